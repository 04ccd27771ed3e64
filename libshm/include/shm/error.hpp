// Typed errors. Back-pressure (full, empty, timed out, quota exhausted) is not an
// error: operations report it as an ordinary outcome (std::optional / status enums).
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace shm {

enum class Errc : std::uint8_t {
  // names and files
  InvalidName = 1,
  AlreadyExists,
  NotFound,
  PermissionDenied,
  NoSpace,
  NotRegularFile,
  WrongOwner,
  Truncated,
  SizeMismatch,
  // the handshake header
  BadMagic,
  VersionMismatch,
  KindMismatch,
  FingerprintMismatch,
  ParamMismatch,
  HeaderCorrupt,
  NotReady,
  // attachments
  RoleTaken,
  NoFreeSlot,
  // data
  InvalidArgument,
  TooLarge,
  Corrupt,
  ProducerDied,
  Faulted,
  SystemError,
  // priority fanout
  PriorityOutOfBounds,
  // roots (added after the others: the values above are stable)
  UnsafeRoot,     // a symbolic link, another user's directory, world-writable without sticky bit
  ForeignHandle,  // a handle (ledger PoolId/Ticket) issued by another segment or incarnation
  // relays
  PolicyRefused,  // an (overflow, policy) or (egress, policy) pair the validation table refuses
  UnknownPolicy,  // a merge policy id not registered in this process
  // calls
  OutOfOrder,  // a call its protocol does not allow now (take() again before commit())
};

[[nodiscard]] std::string_view to_string(Errc code) noexcept;

struct Error {
  Errc code;
  std::string message;

  [[nodiscard]] std::string what() const;  // "code: message"
};

template <class T>
using Result = std::expected<T, Error>;

[[nodiscard]] inline std::unexpected<Error> fail(Errc code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

// Maps an errno from a system call on `what` (a path, an operation) to an Error.
[[nodiscard]] std::unexpected<Error> fail_errno(int err, std::string_view what);

}  // namespace shm
