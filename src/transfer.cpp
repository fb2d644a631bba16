// SPDX-License-Identifier: MIT
// The Transfer API: argument checks, then the call's skeleton (bind the thread, lock, order
// the executor's access, wait for the caller's points, copy, hand the range on, record
// activity, keep sources alive, signal the caller's points) around planning (planning.hpp),
// staging (staging.hpp) and access ordering (access.hpp).
#include "ferry/transfer.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include "call.hpp"
#include "pacing.hpp"
#include "planning.hpp"

namespace ferry {

Transfer::Transfer(const Device& device, TransferOptions options, std::source_location where) {
  FERRY_REQUIRE(static_cast<bool>(device) && device.is_open(), "Transfer::Transfer", "null or closed device", where);
  FERRY_REQUIRE(options.staging_chunk_bytes >= 4096 && options.staging_chunk_bytes <= (1ull << 32),
          "Transfer::Transfer", "staging_chunk_bytes must be in [4 KiB, 4 GiB]", where);
  FERRY_REQUIRE(options.staging_chunks >= 1 && options.staging_chunks <= 64, "Transfer::Transfer",
          "staging_chunks must be in [1, 64]", where);
  FERRY_REQUIRE(options.staging_threads >= -1, "Transfer::Transfer",
                "staging_threads must be -1 (automatic) or >= 0, not " + std::to_string(options.staging_threads),
                where);
  FERRY_REQUIRE(options.submit_batch >= 1, "Transfer::Transfer",
                "submit_batch must be >= 1 (1 submits every call), not 0", where);
  FERRY_REQUIRE(options.submit_bytes >= 1, "Transfer::Transfer",
                "submit_bytes must be >= 1 (1 submits every call), not 0", where);
  FERRY_REQUIRE(options.bulk_piece_bytes == 0 || options.bulk_piece_bytes >= detail::planning::kMinGivenPiece,
                "Transfer::Transfer",
                "bulk_piece_bytes must be 0 (derived) or at least " +
                    std::to_string(detail::planning::kMinGivenPiece) + " bytes, not " +
                    std::to_string(options.bulk_piece_bytes),
                where);
  if (options.urgent_executor) {
    detail::QueueState& q = detail::checked_queue(options.urgent_executor, "Transfer::Transfer", where);
    FERRY_REQUIRE(q.device_id == detail::access::state(device).get(), "Transfer::Transfer",
                  "the urgent_executor queue belongs to another device", where);
  }
  state_ = std::make_unique<detail::TransferState>();
  state_->device = device;
  if (options.executor) {
    detail::QueueState& q = detail::checked_queue(options.executor, "Transfer::Transfer", where);
    FERRY_REQUIRE(q.device_id == detail::access::state(device).get(), "Transfer::Transfer", "the executor queue belongs to another device",
            where);
    state_->exec = detail::access::state(options.executor);
  } else {
    state_->exec = detail::access::state(device.queue(QueueRole::transfer));
  }
  // Bulk copies are cut only where the executor can yield between pieces (pacing.hpp): into
  // the piece given, or else into the derived one where a yield costs the engine nothing.
  if (state_->exec->traits.yields) {
    if (options.bulk_piece_bytes != 0) {
      state_->piece = options.bulk_piece_bytes;
    } else if (state_->exec->traits.cuts_by_default) {
      state_->piece = detail::planning::derived_bulk_piece(device.capabilities(where).copy_bytes_per_second);
    }
  }
  state_->options = std::move(options);
}

Transfer::~Transfer() {
  if (!state_) return;
  try {
    synchronize();
  } catch (...) {
    // Closed or lost device: nothing is in flight any more.
  }
}

Transfer::Transfer(Transfer&&) noexcept = default;
Transfer& Transfer::operator=(Transfer&&) noexcept = default;

Queue Transfer::executor(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::executor", "moved-from transfer", where);
  return detail::access::make<Queue>(state_->exec);
}

Queue Transfer::urgent_executor(std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::urgent_executor", "moved-from transfer", where);
  FERRY_REQUIRE(state_->device.is_open(), "Transfer::urgent_executor", "the device is closed", where);
  return detail::access::make<Queue>(state_->urgent_lane(where).exec);
}

std::uint64_t Transfer::bulk_piece_bytes(std::source_location where) const {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::bulk_piece_bytes", "moved-from transfer", where);
  return state_->piece;
}

std::string_view to_string(Priority priority) noexcept {
  switch (priority) {
    case Priority::bulk: return "bulk";
    case Priority::urgent: return "urgent";
  }
  return "unknown";
}

namespace {
using detail::Call;
using detail::checked_any_block;
using detail::checked_owner;
using detail::QueuePtr;

/// The blocks of a many-buffer call (download of several sources, upload_into several
/// destinations), checked like checked_block with the index in each message (`what` names
/// the list): live and of `d`. DeviceBuffer is move-only, so no block appears twice.
std::vector<detail::BlockState*> checked_blocks(std::span<const DeviceBuffer> buffers, detail::DeviceState& d,
                                                const char* fn, const char* what, std::size_t offsets,
                                                const std::source_location& where) {
  FERRY_REQUIRE(!buffers.empty(), fn, std::string("empty span of ") + what + "s", where);
  FERRY_REQUIRE(buffers.size() <= max_batch_views, fn,
                std::to_string(buffers.size()) + " " + what + "s exceed the limit of " + std::to_string(max_batch_views),
                where);
  FERRY_REQUIRE(offsets == buffers.size(), fn,
                std::to_string(offsets) + " offsets for " + std::to_string(buffers.size()) + " " + what + "s", where);
  std::vector<detail::BlockState*> blocks;
  blocks.reserve(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const auto name = [&] { return std::string(what) + " " + std::to_string(i); };  // built on failure only
    detail::BlockState* b = detail::access::state(buffers[i]).get();
    FERRY_REQUIRE(b != nullptr, fn, name() + " is a null or moved-from device buffer", where);
    FERRY_REQUIRE(b->device_id == &d, fn, name() + " belongs to another device", where);
    FERRY_REQUIRE(!b->released, fn, name() + " was released", where);
    blocks.push_back(b);
  }
  return blocks;
}

/// Each owner of a call into several destinations, with the point its `owner_waits` waits for.
using OwnerPoints = std::vector<std::pair<QueuePtr, TimelinePoint>>;

/// `owner_waits` of a call into several destinations: each distinct owner waits once.
void make_owners_wait(const OwnerPoints& owners) {
  for (const auto& [owner, point] : owners) detail::make_owner_wait(owner, point);
}

/// The copies of a call into several destinations, `copies[i]` into `blocks[i]`, in order:
/// each after its own destination's previous use (Call::access), the copies between two
/// accesses that enqueue work on the executor in one batch (paced_many), and each batch
/// followed by a mark that becomes its destinations' last access. So a copy follows the
/// destinations before it and never waits for one after it: a batch's destinations come free
/// at different points (an engine's ranges released by different work), and one wait for all
/// of them would hold every copy back to the latest. `keep[i]`: destination i keeps the bytes
/// past its copy. Fills `owner_done`: each distinct owner of the destinations with the mark of
/// the last run that filled one of its destinations (what `owner_waits` waits for). Returns
/// the last mark.
TimelinePoint upload_in_order(Call& call, std::span<detail::BlockState* const> blocks,
                              std::span<const detail::HostDeviceCopy> copies, const std::vector<bool>& keep,
                              bool user_idle, OwnerPoints& owner_done) {
  for (const detail::BlockState* b : blocks) call.check_access(*b, user_idle);  // before any device work
  std::vector<QueuePtr> owners(blocks.size());  // the queue each block goes back to
  owner_done.clear();
  TimelinePoint done;
  std::size_t first = 0;  // the run: copies [first, end)
  const auto end_run = [&](std::size_t end) {
    done = call.with_executor([&](detail::QueueState& e) {
      detail::paced_many(e, call.piece(), copies.subspan(first, end - first), /*to_device=*/true);
      return detail::finish_access(call.exec(), blocks.subspan(first, end - first),
                                   std::span<const QueuePtr>(owners).subspan(first, end - first));
    });
    for (std::size_t i = first; i < end; ++i) {
      const auto it = std::find_if(owner_done.begin(), owner_done.end(), [&](const auto& o) { return o.first == owners[i]; });
      if (it == owner_done.end()) {
        owner_done.emplace_back(owners[i], done);
      } else {
        it->second = done;  // marks of one executor only grow
      }
    }
    first = end;
  };
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (i > first && call.access_may_enqueue(*blocks[i], keep[i], user_idle)) end_run(i);
    owners[i] = call.access(*blocks[i], keep[i], user_idle);
  }
  end_run(blocks.size());
  return done;
}

/// `overwrite_padding` concerns the gaps between the views of the batch upload_into; the
/// other upload_into calls have none, so the flag there is a mistake of the caller's.
void check_no_padding(const UploadIntoOptions& options, const char* fn, const std::source_location& where) {
  FERRY_REQUIRE(!options.overwrite_padding, fn,
                "UploadIntoOptions::overwrite_padding applies only to the batch upload_into (HostViews at "
                "offsets): this call copies no views with padding between them",
                where);
}

}  // namespace

