// SPDX-License-Identifier: MIT
// Device state: the backend device, queues and semaphore registries, pools, activity trace.
// Not installed.
//
// Lifetime model: Device handles own the DeviceState (shared_ptr). Every other handle
// (Queue, TimelineSemaphore, DeviceBuffer, HostBuffer) holds its own state plus a weak_ptr to
// the device: once the last Device handle goes away (or close() is called) the device waits
// for its queues, destroys every backend object it made -- including those still referenced by
// live handles -- and those handles become inert ("device is closed" errors).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend.hpp"
#include "block_state.hpp"
#include "contract.hpp"
#include "ferry/device.hpp"
#include "ferry/pool.hpp"
#include "ferry/snapshot.hpp"
#include "handle_access.hpp"
#include "host_state.hpp"
#include "pool_state.hpp"
#include "queue_state.hpp"
#include "timeline.hpp"

namespace ferry::detail {

/// Binds the device's backend to the calling thread for one front-end call (see
/// BackendDevice::bind_thread): the hot calls (uploads, downloads, copies) make several backend
/// calls in a row.
class BoundThread {
 public:
  explicit BoundThread(BackendDevice& device) : device_(device) { device_.bind_thread(binding_); }
  ~BoundThread() { device_.unbind_thread(binding_); }
  BoundThread(const BoundThread&) = delete;
  BoundThread& operator=(const BoundThread&) = delete;

 private:
  BackendDevice& device_;
  ThreadBinding binding_;
};

struct DeviceState : std::enable_shared_from_this<DeviceState> {
  std::unique_ptr<BackendDevice> backend;
  DeviceOptions options;
  Capabilities caps;
  std::atomic<bool> closed{false};
  std::uint64_t validation_messages_at_close = 0;  // readable after close
  std::atomic<std::uint64_t> host_waits{0};        // Device::host_waits
  std::int64_t opened_steady_ns = steady_now_ns();

  std::mutex mutex;  // queues, semaphores registries
  std::vector<std::shared_ptr<QueueState>> queues;
  /// Every semaphore of the device by timeline id (queue timelines and user semaphores): the
  /// pool resolves free points through it, close() destroys what is left through it.
  std::unordered_map<std::uint32_t, std::weak_ptr<SemaphoreState>> timelines;
  std::size_t prune_timelines_at = 64;  // forget dead entries when the map reaches this size
  std::uint32_t next_queue_id = 1;
  /// Devices this one copied to or from (peer copies), whose queues may wait on this device's
  /// semaphores and this device's queues on theirs (under `mutex`).
  std::vector<std::weak_ptr<DeviceState>> peers;
  /// Backend semaphores of peers that closed while this device's queues may still wait on
  /// them: destroyed once these queues are gone (close). Under `mutex`.
  std::vector<std::shared_ptr<BackendSemaphore>> foreign_semaphores;
  bool queues_gone = false;  ///< close destroyed the queues (under `mutex`)
  std::shared_ptr<QueueState> compute;
  std::shared_ptr<QueueState> transfer;
  /// The queue of urgent copies (TransferState::urgent_lane), made at the first urgent call
  /// of any Transfer without an urgent_executor: the transfer queue itself where the device
  /// has no queue left. Under urgent_mutex.
  std::mutex urgent_mutex;
  std::shared_ptr<QueueState> urgent_transfer;

  PoolState pool;
  HostPoolState host;
  DevicePool pool_api = access::device_pool(this);
  HostPool host_pool_api = access::host_pool(this);
  std::mutex activity_mutex;
  std::deque<QueueActivity> activity;  // (see PoolState::events)
  /// Spans not seen complete yet, per semaphore, in increasing value of their end point:
  /// resolve_activity queries each semaphore at most once and stops at its first span not
  /// reached. (index into `activity`, end point value).
  struct UnresolvedSpans {
    std::shared_ptr<SemaphoreState> semaphore;
    std::deque<std::pair<std::uint64_t, std::size_t>> spans;  // (value, index)
  };
  std::vector<UnresolvedSpans> unresolved_activity;
  std::uint64_t last_resolve_ns = 0;  // resolve_activity rate limit (guarded by activity_mutex)

  ~DeviceState();
  void close() noexcept;
  /// A steady_now_ns() reading as ns since the device was opened (what events and spans carry).
  [[nodiscard]] std::uint64_t since_opened_ns(std::int64_t steady_ns) const {
    return static_cast<std::uint64_t>(steady_ns - opened_steady_ns);
  }
};

// ---- helpers used across src/*.cpp ------------------------------------------------------

/// Lock the device of a handle; throws invalid_argument when closed.
std::shared_ptr<DeviceState> lock_device(const std::weak_ptr<DeviceState>& device,
                                         const char* function, const std::source_location& where);
/// Validate a queue handle (non-null, device open) and return its state + device.
QueueState& checked_queue(const Queue& queue, const char* function, const std::source_location& where);
/// Create a semaphore state registered with the device (assigns a timeline id).
std::shared_ptr<SemaphoreState> make_semaphore(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                               std::uint64_t initial);
/// The route of peer copies run by `exec`'s queues to or from `other` (both open, of one
/// backend), after checking that each device's queues can wait on the other's semaphores;
/// `unsupported` naming `function` and the reason otherwise. Records the two as peers.
PeerSupport require_peer(DeviceState& exec, DeviceState& other, const char* function,
                         const std::source_location& where);
/// Wrap a backend queue as a QueueState registered with the device.
std::shared_ptr<QueueState> make_queue(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                       QueueRole role, std::string name, BackendQueue* backend,
                                       std::unique_ptr<BackendQueue> owned);

/// Record queue activity for traces: begins now (enqueue), ends when `done` is observed
/// reached by a later record_activity/resolve_activity call (an upper bound on completion).
void record_activity(DeviceState& device, const QueueState& q, std::string name, std::uint64_t bytes,
                     const TimelinePoint& done);
/// Stamp the end time of recorded activity whose point is reached. Caller holds activity_mutex.
void resolve_activity(DeviceState& device, bool force = false);
/// The same with the caller's clock reading (steady_now_ns()).
void resolve_activity(DeviceState& device, bool force, std::int64_t steady_now);

}  // namespace ferry::detail
