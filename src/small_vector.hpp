// SPDX-License-Identifier: MIT
// A vector that keeps its first N elements inline: the hot paths' per-call scratch lists (a
// few timelines per allocation) without a heap allocation per call. Grows onto the heap past N.
// The inline slots are raw storage: constructing an empty SmallVector writes nothing there.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace ferry::detail {

template <class T, std::size_t N>
class SmallVector {
 public:
  SmallVector() noexcept {}  // user-provided: `SmallVector<T, N> v{};` does not zero the slots
  ~SmallVector() {
    if (heap_.empty()) {
      for (std::size_t i = 0; i < size_; ++i) slot(i)->~T();
    }
  }
  SmallVector(const SmallVector&) = delete;
  SmallVector& operator=(const SmallVector&) = delete;

  T* begin() noexcept { return heap_.empty() ? slot(0) : heap_.data(); }
  T* end() noexcept { return begin() + size_; }
  const T* begin() const noexcept { return heap_.empty() ? slot(0) : heap_.data(); }
  const T* end() const noexcept { return begin() + size_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return begin()[i]; }
  T& front() noexcept { return *begin(); }
  T& back() noexcept { return begin()[size_ - 1]; }

  /// Invalidates references to elements when it moves them onto the heap (at N + 1).
  T& push_back(T value) {
    if (size_ < N && heap_.empty()) {
      ::new (static_cast<void*>(slot(size_))) T(std::move(value));
    } else {
      if (heap_.empty()) {
        heap_.reserve(2 * N);
        for (std::size_t i = 0; i < size_; ++i) {
          heap_.push_back(std::move(*slot(i)));
          slot(i)->~T();
        }
      }
      heap_.push_back(std::move(value));
    }
    ++size_;
    return back();
  }

 private:
  T* slot(std::size_t i) noexcept { return std::launder(reinterpret_cast<T*>(storage_)) + i; }
  const T* slot(std::size_t i) const noexcept { return std::launder(reinterpret_cast<const T*>(storage_)) + i; }

  alignas(T) unsigned char storage_[N * sizeof(T)];
  std::vector<T> heap_;
  std::size_t size_ = 0;
};

}  // namespace ferry::detail
