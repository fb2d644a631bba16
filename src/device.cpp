// SPDX-License-Identifier: MIT
// Front end of devices and queues: argument checks, lifetime (close), the handles' methods.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "device_state.hpp"

namespace ferry {
namespace detail {

void fail(ErrorCode code, const std::string& message, const std::source_location& where) {
  throw Error(code, message, {}, where);
}

std::shared_ptr<DeviceState> lock_device(const std::weak_ptr<DeviceState>& device,
                                         const char* function, const std::source_location& where) {
  auto d = device.lock();
  if (!d || d->closed.load(std::memory_order_acquire)) {
    fail(ErrorCode::invalid_argument, std::string(function) + ": the device is closed", where);
  }
  return d;
}

QueueState& checked_queue(const Queue& queue, const char* function, const std::source_location& where) {
  FERRY_REQUIRE(static_cast<bool>(queue), function, "null queue handle", where);
  QueueState& q = *detail::access::state(queue);
  (void)lock_device(q.device, function, where);
  return q;
}

std::shared_ptr<SemaphoreState> make_semaphore(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                               std::uint64_t initial) {
  auto s = std::make_shared<SemaphoreState>();
  s->device = self;
  s->device_id = &device;
  s->backend = device.backend->create_semaphore(initial);
  s->max_signal = initial;
  s->reached.store(initial, std::memory_order_relaxed);
  // Ids are unique in the process, not only per device: a queue's cache of the waits it
  // enqueued (QueueState::waited) is keyed by id and may hold another device's timeline.
  static std::atomic<std::uint32_t> next_timeline_id{1};
  s->timeline_id = next_timeline_id.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(device.mutex);
  device.timelines[s->timeline_id] = s;
  // Forget semaphores that died so the registry does not grow without bound (amortized).
  if (device.timelines.size() >= device.prune_timelines_at) {
    std::erase_if(device.timelines, [](const auto& kv) { return kv.second.expired(); });
    device.prune_timelines_at = std::max<std::size_t>(64, 2 * device.timelines.size());
  }
  return s;
}

std::shared_ptr<QueueState> make_queue(DeviceState& device, const std::shared_ptr<DeviceState>& self,
                                       QueueRole role, std::string name, BackendQueue* backend,
                                       std::unique_ptr<BackendQueue> owned) {
  auto q = std::make_shared<QueueState>();
  q->device = self;
  q->device_id = &device;
  q->role = role;
  q->owned = std::move(owned);
  q->backend = q->owned ? q->owned.get() : backend;
  q->traits = q->backend->traits();
  q->timeline = make_semaphore(device, self, 0);
  q->timeline->queue_private = true;
  if (q->traits.defers_signals) {
    q->timeline->submitter = q->backend;
    q->timeline->submitted.store(0);
  }
  std::lock_guard lock(device.mutex);
  q->id = device.next_queue_id++;
  q->name = name.empty() ? (role == QueueRole::compute ? "compute" : "transfer") +
                               (q->id <= 2 ? std::string() : "-" + std::to_string(q->id))
                         : std::move(name);
  device.queues.push_back(q);
  return q;
}

void assert_fail(const char* expression, const char* why, const char* file, int line) noexcept {
  std::fprintf(stderr, "ferry: internal invariant broken at %s:%d: %s (%s); this is a bug in ferry\n", file, line,
               expression, why);
  std::abort();
}

DeviceState::~DeviceState() { close(); }

void DeviceState::close() noexcept {
  if (closed.exchange(true)) return;
  if (!backend) return;  // Device::open failed before the backend existed
  try {
    std::vector<std::shared_ptr<QueueState>> open_queues;
    {
      std::lock_guard lock(mutex);  // the registry grows under it (create_queue, adopt_queue)
      open_queues = queues;
    }
    for (auto& q : open_queues) {
      std::lock_guard lock(q->mutex);
      if (q->backend != nullptr) flush(*q);
    }
    backend->wait_idle();
  } catch (...) {
    // A lost device cannot be waited for; freeing below is still the right thing to do.
  }
  pool_close(*this);
  host_pool_close(*this);
  validation_messages_at_close = backend->validation_messages();
  // Semaphores a peer's queue waited on may still be named by waits queued there: they go to
  // the live peers, which destroy them once their own queues are gone.
  std::vector<std::shared_ptr<BackendSemaphore>> handed;
  std::vector<std::weak_ptr<DeviceState>> peer_devices;
  std::vector<std::shared_ptr<BackendSemaphore>> released;
  {
    std::lock_guard lock(mutex);
    for (auto& [id, w] : timelines) {
      if (auto s = w.lock()) {
        std::lock_guard slock(s->mutex);
        if (s->foreign_waits.load(std::memory_order_relaxed) && s->backend) {
          handed.emplace_back(std::move(s->backend));
        }
        s->backend.reset();
        s->submitter = nullptr;
      }
    }
    for (auto& q : queues) {
      std::lock_guard qlock(q->mutex);
      q->backend = nullptr;
      q->owned.reset();
    }
    queues.clear();
    compute.reset();
    transfer.reset();
    queues_gone = true;
    peer_devices = std::move(peers);
    released = std::move(foreign_semaphores);  // no queue of this device waits any more
  }
  {
    std::lock_guard ulock(urgent_mutex);  // not under `mutex`: urgent_lane takes it first
    urgent_transfer.reset();
  }
  if (!handed.empty()) {
    for (const auto& w : peer_devices) {
      auto peer = w.lock();
      if (!peer) continue;
      std::lock_guard lock(peer->mutex);  // one device's mutex at a time: no lock order to keep
      if (!peer->queues_gone) peer->foreign_semaphores.insert(peer->foreign_semaphores.end(), handed.begin(), handed.end());
    }
  }
  handed.clear();
  released.clear();
  backend.reset();
}

PeerSupport require_peer(DeviceState& exec, DeviceState& other, const char* function,
                         const std::source_location& where) {
  if (exec.options.backend != other.options.backend) {
    fail(ErrorCode::unsupported,
         std::string(function) + ": the devices are of different backends (" +
             std::string(to_string(exec.options.backend)) + " and " + std::string(to_string(other.options.backend)) +
             "); copy through the host with a download and an upload",
         where);
  }
  PeerSupport there;
  PeerSupport back;
  try {
    there = exec.backend->peer_support(*other.backend);
    back = other.backend->peer_support(*exec.backend);
  } catch (const Error& err) {
    throw Error(err.code(), std::string(function) + ": " + err.message(), err.call(), where);
  }
  if (!there.possible || !back.possible) {
    fail(ErrorCode::unsupported,
         std::string(function) + ": no copies between these two devices: " + (!there.possible ? there.reason : back.reason),
         where);
  }
  const auto link = [](DeviceState& a, const DeviceState& b) {
    std::lock_guard lock(a.mutex);
    std::erase_if(a.peers, [](const std::weak_ptr<DeviceState>& w) { return w.expired(); });
    for (const auto& w : a.peers) {
      if (w.lock().get() == &b) return;
    }
    a.peers.push_back(const_cast<DeviceState&>(b).weak_from_this());
  };
  if (&exec != &other) {
    link(exec, other);
    link(other, exec);
  }
  return there;
}

}  // namespace detail

using detail::fail;

// ---- Queue -------------------------------------------------------------------------------

QueueRole Queue::role(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Queue::role", "null queue handle", where);
  return state_->role;
}
std::uint32_t Queue::id(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Queue::id", "null queue handle", where);
  return state_->id;
}
const std::string& Queue::name(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Queue::name", "null queue handle", where);
  return state_->name;
}

void Queue::wait(const TimelinePoint& point, std::source_location where) {
  detail::QueueState& q = detail::checked_queue(*this, "Queue::wait", where);
  if (point.empty()) return;  // an empty point is already reached
  FERRY_REQUIRE(detail::access::semaphore(point)->device_id == q.device_id, "Queue::wait",
          "the point's semaphore belongs to another device", where);
  std::lock_guard lock(q.mutex);
  // No backend query: a wait on a point that turns out reached costs the backend less than
  // asking first (CUDA: the semaphore answers from its own record without a driver call).
  detail::enqueue_wait(q, point, /*query=*/false);
  detail::flush(q);
}

void Queue::signal(const TimelinePoint& point, std::source_location where) {
  detail::QueueState& q = detail::checked_queue(*this, "Queue::signal", where);
  FERRY_REQUIRE(!point.empty(), "Queue::signal", "empty timeline point", where);
  FERRY_REQUIRE(detail::access::semaphore(point)->device_id == q.device_id, "Queue::signal",
          "the point's semaphore belongs to another device", where);
  FERRY_REQUIRE(!detail::access::semaphore(point)->queue_private, "Queue::signal",
                "the point is on a queue's private timeline, which only ferry signals; signal a semaphore "
                "from Device::create_semaphore instead",
                where);
  std::lock_guard lock(q.mutex);
  {
    std::lock_guard slock(detail::access::semaphore(point)->mutex);
    auto& s = *detail::access::semaphore(point);
    FERRY_REQUIRE(s.backend != nullptr, "Queue::signal", "the device is closed", where);
    // Every signal (host or queue) goes through ferry and raises max_signal, and the value
    // starts at max_signal: max_signal bounds the backend's value without asking it.
    const std::uint64_t current = s.max_signal;
    FERRY_REQUIRE(point.value > current, "Queue::signal",
            "value " + std::to_string(point.value) + " does not exceed the highest value signalled so far (" +
                std::to_string(current) + ")",
            where);
    s.max_signal = point.value;
    q.backend->signal(*s.backend, point.value);
  }
  q.dirty = true;
  detail::hold_semaphore(q, detail::access::semaphore(point));
  detail::flush(q);
}

TimelinePoint Queue::mark(std::source_location where) {
  detail::QueueState& q = detail::checked_queue(*this, "Queue::mark", where);
  std::lock_guard lock(q.mutex);
  TimelinePoint p = detail::enqueue_mark(q);
  detail::flush(q);
  return p;
}

void Queue::synchronize(std::chrono::nanoseconds timeout, std::source_location where) {
  mark(where).wait(timeout, where);
}

// ---- Device ------------------------------------------------------------------------------

namespace {
detail::DeviceState& checked(const std::shared_ptr<detail::DeviceState>& s, const char* function,
                             const std::source_location& where) {
  FERRY_REQUIRE(s != nullptr, function, "null device handle", where);
  FERRY_REQUIRE(!s->closed.load(), function, "the device is closed", where);
  return *s;
}
}  // namespace

const Capabilities& Device::capabilities(std::source_location where) const {
  return checked(state_, "Device::capabilities", where).caps;
}
Backend Device::backend(std::source_location where) const {
  return checked(state_, "Device::backend", where).options.backend;
}

Queue Device::queue(QueueRole role, std::source_location where) const {
  auto& s = checked(state_, "Device::queue", where);
  return detail::access::make<Queue>(role == QueueRole::compute ? s.compute : s.transfer);
}

Queue Device::create_queue(QueueRole role, std::string name, int priority, std::source_location where) {
  auto& s = checked(state_, "Device::create_queue", where);
  std::unique_ptr<detail::BackendQueue> backend;
  try {
    backend = s.backend->create_queue(role, priority);
  } catch (const Error& err) {
    throw Error(err.code(), "Device::create_queue: " + err.message(), err.call(), where);
  }
  return detail::access::make<Queue>(detail::make_queue(s, state_, role, std::move(name), nullptr, std::move(backend)));
}

Queue Device::adopt_queue(QueueRole role, const NativeQueue& native, std::string name,
                          std::source_location where) {
  auto& s = checked(state_, "Device::adopt_queue", where);
  std::unique_ptr<detail::BackendQueue> backend;
  try {
    backend = s.backend->adopt_queue(role, native);
  } catch (Error& err) {
    throw Error(err.code(), "Device::adopt_queue: " + err.message(), err.call(), where);
  }
  auto q = detail::make_queue(s, state_, role, name.empty() ? "adopted" : std::move(name), nullptr, std::move(backend));
  q->external = true;
  return detail::access::make<Queue>(std::move(q));
}

TimelineSemaphore Device::create_semaphore(std::uint64_t initial, std::source_location where) {
  auto& s = checked(state_, "Device::create_semaphore", where);
  return detail::access::make<TimelineSemaphore>(detail::make_semaphore(s, state_, initial));
}

DevicePool& Device::pool(std::source_location where) const { return checked(state_, "Device::pool", where).pool_api; }
HostPool& Device::host_pool(std::source_location where) const {
  return checked(state_, "Device::host_pool", where).host_pool_api;
}

std::uint64_t Device::validation_messages(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Device::validation_messages", "null device handle", where);
  if (state_->closed.load()) return state_->validation_messages_at_close;
  return state_->backend->validation_messages();
}

std::uint64_t Device::host_waits(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Device::host_waits", "null device handle", where);
  return state_->host_waits.load(std::memory_order_relaxed);
}

std::uint64_t Device::submissions(std::source_location where) const {
  auto& s = checked(state_, "Device::submissions", where);
  std::lock_guard lock(s.mutex);
  std::uint64_t total = 0;
  std::vector<const detail::BackendQueue*> seen;  // one backend queue may serve two roles
  for (const auto& q : s.queues) {
    if (q->backend == nullptr || std::find(seen.begin(), seen.end(), q->backend) != seen.end()) continue;
    seen.push_back(q->backend);
    total += q->backend->driver_submits();
  }
  return total;
}

void Device::close() {
  if (!state_) return;
  // close() frees the segments under the pool's mutex, which a segment callback holds.
  detail::refuse_in_segment_callback(*state_, "Device::close", std::source_location::current());
  state_->close();
}

bool Device::is_open() const noexcept { return state_ != nullptr && !state_->closed.load(); }

}  // namespace ferry
