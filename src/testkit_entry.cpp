// SPDX-License-Identifier: MIT
// The test kit's entry (see testkit_entry.hpp): the synthetic compute step the suite, the
// bench and the examples stand a model's work with.
#include "testkit_entry.hpp"

#include <string>

#include "access.hpp"
#include "backend.hpp"

namespace ferry::detail {

void testkit_register_kernels(Backend backend, const void* image, std::size_t bytes) noexcept {
  if (image == nullptr || bytes == 0) return;
  set_synthetic_kernel_image(backend, std::span<const std::byte>(static_cast<const std::byte*>(image), bytes));
}

void testkit_enqueue_compute(const Queue& queue, const DeviceBuffer& input, const DeviceBuffer& output,
                             std::uint32_t units, const std::source_location& where) {
  constexpr const char* fn = "run_synthetic_compute";
  QueueState& q = checked_queue(queue, fn, where);
  auto& in = checked_block(input, q.device_id, fn, where);
  auto& out = checked_block(output, q.device_id, fn, where);
  FERRY_REQUIRE(&in != &out, fn, "input and output must be different buffers", where);
  FERRY_REQUIRE(in.requested == out.requested, fn,
                "input (" + std::to_string(in.requested) + " bytes) and output (" +
                    std::to_string(out.requested) + " bytes) differ in size",
                where);
  FERRY_REQUIRE(units >= 1 && units <= 1'000'000, fn, "units must be in [1, 1000000]", where);
  const auto& qs = access::state(queue);
  std::lock_guard lock(q.mutex);
  use_on(qs, in);
  use_on(qs, out);
  // A buffer owned by another queue (a copy's executor, say) is now in use by this queue too:
  // its release must wait for this queue (PyTorch's record_stream).
  for (auto* b : {&in, &out}) {
    if (b->owner != qs) b->recorded_user = qs;
  }
  if (!q.backend->synthetic_compute(ref(in), ref(out), in.requested, units)) {
    fail(ErrorCode::unsupported, std::string(fn) + ": this backend has no synthetic compute kernel", where);
  }
  q.dirty = true;
  // One mark after the step serves both of its users: a buffer of another queue (later users
  // of it, its owner and its free point included, are ordered after this access, as after a
  // copy) and the trace (which sees when the compute ends).
  const bool foreign = in.owner != qs || out.owner != qs;
  auto d = q.device.lock();
  const bool record = d && d->options.record_events;
  TimelinePoint done;
  if (foreign || record) done = enqueue_mark(q);
  if (in.owner != qs) in.last_access = done;
  if (out.owner != qs) out.last_access = done;
  detail::flush(q);
  if (record) record_activity(*d, q, "compute", in.requested, done);
}

}  // namespace ferry::detail
