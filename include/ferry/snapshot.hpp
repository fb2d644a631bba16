// SPDX-License-Identifier: MIT
/// @file snapshot.hpp
/// @brief Memory snapshots: segments, blocks and the trace of pool events, and their
/// documented JSON form.
///
/// A snapshot is a plain value copied out of the pool (`DevicePool::snapshot()`); exporting
/// it touches no device. Times are nanoseconds since the device was opened (steady clock).
/// The memory_viz pickle, Chrome trace and HTML report exporters are the ferry-export
/// library's (`<ferry/export.hpp>`).
///
/// Thread-safety: snapshots are values; `to_json` and `write_json` only read them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <source_location>
#include <string>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/error.hpp"

namespace ferry {

/// @brief Kinds of pool events (the names PyTorch's memory_viz uses in parentheses).
enum class PoolEventKind : std::uint8_t {
  alloc,           ///< block handed to a caller ("alloc")
  free_requested,  ///< release called; block pending on its free point ("free_requested")
  free_completed,  ///< block free for every queue ("free_completed")
  segment_alloc,   ///< segment obtained from the backend ("segment_alloc")
  segment_free,    ///< segment returned to the backend ("segment_free")
};

/// @brief Stable name of an event kind ("alloc", "free_requested", ...).
FERRY_API std::string_view to_string(PoolEventKind kind) noexcept;

/// @brief One recorded pool event.
struct PoolEvent {
  PoolEventKind kind = PoolEventKind::alloc;
  std::uint64_t address = 0;   ///< block or segment address (pool-virtual for Vulkan)
  std::uint64_t size = 0;      ///< bytes
  std::uint32_t queue_id = 0;  ///< owner queue
  std::uint64_t time_ns = 0;   ///< ns since device open
  std::string tag{};           ///< user tag of the allocation
};

/// @brief Block states, as PyTorch names them.
enum class BlockStateKind : std::uint8_t {
  active_allocated,     ///< allocated to a caller
  active_pending_free,  ///< released, free point not reached yet
  inactive,             ///< free for every queue
};

/// @brief Stable name of a block state ("active_allocated", ...).
FERRY_API std::string_view to_string(BlockStateKind kind) noexcept;

/// @brief One block of a segment.
struct SnapshotBlock {
  std::uint64_t address = 0;         ///< start address
  std::uint64_t size = 0;            ///< rounded size
  std::uint64_t requested_size = 0;  ///< bytes asked for (0 for free blocks)
  BlockStateKind state = BlockStateKind::inactive;
  std::uint32_t queue_id = 0;        ///< owner (last owner for free blocks)
  std::string tag{};                 ///< user tag
};

/// @brief One segment obtained from the backend.
struct SnapshotSegment {
  std::uint64_t address = 0;            ///< start address
  std::uint64_t total_size = 0;         ///< bytes
  std::uint64_t allocated_size = 0;     ///< bytes in active_allocated blocks
  std::uint64_t active_size = 0;        ///< allocated + pending-free bytes
  std::uint64_t requested_size = 0;     ///< bytes requested by callers of its blocks
  std::uint32_t queue_id = 0;           ///< queue the segment was created for
  bool large = false;                   ///< a segment of the large-request class
  std::vector<SnapshotBlock> blocks{};  ///< ordered by address
};

/// @brief A queue known to the snapshot.
struct SnapshotQueue {
  std::uint32_t id = 0;
  std::string name{};
  std::string role{};  ///< "compute" or "transfer"
};

/// @brief A span of queue activity recorded by ferry (copies, waits, compute), host-timed at
/// enqueue and completion.
struct QueueActivity {
  std::uint32_t queue_id = 0;
  std::string name{};          ///< "copy h2d", "wait", "compute", ...
  std::uint64_t begin_ns = 0;  ///< enqueue time
  std::uint64_t end_ns = 0;    ///< completion time observed (0 = unknown)
  std::uint64_t bytes = 0;     ///< bytes moved (copies)
};

/// @brief Everything needed to draw a footprint.
struct MemorySnapshot {
  std::string device_name{};
  std::string backend{};
  std::vector<SnapshotQueue> queues{};
  std::vector<SnapshotSegment> segments{};
  std::vector<PoolEvent> events{};
  std::vector<QueueActivity> activity{};
};

/// @brief The documented JSON form (schema: tools/snapshot.schema.json).
FERRY_API std::string to_json(const MemorySnapshot& snapshot);

/// @brief Write `to_json(snapshot)` to `path`; `backend_error` naming the path on I/O failure.
FERRY_API void write_json(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                          std::source_location where = std::source_location::current());

}  // namespace ferry
