#include "common/nats_cluster.hpp"

#include <thread>

namespace shm::test {

NatsCluster::NatsCluster() {
  std::array<int, kNodes> cluster_ports{};
  for (int& p : cluster_ports) p = free_loopback_port();
  for (std::size_t i = 0; i < kNodes; ++i) {
    std::string routes;
    for (std::size_t j = 0; j < kNodes; ++j) {
      if (j == i) continue;
      if (!routes.empty()) routes += ",";
      routes += "nats://127.0.0.1:" + std::to_string(cluster_ports[j]);
    }
    nodes_[i] = std::make_unique<NatsServer>(std::vector<std::string>{
        "--server_name", "n" + std::to_string(i), "--cluster_name", "libshm-test", "--cluster",
        "nats://127.0.0.1:" + std::to_string(cluster_ports[i]), "--routes", routes});
  }
}

bool NatsCluster::ready(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& n : nodes_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !n->ready(left)) return false;
  }
  // The metadata leader is elected: its own log says "Self is new JetStream
  // cluster metadata leader". The other nodes do not always log that they
  // know it; the bridge retries a stream creation that comes before the
  // cluster knows its peers (NatsLink::create_stream).
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& n : nodes_)
      if (n->log().find("Self is new JetStream cluster metadata leader") != std::string::npos)
        return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::vector<std::string> NatsCluster::urls() const {
  std::vector<std::string> out;
  for (const auto& n : nodes_) out.push_back(n->url());
  return out;
}

std::string NatsCluster::logs() const {
  std::string out;
  for (std::size_t i = 0; i < kNodes; ++i)
    out += "--- n" + std::to_string(i) + "\n" + nodes_[i]->log();
  return out;
}

}  // namespace shm::test
