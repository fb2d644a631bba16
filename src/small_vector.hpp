// SPDX-License-Identifier: MIT
// A vector that keeps its first N elements inline: the hot paths' per-call scratch lists (a
// few timelines per allocation) without a heap allocation per call. Grows onto the heap past N.
#pragma once

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class T, std::size_t N>
class SmallVector {
 public:
  T* begin() noexcept { return heap_.empty() ? inline_.data() : heap_.data(); }
  T* end() noexcept { return begin() + size_; }
  const T* begin() const noexcept { return heap_.empty() ? inline_.data() : heap_.data(); }
  const T* end() const noexcept { return begin() + size_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return begin()[i]; }
  T& front() noexcept { return *begin(); }
  T& back() noexcept { return begin()[size_ - 1]; }

  /// Invalidates references to elements when it moves them onto the heap (at N + 1).
  T& push_back(T value) {
    if (size_ < N && heap_.empty()) {
      inline_[size_] = std::move(value);
    } else {
      if (heap_.empty()) {
        heap_.reserve(2 * N);
        for (T& x : inline_) heap_.push_back(std::move(x));
      }
      heap_.push_back(std::move(value));
    }
    ++size_;
    return back();
  }

 private:
  std::array<T, N> inline_;  // not value-initialized: trivial elements cost nothing until used
  std::vector<T> heap_;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
