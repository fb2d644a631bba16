// SPDX-License-Identifier: MIT
// Front end of devices, queues and timeline semaphores: argument checks, lifetime, registry.
#include <algorithm>
#include <thread>

#include "ferry/config.hpp"
#include "internal.hpp"

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
  QueueState& q = *queue.state();
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
  std::lock_guard lock(device.mutex);
  s->timeline_id = device.next_timeline_id++;
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
  q->timeline = make_semaphore(device, self, 0);
  q->timeline->queue_private = true;
  std::lock_guard lock(device.mutex);
  q->id = device.next_queue_id++;
  q->name = name.empty() ? (role == QueueRole::compute ? "compute" : "transfer") +
                               (q->id <= 2 ? std::string() : "-" + std::to_string(q->id))
                         : std::move(name);
  device.queues.push_back(q);
  return q;
}

std::uint64_t query_value(SemaphoreState& s) {
  std::lock_guard lock(s.mutex);
  const std::uint64_t v = s.backend == nullptr ? UINT64_MAX : s.backend->value();
  s.note_reached(v);
  s.last_query_ns.store(steady_now_ns(), std::memory_order_relaxed);
  return v;
}

std::uint64_t query_value_throttled(SemaphoreState& s, std::int64_t now) {
  if (now - s.last_query_ns.load(std::memory_order_relaxed) < kHotPathQueryIntervalNs) {
    return s.reached.load(std::memory_order_acquire);
  }
  return query_value(s);
}

namespace {

/// Whether q has a wait enqueued for `timeline` at `value` or later (caller holds q.mutex).
bool already_waited(const QueueState& q, std::uint32_t timeline, std::uint64_t value) {
  for (const auto& w : q.waited) {
    if (w.timeline == timeline) return w.value >= value;
  }
  return false;
}

void note_waited(QueueState& q, std::uint32_t timeline, std::uint64_t value) {
  for (auto& w : q.waited) {
    if (w.timeline == timeline) {
      w.value = std::max(w.value, value);
      return;
    }
  }
  q.waited[q.waited_next] = {timeline, value};
  q.waited_next = (q.waited_next + 1) % q.waited.size();
}

}  // namespace

void enqueue_wait(QueueState& q, const TimelinePoint& point, bool query) {
  if (point.empty()) return;
  SemaphoreState& s = *point.semaphore;
  // A queue is already ordered after points of its own timeline and after values it waited
  // for (stream-ordered backends); reached points need no wait (their work is complete).
  // Cheapest test first: only the last one asks the backend.
  if (&s != q.timeline.get() && !s.known_reached(point.value) && !already_waited(q, s.timeline_id, point.value)) {
    std::lock_guard lock(s.mutex);  // one lock: the query and the wait
    std::uint64_t value = UINT64_MAX;  // closed: all done
    if (s.backend != nullptr) value = query ? s.backend->value() : s.reached.load(std::memory_order_acquire);
    s.note_reached(value);
    if (value < point.value) {
      q.backend->wait(*s.backend, point.value);
      q.dirty = true;
      if (q.backend->wait_orders_later_work()) note_waited(q, s.timeline_id, point.value);
    }
  }
  // Ownership acquires whose release is ordered before this point are recorded now.
  if (!q.pending_acquires.empty()) {
    std::erase_if(q.pending_acquires, [&](const QueueState::PendingAcquire& a) {
      if (a.point.semaphore != point.semaphore || a.point.value > point.value) return false;
      q.backend->acquire_ownership(a.range, a.bytes, *a.from);
      q.dirty = true;
      return true;
    });
  }
}

TimelinePoint enqueue_mark(QueueState& q) {
  if (q.dirty) {
    std::lock_guard lock(q.timeline->mutex);
    const std::uint64_t v = ++q.last_mark;
    q.timeline->max_signal = v;
    q.backend->signal(*q.timeline->backend, v);
    q.dirty = false;
  }
  return TimelinePoint{q.timeline, q.last_mark};
}

bool point_reached(const TimelinePoint& point) {
  if (point.empty()) return true;
  SemaphoreState& s = *point.semaphore;
  return s.known_reached(point.value) || query_value(s) >= point.value;
}