Upload Transfer::upload(const HostBuffer& source, const Queue& owner, UploadOptions options,
                        std::source_location where) {
  FERRY_REQUIRE(static_cast<bool>(detail::access::state(source)), "Transfer::upload", "null or moved-from host buffer", where);
  return upload(source, 0, source.size(), owner, std::move(options), where);
}

Upload Transfer::upload(const HostBuffer& source, std::uint64_t offset, std::uint64_t bytes, const Queue& owner,
                        UploadOptions options, std::source_location where) {
  Call call(state_, "Transfer::upload", where);
  auto& d = call.device();
  auto& host = detail::checked_host(source, &d, "Transfer::upload", where);
  detail::check_range(offset, bytes, host.memory->size, "Transfer::upload", "source", where);
  const auto& q = checked_owner(owner, d, "Transfer::upload", where);
  call.order(options);
  call.lock();
  const auto& self = detail::access::state(state_->device);
  const detail::HostRef src{host.memory.get(), offset};
  const auto& exec = call.exec();
  Upload up;
  up.buffer = detail::pool_allocate(d, self, bytes, q, exec, options.tag, where, !options.overlap);
  auto& b = *detail::access::state(up.buffer);
  // The destination was just allocated: its contents are discarded, so the executor only
  // waits for the block's free point (pending only if the pool found it not reached).
  up.ready = call.on_executor(b, q, [&](detail::QueueState& e) {
    detail::enqueue_wait(e, b.ready_after, /*query=*/false);
    detail::paced(e, call.piece(), bytes, [&](std::uint64_t at, std::uint64_t n) {
      e.backend->copy_h2d(detail::DeviceRef{b.segment, b.offset + at}, detail::HostRef{src.memory, src.offset + at}, n);
    });
  });
  call.finish("copy h2d", bytes, up.ready, detail::access::state(source));
  if (options.owner_waits) detail::make_owner_wait(q, up.ready);
  return up;
}

