// SPDX-License-Identifier: MIT
// The host backend's queue: one worker thread draining a FIFO of operations (copies, image
// rows, signals, waits, synthetic compute) in enqueue order, with optional latency injection.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "host/fault_layer.hpp"
#include "host/host_internal.hpp"

namespace ferry::detail::host_impl {

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

// Copy engines by direction (CopyEngines).
constexpr std::uint8_t kToDevice = 0, kFromDevice = 1, kWithinDevice = 2;

}  // namespace

bool CopyEngines::acquire(int e, const void* queue, const std::atomic<bool>& stop) {
  std::unique_lock lock(mutex_);
  Engine& engine = engines_[static_cast<std::size_t>(e)];
  if (engine.holder == queue) return true;
  if (engine.holder == nullptr) {  // released engines pass to a waiter at once: none waits
    engine.holder = queue;
    return true;
  }
  engine.waiting.push_back(queue);
  cv_.wait(lock, [&] { return engine.holder == queue || stop.load(); });
  if (engine.holder == queue) return true;
  engine.waiting.erase(std::find(engine.waiting.begin(), engine.waiting.end(), queue));
  return false;
}

void CopyEngines::release(int e, const void* queue) {
  {
    std::lock_guard lock(mutex_);
    Engine& engine = engines_[static_cast<std::size_t>(e)];
    if (engine.holder != queue) return;
    engine.holder = nullptr;
    if (!engine.waiting.empty()) {
      engine.holder = engine.waiting.front();
      engine.waiting.pop_front();
    }
  }
  cv_.notify_all();
}

void CopyEngines::wake() {
  { std::lock_guard lock(mutex_); }  // a worker between its check of `stop` and its wait
  cv_.notify_all();
}

HostQueue::HostQueue(std::shared_ptr<QueueRegistry> registry, std::uint32_t latency_us, std::shared_ptr<FaultState> faults)
    : BackendQueue(kTraits), registry_(std::move(registry)), latency_us_(latency_us), faults_(std::move(faults)) {
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

HostQueue::~HostQueue() {
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
  registry_->engines.wake();
  worker_.join();
}

void HostQueue::copy_h2d(DeviceRef dst, HostRef src, std::uint64_t bytes) {
  push(Op::copy(device_ptr(dst), host_ptr(src), bytes, kToDevice));
}

void HostQueue::copy_d2h(HostRef dst, DeviceRef src, std::uint64_t bytes) {
  push(Op::copy(host_ptr(dst), device_ptr(src), bytes, kFromDevice));
}

void HostQueue::copy_d2d(DeviceRef dst, DeviceRef src, std::uint64_t bytes) {
  push(Op::copy(device_ptr(dst), device_ptr(src), bytes, kWithinDevice));
}

void HostQueue::copy_h2i(BackendImage& dst, HostRef src, std::span<const ImageCopy> regions) {
  push_rows(static_cast<HostImage&>(dst), host_ptr(src), regions, /*to_image=*/true, kToDevice);
}

void HostQueue::copy_i2h(HostRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  push_rows(static_cast<HostImage&>(src), host_ptr(dst), regions, /*to_image=*/false, kFromDevice);
}

void HostQueue::copy_d2i(BackendImage& dst, DeviceRef src, std::span<const ImageCopy> regions) {
  push_rows(static_cast<HostImage&>(dst), device_ptr(src), regions, /*to_image=*/true, kWithinDevice);
}

void HostQueue::copy_i2d(DeviceRef dst, BackendImage& src, std::span<const ImageCopy> regions) {
  push_rows(static_cast<HostImage&>(src), device_ptr(dst), regions, /*to_image=*/false, kWithinDevice);
}

// Every host device's memory is process memory: a copy between two is a memmove.
void HostQueue::copy_peer(DeviceRef dst, BackendDevice& /*dst_device*/, DeviceRef src,
                          BackendDevice& /*src_device*/, std::uint64_t bytes) {
  push(Op::copy(device_ptr(dst), device_ptr(src), bytes, kWithinDevice));
}

void HostQueue::enqueue_yield() { push(Op{Op::Kind::yield}); }

void HostQueue::signal(BackendSemaphore& sem, std::uint64_t value) {
  Op op{Op::Kind::signal};
  op.sem = static_cast<HostSemaphore*>(&sem);  // trusted: a semaphore of this backend
  op.value = value;
  push(op);
}

void HostQueue::wait(BackendSemaphore& sem, std::uint64_t value) {
  Op op{Op::Kind::wait};
  op.sem = static_cast<HostSemaphore*>(&sem);
  op.value = value;
  push(op);
}

bool HostQueue::synthetic_compute(DeviceRef in, DeviceRef out, std::uint64_t bytes, std::uint32_t units) {
  Op op = Op::copy(device_ptr(out), device_ptr(in), bytes, 0);
  op.kind = Op::Kind::compute;
  op.units = units;
  push(op);
  return true;
}

void HostQueue::drain() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = submitted_;
  done_cv_.wait(lock, [&] { return completed_ >= target || stop_.load(); });
}

void HostQueue::push_rows(const HostImage& image, std::byte* linear, std::span<const ImageCopy> regions,
                          bool to_image, std::uint8_t engine) {
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
  op.engine = engine;
  op.rows = std::move(rows);
  push(op);
}

void HostQueue::push(const Op& op) {
  // Throws an injected fault. A yield is no operation a plan counts: plans name the caller's work.
  if (faults_ && op.kind != Op::Kind::yield) faults_->enqueue(op.kind == Op::Kind::copy);
  {
    std::lock_guard lock(mutex_);
    ops_.push_back(op);
    ++submitted_;
  }
  work_cv_.notify_one();
}

void HostQueue::run() noexcept {
  struct Release {  // a stopping worker lets its engines go
    HostQueue* q;
    ~Release() { q->release_engines(); }
  } release{this};
  for (;;) {
    Op op;
    {
      std::unique_lock lock(mutex_);
      if (ops_.empty() && held_engines_ != 0) {
        // Nothing is ready on this queue: the engines go on to the others.
        lock.unlock();
        release_engines();
        lock.lock();
      }
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
    if (!hold_engines(op)) return;
    inject_latency();  // for a copy, while it holds its engine: delay as engine time
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

bool HostQueue::hold_engines(const Op& op) {
  switch (op.kind) {
    case Op::Kind::signal:
      return true;  // a signal between two copies keeps the engine with the queue
    case Op::Kind::copy:
    case Op::Kind::rows: {
      const unsigned bit = 1U << op.engine;
      if ((held_engines_ & bit) != 0) return true;
      release_engines();  // wait for an engine holding none: no worker waits on another's hold
      if (!registry_->engines.acquire(op.engine, this, stop_)) return false;
      held_engines_ = bit;
      return true;
    }
    case Op::Kind::yield:
    case Op::Kind::wait:
    case Op::Kind::compute:
      release_engines();
      return true;
  }
  return true;
}

void HostQueue::release_engines() noexcept {
  for (int e = 0; e < CopyEngines::kCount; ++e) {
    if ((held_engines_ & (1U << e)) != 0) registry_->engines.release(e, this);
  }
  held_engines_ = 0;
}

void HostQueue::inject_latency() {
  if (latency_us_ == 0) return;
  std::uniform_int_distribution<std::uint32_t> dist(0, latency_us_);
  const std::uint32_t us = dist(rng_);
  if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

bool HostQueue::execute(const Op& op) {
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
    case Op::Kind::yield:
      return true;  // hold_engines let the engines go
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

}  // namespace ferry::detail::host_impl
