// SPDX-License-Identifier: MIT
// The host (CPU reference) backend.
//
// "Device memory" is ordinary process memory: segments are 4096-aligned allocations and
// Segment::address / Segment::native are the base pointer. Each queue is a worker thread that
// drains a FIFO of operations (copy = memmove, signal, wait, synthetic compute) strictly in
// enqueue order. Timeline semaphores are an atomic counter plus a condition variable.
//
// Several devices: every Device::open of the host backend is a device of its own (its own
// queues, pool and semaphores). Two of them copy between each other (peer copies) with a
// memmove, and a worker of one waits on the other's semaphores, which are plain host objects:
// so the cross-device ordering of peer copies is tested without a GPU.
//
// Latency injection (DeviceOptions::host_latency_us, or FERRY_HOST_LATENCY_US when that is
// negative): before each operation the worker sleeps a random 0..N microseconds, so that a
// missing queue wait shows up as wrong data rather than passing by luck.
//
// Memory limit (FERRY_HOST_MEMORY_LIMIT, bytes): when set, allocate_segment throws
// out_of_memory once the sum of live segment sizes would exceed it, so tests can exercise
// the pool's out-of-memory path. It is reported as device_memory_bytes.
//
// Fault injection (FERRY_HOST_FAULTS, read at open): a comma-separated list of key=N, each N
// a decimal integer >= 1, each key at most once; anything else makes the open fail with
// invalid_argument naming the variable. Faults exist so that tests can drive the front end's
// error paths, which a CPU never takes on its own:
//  - device_lost_at=N: the N-th enqueue of an operation on any queue of the device (copies,
//    signals, waits and compute, counted from 1) loses the device. It and every later
//    enqueue throws device_lost; the workers drop what is still queued (as a GPU abandons
//    its work), so points not reached by then never are, and a host wait for one throws
//    device_lost instead of waiting; wait_idle throws it after the queues ran dry. A loss is
//    reported only once no operation runs any more: the caller may then free what the lost
//    work named, as after a GPU's loss.
//  - alloc_fail_at=N, alloc_fail_count=K (default 1): allocate_segment calls N..N+K-1 throw
//    out_of_memory, as a full GPU does when the pool grows.
//  - copy_fail_at=N: the N-th copy enqueued (h2d, d2h or d2d, any queue) throws
//    backend_error and is not queued; the device stays usable, as after a failed copy call.
//
// Lifetime contracts for the front end:
//  - Operations capture raw pointers: segments, host memory and semaphores named by enqueued
//    work must stay alive until that work has completed (synchronize / wait_idle).
//  - Destroying a queue stops its worker promptly: the operation in progress finishes (a
//    blocked wait is abandoned within ~10 ms) and every operation still queued is DROPPED.
//    Drain first (wait_idle, or a signal + host wait) when the work must complete.
//  - wait_idle() waits for every live queue of the device to run dry; it blocks forever if a
//    queue waits on a value nobody will signal (as a GPU backend would).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <span>
#include <unordered_set>
#include <vector>

#include "backend.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace ferry::detail {
namespace {

// dst[i] = src[i] + 1 for every byte (wrapping), eight bytes at a time: add 1 to the low seven
// bits of each byte (no carry can cross a byte), then restore each byte's top bit by XOR.
void add_one(std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  constexpr std::uint64_t low = 0x7f7f7f7f7f7f7f7fULL, ones = 0x0101010101010101ULL;
  std::uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, src + i, 8);
    w = ((w & low) + ones) ^ (w & ~low);
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < bytes; ++i) dst[i] = static_cast<std::byte>(static_cast<std::uint8_t>(src[i]) + 1U);
}


constexpr std::size_t kPageAlignment = 4096;
constexpr auto kWaitSlice = std::chrono::milliseconds(10);

// ---------------------------------------------------------------------------------------------
// Helpers

void* aligned_allocate(std::uint64_t bytes) noexcept {
  const std::uint64_t rounded = (bytes + kPageAlignment - 1) / kPageAlignment * kPageAlignment;
  if (rounded < bytes || rounded > SIZE_MAX) return nullptr;
#if defined(_WIN32)
  return _aligned_malloc(static_cast<std::size_t>(rounded), kPageAlignment);
#else
  return std::aligned_alloc(kPageAlignment, static_cast<std::size_t>(rounded));
#endif
}

