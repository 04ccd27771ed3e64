// Two network namespaces joined by a veth pair: two "hosts" whose only path
// to each other is that link, for tests that must show data crossed a
// network (and not shared memory, or loopback). Needs root and `ip` (the
// iproute2 package); create() says why when it cannot, so the test can skip.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shm::test {

class NamespacePair {
 public:
  // nullptr and `why` filled when the namespaces cannot be made here.
  [[nodiscard]] static std::unique_ptr<NamespacePair> create(std::string& why);
  NamespacePair(const NamespacePair&) = delete;
  NamespacePair& operator=(const NamespacePair&) = delete;
  // Deletes both namespaces; the veth pair goes with them. Processes started
  // in them must be gone first (a namespace lives while a process uses it).
  ~NamespacePair();

  // The argv prefix that runs a program in host A's / host B's namespace.
  [[nodiscard]] std::vector<std::string> exec_in_a() const;
  [[nodiscard]] std::vector<std::string> exec_in_b() const;
  // The veth addresses (a /30 between them).
  [[nodiscard]] const std::string& address_a() const { return address_a_; }
  [[nodiscard]] const std::string& address_b() const { return address_b_; }
  // Bytes host A's end of the link has sent so far.
  [[nodiscard]] std::uint64_t tx_bytes_a() const;

 private:
  NamespacePair() = default;
  std::string ip_;  // path of `ip`
  std::string ns_a_, ns_b_;
  std::string veth_a_;  // host A's end of the link
  std::string address_a_ = "10.231.0.1", address_b_ = "10.231.0.2";
  bool made_a_ = false, made_b_ = false;
};

}  // namespace shm::test
