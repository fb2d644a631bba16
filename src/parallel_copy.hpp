// SPDX-License-Identifier: MIT
// Persistent helper threads for host memcpy (packing pageable and scattered sources into
// pinned staging, scattering staging into destinations), running a CopyPlan's units.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::detail {

/// memcpy with non-temporal (streaming) stores for sizes >= 256 bytes where the CPU has them
/// (SSE2), plain memcpy otherwise. Call finish_stream_copies() before another thread may read
/// `dst` (or a DMA is issued from it): streaming stores are weakly ordered.
void stream_copy(std::byte* dst, const std::byte* src, std::size_t n) noexcept;
void finish_stream_copies() noexcept;

/// One memcpy of a pipelined copy (staging <-> host, either direction).
struct CopyItem {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::uint64_t size = 0;
};

/// A contiguous group of items (`items[begin, end)`) that one thread copies; it belongs to
/// staging chunk `chunk`. Units are ordered by chunk.
struct CopyUnit {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  std::uint32_t chunk = 0;
};

/// The host side of a pipelined staged copy, planned up front: every memcpy, grouped into
/// units balanced by bytes, units grouped by staging chunk.
struct CopyPlan {
  std::vector<CopyItem> items;
  std::vector<CopyUnit> units;
  std::uint32_t chunks = 0;
};

class ParallelCopier;

/// A CopyPlan being executed by the calling thread and the helpers. The caller (the thread
/// that issues DMAs) releases chunks in order once their staging memory may be touched;
/// helpers claim released units in order (one wake-up per job, not per view or chunk) and the
/// caller runs units between its DMA work. A chunk is complete once all its units are.
/// The destructor stops the helpers (abandoning unclaimed units) and waits for them.
class PipelinedCopy {
 public:
  PipelinedCopy(ParallelCopier& copier, const CopyPlan& plan);
  ~PipelinedCopy();
  PipelinedCopy(const PipelinedCopy&) = delete;
  PipelinedCopy& operator=(const PipelinedCopy&) = delete;

  /// Let the units of chunks [0, chunk] run (chunks are released in order).
  void release_through(std::uint32_t chunk);
  /// Claim and run one released unit on the calling thread; false when none is available.
  bool run_one();
  [[nodiscard]] bool chunk_done(std::uint32_t chunk) const {
    return remaining_[chunk].load(std::memory_order_acquire) == 0;
  }
  [[nodiscard]] bool all_done() const { return finished_.load(std::memory_order_acquire) == plan_.units.size(); }

 private:
  friend class ParallelCopier;
  void helper();  // a helper thread's loop: claim, wait for release, run, until none are left
  void run_unit(std::size_t u);

  ParallelCopier& copier_;
  const CopyPlan& plan_;
  std::vector<std::uint32_t> chunk_end_;                // first unit after chunk k
  std::unique_ptr<std::atomic<std::uint32_t>[]> remaining_;  // units left per chunk
  alignas(64) std::atomic<std::uint64_t> next_{0};      // next unit to claim
  alignas(64) std::atomic<std::uint64_t> released_{0};  // units [0, released) may run
  alignas(64) std::atomic<std::uint64_t> finished_{0};
  std::atomic<bool> stop_{false};
  std::function<void(unsigned, unsigned)> job_;  // what the helpers run (lives until finish)
  bool started_ = false;
};

class ParallelCopier {
 public:
  /// `threads` helpers (0 = copy on the calling thread only).
  explicit ParallelCopier(unsigned threads);
  ~ParallelCopier();
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  [[nodiscard]] unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()); }

 private:
  friend class PipelinedCopy;
  /// Wake the helpers once to run `job(index, parts)` (index >= 1) without the caller;
  /// `finish` waits until every helper has returned from it.
  void start(const std::function<void(unsigned, unsigned)>& job, unsigned parts);
  void finish();
  void worker(unsigned index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(unsigned, unsigned)>* job_ = nullptr;
  unsigned parts_ = 0;
  std::uint64_t generation_ = 0;
  unsigned remaining_ = 0;
  bool stop_ = false;
};

}  // namespace ferry::detail