void aligned_free(void* p) noexcept {
#if defined(_WIN32)
  _aligned_free(p);
#else
  std::free(p);
#endif
}

// Parse an environment variable as a non-negative integer. Unset/empty -> `fallback`;
// anything else that is not a plain non-negative number is an invalid_argument error.
std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
    throw Error(ErrorCode::invalid_argument,
                std::string("host: environment variable ") + name + "='" + text +
                    "' is not a non-negative integer");
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Fault injection (see the file comment)

constexpr const char* kFaultsVariable = "FERRY_HOST_FAULTS";

struct FaultPlan {
  std::uint64_t device_lost_at = 0;  // 0 = never
  std::uint64_t alloc_fail_at = 0;
  std::uint64_t alloc_fail_count = 1;
  std::uint64_t copy_fail_at = 0;
  std::string text;  // the variable's value, for reports

  [[nodiscard]] bool any() const { return device_lost_at != 0 || alloc_fail_at != 0 || copy_fail_at != 0; }
};

[[noreturn]] void bad_faults(const std::string& text, const std::string& why) {
  throw Error(ErrorCode::invalid_argument,
              std::string("host: environment variable ") + kFaultsVariable + "='" + text + "': " + why +
                  " (expected a comma-separated list of device_lost_at=N, alloc_fail_at=N, "
                  "alloc_fail_count=N, copy_fail_at=N, each N an integer >= 1)",
              {}, std::source_location{});
}

// Strict: digits only (no sign, no spaces), no overflow, at least 1.
std::uint64_t fault_number(const std::string& text, const std::string& key, const std::string& value) {
  if (value.empty() || value.size() > 19 ||
      !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    bad_faults(text, "the value of " + key + " ('" + value + "') is not a decimal integer");
  }
  const std::uint64_t n = std::stoull(value);  // 19 digits always fit in 64 bits
  if (n == 0) bad_faults(text, "the value of " + key + " must be at least 1");
  return n;
}

FaultPlan parse_faults() {
  FaultPlan plan;
  const char* env = std::getenv(kFaultsVariable);
  if (env == nullptr || *env == '\0') return plan;
  const std::string text(env);
  plan.text = text;
  bool seen[4] = {false, false, false, false};
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    const std::size_t eq = item.find('=');
    if (item.empty()) bad_faults(text, "empty entry");
    if (eq == std::string::npos) bad_faults(text, "entry '" + item + "' has no '='");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    static constexpr const char* keys[4] = {"device_lost_at", "alloc_fail_at", "alloc_fail_count", "copy_fail_at"};
    const std::size_t k = static_cast<std::size_t>(std::find(std::begin(keys), std::end(keys), key) - std::begin(keys));
    if (k == 4) bad_faults(text, "unknown key '" + key + "'");
    if (seen[k]) bad_faults(text, "key '" + key + "' given twice");
    seen[k] = true;
    std::uint64_t* fields[4] = {&plan.device_lost_at, &plan.alloc_fail_at, &plan.alloc_fail_count, &plan.copy_fail_at};
    *fields[k] = fault_number(text, key, value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (seen[2] && !seen[1]) bad_faults(text, "alloc_fail_count needs alloc_fail_at");
  return plan;
}

// What the device's queues, semaphores and allocations share while faults are injected.
class FaultState {
 public:
  explicit FaultState(const FaultPlan& plan) : plan_(plan) {}

  [[nodiscard]] bool lost() const { return lost_.load(std::memory_order_acquire); }

  // Worker side, around each operation: whether it may run (false once the device is lost);
  // when it may, end_operation() follows it.
  bool begin_operation() {
    std::lock_guard lock(mutex_);
    if (lost()) return false;
    ++running_;
    return true;
  }
  void end_operation() {
    std::lock_guard lock(mutex_);
    if (--running_ == 0) idle_.notify_all();
  }

  // Host side (never a worker). Waits until no operation runs: an operation begun before the
  // loss finishes (a wait is abandoned within a slice), and none begins after it.
  [[noreturn]] void throw_lost() {
    {
      std::unique_lock lock(mutex_);
      idle_.wait(lock, [&] { return running_ == 0; });
    }
    throw Error(ErrorCode::device_lost,
                "host: the device is lost (injected: " + std::string(kFaultsVariable) +
                    " device_lost_at=" + std::to_string(plan_.device_lost_at) + ")",
                "host queue", std::source_location{});
  }

  // Counts one enqueue; throws when it is (or comes after) the fatal one, or is the failing copy.
  void enqueue(bool copy) {
    if (lost()) throw_lost();
    const std::uint64_t n = operations_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (plan_.device_lost_at != 0 && n >= plan_.device_lost_at) {
      lost_.store(true, std::memory_order_release);
      throw_lost();
    }
    if (copy && plan_.copy_fail_at != 0 && copies_.fetch_add(1, std::memory_order_relaxed) + 1 == plan_.copy_fail_at) {
      throw Error(ErrorCode::backend_error,
                  "host: copy " + std::to_string(plan_.copy_fail_at) + " failed (injected: " + kFaultsVariable +
                      " copy_fail_at=" + std::to_string(plan_.copy_fail_at) + ")",
                  "memcpy", std::source_location{});
    }
  }

  // Counts one segment allocation; throws out_of_memory for the failing ones.
  void allocate(std::uint64_t bytes) {
    if (plan_.alloc_fail_at == 0) return;
    const std::uint64_t n = allocations_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n >= plan_.alloc_fail_at && n - plan_.alloc_fail_at < plan_.alloc_fail_count) {
      throw Error(ErrorCode::out_of_memory,
                  "host: cannot allocate " + std::to_string(bytes) + " bytes (injected: allocation " +
                      std::to_string(n) + ", " + kFaultsVariable + " alloc_fail_at=" +
                      std::to_string(plan_.alloc_fail_at) + " alloc_fail_count=" +
                      std::to_string(plan_.alloc_fail_count) + ")",
                  "aligned_alloc", std::source_location{});
    }
  }

 private:
  const FaultPlan plan_;
  std::atomic<std::uint64_t> operations_{0};
  std::atomic<std::uint64_t> copies_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<bool> lost_{false};
  std::mutex mutex_;                // orders begin_operation against a loss
  std::condition_variable idle_;    // running_ dropped to 0
  std::uint64_t running_ = 0;       // operations the workers are executing
};

