// SPDX-License-Identifier: MIT
// ferry._ferry's devices, queues, timelines, pools and snapshots (ferry/device.hpp, queue.hpp,
// timeline.hpp, pool.hpp, snapshot.hpp, export.hpp).
#include "binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <ferry/export.hpp>

#include <span>

namespace ferry::python {

using namespace nb::literals;

void bind_device(nb::module_& m) {
  nb::class_<ferry::Capabilities>(m, "Capabilities", "Device capabilities and limits, filled at open.")
      .def_ro("name", &ferry::Capabilities::name)
      .def_ro("backend", &ferry::Capabilities::backend)
      .def_ro("is_gpu", &ferry::Capabilities::is_gpu)
      .def_ro("device_memory_bytes", &ferry::Capabilities::device_memory_bytes)
      .def_ro("copy_engines", &ferry::Capabilities::copy_engines)
      .def_ro("copy_priorities", &ferry::Capabilities::copy_priorities)
      .def_ro("copy_bytes_per_second", &ferry::Capabilities::copy_bytes_per_second)
      .def_ro("dedicated_transfer_queue", &ferry::Capabilities::dedicated_transfer_queue)
      .def_ro("host_memory_registration", &ferry::Capabilities::host_memory_registration)
      .def_ro("host_memory_adoption", &ferry::Capabilities::host_memory_adoption)
      .def_ro("timeline_export", &ferry::Capabilities::timeline_export)
      .def_ro("min_alignment", &ferry::Capabilities::min_alignment)
      .def_ro("max_allocation_bytes", &ferry::Capabilities::max_allocation_bytes)
      .def_ro("uuid", &ferry::Capabilities::uuid)
      .def_ro("notes", &ferry::Capabilities::notes)
      .def("__repr__", [](const ferry::Capabilities& c) {
        return "<ferry.Capabilities " + c.name + " (" + std::string(ferry::to_string(c.backend)) + ")>";
      });

  nb::class_<ferry::TimelinePoint>(m, "TimelinePoint",
                                   "A point on a timeline: all work up to here. An empty point counts as reached.")
      .def_ro("value", &ferry::TimelinePoint::value)
      .def_prop_ro("empty", &ferry::TimelinePoint::empty)
      .def("reached", [](const ferry::TimelinePoint& p) { return p.reached(); },
           "Non-blocking query: has the point been reached?")
      .def_prop_ro("known_reached", &ferry::TimelinePoint::known_reached,
                   "Whether the point is known reached without asking the device (a query or wait on its "
                   "semaphore has seen it); False means not known: reached() asks.")
      .def("wait", [](const ferry::TimelinePoint& p, double timeout) {
             nb::gil_scoped_release nogil;
             p.wait(seconds(timeout));
           }, "timeout"_a = 60.0,
           "Block until reached (the GIL is released); ferry.Error('timeout') after `timeout` seconds.");

  nb::class_<ferry::TimelineSemaphore>(m, "TimelineSemaphore", "A monotonic 64-bit counter; host and queues signal and wait on it.")
      .def_prop_ro("value", [](const ferry::TimelineSemaphore& s) { return s.value(); })
      .def("signal", [](ferry::TimelineSemaphore& s, std::uint64_t v) { s.signal(v); }, "value"_a,
           "Signal from the host; the value must exceed the current one.")
      .def("wait", [](const ferry::TimelineSemaphore& s, std::uint64_t v, double timeout) {
             nb::gil_scoped_release nogil;
             s.wait(v, seconds(timeout));
           }, "value"_a, "timeout"_a = 60.0, "Block until the value is >= `value` (the GIL is released).")
      .def("at", [](const ferry::TimelineSemaphore& s, std::uint64_t v) { return s.at(v); }, "value"_a,
           "The point (this, value).");

  nb::class_<ferry::Queue>(m, "Queue", "A queue of ordered work, with a role and a private timeline.")
      .def_prop_ro("role", [](const ferry::Queue& q) { return q.role(); })
      .def_prop_ro("id", [](const ferry::Queue& q) { return q.id(); })
      .def_prop_ro("name", [](const ferry::Queue& q) { return q.name(); })
      .def("wait", [](ferry::Queue& q, const ferry::TimelinePoint& p) { q.wait(p); }, "point"_a,
           "Make later work on this queue wait for `point` (on the device; the host is not blocked).")
      .def("signal", [](ferry::Queue& q, const ferry::TimelinePoint& p) { q.signal(p); }, "point"_a,
           "Signal `point` after all work enqueued so far.")
      .def("mark", [](ferry::Queue& q) { return q.mark(); },
           "A point reached once all work enqueued so far has completed.")
      .def("synchronize", [](ferry::Queue& q, double timeout) {
             nb::gil_scoped_release nogil;
             q.synchronize(seconds(timeout));
           }, "timeout"_a = 60.0, "Block until all work enqueued so far has completed (the GIL is released).")
      .def("__eq__", [](const ferry::Queue& a, const ferry::Queue& b) { return a == b; })
      .def("__repr__", [](const ferry::Queue& q) { return "<ferry.Queue " + q.name() + ">"; });

  // --- pools and statistics
  nb::class_<ferry::QueueBudget>(m, "QueueBudget", "Per-owner pool statistics.")
      .def_ro("queue_id", &ferry::QueueBudget::queue_id)
      .def_ro("queue_name", &ferry::QueueBudget::queue_name)
      .def_ro("active_bytes", &ferry::QueueBudget::active_bytes)
      .def_ro("free_bytes", &ferry::QueueBudget::free_bytes)
      .def_ro("peak_active_bytes", &ferry::QueueBudget::peak_active_bytes);
  nb::class_<ferry::PoolBudget>(m, "PoolBudget", "Cheap pool statistics (every step of a loop may read them).")
      .def_ro("reserved_bytes", &ferry::PoolBudget::reserved_bytes)
      .def_ro("active_bytes", &ferry::PoolBudget::active_bytes)
      .def_ro("requested_bytes", &ferry::PoolBudget::requested_bytes)
      .def_ro("peak_reserved_bytes", &ferry::PoolBudget::peak_reserved_bytes)
      .def_ro("peak_active_bytes", &ferry::PoolBudget::peak_active_bytes)
      .def_ro("stranded_bytes", &ferry::PoolBudget::stranded_bytes)
      .def_ro("peak_stranded_bytes", &ferry::PoolBudget::peak_stranded_bytes)
      .def_ro("segment_count", &ferry::PoolBudget::segment_count)
      .def_ro("allocations", &ferry::PoolBudget::allocations)
      .def_ro("segment_allocations", &ferry::PoolBudget::segment_allocations)
      .def_ro("pending_reuses", &ferry::PoolBudget::pending_reuses)
      .def_ro("immediate_reuses", &ferry::PoolBudget::immediate_reuses)
      .def_ro("queues", &ferry::PoolBudget::queues);
  nb::class_<ferry::PoolDetailedStatistics>(m, "PoolDetailedStatistics", "Slow statistics (walks every block).")
      .def_ro("budget", &ferry::PoolDetailedStatistics::budget)
      .def_ro("free_blocks", &ferry::PoolDetailedStatistics::free_blocks)
      .def_ro("allocated_blocks", &ferry::PoolDetailedStatistics::allocated_blocks)
      .def_ro("pending_free_blocks", &ferry::PoolDetailedStatistics::pending_free_blocks)
      .def_ro("largest_free_block", &ferry::PoolDetailedStatistics::largest_free_block)
      .def_ro("idle_segments", &ferry::PoolDetailedStatistics::idle_segments);

  nb::class_<ferry::MemorySnapshot>(m, "MemorySnapshot",
                                    "Segments, blocks and the trace of pool events, copied out of the pool.")
      .def_ro("device_name", &ferry::MemorySnapshot::device_name)
      .def_ro("backend", &ferry::MemorySnapshot::backend)
      .def_prop_ro("segment_count", [](const ferry::MemorySnapshot& s) { return s.segments.size(); })
      .def_prop_ro("event_count", [](const ferry::MemorySnapshot& s) { return s.events.size(); })
      .def("to_json", [](const ferry::MemorySnapshot& s) { return ferry::to_json(s); },
           "The documented JSON form (tools/snapshot.schema.json).")
      .def("write_json", [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_json(s, path); },
           "path"_a)
      .def("to_memory_viz_pickle", [](const ferry::MemorySnapshot& s) {
             const std::string p = ferry::to_memory_viz_pickle(s);
             return nb::bytes(p.data(), p.size());
           }, "The pickle PyTorch's memory_viz reads (torch.cuda.memory._snapshot()'s format).")
      .def("write_memory_viz_pickle",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_memory_viz_pickle(s, path); },
           "path"_a)
      .def("write_chrome_trace",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_chrome_trace(s, path); },
           "path"_a, "Chrome trace-event JSON of the queues' activity (opens in Perfetto).")
      .def("write_html_report",
           [](const ferry::MemorySnapshot& s, const std::string& path) { ferry::write_html_report(s, path); },
           "path"_a, "A self-contained HTML report of the footprint timelines.");

  nb::class_<PyPool>(m, "DevicePool", "The device's stream-ordered memory pool (Device.pool).")
      .def("allocate", [](PyPool& p, std::uint64_t bytes, const ferry::Queue& owner, const std::string& tag,
                          std::optional<ferry::Queue> first_writer) {
             ferry::AllocationOptions o{.tag = tag};
             if (first_writer) o.first_writer = *first_writer;
             return wrap(p.device.device.pool().allocate(bytes, owner, std::move(o)), p.device);
           }, "nbytes"_a, "owner"_a, "tag"_a = "", "first_writer"_a = nb::none(),
           "Allocate `nbytes` (> 0) owned by `owner`. `first_writer`: the queue that writes the block "
           "first when it is not the owner (a Transfer's executor); the block's ready_after then "
           "covers its previous use (AllocationOptions::first_writer).")
      .def("budget", [](const PyPool& p) { return p.device.device.pool().get_budget(); }, "Cheap statistics.")
      .def("statistics", [](const PyPool& p) { return p.device.device.pool().calculate_statistics(); },
           "Slow statistics (walks every block).")
      .def("reset_peaks", [](PyPool& p) { p.device.device.pool().reset_peaks(); })
      .def("trim", [](PyPool& p) { return p.device.device.pool().trim(); },
           "Return idle segments to the backend; returns the bytes returned.")
      .def("validate", [](const PyPool& p) { p.device.device.pool().validate(); },
           "Check every invariant (ferry.Error('internal_error') names a broken one).")
      .def("snapshot", [](const PyPool& p) { return p.device.device.pool().snapshot(); })
      .def("clear_events", [](PyPool& p) { p.device.device.pool().clear_events(); });

  nb::class_<PyHostPool>(m, "HostPool", "Pinned host memory of a device (Device.host_pool).")
      .def("allocate", [](PyHostPool& p, std::uint64_t bytes) {
             return PyHostBuffer{p.device.device.host_pool().allocate(bytes)};
           }, "nbytes"_a, "Allocate `nbytes` (> 0) of pinned host memory.")
      .def("register", [](PyHostPool& p, nb::handle obj) {
             auto held = std::make_unique<Buffer>(obj, true, "HostPool.register: memory");
             auto span = std::span<std::byte>(static_cast<std::byte*>(held->data()), held->size());
             PyHostBuffer h{p.device.device.host_pool().register_memory(span)};
             h.registered = std::move(held);
             return h;
           }, "memory"_a,
           "Register a writable contiguous Python buffer for DMA; the result keeps it alive. "
           "ferry.Error('unsupported') where the backend cannot register memory.")
      .def("adopt", [](PyHostPool& p, std::uint64_t address, std::uint64_t nbytes) {
             return PyHostBuffer{p.device.device.host_pool().adopt(
                 reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)), nbytes)};
           }, "address"_a, "nbytes"_a,
           "Adopt `nbytes` at `address`, host memory an engine already page-locked for this device "
           "(a pinned torch tensor's data_ptr()), as a HostBuffer that every pinned path copies "
           "by DMA directly. ferry never frees it and holds no reference to its owner: keep the "
           "memory alive and unchanged until each copy's point is reached. ferry.Error "
           "('invalid_argument') for a null address, 0 bytes, a wrapping range or (CUDA/HIP) "
           "memory that is not page-locked for the device; ('unsupported') where the backend "
           "cannot adopt host memory.")
      .def_prop_ro("pinned_bytes", [](const PyHostPool& p) { return p.device.device.host_pool().pinned_bytes(); });

  nb::class_<PyDevice>(m, "Device", "One device opened through one backend.")
      .def_static("open", [](ferry::Backend backend, int ordinal, int host_latency_us, bool record_events) {
                    ferry::DeviceOptions o;
                    o.backend = backend;
                    o.ordinal = ordinal;
                    o.host_latency_us = host_latency_us;
                    o.record_events = record_events;
                    nb::gil_scoped_release nogil;
                    return PyDevice{ferry::Device::open(o), ordinal};
                  }, "backend"_a = ferry::Backend::host, "ordinal"_a = 0, "host_latency_us"_a = -1,
                  "record_events"_a = true,
                  "Open a device. ferry.Error('unsupported') when the backend was not built or has no device.")
      .def_static("open_default", [] {
                    nb::gil_scoped_release nogil;
                    return PyDevice{ferry::Device::open_default(), 0};
                  }, "Open the best device present (GPUs first, the host backend last).")
      .def_static("count", &ferry::Device::count, "backend"_a, "Number of devices a backend sees.")
      .def_static("built_with", &ferry::Device::built_with, "backend"_a,
                  "Whether the backend was compiled into this build.")
      .def_static("runtime_present", &ferry::Device::runtime_present, "backend"_a,
                  "Whether the backend was built and the vendor library it opens at run time loads here "
                  "(libcuda.so.1, libamdhip64, libvulkan.so.1); opening a backend without it raises "
                  "ferry.Error('unsupported') naming the library.")
      .def_prop_ro("backend", [](const PyDevice& d) { return d.device.backend(); })
      .def_prop_ro("ordinal", [](const PyDevice& d) { return d.ordinal; })
      .def_prop_ro("capabilities", [](const PyDevice& d) { return d.device.capabilities(); })
      .def("queue", [](const PyDevice& d, ferry::QueueRole role) { return d.device.queue(role); }, "role"_a,
           "The device's default queue of a role.")
      .def("create_queue", [](PyDevice& d, ferry::QueueRole role, const std::string& name, int priority) {
             return d.device.create_queue(role, name, priority);
           }, "role"_a, "name"_a = "", "priority"_a = 0)
      .def("adopt_queue", [](PyDevice& d, nb::handle stream, ferry::QueueRole role, const std::string& name) {
             std::uintptr_t handle = native_stream(stream);
             // PyTorch's default stream reports handle 0: on CUDA that is the legacy default
             // stream, which the backend adopts by its own name.
             if (handle == 0 && d.device.backend() == ferry::Backend::cuda) handle = 1;  // cudaStreamLegacy
             return d.adopt(handle, role, name.empty() ? std::string_view("adopted") : std::string_view(name));
           }, "stream"_a, "role"_a = ferry::QueueRole::compute, "name"_a = "", nb::keep_alive<0, 2>(),
           "Adopt an engine's stream (an int cudaStream_t/hipStream_t, an object with "
           "__cuda_stream__ such as torch.cuda.Stream). ferry never destroys it; keep it alive "
           "while ferry uses the queue. The same handle gives the same Queue.")
      .def("adopt_memory", [](PyDevice& d, std::uint64_t pointer, std::uint64_t size, const ferry::Queue& owner,
                              const ferry::TimelinePoint& ready_after, const std::string& tag, nb::object keep,
                              nb::object on_release) {
             if (!on_release.is_none() && !PyCallable_Check(on_release.ptr())) {
               invalid("Device.adopt_memory: on_release (a " + std::string(Py_TYPE(on_release.ptr())->tp_name) +
                       ") is not callable");
             }
             ferry::AdoptOptions o;
             o.ready_after = ready_after;
             o.tag = tag;
             PyDeviceBuffer b =
                 wrap(d.device.adopt_memory(ferry::NativeMemory{.pointer = pointer}, size, owner, std::move(o)), d);
             if (!keep.is_none()) b.s->keep.object = std::move(keep);
             if (!on_release.is_none()) b.s->on_release.object = std::move(on_release);
             return b;
           }, "pointer"_a, "size"_a, "owner"_a, "ready_after"_a = ferry::TimelinePoint{}, "tag"_a = "",
           "keep"_a = nb::none(), "on_release"_a = nb::none(),
           "Adopt an engine's memory (a host pointer on the host backend, a device pointer on "
           "CUDA/HIP) as a DeviceBuffer owned by `owner`. ferry never frees it; the engine keeps "
           "it allocated until the buffer's release point is reached. `keep` (optional) is held "
           "until the buffer is released and its handle and every DLPack export are gone: pass "
           "the object that owns the memory (a torch tensor) and its stream-ordered free on the "
           "owner then follows the release, which orders the owner after every ferry copy. "
           "`on_release` (optional, a callable) is called once, with the GIL, when the handle and "
           "every export are gone: with the release point (a TimelinePoint on the owner, empty "
           "once the device is closed), before `keep` is dropped. Memory reused on another queue "
           "after that point is never reused under a ferry copy or an owner's read before it.")
      .def("create_semaphore", [](PyDevice& d, std::uint64_t initial) { return d.device.create_semaphore(initial); },
           "initial"_a = 0)
      .def_prop_ro("pool", [](const PyDevice& d) { (void)d.device.pool(); return PyPool{d}; })
      .def_prop_ro("host_pool", [](const PyDevice& d) { (void)d.device.host_pool(); return PyHostPool{d}; })
      .def_prop_ro("host_waits", [](const PyDevice& d) { return d.device.host_waits(); })
      .def_prop_ro("is_open", [](const PyDevice& d) { return d.device.is_open(); })
      .def("close", [](PyDevice& d) {
             {
               std::lock_guard<std::mutex> lock(*d.mutex);
               d.adopted->clear();
             }
             nb::gil_scoped_release nogil;
             d.device.close();
           }, "Wait for all work, free everything, invalidate handles. Idempotent.")
      .def("__eq__", [](const PyDevice& a, const PyDevice& b) { return a.device == b.device; })
      .def("__repr__", [](const PyDevice& d) {
        if (!d.device.is_open()) return std::string("<ferry.Device closed>");
        return "<ferry.Device " + d.device.capabilities().name + " (" + std::string(ferry::to_string(d.device.backend())) + ")>";
      });

}

}  // namespace ferry::python
