/// @file
/// Handles copied into a forked child. fork() copies the whole address space,
/// and with it every handle the parent holds, but only the calling thread: the
/// child's copy of a handle points at the parent's attachment slot, tickets and
/// background threads. Destroying such a copy must leave them alone: freeing
/// the slot would make the parent's role look free, releasing tickets would
/// take the parent's reservations away, and tearing down a thread that does
/// not exist in the child (its condition variable, which counts it as a
/// waiter; its join) may never return or free what the child's C library has
/// already reclaimed.
#pragma once

#include <cstdint>
#include <memory>

namespace shm {

/// How many fork()s lie between this process and the one that started the
/// program: 0 there, bumped in every child by a pthread_atfork handler
/// registered when the library is loaded. A handle records it when it is
/// made; a different value later means the handle is a forked child's copy.
/// One relaxed load.
[[nodiscard]] std::uint64_t fork_generation() noexcept;

/// Keeps `object` alive and reachable until the process ends, never destroying
/// it: for the state of a background thread in a forked child, where the
/// thread is gone, its mutex may be copied locked and its condition variable
/// may still count the vanished thread as a waiter.
void keep_forever_erased(void* object) noexcept;

/// keep_forever_erased() for an owned object: releases it, never destroying it.
template <class T>
void keep_forever(std::unique_ptr<T> object) noexcept {
  keep_forever_erased(object.release());
}

}  // namespace shm
