#include "shm/platform/process.hpp"

#include <sys/random.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>

namespace shm {

std::uint64_t process_start_time(std::int32_t pid) noexcept {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and ')'; fields resume after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  // After ") " come field 3 (state) ... field 22 (starttime); each space
  // starts the next field.
  int field = 2;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') ++field;
    ++p;
  }
  if (field != 22) return 0;
  return std::strtoull(p, nullptr, 10);
}

ProcessId self_process() noexcept {
  const auto pid = static_cast<std::int32_t>(::getpid());
  return ProcessId{pid, process_start_time(pid)};
}

bool process_alive(const ProcessId& id) noexcept {
  if (id.pid <= 0) return false;
  const std::uint64_t start = process_start_time(id.pid);
  return start != 0 && start == id.start_time;
}

std::string process_cmdline(std::int32_t pid) {
  // stdio, not std::ifstream: reading the file of a process that is exiting
  // fails (ESRCH), and libstdc++'s filebuf throws on a read error.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return {};
  std::string s;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0 && s.size() < (1u << 16);)
    s.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return {};
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s)
    if (c == '\0') c = ' ';
  return s;
}

std::uint64_t random_u64() noexcept {
  std::uint64_t v = 0;
  while (getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v)) {
  }
  return v;
}

}  // namespace shm
