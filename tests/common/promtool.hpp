// `promtool check metrics` over a saved exposition page: the checker that
// Prometheus itself ships (the prometheus package; scripts/setup.sh installs
// it). A page passes when promtool exits 0 and says nothing: a lint warning
// (a time not in seconds, a counter without _total) fails like an error.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace shm::test {

// Fails the calling test (non-fatally) naming what promtool said; `page_text`
// is printed with a warning so the offending line can be found.
inline void expect_promtool_clean(const std::filesystem::path& page, std::string_view page_text) {
  FILE* check =
      ::popen(fmt::format("promtool check metrics < '{}' 2>&1", page.string()).c_str(), "r");
  ASSERT_NE(check, nullptr) << "popen(promtool) failed";
  std::string said;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, check) != nullptr) said += buf;
  const int status = ::pclose(check);
  ASSERT_TRUE(WIFEXITED(status)) << "promtool did not exit: " << said;
  ASSERT_NE(WEXITSTATUS(status), 127) << "promtool is not installed (scripts/setup.sh installs "
                                         "the prometheus package)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
  EXPECT_EQ(said, "") << "promtool warned:\n" << page_text;
}

}  // namespace shm::test
