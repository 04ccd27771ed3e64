// A scratch directory for hand-written logs (the soak verifier tests),
// removed afterwards.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace shm::test {

class LogDir {
 public:
  // Creates /tmp/<prefix>-XXXXXX.
  explicit LogDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl + " failed");
    path_ = tmpl;
  }
  LogDir(const LogDir&) = delete;
  LogDir& operator=(const LogDir&) = delete;
  ~LogDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] std::string string() const { return path_.string(); }
  // Writes `text` as the whole of `file` in the directory.
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(path_ / file) << text;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace shm::test
