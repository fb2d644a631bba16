// SPDX-License-Identifier: MIT
#include "parallel_copy.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry::detail {

// Packing scattered views writes each staging cache line once and never reads it back on the
// host: a regular store first reads the line for ownership (an extra memory read per line),
// non-temporal stores do not. glibc's memcpy only streams above a multi-MiB threshold, so a
// gather of 16 KiB pieces ran at ~60% of one large memcpy on the H200 host; streaming stores
// close most of that gap. Callers fence (finish_stream_copies) before publishing the bytes.
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
#if defined(__SSE2__)
  if (n >= 256) {
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    std::size_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void finish_stream_copies() noexcept {
#if defined(__SSE2__)
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before publishing
#endif
}

ParallelCopier::ParallelCopier(unsigned threads) {
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this, i] { worker(i + 1); });
}

ParallelCopier::~ParallelCopier() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ParallelCopier::worker(unsigned index) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(unsigned, unsigned)>* job = nullptr;
    unsigned parts = 0;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      parts = parts_;
    }
    if (index < parts) (*job)(index, parts);
    {
      std::lock_guard lock(mutex_);
      if (--remaining_ == 0) done_.notify_one();
    }
  }
}

void ParallelCopier::start(const std::function<void(unsigned, unsigned)>& job, unsigned parts) {
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    parts_ = parts;
    remaining_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
}

void ParallelCopier::finish() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return remaining_ == 0; });
  job_ = nullptr;
}

PipelinedCopy::PipelinedCopy(ParallelCopier& copier, const CopyPlan& plan)
    : copier_(copier), plan_(plan), chunk_end_(plan.chunks, 0),
      remaining_(new std::atomic<std::uint32_t>[plan.chunks]) {
  for (std::uint32_t k = 0; k < plan.chunks; ++k) remaining_[k].store(0, std::memory_order_relaxed);
  for (std::size_t u = 0; u < plan.units.size(); ++u) {
    const std::uint32_t k = plan.units[u].chunk;
    remaining_[k].fetch_add(1, std::memory_order_relaxed);
    chunk_end_[k] = static_cast<std::uint32_t>(u + 1);
  }
  for (std::uint32_t k = 1; k < plan.chunks; ++k) chunk_end_[k] = std::max(chunk_end_[k], chunk_end_[k - 1]);
  // One wake-up per job, and only when there is more than one unit to share.
  if (copier_.threads() > 0 && plan.units.size() > 1) {
    job_ = [this](unsigned, unsigned) { helper(); };
    const unsigned helpers = static_cast<unsigned>(std::min<std::size_t>(copier_.threads(), plan.units.size() - 1));
    copier_.start(job_, helpers + 1);
    started_ = true;
  }
}

PipelinedCopy::~PipelinedCopy() {
  if (!started_) return;
  // Wake helpers sleeping on `released_` (the value must change for atomic::wait to return);
  // they see `stop_` and leave without running anything more.
  stop_.store(true, std::memory_order_release);
  released_.store(plan_.units.size() + 1, std::memory_order_release);
  released_.notify_all();
  copier_.finish();
}

void PipelinedCopy::release_through(std::uint32_t chunk) {
  const std::uint64_t upto = chunk_end_[chunk];
  if (upto > released_.load(std::memory_order_relaxed)) {
    released_.store(upto, std::memory_order_release);
    released_.notify_all();
  }
}

void PipelinedCopy::run_unit(std::size_t u) {
  const CopyUnit& unit = plan_.units[u];
  for (std::uint32_t i = unit.begin; i < unit.end; ++i) {
    const CopyItem& it = plan_.items[i];
    stream_copy(it.dst, it.src, it.size);
  }
  finish_stream_copies();
  // finished_ first: once every chunk reads done, all_done() holds too (a helper between the
  // two updates made the unit test's all_done() check fail now and then).
  finished_.fetch_add(1, std::memory_order_acq_rel);
  remaining_[unit.chunk].fetch_sub(1, std::memory_order_acq_rel);
}

bool PipelinedCopy::run_one() {
  std::uint64_t n = next_.load(std::memory_order_relaxed);
  for (;;) {
    if (n >= released_.load(std::memory_order_acquire)) return false;
    if (next_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) break;
  }
  run_unit(n);
  return true;
}

void PipelinedCopy::helper() {
  const std::uint64_t total = plan_.units.size();
  for (;;) {
    const std::uint64_t u = next_.fetch_add(1, std::memory_order_acq_rel);
    if (u >= total) return;
    // Sleep (futex) until the caller releases this unit's chunk or stops the job.
    for (std::uint64_t r = released_.load(std::memory_order_acquire); u >= r;
         r = released_.load(std::memory_order_acquire)) {
      if (stop_.load(std::memory_order_acquire)) return;
      released_.wait(r, std::memory_order_acquire);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    run_unit(u);
  }
}

}  // namespace ferry::detail
