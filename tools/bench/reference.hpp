// SPDX-License-Identifier: MIT
/// @file reference.hpp
/// @brief The copy strategies ferry-bench and the conformance suite compare ferry's upload
/// with, written with ferry's public API only (header-only; not installed).
///
/// ferry has one upload strategy (`Transfer::upload`: the destination comes from the owner's
/// pool, in the owner's stream order) and one way into a caller's buffer
/// (`Transfer::upload_into`). The two references below are what a footprint is judged
/// against; they are not ferry's API because no product should use them:
///  - `blocking`: the copy runs on the owner queue and the host waits for it, so at most one
///    batch is in flight. The reference footprint, with no overlap.
///  - `executor_owned`: the destination belongs to the executing queue and is released after
///    the owner's use, with the pool's deferral for a block used by a queue other than its
///    owner (PyTorch's `non_blocking` copy on a side stream + `record_stream`). The released
///    block returns to the executor's free list, where the owner's own allocations (the
///    compute step's temporaries) cannot reuse it: the memory the seed's snapshot showed
///    stranded.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/ferry.hpp"

namespace ferry_bench {

/// @brief The strategies a footprint run compares.
enum class Strategy : std::uint8_t {
  blocking,        ///< reference: copy on the owner queue, host waits (ReferenceUploads::blocking)
  executor_owned,  ///< the seed's problem: destination of the executor (ReferenceUploads::executor_owned)
  preallocated,    ///< a caller's destination allocated once (`Transfer::upload_into`)
  owner_owned,     ///< ferry (`Transfer::upload`)
};

/// @brief Every strategy, in report order.
inline constexpr std::array<Strategy, 4> all_strategies{Strategy::blocking, Strategy::executor_owned,
                                                        Strategy::preallocated, Strategy::owner_owned};

/// @brief Lower-case name of a strategy ("blocking", "executor_owned", ...).
inline std::string_view to_string(Strategy s) noexcept {
  switch (s) {
    case Strategy::blocking: return "blocking";
    case Strategy::executor_owned: return "executor_owned";
    case Strategy::preallocated: return "preallocated";
    case Strategy::owner_owned: return "owner_owned";
  }
  return "unknown";
}

/// @brief The strategy named `name`, or nullopt.
inline std::optional<Strategy> parse_strategy_name(std::string_view name) noexcept {
  for (Strategy s : all_strategies) {
    if (to_string(s) == name) return s;
  }
  return std::nullopt;
}

/// @brief Uploads with the reference strategies beside a Transfer under study, to one owner.
///
/// Ownership: holds a reference to `transfer`, which must outlive it, and a Transfer of its
/// own over the owner queue (for `blocking`), which waits for its copies when destroyed.
/// Thread-safety: as the Transfers it calls.
class ReferenceUploads {
 public:
  /// `transfer`'s executor runs the executor_owned copies; `owner` is the queue that uses the
  /// uploads. Errors: those of `Transfer`'s constructor over `owner`.
  ReferenceUploads(const ferry::Device& device, ferry::Transfer& transfer, const ferry::Queue& owner,
                   std::source_location where = std::source_location::current())
      : device_(device), transfer_(&transfer), owner_(owner), on_owner_(device, {.executor = owner}, where) {}

  /// @brief The Transfer whose executor is the owner queue (blocking copies run there).
  [[nodiscard]] ferry::Transfer& on_owner() noexcept { return on_owner_; }

  /// @brief blocking: `source` is copied on the owner queue into a block of the owner's pool,
  /// and the call returns once the copy is complete (`ready` is reached). `options.wait` and
  /// `.signal` are enqueued on the owner.
  ferry::Upload blocking(const ferry::HostBuffer& source, ferry::UploadOptions options = {},
                         std::source_location where = std::source_location::current()) {
    ferry::Upload up = on_owner_.upload(source, owner_, std::move(options), where);
    up.ready.wait(std::chrono::hours(1), where);
    return up;
  }
  /// @brief blocking, for a batch of host views (pageable or pinned), staged by the Transfer
  /// over the owner.
  ferry::UploadBatch blocking(std::span<const ferry::HostView> views, ferry::UploadOptions options = {},
                              std::source_location where = std::source_location::current()) {
    ferry::UploadBatch batch = on_owner_.upload(views, owner_, std::move(options), where);
    batch.ready.wait(std::chrono::hours(1), where);
    return batch;
  }

  /// @brief executor_owned: the destination is allocated in the pool for the executor
  /// (`DevicePool::allocate` with the executor as owner, tagged `options.tag`) and written by
  /// `Transfer::upload_into`; with `options.owner_waits` the owner waits for the copy.
  /// `options.wait` and `.signal` apply to the copy; `options.overlap` has no effect (the
  /// executor's own blocks are never pending for it).
  ///
  /// Release: the owner's use of the buffer through `run_synthetic_compute` records the owner
  /// as a user (see testing.hpp), so `release()` is deferred until that use completes and the
  /// block then returns to the executor's free list, stranded for the owner.
  ferry::Upload executor_owned(const ferry::HostBuffer& source, ferry::UploadOptions options = {},
                               std::source_location where = std::source_location::current()) {
    ferry::Upload up;
    up.buffer = device_.pool().allocate(source.size(where), transfer_->executor(where), {.tag = options.tag}, where);
    // The destination's owner is the executor itself: the compute owner waits here.
    up.ready = transfer_->upload_into(
        source, up.buffer, {.owner_waits = false, .wait = std::move(options.wait), .signal = std::move(options.signal)},
        where);
    if (options.owner_waits) owner_.wait(up.ready, where);
    return up;
  }

  /// @brief An upload of `source` with `strategy`: blocking, executor_owned or owner_owned
  /// (`Transfer::upload`). `preallocated` needs a destination: `invalid_argument`.
  ferry::Upload upload(Strategy strategy, const ferry::HostBuffer& source, ferry::UploadOptions options = {},
                       std::source_location where = std::source_location::current()) {
    switch (strategy) {
      case Strategy::blocking: return blocking(source, std::move(options), where);
      case Strategy::executor_owned: return executor_owned(source, std::move(options), where);
      case Strategy::owner_owned: return transfer_->upload(source, owner_, std::move(options), where);
      case Strategy::preallocated: break;
    }
    throw ferry::Error(ferry::ErrorCode::invalid_argument,
                       "ReferenceUploads::upload: the preallocated strategy needs a destination (Transfer::upload_into)",
                       {}, where);
  }

 private:
  ferry::Device device_;
  ferry::Transfer* transfer_;
  ferry::Queue owner_;
  ferry::Transfer on_owner_;
};

}  // namespace ferry_bench