Upload Transfer::upload(std::span<const std::byte> source, const Queue& owner, UploadOptions options,
                        std::source_location where) {
  FERRY_REQUIRE(!source.empty() && source.data() != nullptr, "Transfer::upload", "empty source span", where);
  const HostView view{source.data(), source.size()};
  UploadBatch batch = upload(std::span<const HostView>(&view, 1), owner, std::move(options), where);
  return Upload{std::move(batch.buffer), std::move(batch.ready)};
}

UploadBatch Transfer::upload(std::span<const HostView> views, const Queue& owner, UploadOptions options,
                             std::source_location where) {
  constexpr const char* fn = "Transfer::upload(batch)";
  Call call(state_, fn, where);
  auto& d = call.device();
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
          std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  const auto& q = checked_owner(owner, d, fn, where);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const HostView& v = views[i];
    if (v.size == 0) continue;  // an empty view reads nothing: any data pointer, no staging
    FERRY_REQUIRE(v.data != nullptr, fn,
                  "view " + std::to_string(i) + " has a null data pointer and " + std::to_string(v.size) + " bytes",
                  where);
    FERRY_REQUIRE(state_->options.staging, fn,
                  "view " + std::to_string(i) + " (" + std::to_string(v.size) +
                      " bytes of host memory) is larger than the staging cap of 0 bytes: staging is disabled "
                      "(TransferOptions::staging = false); upload a HostBuffer instead",
                  where);
  }
  std::optional<detail::planning::BatchLayout> layout =
      detail::planning::layout_batch(views, detail::BlockAllocator::max_request());
  FERRY_REQUIRE(layout.has_value(), fn, "the batch exceeds the largest supported allocation (2^52 bytes)", where);
  call.order(options);
  const std::uint64_t total = layout->total;
  UploadBatch batch;
  batch.offsets = std::move(layout->offsets);
  const std::vector<detail::planning::StreamPiece>& pieces = layout->pieces;
  call.lock();
  auto& s = call.state();
  if (total > 0) s.ensure_staging(d, where);  // views that are all empty copy nothing
  const auto& exec = call.exec();
  batch.buffer =
      detail::pool_allocate(d, detail::access::state(s.device), layout->allocation, q, exec, options.tag, where, !options.overlap);
  auto& b = *detail::access::state(batch.buffer);
  {
    std::lock_guard elock(exec->mutex);
    call.enqueue_waits(*exec);
    detail::enqueue_wait(*exec, b.ready_after);
  }
  try {
    const detail::Call::Staging staging(call, &b);
    if (total > 0) s.staged_h2d(pieces, total, b, where);
  } catch (...) {
    // The chunks issued before the failure still write the block: its release (the batch's
    // buffer goes with the exception) must come after them.
    (void)call.on_executor(b, q, [](detail::QueueState&) {});
    throw;
  }
  batch.ready = call.on_executor(b, q, [](detail::QueueState&) {});
  call.finish("copy h2d (staged)", total, batch.ready);
  if (options.owner_waits) detail::make_owner_wait(q, batch.ready);
  const DeviceView base = batch.buffer.view();
  batch.views.reserve(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    DeviceView v = base;
    v.offset += batch.offsets[i];
    if (v.address != 0) v.address += batch.offsets[i];
    v.size = views[i].size;
    batch.views.push_back(v);
  }
  return batch;
}

TimelinePoint Transfer::upload_into(const HostBuffer& source, const DeviceBuffer& destination,
                                    UploadIntoOptions options, std::source_location where) {
  Call call(state_, "Transfer::upload_into", where);
  auto& d = call.device();
  auto& host = detail::checked_host(source, &d, "Transfer::upload_into", where);
  auto& b = detail::checked_block(destination, &d, "Transfer::upload_into", where);
  check_no_padding(options, "Transfer::upload_into", where);
  FERRY_REQUIRE(host.memory->size <= b.requested, "Transfer::upload_into",
          "source (" + std::to_string(host.memory->size) + " bytes) is larger than the destination (" +
              std::to_string(b.requested) + " bytes)",
          where);
  call.order(options);
  call.lock();
  // The owner may still read the old contents: the executor waits for its work so far. A
  // smaller source leaves the tail as it was, so then the range changes hands properly.
  const QueuePtr owner = call.access(b, host.memory->size < b.requested, options.destination_unused);
  const TimelinePoint done = call.on_executor(b, owner, [&](detail::QueueState& e) {
    detail::paced(e, call.piece(), host.memory->size, [&](std::uint64_t at, std::uint64_t n) {
      e.backend->copy_h2d(detail::DeviceRef{b.segment, b.offset + at}, detail::HostRef{host.memory.get(), at}, n);
    });
  });
  call.finish("copy h2d (preallocated)", host.memory->size, done, detail::access::state(source));
  if (options.owner_waits) detail::make_owner_wait(owner, done);
  return done;
}

