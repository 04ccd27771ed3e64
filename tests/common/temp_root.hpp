// A fresh LIBSHM_ROOT per test, removed afterwards, so tests never see each
// other's segments (or the user's).
#pragma once

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace shm::test {

class TempRoot {
 public:
  TempRoot() {
    char tmpl[] = "/dev/shm/libshm-test-XXXXXX";
    const char* dir = ::mkdtemp(tmpl);
    path_ = dir != nullptr ? dir : "/tmp/libshm-test-fallback";
    ::setenv("LIBSHM_ROOT", path_.c_str(), 1);
  }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;
  ~TempRoot() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    ::unsetenv("LIBSHM_ROOT");
  }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace shm::test
