// SPDX-License-Identifier: MIT
// The interop entry points (ferry/interop.hpp): choosing a pair backend and opening it through
// Device::open. Front end only, in every build: the pair itself is backends/pair/.
#include <string>

#include "contract.hpp"
#include "ferry/interop.hpp"

namespace ferry::interop {

Backend pair_backend(Backend executor, Backend owner, std::source_location where) {
  if (executor == Backend::hip || owner == Backend::hip) {
    detail::fail(ErrorCode::unsupported,
                 "interop::pair_backend: HIP pairings are not supported: on Linux, HIP cannot import a "
                 "timeline semaphore (hipImportExternalSemaphore has no timeline fd type there), so a "
                 "HIP stream cannot wait on another API's queue on the GPU",
                 where);
  }
  if (executor == Backend::vulkan && owner == Backend::cuda) return Backend::vulkan_cuda;
  if (executor == Backend::cuda && owner == Backend::vulkan) return Backend::cuda_vulkan;
  detail::fail(ErrorCode::invalid_argument,
               "interop::pair_backend: (" + std::string(to_string(executor)) + ", " +
                   std::string(to_string(owner)) + ") is not a pairing: one API must be Vulkan, the other CUDA",
               where);
}

Device open_pair(const PairOptions& options, std::source_location where) {
  DeviceOptions o;
  o.backend = pair_backend(options.executor, options.owner, where);
  o.ordinal = options.vulkan_ordinal;
  o.peer_ordinal = options.cuda_ordinal;
  o.validation = options.validation;
  o.record_events = options.record_events;
  return Device::open(o, where);
}

}  // namespace ferry::interop