TimelinePoint Transfer::upload_into(const HostBuffer& source, std::uint64_t source_offset, std::uint64_t bytes,
                                    const DeviceBuffer& destination, std::uint64_t destination_offset,
                                    UploadIntoOptions options, std::source_location where) {
  constexpr const char* fn = "Transfer::upload_into(range)";
  Call call(state_, fn, where);
  auto& d = call.device();
  auto& host = detail::checked_host(source, &d, fn, where);
  auto& b = detail::checked_block(destination, &d, fn, where);
  check_no_padding(options, fn, where);
  detail::check_range(source_offset, bytes, host.memory->size, fn, "source", where);
  detail::check_range(destination_offset, bytes, b.requested, fn, "destination", where);
  call.order(options);
  call.lock();
  // The owner may still read the old contents, and the bytes outside the range stay: the
  // range changes hands with the rest of the buffer's contents kept.
  const QueuePtr owner = call.access(b, bytes < b.requested, options.destination_unused);
  const TimelinePoint done = call.on_executor(b, owner, [&](detail::QueueState& e) {
    detail::paced(e, call.piece(), bytes, [&](std::uint64_t at, std::uint64_t n) {
      e.backend->copy_h2d(detail::DeviceRef{b.segment, b.offset + destination_offset + at},
                          detail::HostRef{host.memory.get(), source_offset + at}, n);
    });
  });
  call.finish("copy h2d (preallocated)", bytes, done, detail::access::state(source));
  if (options.owner_waits) detail::make_owner_wait(owner, done);
  return done;
}

TimelinePoint Transfer::upload_into(const HostBuffer& source, std::span<const std::uint64_t> source_offsets,
                                    std::span<const DeviceBuffer> destinations, UploadIntoOptions options,
                                    std::source_location where) {
  constexpr const char* fn = "Transfer::upload_into(buffers)";
  Call call(state_, fn, where);
  auto& d = call.device();
  auto& host = detail::checked_host(source, &d, fn, where);
  check_no_padding(options, fn, where);
  const std::vector<detail::BlockState*> blocks =
      checked_blocks(destinations, d, fn, "destination", source_offsets.size(), where);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::uint64_t bytes = blocks[i]->requested;
    FERRY_REQUIRE(source_offsets[i] <= host.memory->size && bytes <= host.memory->size - source_offsets[i], fn,
                  "destination " + std::to_string(i) + ": source range [" + std::to_string(source_offsets[i]) +
                      ", +" + std::to_string(bytes) + ") exceeds the host buffer's " +
                      std::to_string(host.memory->size) + " bytes",
                  where);
    total += bytes;
  }
  call.order(options);
  call.lock();
  // Each destination is overwritten whole: no contents to hand over.
  std::vector<detail::HostDeviceCopy> copies;
  copies.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    copies.push_back(
        {detail::ref(*blocks[i]), detail::HostRef{host.memory.get(), source_offsets[i]}, blocks[i]->requested});
  }
  OwnerPoints owner_done;
  const TimelinePoint done = upload_in_order(call, blocks, copies, std::vector<bool>(blocks.size(), false),
                                             options.destination_unused, owner_done);
  call.finish("copy h2d (buffers)", total, done, detail::access::state(source));
  if (options.owner_waits) make_owners_wait(owner_done);
  return done;
}

TimelinePoint Transfer::upload_into(std::span<const HostBuffer* const> sources, std::span<const DeviceBuffer> destinations,
                                    UploadIntoOptions options, std::source_location where) {
  constexpr const char* fn = "Transfer::upload_into(sources)";
  Call call(state_, fn, where);
  auto& d = call.device();
  check_no_padding(options, fn, where);
  FERRY_REQUIRE(sources.size() == destinations.size(), fn,
                std::to_string(sources.size()) + " sources for " + std::to_string(destinations.size()) + " destinations",
                where);
  const std::vector<detail::BlockState*> blocks =
      checked_blocks(destinations, d, fn, "destination", sources.size(), where);
  std::vector<std::shared_ptr<detail::HostAllocation>> hosts;
  hosts.reserve(sources.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto name = [i] { return "source " + std::to_string(i); };
    FERRY_REQUIRE(sources[i] != nullptr, fn, name() + " is a null pointer", where);
    const std::shared_ptr<detail::HostAllocation>& host = detail::access::state(*sources[i]);
    FERRY_REQUIRE(host != nullptr, fn, name() + " is a null or moved-from host buffer", where);
    FERRY_REQUIRE(host->memory != nullptr, fn, name() + ": its device is closed", where);
    FERRY_REQUIRE(host->device_id == &d, fn, name() + " belongs to another device", where);
    FERRY_REQUIRE(host->memory->size <= blocks[i]->requested, fn,
                  name() + " (" + std::to_string(host->memory->size) + " bytes) is larger than destination " +
                      std::to_string(i) + " (" + std::to_string(blocks[i]->requested) + " bytes)",
                  where);
    hosts.push_back(host);
    total += host->memory->size;
  }
  call.order(options);
  call.lock();
  // A smaller source leaves the destination's tail as it was: that range changes hands with
  // its contents kept.
  std::vector<detail::HostDeviceCopy> copies;
  std::vector<bool> keep;
  copies.reserve(blocks.size());
  keep.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    copies.push_back({detail::ref(*blocks[i]), detail::HostRef{hosts[i]->memory.get(), 0}, hosts[i]->memory->size});
    keep.push_back(hosts[i]->memory->size < blocks[i]->requested);
  }
  OwnerPoints owner_done;
  const TimelinePoint done = upload_in_order(call, blocks, copies, keep, options.destination_unused, owner_done);
  call.finish("copy h2d (sources)", total, done, hosts);
  if (options.owner_waits) make_owners_wait(owner_done);
  return done;
}

