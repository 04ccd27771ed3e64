// Harness for the README's group-root snippet. It runs in the test's private
// root (owned by this process), with this process's own group as the team:
// what it checks is that the calls compile and that the segment gets the
// group and the mode the snippet asks for.
#include <shm/spsc/consumer.hpp>
#include <shm/spsc/producer.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main() {
  const gid_t team_gid = ::getegid();
  {
    // README_BLOCK
    if (!producer || !consumer) {
      std::fprintf(stderr, "%s\n",
                   (!producer ? producer.error() : consumer.error()).what().c_str());
      return 1;
    }
  }
  struct stat st {};
  const char* root = std::getenv("LIBSHM_ROOT");
  if (root == nullptr || ::stat((std::string(root) + "/orders").c_str(), &st) != 0) return 2;
  return st.st_gid == team_gid && (st.st_mode & 0777) == 0660 ? 0 : 1;
}
