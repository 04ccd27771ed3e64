// A fresh directory under /tmp (a durable filesystem, unlike /dev/shm) and
// LIBSHM_SPILL_DIR pointing at it, removed afterwards: spill tests never see
// each other's pages (or the user's).
#pragma once

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace shm::test {

class TempSpillDir {
 public:
  TempSpillDir() {
    char tmpl[] = "/tmp/libshm-spill-test-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    path_ = dir != nullptr ? dir : "/tmp/libshm-spill-test-fallback";
    ::setenv("LIBSHM_SPILL_DIR", path_.c_str(), 1);
  }
  TempSpillDir(const TempSpillDir&) = delete;
  TempSpillDir& operator=(const TempSpillDir&) = delete;
  ~TempSpillDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    ::unsetenv("LIBSHM_SPILL_DIR");
  }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Entries of `dir` whose name ends in `suffix` (0 when `dir` is missing).
[[nodiscard]] inline std::size_t count_files(const std::string& dir, std::string_view suffix) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().ends_with(suffix)) ++n;
  return n;
}

}  // namespace shm::test