TimelinePoint Transfer::upload_into(std::span<const HostView> views, const DeviceBuffer& destination,
                                    std::span<const std::uint64_t> offsets, UploadIntoOptions options,
                                    std::source_location where) {
  constexpr const char* fn = "Transfer::upload_into(batch)";
  Call call(state_, fn, where);
  auto& d = call.device();
  auto& b = detail::checked_block(destination, &d, fn, where);
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
                std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  FERRY_REQUIRE(offsets.size() == views.size(), fn,
                std::to_string(offsets.size()) + " offsets for " + std::to_string(views.size()) + " views", where);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const HostView& v = views[i];
    FERRY_REQUIRE(v.data != nullptr, fn, "view " + std::to_string(i) + " has a null data pointer", where);
    FERRY_REQUIRE(v.size > 0, fn, "view " + std::to_string(i) + " is empty (size 0)", where);
    FERRY_REQUIRE(offsets[i] <= b.requested && v.size <= b.requested - offsets[i], fn,
                  "view " + std::to_string(i) + ": range [" + std::to_string(offsets[i]) + ", +" +
                      std::to_string(v.size) + ") exceeds the destination's " + std::to_string(b.requested) +
                      " bytes",
                  where);
    FERRY_REQUIRE(state_->options.staging, fn,
                  "view " + std::to_string(i) + " (" + std::to_string(v.size) +
                      " bytes of host memory) is larger than the staging cap of 0 bytes: staging is disabled "
                      "(TransferOptions::staging = false); upload a HostBuffer with upload_into instead",
                  where);
  }
  // Destination ranges must not overlap (the result would depend on the DMA order): sort by
  // offset, compare neighbours. Runs of exactly contiguous ranges become one staged stream.
  std::vector<std::uint32_t> order(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t x, std::uint32_t y) { return offsets[x] < offsets[y] || (offsets[x] == offsets[y] && x < y); });
  struct Run {
    std::uint64_t base = 0;
    std::uint64_t total = 0;
    std::vector<detail::planning::StreamPiece> pieces;
  };
  std::vector<Run> runs;
  for (std::size_t j = 0; j < order.size(); ++j) {
    const std::uint32_t c = order[j];
    if (j > 0) {
      const std::uint32_t p = order[j - 1];
      FERRY_REQUIRE(offsets[p] + views[p].size <= offsets[c], fn,
                    "the destination ranges of views " + std::to_string(std::min(p, c)) + " and " +
                        std::to_string(std::max(p, c)) + " overlap",
                    where);
    }
    // A view starts a new run unless it follows the run's end directly, or (padding may be
    // overwritten) after a gap shorter than kPaddingLimit, which the stream then covers.
    const bool joins = !runs.empty() && (runs.back().base + runs.back().total == offsets[c] ||
                                         (options.overwrite_padding &&
                                          offsets[c] - (runs.back().base + runs.back().total) <
                                              UploadIntoOptions::kPaddingLimit));
    if (!joins) runs.push_back({offsets[c], 0, {}});
    Run& r = runs.back();
    const std::uint64_t at = offsets[c] - r.base;
    // const_cast: an upload only reads through StreamPiece::host.
    r.pieces.push_back({at, const_cast<std::byte*>(static_cast<const std::byte*>(views[c].data)), views[c].size});
    r.total = at + views[c].size;
  }
  std::uint64_t total = 0;
  for (const Run& r : runs) total += r.total;
  call.order(options);
  call.lock();
  auto& s = call.state();
  s.ensure_staging(d, where);
  // Bytes outside the views keep their contents unless the views cover the whole buffer.
  const QueuePtr owner = call.access(b, total < b.requested, options.destination_unused);
  call.enqueue_waits_on_executor();
  try {
    const detail::Call::Staging staging(call, &b);
    for (const Run& r : runs) s.staged_h2d(r.pieces, r.total, b, where, r.base);
  } catch (...) {
    (void)call.on_executor(b, owner, [](detail::QueueState&) {});  // the chunks issued still write the block
    throw;
  }
  const TimelinePoint done = call.on_executor(b, owner, [](detail::QueueState&) {});
  call.finish("copy h2d (staged, preallocated)", total, done);
  if (options.owner_waits) detail::make_owner_wait(owner, done);
  return done;
}

TimelinePoint Transfer::download(const DeviceBuffer& source, const HostBuffer& destination, std::uint64_t offset,
                                 CallOptions options, std::source_location where) {
  Call call(state_, "Transfer::download", where);
  auto& d = call.device();
  auto& b = detail::checked_block(source, &d, "Transfer::download", where);
  auto& host = detail::checked_host(destination, &d, "Transfer::download", where);
  detail::check_range(offset, b.requested, host.memory->size, "Transfer::download", "destination", where);
  call.order(options);
  call.lock();
  const QueuePtr owner = call.access(b, true);  // after the work that produced the data
  const TimelinePoint done = call.on_executor(b, owner, [&](detail::QueueState& e) {
    detail::paced(e, call.piece(), b.requested, [&](std::uint64_t at, std::uint64_t n) {
      e.backend->copy_d2h(detail::HostRef{host.memory.get(), offset + at}, detail::DeviceRef{b.segment, b.offset + at}, n);
    });
  });
  call.finish("copy d2h", b.requested, done, detail::access::state(destination));
  return done;
}

