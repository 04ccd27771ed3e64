#include "shm/bridge/state_layout.hpp"

namespace shm::bridge {

std::string_view to_string(Route r) noexcept {
  switch (r) {
    case Route::Export:
      return "export";
    case Route::Import:
      return "import";
  }
  return "unknown";
}

}  // namespace shm::bridge
