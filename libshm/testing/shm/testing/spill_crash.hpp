// Test-only: stop a relay's spill seal, page acknowledgement, Ttl expiry,
// page refusal or spill directory binding at each step.
//
// The crash points are calls in the real code paths of libshm/src/relay/
// (detail::spill_crash_point); with no hook installed each costs one
// predictable branch on a relaxed load. A test helper installs a hook that
// stops (prints a line, sleeps until it is killed -9) at the step it wants,
// with the relay's robust mutex held; the test then checks that the next
// locker repairs: nothing lost, nothing delivered twice once acknowledged.
// Not installed: only the shm_testing target (tests) sees libshm/testing/.
#pragma once

#include <cstdint>

namespace shm::test_hooks {

enum class SpillCrashPoint : std::uint8_t {
  ContentWritten,   // seal: page-N.tmp holds the flushed content, no header
  HeaderWritten,    // seal: header flushed, not renamed
  Renamed,          // seal: page-N.spill in place, directory not synced
  DirSynced,        // seal: durable, not in the manifest (repair rolls back: removes it)
  ManifestUpdated,  // seal: in the manifest, entries still in the hot head (repair rolls forward)
  PageAcked,        // commit: the manifest slot says acknowledged, the file is still there
  FileRemoved,      // commit, the relay unlocked: the file is gone, the slot (Acked) not yet freed
  // Appended (the indices above are stable): the counters' windows.
  SealCounted,  // seal: entries freed, pages_sealed bumped, the intent not yet cleared
  AckCounted,  // commit: pages_acked bumped, the slot Acked, the file there, the intent not cleared
  ExpireMarked,   // Ttl expiry: the slot says acknowledged, pages_expired not yet bumped
  ExpireCounted,  // Ttl expiry: pages_expired bumped, the file still there, the intent not cleared
  // Relay create (no mutex yet: the segment is not published): the spill
  // directory is bound to it and its manifest rebuilt, the segment not yet
  // under its name; the directory's binding lock is held.
  DirBound,
  // The reader refusing an invalid cold page (inside the Refuse intent):
  RefuseMoved,    // the file moved aside into refused/, the slot still sealed, nothing counted
  RefuseCounted,  // pages_refused bumped, the slot not yet freed, the intent not cleared
  // The reader's take, the relay unlocked: the oldest cold page's file read
  // into the reader's buffer, not yet checked against its slot.
  ColdPageRead,
};
inline constexpr int kSpillCrashPoints = 15;

// Called at every spill crash point of every relay in this process, with the
// relay's mutex held (DirBound: the binding lock; FileRemoved, ColdPageRead:
// nothing held). A hook that returns lets
// the operation go on.
using SpillCrashHook = void (*)(SpillCrashPoint point);
void set_spill_crash_hook(SpillCrashHook hook) noexcept;

// Turns the seal's and the acknowledgement's fdatasync/fsync calls off (on by
// default) for property tests that check logic, not durability: thousands of
// seeds would otherwise wait on the disk. Crash tests leave them on.
void set_spill_sync(bool on) noexcept;

// The durability calls of the spill files, in the order the code makes them
// (also with set_spill_sync(false): the call is recorded, not its effect).
// Crash points cannot see a missing flush (a SIGKILL loses nothing the kernel
// holds); the order can: a page renamed into place before its header was
// flushed is a torn page after a power loss.
enum class SpillIo : std::uint8_t {
  DataSync,  // fdatasync of a file (what: its path)
  Sync,      // fsync of a file or a directory (what: its path)
  Rename,    // a file renamed into place (what: the new name)
};
using SpillIoHook = void (*)(SpillIo io, const char* what);
// Installed before the operations it watches start, removed (nullptr) after.
void set_spill_io_hook(SpillIoHook hook) noexcept;

}  // namespace shm::test_hooks