std::uint64_t physical_memory_bytes() noexcept {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
#endif
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Semaphore: the value is atomic (lock-free queries); the mutex only orders stores against
// waiters so that no wake-up is lost.

class HostSemaphore final : public BackendSemaphore {
 public:
  HostSemaphore(std::uint64_t initial, std::shared_ptr<FaultState> faults)
      : value_(initial), faults_(std::move(faults)) {}

  // A host thread may destroy the semaphore as soon as it observes the value (value() or
  // wait()), while the signalling worker is still inside signal(): taking the mutex here
  // waits for that signal() to finish touching this object.
  ~HostSemaphore() override { std::lock_guard lock(mutex_); }

  HostSemaphore(const HostSemaphore&) = delete;
  HostSemaphore& operator=(const HostSemaphore&) = delete;

  std::uint64_t value() override { return value_.load(std::memory_order_acquire); }

  void signal(std::uint64_t v) override {
    // Store and notify under the mutex: see the destructor.
    std::lock_guard lock(mutex_);
    value_.store(v, std::memory_order_release);
    cv_.notify_all();
  }

  // A value reached is reached, lost device or not. Under fault injection the wait sleeps in
  // slices, so that a device lost while it waits (nobody will signal) is reported promptly.
  bool wait(std::uint64_t v, std::chrono::nanoseconds timeout) override {
    if (!faults_) return wait_for(v, timeout);
    using clock = std::chrono::steady_clock;
    const auto deadline = timeout >= std::chrono::hours(24 * 365) ? clock::time_point::max() : clock::now() + timeout;
    for (;;) {
      if (value() >= v) return true;
      if (faults_->lost()) faults_->throw_lost();
      const auto now = clock::now();
      if (now >= deadline) return false;
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
      if (wait_for(v, std::min<std::chrono::nanoseconds>(left, kWaitSlice))) return true;
    }
  }

  // The plain wait, which never throws (the queue workers' too): true once `v` is reached,
  // false at the timeout.
  bool wait_for(std::uint64_t v, std::chrono::nanoseconds timeout) {
    if (value() >= v) return true;
    std::unique_lock lock(mutex_);
    const auto reached = [&] { return value_.load(std::memory_order_acquire) >= v; };
    // Very long timeouts (e.g. nanoseconds::max()) would overflow the clock arithmetic.
    if (timeout >= std::chrono::hours(24 * 365)) {
      cv_.wait(lock, reached);
      return true;
    }
    return cv_.wait_for(lock, timeout, reached);
  }

 private:
  std::atomic<std::uint64_t> value_;
  const std::shared_ptr<FaultState> faults_;  // null: no faults injected
  std::mutex mutex_;
  std::condition_variable cv_;
};

// ---------------------------------------------------------------------------------------------
// Queue: one worker thread, one FIFO. Every public method only enqueues (never blocks on the
// worker), and is safe to call from several threads.

class HostQueue;

/// An engine's host image (Device::adopt_image): memory in the reference layout of
/// host_image_level, with the level-0 pitches it was adopted with (0 = tight).
struct HostImage final : BackendImage {
  std::byte* base = nullptr;
  ImageDesc desc{};
  std::uint64_t row_pitch = 0;
  std::uint64_t slice_pitch = 0;
};

/// One row of an image copy, as the worker runs it.
struct RowCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::uint64_t bytes = 0;
};