void resolve_activity(DeviceState& device, bool force) { resolve_activity(device, force, steady_now_ns()); }

void resolve_activity(DeviceState& device, bool force, std::int64_t steady_now) {
  if (device.unresolved_activity.empty()) return;
  const std::uint64_t now = device.since_opened_ns(steady_now);
  // On the hot path (every copy records a span) look at most every 10 us, and ask the
  // backend about a timeline at most every kHotPathQueryIntervalNs: a span's end is "first
  // seen complete" either way, so this bounds its error by that interval and keeps driver
  // queries off the copy path. Snapshots force a full resolve.
  if (!force && now - device.last_resolve_ns < 10'000) return;
  device.last_resolve_ns = now;
  // Spans of one semaphore are kept in increasing end value: one query per semaphore, and
  // the first span not reached ends the scan of that semaphore.
  std::erase_if(device.unresolved_activity, [&](DeviceState::UnresolvedSpans& u) {
    SemaphoreState& s = *u.semaphore;
    std::uint64_t value = s.reached.load(std::memory_order_acquire);
    if (value < u.spans.front().first) value = force ? query_value(s) : query_value_throttled(s, steady_now);
    while (!u.spans.empty() && u.spans.front().first <= value) {
      device.activity[u.spans.front().second].end_ns = now;
      u.spans.pop_front();
    }
    return u.spans.empty();
  });
}

void record_activity(DeviceState& device, const QueueState& q, std::string name, std::uint64_t bytes,
                     const TimelinePoint& done) {
  if (!device.options.record_events) return;
  std::lock_guard lock(device.activity_mutex);
  const std::int64_t steady_now = steady_now_ns();  // one clock reading for the call
  resolve_activity(device, false, steady_now);
  if (device.activity.size() >= (1u << 20)) return;  // bounded: a million spans
  const std::uint64_t now = device.since_opened_ns(steady_now);
  device.activity.push_back(QueueActivity{q.id, std::move(name), now, 0, bytes});
  const std::size_t index = device.activity.size() - 1;
  // Only the watermark is consulted: `done` was just enqueued, a query would rarely find it
  // reached, and a later call resolves it (the end is an upper bound either way).
  if (done.empty() || done.semaphore->known_reached(done.value)) {
    device.activity.back().end_ns = now;
    return;
  }
  auto it = std::find_if(device.unresolved_activity.begin(), device.unresolved_activity.end(),
                         [&](const DeviceState::UnresolvedSpans& u) { return u.semaphore == done.semaphore; });
  if (it == device.unresolved_activity.end()) {
    it = device.unresolved_activity.insert(device.unresolved_activity.end(), {done.semaphore, {}});
  }
  // Usually the greatest value so far (a queue's marks grow); callers racing on one queue may
  // record out of order by a few: insert from the back.
  auto pos = it->spans.end();
  while (pos != it->spans.begin() && std::prev(pos)->first > done.value) --pos;
  it->spans.insert(pos, {done.value, index});
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
      if (q->backend != nullptr) q->backend->flush();
    }
    backend->wait_idle();
  } catch (...) {
    // A lost device cannot be waited for; freeing below is still the right thing to do.
  }
  pool_close(*this);
  host_pool_close(*this);
  validation_messages_at_close = backend->validation_messages();
  {
    std::lock_guard lock(mutex);
    for (auto& [id, w] : timelines) {
      if (auto s = w.lock()) {
        std::lock_guard slock(s->mutex);
        s->backend.reset();
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
  }
  backend.reset();
}

Device wrap_backend_device(std::unique_ptr<BackendDevice> backend, const DeviceOptions& options,
                           std::source_location where) {
  FERRY_REQUIRE(backend != nullptr, "wrap_backend_device", "null backend device", where);
  auto state = std::make_shared<DeviceState>();
  state->options = options;
  state->backend = std::move(backend);
  state->caps = state->backend->capabilities();
  state->pool.allocator = BlockAllocator(BlockAllocator::Config{
      .alignment = std::max<std::uint64_t>(512, state->caps.min_alignment)});
  auto& compute_backend = state->backend->default_queue(QueueRole::compute);
  auto& transfer_backend = state->backend->default_queue(QueueRole::transfer);
  state->compute = make_queue(*state, state, QueueRole::compute, "compute", &compute_backend, nullptr);
  if (&transfer_backend == &compute_backend) {
    state->transfer = state->compute;  // one-queue device: documented in capabilities
  } else {
    state->transfer = make_queue(*state, state, QueueRole::transfer, "transfer", &transfer_backend, nullptr);
  }
  return Device(std::move(state));
}

namespace {

struct BackendEntry {
  Backend backend;
  bool built;
  const char* option;
  int (*count)() noexcept;
  std::unique_ptr<BackendDevice> (*open)(const DeviceOptions&);
};

#define FERRY_ENTRY(name, have) \
  BackendEntry{Backend::name, have, "-D" #name "=enabled", &name##_device_count, &name##_open}

[[maybe_unused]] int none_count() noexcept { return 0; }

const BackendEntry& entry(Backend b) {
  static const BackendEntry entries[] = {
#if FERRY_HAVE_HOST
      FERRY_ENTRY(host, true),
#else
      BackendEntry{Backend::host, false, "-Dhost=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_CUDA
      FERRY_ENTRY(cuda, true),
#else
      BackendEntry{Backend::cuda, false, "-Dcuda=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_HIP
      FERRY_ENTRY(hip, true),
#else
      BackendEntry{Backend::hip, false, "-Dhip=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_VULKAN
      FERRY_ENTRY(vulkan, true),
#else
      BackendEntry{Backend::vulkan, false, "-Dvulkan=enabled", &none_count, nullptr},
#endif
#if FERRY_HAVE_VULKAN && FERRY_HAVE_CUDA
      BackendEntry{Backend::vulkan_cuda, true, "", &pair_device_count, &pair_open},
      BackendEntry{Backend::cuda_vulkan, true, "", &pair_device_count, &pair_open},
#else
      BackendEntry{Backend::vulkan_cuda, false, "-Dvulkan=enabled -Dcuda=enabled", &none_count, nullptr},
      BackendEntry{Backend::cuda_vulkan, false, "-Dvulkan=enabled -Dcuda=enabled", &none_count, nullptr},
#endif
  };
  static_assert(std::size(entries) == static_cast<std::size_t>(Backend::cuda_vulkan) + 1);
  return entries[static_cast<int>(b)];
}

}  // namespace
}  // namespace detail

using detail::fail;

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::host: return "host";
    case Backend::cuda: return "cuda";
    case Backend::hip: return "hip";
    case Backend::vulkan: return "vulkan";
    case Backend::vulkan_cuda: return "vulkan_cuda";
    case Backend::cuda_vulkan: return "cuda_vulkan";
  }
  return "unknown";
}

Backend parse_backend(std::string_view name, std::source_location where) {
  for (Backend b : {Backend::host, Backend::cuda, Backend::hip, Backend::vulkan, Backend::vulkan_cuda,
                    Backend::cuda_vulkan}) {
    if (to_string(b) == name) return b;
  }
  fail(ErrorCode::invalid_argument,
       "parse_backend: unknown backend '" + std::string(name) +
           "' (expected host, cuda, hip, vulkan, vulkan_cuda or cuda_vulkan)",
       where);
}

// ---- TimelinePoint / TimelineSemaphore --------------------------------------------------

bool TimelinePoint::reached(std::source_location where) const {
  try {
    return detail::point_reached(*this);
  } catch (const Error& err) {  // a device error while querying: name the caller
    throw Error(err.code(), "TimelinePoint::reached: " + err.message(), err.call(), where);
  }
}

void TimelinePoint::wait(std::chrono::nanoseconds timeout, std::source_location where) const {
  if (empty()) return;
  TimelineSemaphore(semaphore).wait(value, timeout, where);
}

std::uint64_t TimelineSemaphore::value(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::value", "null semaphore handle", where);
  std::lock_guard lock(state_->mutex);
  FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::value", "the device is closed", where);
  const std::uint64_t v = state_->backend->value();
  state_->note_reached(v);
  return v;
}

void TimelineSemaphore::signal(std::uint64_t value, std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::signal", "null semaphore handle", where);
  auto device = detail::lock_device(state_->device, "TimelineSemaphore::signal", where);
  FERRY_REQUIRE(!state_->queue_private, "TimelineSemaphore::signal",
                "the semaphore is a queue's private timeline, which only ferry signals (signalling it "
                "would make the queue's marks report pending work complete); signal a semaphore from "
                "Device::create_semaphore instead",
                where);
  std::lock_guard lock(state_->mutex);
  FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::signal", "the device is closed", where);
  const std::uint64_t current = std::max(state_->max_signal, state_->backend->value());
  FERRY_REQUIRE(value > current, "TimelineSemaphore::signal",
          "value " + std::to_string(value) + " does not exceed the current value " +
              std::to_string(current) + " (timelines only move forward)",
          where);
  state_->backend->signal(value);
  state_->max_signal = value;
  state_->note_reached(value);  // a host signal takes effect at once
}

bool TimelineSemaphore::try_wait(std::uint64_t value, std::chrono::nanoseconds timeout,
                                 std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::try_wait", "null semaphore handle", where);
  detail::BackendSemaphore* backend = nullptr;
  {
    std::lock_guard lock(state_->mutex);
    FERRY_REQUIRE(state_->backend != nullptr, "TimelineSemaphore::try_wait", "the device is closed", where);
    backend = state_->backend.get();
    // Reached (the watermark, else one query): not a blocking wait, not counted in host_waits.
    if (state_->known_reached(value)) return true;
    const std::uint64_t now = backend->value();
    state_->note_reached(now);
    if (now >= value) return true;
  }
  if (auto device = state_->device.lock()) device->host_waits.fetch_add(1, std::memory_order_relaxed);
  // Not holding the mutex while blocked: a host signal from another thread must get through.
  if (!backend->wait(value, timeout)) return false;
  state_->note_reached(value);
  return true;
}

void TimelineSemaphore::wait(std::uint64_t value, std::chrono::nanoseconds timeout,
                             std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::wait", "null semaphore handle", where);
  if (!try_wait(value, timeout, where)) {
    fail(ErrorCode::timeout,
         "TimelineSemaphore::wait: value " + std::to_string(value) + " not reached within " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
             " ms (current value " + std::to_string(this->value(where)) + ")",
         where);
  }
}

TimelinePoint TimelineSemaphore::at(std::uint64_t value, std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "TimelineSemaphore::at", "null semaphore handle", where);
  return TimelinePoint{state_, value};
}

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
  FERRY_REQUIRE(point.semaphore->device_id == q.device_id, "Queue::wait",
          "the point's semaphore belongs to another device", where);
  std::lock_guard lock(q.mutex);
  // No backend query: a wait on a point that turns out reached costs the backend less than
  // asking first (CUDA: the semaphore answers from its own record without a driver call).
  detail::enqueue_wait(q, point, /*query=*/false);
  q.backend->flush();
}

