#include "common/nats_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace shm::test {

std::string nats_server_program() {
#ifdef SHM_NATS_SERVER
  return SHM_NATS_SERVER;
#else
  return {};
#endif
}

int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("bind to a free loopback port failed");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

NatsServer::NatsServer(std::vector<std::string> extra, NatsPlacement placement)
    : extra_(std::move(extra)), placement_(std::move(placement)) {
  char tmpl[] = "/tmp/libshm-nats-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp for the NATS store failed");
  dir_ = tmpl;
  port_ = placement_.port != 0 ? placement_.port : free_loopback_port();
  start();
}

NatsServer::~NatsServer() {
  process_.reset();  // SIGKILL and reap
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void NatsServer::start() {
  std::error_code ec;
  log_offset_ = static_cast<std::size_t>(std::filesystem::file_size(dir_ + "/nats.log", ec));
  if (ec) log_offset_ = 0;
  std::vector<std::string> argv = placement_.launcher;
  argv.insert(argv.end(),
              {nats_server_program(), "-js", "-a", placement_.host, "-p", std::to_string(port_),
               "-sd", dir_ + "/store", "-l", dir_ + "/nats.log"});
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  process_ = std::make_unique<Subprocess>(std::move(argv), false);
}

std::string NatsServer::log() const {
  std::ifstream in(dir_ + "/nats.log");
  std::stringstream s;
  s << in.rdbuf();
  std::string all = s.str();
  return log_offset_ < all.size() ? all.substr(log_offset_) : std::string();
}

bool NatsServer::ready(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (log().find("Server is ready") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the log file
  }
  return false;
}

void NatsServer::kill(int sig) {
  if (!process_) return;
  process_->kill(sig);
  (void)process_->wait(std::chrono::seconds(20));  // SIGKILLs it when it does not stop
  process_.reset();
}

bool NatsServer::restart(int sig, std::chrono::milliseconds timeout) {
  kill(sig);
  return start_again(timeout);
}

bool NatsServer::start_again(std::chrono::milliseconds timeout) {
  start();
  return ready(timeout);
}

}  // namespace shm::test
