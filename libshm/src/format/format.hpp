// The library's one way to build a message: shm::detail::format, with fmt's
// compile-time checked format strings.
//
// fmt is header-only inside the library (see libshm/CMakeLists.txt). Calling
// fmt::format directly instantiates fmt's whole formatting engine in every
// translation unit that calls it (about 4.5 s of compile time each, more
// under the sanitizers). Here the callers only pack their arguments;
// fmt::vformat is instantiated once, behind format_packed, in format.cpp.
#pragma once

#include <fmt/core.h>

#include <string>
#include <utility>

namespace shm::detail {

[[nodiscard]] std::string format_packed(fmt::string_view format_string, fmt::format_args args);

template <typename... Args>
[[nodiscard]] std::string format(fmt::format_string<Args...> format_string, Args&&... args) {
  return detail::format_packed(format_string, fmt::make_format_args(args...));
}

}  // namespace shm::detail
