// SPDX-License-Identifier: MIT
// The backend layer's shared definitions (backend.hpp): the default bodies of the optional
// hooks, and what the stubs of backends that were not built share.
#include "backend.hpp"

namespace ferry::detail {

// Defaults of the optional interop hooks: a backend that does not override them cannot take
// part in an interop pair, which says so when it is opened.
std::unique_ptr<BackendSemaphore> BackendDevice::create_exported_semaphore(std::uint64_t, int*) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": timeline semaphore export is not supported",
              {}, std::source_location{});
}
std::unique_ptr<Segment> BackendDevice::allocate_exported_segment(std::uint64_t, ExternalMemory*) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": device memory export is not supported", {},
              std::source_location{});
}
std::unique_ptr<BackendSemaphore> BackendDevice::import_semaphore(int) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": timeline semaphore import is not supported",
              {}, std::source_location{});
}
std::unique_ptr<Segment> BackendDevice::import_segment(const ExternalMemory&) {
  throw Error(ErrorCode::unsupported, capabilities().name + ": device memory import is not supported", {},
              std::source_location{});
}

int no_devices() noexcept { return 0; }

void fail_not_built(const char* name, const char* option) {
  throw Error(ErrorCode::unsupported,
              std::string("ferry was built without the ") + name + " backend (reconfigure with meson " + option + ")",
              {}, std::source_location{});
}

}  // namespace ferry::detail