// The set of live queues of a device, for wait_idle. Shared so that a caller-owned queue may
// outlive its device without touching freed memory.
struct QueueRegistry {
  std::mutex mutex;
  std::unordered_set<HostQueue*> queues;
};

class HostQueue final : public BackendQueue {
 public:
  HostQueue(std::shared_ptr<QueueRegistry> registry, std::uint32_t latency_us, std::shared_ptr<FaultState> faults)
      : registry_(std::move(registry)), latency_us_(latency_us), faults_(std::move(faults)) {
    if (latency_us_ > 0) rng_.seed(std::random_device{}());
    {
      std::lock_guard lock(registry_->mutex);
      registry_->queues.insert(this);
    }
    try {
      worker_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
      std::lock_guard lock(registry_->mutex);
      registry_->queues.erase(this);
      throw Error(ErrorCode::backend_error,
                  std::string("host: cannot start queue worker thread: ") + e.what(), "std::thread");
    }
  }

  ~HostQueue() override {
    {
      std::lock_guard lock(registry_->mutex);
      registry_->queues.erase(this);
    }
    {
      std::lock_guard lock(mutex_);
      stop_.store(true);
    }
    work_cv_.notify_all();
    done_cv_.notify_all();
    worker_.join();
  }

  HostQueue(const HostQueue&) = delete;
  HostQueue& operator=(const HostQueue&) = delete;

