// SPDX-License-Identifier: MIT
/// @file export.hpp
/// @brief Snapshot exporters of the ferry-export library: PyTorch memory_viz pickle, Chrome
/// trace-event JSON and a self-contained HTML report.
///
/// ferry-export is a library of its own beside libferry (link `ferry-export`: pkg-config
/// `ferry-export`, meson `dependency('ferry-export')`; it brings libferry with it). libferry
/// keeps the snapshot value and its documented JSON form (`<ferry/snapshot.hpp>`); everything
/// here reads a `MemorySnapshot` value only and touches no device.
///
/// Errors: the writers throw `ferry::Error` with `ErrorCode::backend_error`, naming the writer
/// and the path, with the caller's source location, when the file cannot be written.
///
/// Thread-safety: every function is a pure function of its arguments; concurrent calls are
/// safe as long as no other thread modifies the snapshots passed in.
#pragma once

#include <filesystem>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "ferry/api.hpp"
#include "ferry/snapshot.hpp"

namespace ferry {

/// @brief The snapshot as a Python pickle (protocol 2) of the dict PyTorch's `memory_viz`
/// (https://pytorch.org/memory_viz, `torch.cuda.memory._snapshot()`'s format) reads:
/// `segments` (one dict per segment with `device`, `address`, `total_size`, `allocated_size`,
/// `active_size`, `requested_size`, `stream`, `segment_type`, `segment_pool_id`,
/// `is_expandable` and `blocks` = [{`address`, `size`, `requested_size`, `state`}]),
/// `device_traces` (one list per device of {`action`, `addr`, `size`, `stream`, `time_us`,
/// `compile_context`, `user_metadata`}), `allocator_settings` and `external_annotations`.
///
/// Mapping: every snapshot is device 0. `stream` is 0 for the first compute queue (PyTorch's
/// default stream) and the ferry queue id for every other queue. `time_us` is microseconds
/// since the device was opened. `user_metadata` carries the allocation's tag. A
/// `free_requested` that the pool never followed by `free_completed` (a free point that was
/// still pending when recorded) gets a synthesized `free_completed` just before the next
/// `alloc` of the same address, or at the end of the trace when the snapshot shows the block
/// free: memory_viz only releases a block on `free_completed`.
[[nodiscard]] FERRY_EXPORT_API std::string to_memory_viz_pickle(const MemorySnapshot& snapshot);

/// @brief Write `to_memory_viz_pickle(snapshot)` to `path` (open it at pytorch.org/memory_viz).
FERRY_EXPORT_API void write_memory_viz_pickle(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                                              std::source_location where = std::source_location::current());

/// @brief Chrome trace-event JSON (`{"traceEvents": [...]}`, opens in Perfetto and
/// chrome://tracing) of the snapshot's queue activity: one thread (`tid` = queue id, named by
/// `thread_name` metadata) per queue, one complete event (`ph: "X"`, `ts`/`dur` in
/// microseconds) per activity span. A span whose completion was not observed (`end_ns == 0`)
/// is drawn with `dur: 0` and `args.end_observed: false`. The pool's allocated and reserved
/// bytes are added as counter events (`ph: "C"`).
[[nodiscard]] FERRY_EXPORT_API std::string to_chrome_trace(const MemorySnapshot& snapshot);

/// @brief Write `to_chrome_trace(snapshot)` to `path`.
FERRY_EXPORT_API void write_chrome_trace(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                                         std::source_location where = std::source_location::current());

/// @brief A self-contained HTML report (inline SVG and CSS, no scripts, well-formed XML) with one
/// column per labelled snapshot, side by side: the *active memory timeline* (allocated bytes
/// over time, from alloc/free events), the *active cached segment timeline* (reserved bytes
/// over time, from segment_alloc/segment_free) and each queue's activity, with axes, labels and
/// a legend. The labels are typically copy strategies ("blocking", "owner_owned"). Every
/// column's timelines are wrapped in `<g class="timeline" data-strategy="LABEL">`.
[[nodiscard]] FERRY_EXPORT_API std::string to_html_report(
                     const std::vector<std::pair<std::string, MemorySnapshot>>& by_strategy);

/// @brief Write `to_html_report(by_strategy)` to `path`.
FERRY_EXPORT_API void write_html_report(const std::vector<std::pair<std::string, MemorySnapshot>>& by_strategy,
                                        const std::filesystem::path& path,
                                        std::source_location where = std::source_location::current());

/// @brief One snapshot's report (a single column labelled with the snapshot's backend).
FERRY_EXPORT_API void write_html_report(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                                        std::source_location where = std::source_location::current());

}  // namespace ferry
