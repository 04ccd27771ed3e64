/// @file
/// Typed errors. Back-pressure (full, empty, timed out, quota exhausted) is not an
/// error: operations report it as an ordinary outcome (std::optional / status enums).
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

/// libshm: cross-process shared-memory IPC. Every public name is in this
/// namespace; each structure keeps its layout and internals in a sub-namespace.
namespace shm {

/// What went wrong, by kind; Error::message carries the values that mattered.
/// The numeric values are stable: a new code is appended, never inserted.
enum class Errc : std::uint8_t {
  // names and files
  /// A name the naming rules refuse (empty, over 200 characters, '..', a leading '-').
  InvalidName = 1,
  AlreadyExists,     ///< create() found the name (file, pool, key, category) already there
  NotFound,          ///< nothing by that name: a file (ENOENT), pool, key, category
  PermissionDenied,  ///< access refused (EACCES, EPERM), or a handle the caller does not own
  NoSpace,           ///< the file system has no room (ENOSPC, EDQUOT, a statvfs preflight)
  NotRegularFile,    ///< the path is a symbolic link, directory, device or FIFO, not a regular file
  WrongOwner,        ///< the file or directory belongs to another user
  Truncated,         ///< a file shorter than its header (or than its header says)
  SizeMismatch,      ///< a file or data area whose size is not what its header or parameters need
  // the handshake header
  BadMagic,             ///< the file does not start with libshm's magic: not one of our files
  VersionMismatch,      ///< the header's format version is not the one this build reads
  KindMismatch,         ///< the segment holds another kind of structure than the one opened
  FingerprintMismatch,  ///< the creator's shared-struct layout differs from this build's
  ParamMismatch,        ///< the segment's parameters differ from (or do not fit) the ones asked for
  HeaderCorrupt,        ///< a header word is impossible or the header CRC does not match
  NotReady,  ///< the segment stayed INITIALIZING past the wait (its creator may have died)
  // attachments
  RoleTaken,   ///< a role (or spill directory) is held by another live process
  NoFreeSlot,  ///< every attachment slot (or table row: pool, bucket, category) is in use
  // data
  InvalidArgument,  ///< an argument out of its documented range (capacity not a power of two, ...)
  TooLarge,         ///< a record or value bigger than the structure's limit
  Corrupt,          ///< shared memory holds a value the protocol cannot produce
  ProducerDied,     ///< a channel's earlier producer died without finishing its stream
  Faulted,          ///< the structure was marked faulted earlier; it must be re-created
  SystemError,      ///< a system call failed with an errno no other code covers
  // priority fanout
  PriorityOutOfBounds,  ///< a priority outside the fanout's 0..priorities-1
  // roots (added after the others: the values above are stable)
  UnsafeRoot,     ///< a symbolic link, another user's directory, world-writable without sticky bit
  ForeignHandle,  ///< a handle (ledger PoolId/Ticket) issued by another segment or incarnation
  // relays
  PolicyRefused,  ///< an (overflow, policy) or (egress, policy) pair the validation table refuses
  UnknownPolicy,  ///< a merge policy id not registered in this process
  // calls
  OutOfOrder,  ///< a call its protocol does not allow now (take() again before commit())
  // topics
  HeldLimit,  ///< a handle already holds as many samples as it may (a topic's max_held, loans)
};

/// The enumerator's name ("InvalidName"), for messages and logs.
[[nodiscard]] std::string_view to_string(Errc code) noexcept;

/// A failure: its kind and a message naming what was wrong and the values that mattered.
struct Error {
  Errc code;            ///< the kind of failure; callers branch on this
  std::string message;  ///< for people: the object (path, name) and the values involved

  [[nodiscard]] std::string what() const;  ///< "code: message"
};

/// What every call that can fail returns: the value, or the Error saying why not.
template <class T>
using Result = std::expected<T, Error>;

/// Builds the failure side of a Result: `return fail(Errc::TooLarge, "...")`.
[[nodiscard]] inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

/// Maps an errno from a system call on `what` (a path, an operation) to an Error.
[[nodiscard]] std::unexpected<Error> fail_errno(int err, std::string_view what);

}  // namespace shm
