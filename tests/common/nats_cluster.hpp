// A three-node nats-server JetStream cluster on loopback for the bridge's
// failover test, started by the test itself: each node a NatsServer (its own
// client port and store) with a cluster port and routes to the two others.
// Ready when every node is and the cluster has elected its JetStream
// metadata leader (a replicated stream can be created from then on).
#pragma once

#include "common/nats_server.hpp"

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace shm::test {

class NatsCluster {
 public:
  static constexpr std::size_t kNodes = 3;

  NatsCluster();

  [[nodiscard]] bool ready(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  [[nodiscard]] std::vector<std::string> urls() const;
  [[nodiscard]] NatsServer& node(std::size_t i) { return *nodes_.at(i); }
  // Every node's log so far (for failure messages).
  [[nodiscard]] std::string logs() const;

 private:
  std::array<std::unique_ptr<NatsServer>, kNodes> nodes_;
};

}  // namespace shm::test