  void copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) override {
    push(Op::copy(device_ptr(dst), host_ptr(src), bytes));
  }
  void copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) override {
    push(Op::copy(host_ptr(dst), device_ptr(src), bytes));
  }
  void copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) override {
    push(Op::copy(device_ptr(dst), device_ptr(src), bytes));
  }
  void copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) override {
    push_rows(static_cast<HostImage&>(dst), host_ptr(src), regions, /*to_image=*/true);
  }
  void copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    push_rows(static_cast<HostImage&>(src), host_ptr(dst), regions, /*to_image=*/false);
  }
  void copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) override {
    push_rows(static_cast<HostImage&>(dst), device_ptr(src), regions, /*to_image=*/true);
  }
  void copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) override {
    push_rows(static_cast<HostImage&>(src), device_ptr(dst), regions, /*to_image=*/false);
  }
  // Every host device's memory is process memory: a copy between two is a memmove.
  void copy_peer(DeviceRef dst, BackendDevice& /*dst_device*/, DeviceRef src, BackendDevice& /*src_device*/,
                 std::uint64_t bytes) override {
    push(Op::copy(device_ptr(dst), device_ptr(src), bytes));
  }
  void signal(BackendSemaphore& sem, std::uint64_t value) override {
    Op op{Op::Kind::signal};
    op.sem = static_cast<HostSemaphore*>(&sem);  // trusted: a semaphore of this backend
    op.value = value;
    push(op);
  }
  void wait(BackendSemaphore& sem, std::uint64_t value) override {
    Op op{Op::Kind::wait};
    op.sem = static_cast<HostSemaphore*>(&sem);
    op.value = value;
    push(op);
  }
  /// The worker blocks on a wait before anything queued after it.
  [[nodiscard]] bool wait_orders_later_work() const override { return true; }
  bool synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes,
                         std::uint32_t units) override {
    Op op = Op::copy(device_ptr(out), device_ptr(in), bytes);
    op.kind = Op::Kind::compute;
    op.units = units;
    push(op);
    return true;
  }

  // Block until everything enqueued before this call has run or was dropped (a lost device),
  // or the queue is stopping.
  void drain() {
    std::unique_lock lock(mutex_);
    const std::uint64_t target = submitted_;
    done_cv_.wait(lock, [&] { return completed_ >= target || stop_.load(); });
  }

 private:
  struct Op {
    enum class Kind : std::uint8_t { copy, compute, signal, wait, rows } kind = Kind::copy;
    std::shared_ptr<const std::vector<RowCopy>> rows{};  // Kind::rows: an image copy's rows
    std::byte* dst = nullptr;
    const std::byte* src = nullptr;
    std::uint64_t bytes = 0;
    HostSemaphore* sem = nullptr;
    std::uint64_t value = 0;
    std::uint32_t units = 0;

    static Op copy(std::byte* d, const std::byte* s, std::uint64_t n) {
      Op op{Kind::copy};
      op.dst = d;
      op.src = s;
      op.bytes = n;
      return op;
    }
  };

  static std::byte* device_ptr(DeviceRef r) {
    return static_cast<std::byte*>(r.segment->native) + r.offset;
  }
  static std::byte* host_ptr(HostRef r) { return r.memory->ptr + r.offset; }

  /// One queued operation copying every row of `regions` between linear memory at `linear`
  /// and the image's reference layout (host_image_level), in the direction `to_image`.
  void push_rows(const HostImage& image, std::byte* linear, std::span<const ImageCopy> regions, bool to_image) {
    const FormatInfo f = format_info(image.desc.format);
    auto rows = std::make_shared<std::vector<RowCopy>>();
    for (const ImageCopy& c : regions) {
      const HostImageLevel level = host_image_level(image.desc, c.mip, image.row_pitch, image.slice_pitch);
      const Extent3D e = mip_extent(image.desc, c.mip);
      const std::uint64_t slices = std::uint64_t{c.depth} * c.layers;
      for (std::uint64_t s = 0; s < slices; ++s) {
        const std::uint64_t layer = c.base_layer + s / c.depth, z = c.z + s % c.depth;
        const std::uint64_t slice_at = level.offset + (layer * e.depth + z) * level.slice_pitch;
        for (std::uint32_t r = 0; r < c.rows; ++r) {
          std::byte* img = image.base + slice_at + (std::uint64_t{c.y / f.block_height} + r) * level.row_pitch +
                           std::uint64_t{c.x / f.block_width} * f.block_bytes;
          std::byte* lin = linear + c.buffer_offset + s * c.slice_pitch + std::uint64_t{r} * c.row_pitch;
          rows->push_back(to_image ? RowCopy{img, lin, c.row_bytes} : RowCopy{lin, img, c.row_bytes});
        }
      }
    }
    Op op{Op::Kind::rows};
    op.rows = std::move(rows);
    push(op);
  }

  void push(const Op& op) {
    if (faults_) faults_->enqueue(op.kind == Op::Kind::copy);  // throws an injected fault
    {
      std::lock_guard lock(mutex_);
      ops_.push_back(op);
      ++submitted_;
    }
    work_cv_.notify_one();
  }

  void run() noexcept {
    for (;;) {
      Op op;
      {
        std::unique_lock lock(mutex_);
        work_cv_.wait(lock, [&] { return stop_.load() || !ops_.empty(); });
        if (stop_.load()) return;  // remaining operations are dropped
        if (faults_ && faults_->lost()) {
          // A lost device runs nothing more: what is queued is dropped, which completes drain().
          completed_ += ops_.size();
          ops_.clear();
          done_cv_.notify_all();
          continue;
        }
        op = ops_.front();
        ops_.pop_front();
      }
      inject_latency();
      if (faults_ && !faults_->begin_operation()) {
        // Lost while this operation waited its turn: it does not run, and the rest is
        // dropped at the top of the loop.
        {
          std::lock_guard lock(mutex_);
          ++completed_;
        }
        done_cv_.notify_all();
        continue;
      }
      const bool ran = execute(op);
      if (faults_) faults_->end_operation();
      if (!ran) return;  // a wait abandoned because the queue is being destroyed
      {
        std::lock_guard lock(mutex_);
        ++completed_;
      }
      done_cv_.notify_all();
    }
  }

  void inject_latency() {
    if (latency_us_ == 0) return;
    std::uniform_int_distribution<std::uint32_t> dist(0, latency_us_);
    const std::uint32_t us = dist(rng_);
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

  // Returns false only when a wait was interrupted by destruction.
  bool execute(const Op& op) {
    switch (op.kind) {
      case Op::Kind::copy:
        std::memmove(op.dst, op.src, static_cast<std::size_t>(op.bytes));  // d2d may overlap
        return true;
      case Op::Kind::rows:
        for (const RowCopy& r : *op.rows) std::memcpy(r.dst, r.src, static_cast<std::size_t>(r.bytes));
        return true;
      case Op::Kind::compute:
        for (std::uint32_t pass = 0; pass < op.units; ++pass) add_one(op.dst, op.src, op.bytes);
        return true;
      case Op::Kind::signal:
        op.sem->signal(op.value);
        return true;
      case Op::Kind::wait:
        // Sleep on the semaphore's condition variable in slices so destruction can interrupt
        // (and a device loss: the wait is abandoned, and what follows it dropped).
        while (!op.sem->wait_for(op.value, kWaitSlice)) {
          if (stop_.load()) return false;
          if (faults_ && faults_->lost()) return true;
        }
        return true;
    }
    return true;
  }

  std::shared_ptr<QueueRegistry> registry_;
  const std::uint32_t latency_us_;
  const std::shared_ptr<FaultState> faults_;  // null: no faults injected
  std::mt19937 rng_;  // used by the worker only

  std::mutex mutex_;                  // guards ops_, submitted_, completed_
  std::condition_variable work_cv_;   // worker: work arrived or stop
  std::condition_variable done_cv_;   // drain(): an operation completed or stop
  std::deque<Op> ops_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::atomic<bool> stop_{false};
  std::thread worker_;  // last: started after every other member is constructed
};

