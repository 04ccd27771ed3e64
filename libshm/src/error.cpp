#include "shm/error.hpp"

#include "format/format.hpp"

#include <cerrno>
#include <cstring>

namespace shm {

std::string_view to_string(Errc code) noexcept {
  switch (code) {
    case Errc::InvalidName:
      return "InvalidName";
    case Errc::AlreadyExists:
      return "AlreadyExists";
    case Errc::NotFound:
      return "NotFound";
    case Errc::PermissionDenied:
      return "PermissionDenied";
    case Errc::NoSpace:
      return "NoSpace";
    case Errc::NotRegularFile:
      return "NotRegularFile";
    case Errc::WrongOwner:
      return "WrongOwner";
    case Errc::Truncated:
      return "Truncated";
    case Errc::SizeMismatch:
      return "SizeMismatch";
    case Errc::BadMagic:
      return "BadMagic";
    case Errc::VersionMismatch:
      return "VersionMismatch";
    case Errc::KindMismatch:
      return "KindMismatch";
    case Errc::FingerprintMismatch:
      return "FingerprintMismatch";
    case Errc::ParamMismatch:
      return "ParamMismatch";
    case Errc::HeaderCorrupt:
      return "HeaderCorrupt";
    case Errc::NotReady:
      return "NotReady";
    case Errc::RoleTaken:
      return "RoleTaken";
    case Errc::NoFreeSlot:
      return "NoFreeSlot";
    case Errc::InvalidArgument:
      return "InvalidArgument";
    case Errc::TooLarge:
      return "TooLarge";
    case Errc::Corrupt:
      return "Corrupt";
    case Errc::ProducerDied:
      return "ProducerDied";
    case Errc::Faulted:
      return "Faulted";
    case Errc::SystemError:
      return "SystemError";
    case Errc::PriorityOutOfBounds:
      return "PriorityOutOfBounds";
    case Errc::UnsafeRoot:
      return "UnsafeRoot";
    case Errc::ForeignHandle:
      return "ForeignHandle";
    case Errc::PolicyRefused:
      return "PolicyRefused";
    case Errc::UnknownPolicy:
      return "UnknownPolicy";
    case Errc::OutOfOrder:
      return "OutOfOrder";
    case Errc::HeldLimit:
      return "HeldLimit";
  }
  return "Unknown";
}

std::string Error::what() const {
  return shm::detail::format("{}: {}", to_string(code), message);
}

std::unexpected<Error> fail_errno(int err, std::string_view what) {
  Errc code = Errc::SystemError;
  switch (err) {
    case ENOENT:
      code = Errc::NotFound;
      break;
    case EEXIST:
      code = Errc::AlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = Errc::PermissionDenied;
      break;
    case ENOSPC:
    case EDQUOT:
      code = Errc::NoSpace;
      break;
    case ELOOP:
      code = Errc::NotRegularFile;
      break;
    default:
      break;
  }
  return fail(code, shm::detail::format("{}: {}", what, std::strerror(err)));
}

}  // namespace shm
