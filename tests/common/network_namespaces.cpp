#include "common/network_namespaces.hpp"

#include "common/subprocess.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <string_view>

#include <unistd.h>

namespace shm::test {
namespace {

std::string find_ip() {
  for (std::string_view dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/ip";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

// Runs `ip args...`; "" on success, else what it printed.
std::string run_ip(const std::string& ip, const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", ip};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(std::move(argv));
  const int rc = p.wait(std::chrono::seconds(20));
  if (rc == 0) return {};
  std::string what = "ip";
  for (const auto& a : args) what += " " + a;
  return fmt::format("`{}` failed (status {}): {}", what, rc, p.output());
}

}  // namespace

std::unique_ptr<NamespacePair> NamespacePair::create(std::string& why) {
  if (::geteuid() != 0) {
    why = "not root: network namespaces need CAP_SYS_ADMIN";
    return nullptr;
  }
  std::unique_ptr<NamespacePair> n(new NamespacePair());
  n->ip_ = find_ip();
  if (n->ip_.empty()) {
    why = "no `ip` program (the iproute2 package)";
    return nullptr;
  }
  const auto pid = static_cast<long>(::getpid());
  n->ns_a_ = fmt::format("libshm-{}-a", pid);
  n->ns_b_ = fmt::format("libshm-{}-b", pid);
  n->veth_a_ = fmt::format("lshm{}a", pid);
  const std::string& veth_a = n->veth_a_;
  const std::string veth_b = fmt::format("lshm{}b", pid);
  const auto ok = [&](const std::vector<std::string>& args) {
    why = run_ip(n->ip_, args);
    return why.empty();
  };
  if (!ok({"netns", "add", n->ns_a_})) return nullptr;
  n->made_a_ = true;
  if (!ok({"netns", "add", n->ns_b_})) return nullptr;
  n->made_b_ = true;
  // Made inside the namespaces directly: no name is ever taken on the host.
  const std::vector<std::vector<std::string>> steps{
      {"link", "add", veth_a, "netns", n->ns_a_, "type", "veth", "peer", "name", veth_b, "netns",
       n->ns_b_},
      {"-n", n->ns_a_, "addr", "add", n->address_a_ + "/30", "dev", veth_a},
      {"-n", n->ns_b_, "addr", "add", n->address_b_ + "/30", "dev", veth_b},
      {"-n", n->ns_a_, "link", "set", veth_a, "up"},
      {"-n", n->ns_b_, "link", "set", veth_b, "up"},
      {"-n", n->ns_a_, "link", "set", "lo", "up"},
      {"-n", n->ns_b_, "link", "set", "lo", "up"},
  };
  for (const auto& step : steps)
    if (!ok(step)) return nullptr;
  return n;
}

NamespacePair::~NamespacePair() {
  if (made_a_) (void)run_ip(ip_, {"netns", "delete", ns_a_});
  if (made_b_) (void)run_ip(ip_, {"netns", "delete", ns_b_});
}

std::vector<std::string> NamespacePair::exec_in_a() const {
  return {ip_, "netns", "exec", ns_a_};
}

std::vector<std::string> NamespacePair::exec_in_b() const {
  return {ip_, "netns", "exec", ns_b_};
}

std::uint64_t NamespacePair::tx_bytes_a() const {
  std::vector<std::string> argv = exec_in_a();
  argv.insert(argv.end(), {"/bin/cat", "/sys/class/net/" + veth_a_ + "/statistics/tx_bytes"});
  Subprocess p(std::move(argv));
  if (p.wait(std::chrono::seconds(20)) != 0) return 0;
  return std::stoull(p.output().empty() ? "0" : p.output());
}

}  // namespace shm::test
