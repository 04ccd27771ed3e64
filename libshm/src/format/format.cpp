#include "format/format.hpp"

#include <fmt/format.h>

namespace shm::detail {

std::string format_packed(fmt::string_view format_string, fmt::format_args args) {
  return fmt::vformat(format_string, args);
}

}  // namespace shm::detail