TimelinePoint Transfer::download(std::span<const DeviceBuffer> sources, const HostBuffer& destination,
                                 std::span<const std::uint64_t> offsets, CallOptions options, std::source_location where) {
  constexpr const char* fn = "Transfer::download(buffers)";
  Call call(state_, fn, where);
  auto& d = call.device();
  auto& host = detail::checked_host(destination, &d, fn, where);
  const std::vector<detail::BlockState*> blocks = checked_blocks(sources, d, fn, "source", offsets.size(), where);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::uint64_t bytes = blocks[i]->requested;
    FERRY_REQUIRE(offsets[i] <= host.memory->size && bytes <= host.memory->size - offsets[i], fn,
                  "source " + std::to_string(i) + ": destination range [" + std::to_string(offsets[i]) + ", +" +
                      std::to_string(bytes) + ") exceeds the host buffer's " + std::to_string(host.memory->size) +
                      " bytes",
                  where);
    total += bytes;
  }
  // Destination ranges must not overlap (the bytes would depend on the DMA order).
  std::vector<std::uint32_t> order(blocks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) { return offsets[x] < offsets[y]; });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const std::uint32_t p = order[j - 1], c = order[j];
    FERRY_REQUIRE(offsets[p] + blocks[p]->requested <= offsets[c], fn,
                  "the destination ranges of sources " + std::to_string(std::min(p, c)) + " and " +
                      std::to_string(std::max(p, c)) + " overlap",
                  where);
  }
  call.order(options);
  call.lock();
  std::vector<QueuePtr> owners;
  owners.reserve(blocks.size());
  for (detail::BlockState* b : blocks) owners.push_back(call.access(*b, true));  // after the data's writers
  const TimelinePoint done = call.with_executor([&](detail::QueueState& e) {
    std::vector<detail::HostDeviceCopy> copies;
    copies.reserve(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      copies.push_back({detail::ref(*blocks[i]), detail::HostRef{host.memory.get(), offsets[i]}, blocks[i]->requested});
    }
    detail::paced_many(e, call.piece(), copies, /*to_device=*/false);
    return detail::finish_access(call.exec(), blocks, owners);
  });
  call.finish("copy d2h (buffers)", total, done, detail::access::state(destination));
  return done;
}

void Transfer::download(const DeviceBuffer& source, std::span<std::byte> destination, CallOptions options,
                        std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::download", "moved-from transfer", where);
  FERRY_REQUIRE(state_->device.is_open(), "Transfer::download", "the device is closed", where);
  auto& b = detail::checked_block(source, detail::access::state(state_->device).get(), "Transfer::download", where);
  FERRY_REQUIRE(!destination.empty() && destination.data() != nullptr, "Transfer::download", "empty destination span",
          where);
  FERRY_REQUIRE(destination.size() >= b.requested, "Transfer::download",
          "destination (" + std::to_string(destination.size()) + " bytes) is smaller than the buffer (" +
              std::to_string(b.requested) + " bytes)",
          where);
  const DownloadView view{0, destination.data(), b.requested};
  download(source, std::span<const DownloadView>(&view, 1), std::move(options), where);
}

void Transfer::download(const DeviceBuffer& source, std::span<const DownloadView> views, CallOptions options,
                        std::source_location where) {
  constexpr const char* fn = "Transfer::download(batch)";
  Call call(state_, fn, where);
  auto& d = call.device();
  auto& b = detail::checked_block(source, &d, fn, where);
  FERRY_REQUIRE(!views.empty(), fn, "empty span of views", where);
  FERRY_REQUIRE(views.size() <= max_batch_views, fn,
                std::to_string(views.size()) + " views exceed the limit of " + std::to_string(max_batch_views), where);
  for (std::size_t i = 0; i < views.size(); ++i) {
    const DownloadView& v = views[i];
    FERRY_REQUIRE(v.data != nullptr || v.size == 0, fn,
                  "view " + std::to_string(i) + " has a null data pointer and " + std::to_string(v.size) + " bytes",
                  where);
    FERRY_REQUIRE(v.offset <= b.requested && v.size <= b.requested - v.offset, fn,
                  "view " + std::to_string(i) + ": range [" + std::to_string(v.offset) + ", +" +
                      std::to_string(v.size) + ") exceeds the source buffer's " + std::to_string(b.requested) +
                      " bytes",
                  where);
    FERRY_REQUIRE(reinterpret_cast<std::uintptr_t>(v.data) <= UINTPTR_MAX - v.size, fn,
                  "view " + std::to_string(i) + ": destination range wraps around the address space", where);
    FERRY_REQUIRE(state_->options.staging || v.size == 0, fn,
                  "view " + std::to_string(i) + " (" + std::to_string(v.size) +
                      " bytes) is larger than the staging cap of 0 bytes: staging is disabled "
                      "(TransferOptions::staging = false); download into a HostBuffer instead",
                  where);
  }
  // Destinations must not overlap: sort by address, compare neighbours. An empty destination
  // holds no byte, so it overlaps nothing.
  std::vector<std::uint32_t> order;
  order.reserve(views.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    if (views[i].size > 0) order.push_back(static_cast<std::uint32_t>(i));
  }
  auto addr = [&](std::uint32_t i) { return reinterpret_cast<std::uintptr_t>(views[i].data); };
  std::sort(order.begin(), order.end(), [&](std::uint32_t x, std::uint32_t y) { return addr(x) < addr(y); });
  for (std::size_t j = 1; j < order.size(); ++j) {
    const std::uint32_t p = order[j - 1], c = order[j];
    FERRY_REQUIRE(addr(p) + views[p].size <= addr(c), fn,
                  "the destinations of views " + std::to_string(std::min(p, c)) + " and " +
                      std::to_string(std::max(p, c)) + " overlap",
                  where);
  }
  const detail::planning::DownloadPlan plan = detail::planning::coalesce_downloads(views);
  call.order(options);
  if (plan.total == 0) {
    // Every view is empty: nothing to read. The caller's waits and signals still pass through
    // the executor, so a signal point is reached after the wait points, as for any call.
    call.lock();
    call.pass_through_executor();
    return;
  }
  call.lock();
  auto& s = call.state();
  s.ensure_staging(d, where);
  const QueuePtr owner = call.access(b, true);  // after the work that produced the data
  call.enqueue_waits_on_executor();
  try {
    const detail::Call::Staging staging(call, &b);
    s.staged_d2h(plan.pieces, plan.runs, plan.total, b, where);
  } catch (...) {
    (void)call.on_executor(b, owner, [](detail::QueueState&) {});  // keep the block's ordering consistent
    throw;
  }
  const TimelinePoint done = call.on_executor(b, owner, [](detail::QueueState&) {});
  call.finish("copy d2h (staged)", plan.total, done);
}

