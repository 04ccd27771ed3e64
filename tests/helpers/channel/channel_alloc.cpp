// Proves that a channel performs no heap allocation after create, on either
// side. The global operator new/delete are replaced by counting versions in
// this executable only (not in the shared unit-test binary).
//
//   test_channel_alloc NAME
// Creates channel NAME (under $LIBSHM_ROOT), attaches both ends, then counts
// allocations while it runs many rotations through every steady-state path:
// try_send, reserve/commit, abandon, PageQuotaExhausted, RingFull, receive
// with leases (plain and coalesced), blocking send/receive that time out
// (parking), and the clean end of stream. Prints "allocations after setup:
// N"; exits 0 iff N == 0.
#include "shm/channel/consumer.hpp"
#include "shm/channel/producer.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_counting{false};
std::atomic<std::uint64_t> g_allocations{0};

void* counted(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* counted_aligned(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(a);
  void* p = std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) {
  return counted(n);
}
void* operator new[](std::size_t n) {
  return counted(n);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return counted_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return counted_aligned(n, a);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace {

using namespace std::chrono_literals;

[[noreturn]] void fail_with(const char* what, const shm::Error& e) {
  g_counting = false;
  std::fprintf(stderr, "%s: %s\n", what, e.what().c_str());
  std::exit(2);
}

[[noreturn]] void fail_with(const char* what) {
  g_counting = false;
  std::fprintf(stderr, "%s\n", what);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: NAME\n");
    return 2;
  }
  // P = 2 and 2 cells per page: quota refusals and rotations come often.
  auto p = shm::ChannelProducer::create(
      argv[1], {.pages = 2, .page_bytes = 256, .descriptors_per_page = 2, .ring_cells = 4});
  if (!p) fail_with("create", p.error());
  auto c = shm::ChannelConsumer::open(argv[1]);
  if (!c) fail_with("open", c.error());
  std::array<std::byte, 200> buf{};
  std::uint64_t sent = 0, received = 0, refused = 0;

  g_counting = true;  // ---- steady state from here on
  for (int round = 0; round < 20000; ++round) {
    // The second half receives with coalescing: held partial batches too.
    if (round == 10000)
      if (auto ok = c->set_coalescing({.descriptors = 2, .max_delay = 1ms}); !ok)
        fail_with("set_coalescing", ok.error());
    const std::size_t len = static_cast<std::size_t>(round * 37) % buf.size();
    if (round % 3 == 0) {
      auto r = p->try_reserve(len);
      if (!r) fail_with("reserve", r.error());
      if (*r) {
        if (round % 9 == 0) {
          r->abandon();
        } else {
          if (auto ok = r->commit(len / 2); !ok) fail_with("commit", ok.error());
          ++sent;
        }
      } else {
        ++refused;
      }
    } else {
      auto r = p->try_send(std::span(buf.data(), len));
      if (!r) fail_with("send", r.error());
      if (*r)
        ++sent;
      else
        ++refused;
    }
    // Drain in bursts so the producer meets full rings and exhausted quotas.
    if (round % 4 == 3) {
      for (;;) {
        auto r = c->try_receive();
        if (!r) fail_with("receive", r.error());
        if (!*r) break;
        ++received;
        r->lease.release();
      }
    }
  }
  // Blocking paths that park and time out: quota/ring full, then empty.
  for (int i = 0; i < 8; ++i) (void)p->try_send(std::span(buf.data(), 100));
  auto timed_out = p->send(std::span(buf.data(), 100), 2ms);
  if (!timed_out || *timed_out) fail_with("blocking send should have timed out");
  for (;;) {
    auto r = c->receive(2ms);
    if (!r) fail_with("receive", r.error());
    if (!*r) break;
    ++received;
  }
  if (auto ok = p->finish(); !ok) fail_with("finish", ok.error());
  auto end = c->try_receive();
  if (!end) fail_with("end", end.error());
  g_counting = false;  // ---- end of the measured window

  const std::uint64_t n = g_allocations.load();
  std::printf("sent %llu received %llu refused %llu rotations %llu end %d\n",
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(p->active_epoch()),
              end->status == shm::ReceiveStatus::End ? 1 : 0);
  std::printf("allocations after setup: %llu\n", static_cast<unsigned long long>(n));
  return n == 0 && end->status == shm::ReceiveStatus::End && refused > 0 ? 0 : 1;
}