void Queue::signal(const TimelinePoint& point, std::source_location where) {
  detail::QueueState& q = detail::checked_queue(*this, "Queue::signal", where);
  FERRY_REQUIRE(!point.empty(), "Queue::signal", "empty timeline point", where);
  FERRY_REQUIRE(point.semaphore->device_id == q.device_id, "Queue::signal",
          "the point's semaphore belongs to another device", where);
  FERRY_REQUIRE(!point.semaphore->queue_private, "Queue::signal",
                "the point is on a queue's private timeline, which only ferry signals; signal a semaphore "
                "from Device::create_semaphore instead",
                where);
  std::lock_guard lock(q.mutex);
  {
    std::lock_guard slock(point.semaphore->mutex);
    auto& s = *point.semaphore;
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
  q.backend->flush();
}

TimelinePoint Queue::mark(std::source_location where) {
  detail::QueueState& q = detail::checked_queue(*this, "Queue::mark", where);
  std::lock_guard lock(q.mutex);
  TimelinePoint p = detail::enqueue_mark(q);
  q.backend->flush();
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

Device Device::open(const DeviceOptions& options, std::source_location where) {
  const detail::BackendEntry& e = detail::entry(options.backend);
  if (!e.built) {
    fail(ErrorCode::unsupported,
         "Device::open: ferry was built without the " + std::string(to_string(options.backend)) +
             " backend (reconfigure with meson " + e.option + ")",
         where);
  }
  FERRY_REQUIRE(options.ordinal >= 0, "Device::open", "negative ordinal " + std::to_string(options.ordinal), where);
  std::unique_ptr<detail::BackendDevice> backend;
  try {
    backend = e.open(options);
  } catch (Error& err) {
    throw Error(err.code(), "Device::open(" + std::string(to_string(options.backend)) + ", " +
                                std::to_string(options.ordinal) + "): " + err.message(),
                err.call(), where);
  }
  return detail::wrap_backend_device(std::move(backend), options, where);
}

Device Device::open_default(std::source_location where) {
  auto try_open = [&](Backend b, int ordinal) -> Device {
    try {
      return open(DeviceOptions{.backend = b, .ordinal = ordinal}, where);
    } catch (const Error&) {
      return Device();
    }
  };
  if (count(Backend::cuda) > 0) {
    if (Device d = try_open(Backend::cuda, 0)) return d;
  }
#if FERRY_HAVE_VULKAN
  const int vk = count(Backend::vulkan);
  for (int i = 0; i < vk; ++i) {
    if (detail::vulkan_device_is_gpu(i)) {
      if (Device d = try_open(Backend::vulkan, i)) return d;
    }
  }
#endif
  if (count(Backend::hip) > 0) {
    if (Device d = try_open(Backend::hip, 0)) return d;
  }
#if FERRY_HAVE_VULKAN
  for (int i = 0; i < vk; ++i) {
    if (Device d = try_open(Backend::vulkan, i)) return d;
  }
#endif
  return open(DeviceOptions{.backend = Backend::host}, where);
}

int Device::count(Backend backend) noexcept {
  const detail::BackendEntry& e = detail::entry(backend);
  return e.built ? e.count() : 0;
}

bool Device::built_with(Backend backend) noexcept { return detail::entry(backend).built; }

const Capabilities& Device::capabilities(std::source_location where) const {
  return checked(state_, "Device::capabilities", where).caps;
}
Backend Device::backend(std::source_location where) const {
  return checked(state_, "Device::backend", where).options.backend;
}

Queue Device::queue(QueueRole role, std::source_location where) const {
  auto& s = checked(state_, "Device::queue", where);
  return Queue(role == QueueRole::compute ? s.compute : s.transfer);
}

Queue Device::create_queue(QueueRole role, std::string name, int priority, std::source_location where) {
  auto& s = checked(state_, "Device::create_queue", where);
  std::unique_ptr<detail::BackendQueue> backend;
  try {
    backend = s.backend->create_queue(role, priority);
  } catch (const Error& err) {
    throw Error(err.code(), "Device::create_queue: " + err.message(), err.call(), where);
  }
  return Queue(detail::make_queue(s, state_, role, std::move(name), nullptr, std::move(backend)));
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
  return Queue(detail::make_queue(s, state_, role, name.empty() ? "adopted" : std::move(name), nullptr,
                                  std::move(backend)));
}

TimelineSemaphore Device::create_semaphore(std::uint64_t initial, std::source_location where) {
  auto& s = checked(state_, "Device::create_semaphore", where);
  return TimelineSemaphore(detail::make_semaphore(s, state_, initial));
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

void Device::close() {
  if (state_) state_->close();
}

bool Device::is_open() const noexcept { return state_ != nullptr && !state_->closed.load(); }

#if !FERRY_HAVE_VULKAN
// ferry/vulkan.hpp declares adopt_device; without the Vulkan backend it is defined here, with
// AdoptInfo left incomplete (no Vulkan headers in the front end), and refuses.
namespace vulkan {
struct AdoptInfo;
Device adopt_device(const AdoptInfo& info, std::source_location where);
Device adopt_device(const AdoptInfo& /*info*/, std::source_location where) {
  fail(ErrorCode::unsupported,
       "vulkan::adopt_device: ferry was built without the vulkan backend (reconfigure with meson "
       "-Dvulkan=enabled)",
       where);
}
}  // namespace vulkan
#endif

}  // namespace ferry
