// Maps a libshm error met while opening a local segment to a bridge failure.
#pragma once

#include "bridge/failure.hpp"
#include "shm/error.hpp"

#include <fmt/format.h>

#include <string_view>

namespace shm::bridge {

[[nodiscard]] inline Failure segment_failure(std::string_view what, std::string_view name,
                                             const Error& e) {
  int code = kExitRuntime;
  switch (e.code) {
    case Errc::NotFound:
    case Errc::KindMismatch:
    case Errc::ParamMismatch:
    case Errc::FingerprintMismatch:
    case Errc::SizeMismatch:
    case Errc::BadMagic:
    case Errc::VersionMismatch:
    case Errc::NotRegularFile:
    case Errc::HeaderCorrupt:
    case Errc::Truncated:
    case Errc::InvalidName:
    case Errc::PermissionDenied:
    case Errc::WrongOwner:
    case Errc::UnsafeRoot:
      code = kExitSegment;
      break;
    case Errc::RoleTaken:
      code = kExitBusy;
      break;
    default:
      break;
  }
  return {code, fmt::format("{} segment {}: {}", what, name, e.what())};
}

}  // namespace shm::bridge