// ---------------------------------------------------------------------------------------------
// Device

class HostDevice final : public BackendDevice {
 public:
  explicit HostDevice(const DeviceOptions& options) {
    std::uint64_t latency = options.host_latency_us >= 0
                                ? static_cast<std::uint64_t>(options.host_latency_us)
                                : env_number("FERRY_HOST_LATENCY_US", 0);
    latency = std::min<std::uint64_t>(latency, 10'000'000);  // cap at 10 s per operation
    latency_us_ = static_cast<std::uint32_t>(latency);
    memory_limit_ = env_number("FERRY_HOST_MEMORY_LIMIT", 0);
    const FaultPlan faults = parse_faults();
    if (faults.any()) faults_ = std::make_shared<FaultState>(faults);

    caps_.name = "ferry host reference (CPU)";
    caps_.backend = Backend::host;
    caps_.is_gpu = false;
    caps_.synthetic_compute = true;
    caps_.device_memory_bytes = memory_limit_ != 0 ? memory_limit_ : physical_memory_bytes();
    caps_.copy_engines = 1;
    caps_.dedicated_transfer_queue = true;
    caps_.separate_queue_families = false;
    caps_.ownership_transfer = false;
    caps_.host_memory_registration = true;
    caps_.host_memory_adoption = true;
    caps_.timeline_export = false;
    caps_.min_alignment = 256;
    caps_.max_allocation_bytes = memory_limit_;
    caps_.notes = latency_us_ > 0
                      ? "latency injection: 0.." + std::to_string(latency_us_) + " us per queued operation"
                      : std::string("latency injection off");
    if (memory_limit_ != 0) {
      caps_.notes += "; memory limit " + std::to_string(memory_limit_) + " bytes (FERRY_HOST_MEMORY_LIMIT)";
    }
    if (faults_) caps_.notes += "; fault injection: " + faults.text + " (" + kFaultsVariable + ")";

    compute_ = std::make_unique<HostQueue>(registry_, latency_us_, faults_);
    transfer_ = std::make_unique<HostQueue>(registry_, latency_us_, faults_);
  }