void Transfer::download(const UploadBatch& batch, std::span<const HostSpan> destinations, CallOptions options,
                        std::source_location where) {
  constexpr const char* fn = "Transfer::download(batch)";
  FERRY_REQUIRE(destinations.size() == batch.offsets.size() && batch.views.size() == batch.offsets.size(), fn,
                std::to_string(destinations.size()) + " destinations for a batch of " +
                    std::to_string(batch.offsets.size()) + " inputs",
                where);
  std::vector<DownloadView> views(destinations.size());
  for (std::size_t i = 0; i < destinations.size(); ++i) {
    FERRY_REQUIRE(destinations[i].size == batch.views[i].size, fn,
                  "destination " + std::to_string(i) + " has " + std::to_string(destinations[i].size) +
                      " bytes, input " + std::to_string(i) + " of the batch has " +
                      std::to_string(batch.views[i].size),
                  where);
    views[i] = {batch.offsets[i], destinations[i].data, destinations[i].size};
  }
  download(batch.buffer, std::span<const DownloadView>(views), std::move(options), where);
}

TimelinePoint Transfer::copy(const DeviceBuffer& source, const DeviceBuffer& destination, std::uint64_t bytes,
                             CallOptions options, std::source_location where) {
  constexpr const char* fn = "Transfer::copy";
  Call call(state_, fn, where);
  auto& d = call.device();
  std::shared_ptr<detail::DeviceState> src_device, dst_device;
  auto& src = checked_any_block(source, src_device, fn, where);
  auto& dst = checked_any_block(destination, dst_device, fn, where);
  FERRY_REQUIRE(&src != &dst, fn, "source and destination are the same buffer", where);
  if (bytes == 0) bytes = src.requested;
  FERRY_REQUIRE(bytes <= src.requested && bytes <= dst.requested, fn,
          std::to_string(bytes) + " bytes exceed the source (" + std::to_string(src.requested) +
              ") or destination (" + std::to_string(dst.requested) + ")",
          where);
  if (src_device.get() != &d || dst_device.get() != &d) {
    FERRY_REQUIRE(src_device.get() == &d || dst_device.get() == &d, fn,
                  "neither buffer is on the Transfer's device: a peer copy runs on a queue of the source's or "
                  "the destination's device",
                  where);
    detail::DeviceState& other = src_device.get() != &d ? *src_device : *dst_device;
    (void)detail::require_peer(d, other, fn, where);
    call.allow_peer(other);
    call.order(options);
    call.lock();
    const QueuePtr src_owner = call.access(src, true);
    const QueuePtr dst_owner = call.access(dst, bytes < dst.requested);  // a partial write keeps the rest
    const TimelinePoint done = call.on_executor(dst, dst_owner, [&](detail::QueueState& e) {
      detail::paced(e, call.piece(), bytes, [&](std::uint64_t at, std::uint64_t n) {
        e.backend->copy_peer(detail::DeviceRef{dst.segment, dst.offset + at}, *dst_device->backend,
                             detail::DeviceRef{src.segment, src.offset + at}, *src_device->backend, n);
      });
      e.dirty = true;  // the source's hand-back below marks the copy, so it must count as work
      (void)detail::finish_access(call.exec(), src, src_owner);
    });
    call.finish("copy peer", bytes, done);
    // The destination's owner is ordered after the copy: a queue of the other device cannot be
    // made to wait on this device's point through Queue::wait.
    detail::make_owner_wait(dst_owner, done);
    return done;
  }
  call.order(options);
  call.lock();
  const QueuePtr src_owner = call.access(src, true);
  const QueuePtr dst_owner = call.access(dst, bytes < dst.requested);  // a partial write keeps the rest
  const TimelinePoint done = call.on_executor(dst, dst_owner, [&](detail::QueueState& e) {
    detail::paced(e, call.piece(), bytes, [&](std::uint64_t at, std::uint64_t n) {
      e.backend->copy_d2d(detail::DeviceRef{dst.segment, dst.offset + at}, detail::DeviceRef{src.segment, src.offset + at}, n);
    });
    e.dirty = true;  // the source's hand-back below marks the copy, so it must count as work
    (void)detail::finish_access(call.exec(), src, src_owner);
  });
  call.finish("copy d2d", bytes, done);
  return done;
}

