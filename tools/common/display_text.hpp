// Text that came out of a segment (a path, a name) made safe to print: a
// corrupt or hostile segment must not break shmctl's JSON (nlohmann refuses
// to serialise invalid UTF-8) or put control sequences on a terminal.
#pragma once

#include <string>
#include <string_view>

namespace shm::tools {

// Valid, printable UTF-8 passes through unchanged. Every byte that is not part
// of a well-formed UTF-8 sequence, and every control character (C0, DEL, C1),
// becomes "\xNN" with the byte's value in hex; the result is valid UTF-8.
[[nodiscard]] std::string displayable(std::string_view raw);

}  // namespace shm::tools