  [[nodiscard]] const Capabilities& capabilities() const override { return caps_; }

  BackendQueue& default_queue(QueueRole role) override {
    return role == QueueRole::transfer ? *transfer_ : *compute_;
  }

  std::unique_ptr<BackendQueue> create_queue(QueueRole /*role*/, int /*priority*/) override {
    return std::make_unique<HostQueue>(registry_, latency_us_, faults_);
  }

  std::unique_ptr<BackendQueue> adopt_queue(QueueRole /*role*/, const NativeQueue& /*native*/) override {
    throw Error(ErrorCode::unsupported, "host backend has no native queues to adopt");
  }

  std::unique_ptr<BackendSemaphore> create_semaphore(std::uint64_t initial) override {
    return std::make_unique<HostSemaphore>(initial, faults_);
  }

  std::unique_ptr<Segment> allocate_segment(std::uint64_t bytes) override {
    if (faults_) faults_->allocate(bytes);  // throws an injected out_of_memory
    if (memory_limit_ != 0) {
      std::uint64_t used = used_.load();
      do {
        if (bytes > memory_limit_ || used > memory_limit_ - bytes) {
          throw Error(ErrorCode::out_of_memory,
                      "host: cannot allocate " + std::to_string(bytes) + " bytes (" +
                          std::to_string(used) + " of " + std::to_string(memory_limit_) +
                          " bytes in use, FERRY_HOST_MEMORY_LIMIT)",
                      "aligned_alloc");
        }
      } while (!used_.compare_exchange_weak(used, used + bytes));
    } else {
      used_.fetch_add(bytes);
    }
    void* p = aligned_allocate(bytes);
    if (p == nullptr) {
      used_.fetch_sub(bytes);
      throw Error(ErrorCode::out_of_memory, "host: cannot allocate " + std::to_string(bytes) + " bytes",
                  "aligned_alloc");
    }
    return pointer_segment(p, bytes);
  }

  void free_segment(std::unique_ptr<Segment> segment) override {
    if (!segment) return;
    aligned_free(segment->native);
    used_.fetch_sub(segment->size);
  }

  // Adopted memory is any host memory the caller names; nothing to register or check beyond
  // the pointer (the process's memory is the device's).
  AdoptedRange adopt_memory(const NativeMemory& native, std::uint64_t bytes) override {
    require_pointer_only(native, "host");
    return AdoptedRange{pointer_segment(reinterpret_cast<void*>(static_cast<std::uintptr_t>(native.pointer)), bytes), 0};
  }

