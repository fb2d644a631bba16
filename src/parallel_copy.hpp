// SPDX-License-Identifier: MIT
// Persistent helper threads for host memcpy (packing pageable and scattered sources into
// pinned staging). One pass of the calling thread plus the helpers copies disjoint parts.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry::detail {

/// A piece of a gather: `size` bytes from `src` land at `at` in the packed layout.
struct GatherPiece {
  std::uint64_t at = 0;
  const std::byte* src = nullptr;
  std::uint64_t size = 0;
};

class ParallelCopier {
 public:
  /// `threads` helpers (0 = copy on the calling thread only).
  explicit ParallelCopier(unsigned threads);
  ~ParallelCopier();
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  /// Copy the packed range [begin, end) of `pieces` (sorted by `at`, non-overlapping) into
  /// `dst` (dst[0] corresponds to `begin`). Splits the range across the helpers when it is
  /// large enough to pay for the hand-off; returns when every byte is copied.
  void gather(const std::vector<GatherPiece>& pieces, std::uint64_t begin, std::uint64_t end, std::byte* dst);
  /// Copy `bytes` from `src` to `dst` in parallel parts.
  void copy(std::byte* dst, const std::byte* src, std::uint64_t bytes);
  [[nodiscard]] unsigned threads() const noexcept { return static_cast<unsigned>(workers_.size()); }

 private:
  void run(const std::function<void(unsigned part, unsigned parts)>& job, unsigned parts);
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