PeerCopy Transfer::copy_to(const DeviceBuffer& source, const Queue& owner, UploadOptions options,
                           std::source_location where) {
  constexpr const char* fn = "Transfer::copy_to";
  Call call(state_, fn, where);
  auto& d = call.device();
  std::shared_ptr<detail::DeviceState> src_device;
  auto& src = checked_any_block(source, src_device, fn, where);
  FERRY_REQUIRE(static_cast<bool>(owner), fn, "null queue handle", where);
  const QueuePtr& q = detail::access::state(owner);
  const std::shared_ptr<detail::DeviceState> dst_device = detail::lock_device(q->device, fn, where);
  FERRY_REQUIRE(src_device.get() == &d || dst_device.get() == &d, fn,
                "neither the source nor the owner queue is on the Transfer's device: a peer copy runs on a queue "
                "of the source's or the destination's device",
                where);
  const std::uint64_t bytes = src.requested;
  PeerPath path = PeerPath::same_device;
  if (src_device != dst_device) {
    detail::DeviceState& other = src_device.get() != &d ? *src_device : *dst_device;
    path = detail::require_peer(d, other, fn, where).path;
    call.allow_peer(other);
  }
  call.order(options);
  call.lock();
  const QueuePtr& exec = call.exec();
  // From the owner's pool, owned by it; the executor is its first writer and waits for the
  // block's free point when the pool hands out one still pending on the owner.
  DeviceBuffer buffer = detail::pool_allocate(*dst_device, dst_device, bytes, q, exec, options.tag, where, !options.overlap);
  auto& b = *detail::access::state(buffer);
  const QueuePtr src_owner = call.access(src, true);
  const TimelinePoint done = call.on_executor(b, q, [&](detail::QueueState& e) {
    detail::enqueue_wait(e, b.ready_after, /*query=*/false);
    detail::paced(e, call.piece(), bytes, [&](std::uint64_t at, std::uint64_t n) {
      const detail::DeviceRef to{b.segment, b.offset + at}, from{src.segment, src.offset + at};
      if (path == PeerPath::same_device) {
        e.backend->copy_d2d(to, from, n);
      } else {
        e.backend->copy_peer(to, *dst_device->backend, from, *src_device->backend, n);
      }
    });
    e.dirty = true;
    (void)detail::finish_access(exec, src, src_owner);
  });
  call.finish(path == PeerPath::same_device ? "copy d2d" : "copy peer", bytes, done);
  if (options.owner_waits) detail::make_owner_wait(q, done);
  return PeerCopy{std::move(buffer), done, path};
}

PeerPath Transfer::peer_path(const Device& other, std::source_location where) const {
  constexpr const char* fn = "Transfer::peer_path";
  FERRY_REQUIRE(state_ != nullptr, fn, "moved-from transfer", where);
  FERRY_REQUIRE(state_->device.is_open(), fn, "the device is closed", where);
  FERRY_REQUIRE(static_cast<bool>(other) && other.is_open(), fn, "null or closed device", where);
  auto& d = *detail::access::state(state_->device);
  auto& o = *detail::access::state(other);
  if (&d == &o) return PeerPath::same_device;
  const detail::BoundThread bound(*d.backend);
  return detail::require_peer(d, o, fn, where).path;
}

std::string_view to_string(PeerPath path) noexcept {
  switch (path) {
    case PeerPath::same_device: return "same_device";
    case PeerPath::direct: return "direct";
    case PeerPath::staged: return "staged";
  }
  return "unknown";
}

void Transfer::synchronize(std::chrono::nanoseconds timeout, std::source_location where) {
  FERRY_REQUIRE(state_ != nullptr, "Transfer::synchronize", "moved-from transfer", where);
  if (!state_->device.is_open()) return;
  detail::TransferState* urgent = nullptr;
  {
    std::lock_guard lock(state_->urgent_mutex);
    urgent = state_->urgent.get();
  }
  for (detail::TransferState* lane : {state_.get(), urgent}) {
    if (lane == nullptr) continue;
    detail::access::make<Queue>(lane->exec).synchronize(timeout, where);
    std::lock_guard lock(lane->mutex);
    // Copies enqueued by other threads while this thread waited are not covered by the wait:
    // only what is seen complete is let go.
    lane->prune_completed();
    lane->prune_at = lane->in_flight.size() + 32;
  }
}

void Transfer::flush(std::source_location where) {
  Call call(state_, "Transfer::flush", where);
  call.lock();
  {
    std::lock_guard elock(call.exec()->mutex);
    detail::flush(*call.exec());
  }
  std::lock_guard lock(state_->urgent_mutex);
  if (state_->urgent) {
    std::lock_guard elock(state_->urgent->exec->mutex);
    detail::flush(*state_->urgent->exec);
  }
}

}  // namespace ferry
