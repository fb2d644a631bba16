// SPDX-License-Identifier: MIT
#include "parallel_copy.hpp"

#include <algorithm>
#include <cstring>

namespace ferry::detail {

namespace {
constexpr std::uint64_t kMinPart = 1ull << 20;  // below 1 MiB per thread the hand-off costs more

void gather_range(const std::vector<GatherPiece>& pieces, std::uint64_t begin, std::uint64_t end,
                  std::byte* dst_at_begin) {
  // First piece that ends after `begin`.
  auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                             [](std::uint64_t v, const GatherPiece& p) { return v < p.at + p.size; });
  for (; it != pieces.end() && it->at < end; ++it) {
    const std::uint64_t a = std::max(begin, it->at);
    const std::uint64_t b = std::min(end, it->at + it->size);
    if (a < b) std::memcpy(dst_at_begin + (a - begin), it->src + (a - it->at), b - a);
  }
}
}  // namespace

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

void ParallelCopier::run(const std::function<void(unsigned, unsigned)>& job, unsigned parts) {
  if (parts <= 1 || workers_.empty()) {
    job(0, 1);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    parts_ = parts;
    remaining_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  job(0, parts);  // the caller does part 0
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return remaining_ == 0; });
  job_ = nullptr;
}

void ParallelCopier::gather(const std::vector<GatherPiece>& pieces, std::uint64_t begin, std::uint64_t end,
                            std::byte* dst) {
  const std::uint64_t total = end - begin;
  const unsigned parts =
      static_cast<unsigned>(std::min<std::uint64_t>(workers_.size() + 1, std::max<std::uint64_t>(1, total / kMinPart)));
  const std::function<void(unsigned, unsigned)> job = [&](unsigned part, unsigned n) {
    const std::uint64_t a = begin + total * part / n;
    const std::uint64_t b = begin + total * (part + 1) / n;
    gather_range(pieces, a, b, dst + (a - begin));
  };
  run(job, parts);
}

void ParallelCopier::copy(std::byte* dst, const std::byte* src, std::uint64_t bytes) {
  gather({GatherPiece{0, src, bytes}}, 0, bytes, dst);
}

}  // namespace ferry::detail