  // A host image is the engine's memory in the reference layout; only its pitches can be
  // checked against the shape.
  std::unique_ptr<BackendImage> adopt_image(const NativeImage& native, const ImageDesc& desc,
                                            std::uint32_t /*owner_family*/) override {
    if (native.vulkan_image != 0 || native.vulkan_layout != 0 || native.vulkan_final_layout != 0 ||
        !native.vulkan_queue_families.empty() || native.vulkan_memory != 0 || native.vulkan_memory_offset != 0 ||
        native.vulkan_memory_size != 0 || native.vulkan_dedicated || native.vulkan_usage != 0 ||
        native.cuda_array != 0 || native.cuda_mipmapped) {
      throw Error(ErrorCode::invalid_argument,
                  "host: a host image is described by host_pointer and its pitches only (a Vulkan or CUDA field is set)",
                  {}, std::source_location{});
    }
    if (native.host_pointer == 0) {
      throw Error(ErrorCode::invalid_argument, "host: host_pointer is null", {}, std::source_location{});
    }
    const FormatInfo f = format_info(desc.format);
    const HostImageLevel tight = host_image_level(desc, 0);
    if (native.host_row_pitch != 0 && (native.host_row_pitch < tight.row_pitch || native.host_row_pitch % f.block_bytes != 0)) {
      throw Error(ErrorCode::invalid_argument,
                  "host: host_row_pitch " + std::to_string(native.host_row_pitch) + " must be 0 or a multiple of " +
                      std::to_string(f.block_bytes) + " bytes of at least the level-0 row's " +
                      std::to_string(tight.row_pitch) + " bytes",
                  {}, std::source_location{});
    }
    const HostImageLevel pitched = host_image_level(desc, 0, native.host_row_pitch);
    if (native.host_slice_pitch != 0 &&
        (native.host_slice_pitch < pitched.slice_pitch || native.host_slice_pitch % pitched.row_pitch != 0)) {
      throw Error(ErrorCode::invalid_argument,
                  "host: host_slice_pitch " + std::to_string(native.host_slice_pitch) +
                      " must be 0 or a multiple of the row pitch " + std::to_string(pitched.row_pitch) +
                      " of at least the level-0 slice's " + std::to_string(pitched.slice_pitch) + " bytes",
                  {}, std::source_location{});
    }
    const std::uint64_t bytes = host_image_bytes(desc, native.host_row_pitch, native.host_slice_pitch);
    if (native.host_pointer > UINT64_MAX - bytes) {
      throw Error(ErrorCode::invalid_argument, "host: the image's " + std::to_string(bytes) +
                  " bytes wrap around the address space", {}, std::source_location{});
    }
    auto image = std::make_unique<HostImage>();
    image->base = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(native.host_pointer));
    image->desc = desc;
    image->row_pitch = native.host_row_pitch;
    image->slice_pitch = native.host_slice_pitch;
    return image;
  }

  std::unique_ptr<HostMemory> allocate_host(std::uint64_t bytes) override {
    void* p = aligned_allocate(bytes);
    if (p == nullptr) {
      throw Error(ErrorCode::out_of_memory,
                  "host: cannot allocate " + std::to_string(bytes) + " bytes of host memory",
                  "aligned_alloc");
    }
    return host_memory(static_cast<std::byte*>(p), bytes, /*registered=*/false);
  }

  // Any range is accepted: there is nothing to pin. The memory stays the user's.
  std::unique_ptr<HostMemory> register_host(std::byte* ptr, std::uint64_t bytes) override {
    return host_memory(ptr, bytes, /*registered=*/true);
  }

  // Any range is adopted as it is: the process's memory is the device's, DMA-able already.
  std::unique_ptr<HostMemory> adopt_host(std::byte* ptr, std::uint64_t bytes) override {
    return adopted_host_memory(ptr, bytes);
  }

  void free_host(std::unique_ptr<HostMemory> memory) override {
    if (memory && !memory->registered) aligned_free(memory->ptr);
  }

  // Two host devices (Device::open twice) share the process: memory is addressable by both,
  // and a worker may wait on any HostSemaphore. A peer's semaphores under fault injection are
  // waited for with the plain wait, as every worker's wait is.
  PeerSupport peer_support(BackendDevice& other) override {
    PeerSupport s;
    if (dynamic_cast<HostDevice*>(&other) != nullptr) {
      s.possible = true;
      s.path = PeerPath::direct;
    } else {
      s.reason = "host: the other device is not a host device";
    }
    return s;
  }

  void wait_idle() override {
    // Holding the registry lock keeps every listed queue alive while it drains; queue
    // workers never take this lock, so draining cannot deadlock on it.
    std::lock_guard lock(registry_->mutex);
    for (HostQueue* q : registry_->queues) q->drain();
    if (faults_ && faults_->lost()) faults_->throw_lost();  // as vkDeviceWaitIdle reports a loss
  }

 private:
  Capabilities caps_;
  std::uint32_t latency_us_ = 0;
  std::uint64_t memory_limit_ = 0;  // 0 = no limit
  std::atomic<std::uint64_t> used_{0};
  std::shared_ptr<FaultState> faults_;  // null: no faults injected (FERRY_HOST_FAULTS unset)
  std::shared_ptr<QueueRegistry> registry_ = std::make_shared<QueueRegistry>();
  std::unique_ptr<HostQueue> compute_;   // declared after registry_: destroyed before it
  std::unique_ptr<HostQueue> transfer_;
};

}  // namespace

extern const BackendDescriptor host_backend_descriptor;
constinit const BackendDescriptor host_backend_descriptor{
    .id = Backend::host,
    .name = "host",
    .option = "-Dhost=enabled",
    .kind = DeviceKind::cpu,
    .built = true,
    .count = []() noexcept { return 1; },
    .open = [](const DeviceOptions& options) -> std::unique_ptr<BackendDevice> {
      return std::make_unique<HostDevice>(options);
    },
};

}  // namespace ferry::detail
