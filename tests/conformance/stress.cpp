// SPDX-License-Identifier: MIT
// Randomized multi-threaded stress over the public API. Worker threads share one Device and
// one Transfer and mix every call -- pinned, pageable and batch uploads, upload_into, copy,
// synthetic compute on the owner and on another queue, every download form, release,
// release_after, Transfer::synchronize and Queue::synchronize -- on one or two compute
// queues, while a monitor thread reads the pool's budget and validates its invariants. Each
// worker checks every byte of every buffer it made against what the contract promises, and
// only that: the calls race with each other in any order.
//
// Knobs (the suite runs a modest default; a long run reuses the same binary):
//   FERRY_STRESS_OPS=N         operations in all, split between the workers
//   FERRY_STRESS_SEED=S        base seed (decimal or 0x-hex); every worker derives its own
//   FERRY_STRESS_DEADLINE_S=T  watchdog deadline (default 120 s, scaled with N)
//   FERRY_STRESS_SHARED_READS=1  compute on both queues may read one buffer (Shared::shared_reads)
// The seed is printed at the start (also on stdout, so a crash leaves it in the log) and in
// every failure message.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::fill_pattern;
using conformance::first_mismatch;
using conformance::pattern_byte;
using ferry_bench::Strategy;

namespace {

constexpr std::uint64_t KiB = 1024, MiB = 1024 * KiB;
constexpr unsigned kWorkers = 4;
constexpr std::size_t kMaxLive = 10;  // device buffers one worker holds at most
constexpr std::uint64_t kDefaultSeed = 0x57e55f0e77ull;
constexpr std::byte kGuard{0xA5};     // host bytes a download must not touch
constexpr std::byte kScribble{0xEE};  // written over sources the contract lets us reuse

enum class Op : unsigned {
  pinned_upload,
  pinned_range_upload,
  pageable_upload,
  batch_upload,
  upload_into_fresh,
  upload_into_overwrite,
  upload_into_many,
  copy,
  compute,
  download_host,
  download_span,
  download_views,
  download_batch,
  release,
  release_after,
  drop,
  transfer_sync,
  queue_sync,
  count
};
constexpr std::size_t kOps = static_cast<std::size_t>(Op::count);
constexpr std::array<const char*, kOps> kOpNames{
    "pinned upload", "pinned range upload", "pageable upload", "batch upload", "upload_into (fresh)",
    "upload_into (overwrite)", "upload_into (several)", "copy", "compute", "download (HostBuffer)", "download (span)",
    "download (views)", "download (batch)", "release", "release_after", "drop",
    "Transfer::synchronize", "Queue::synchronize"};

/// An unsigned number from the environment; nullopt when unset. A value that is not a
/// number is a configuration error: the run would silently not be the one asked for.
std::optional<std::uint64_t> env_number(const char* variable) {
  const char* v = std::getenv(variable);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 0);
  if (end == v || *end != '\0') {
    FAIL((std::string(variable) + "=" + v + " is not a number"));
  }
  return static_cast<std::uint64_t>(n);
}

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

/// Bytes [at, at + size) of a buffer hold pattern `seed` from pattern index `first` on, each
/// byte plus `add` (mod 256: each synthetic compute adds one, wrapping).
struct Region {
  std::uint64_t at = 0, size = 0, seed = 0, first = 0;
  unsigned add = 0;
};

std::byte expected(const Region& r, std::uint64_t j) {
  return static_cast<std::byte>((static_cast<unsigned>(pattern_byte(r.seed, r.first + j)) + r.add) & 0xFFu);
}

/// The parts of `in` inside [lo, hi).
std::vector<Region> clip(const std::vector<Region>& in, std::uint64_t lo, std::uint64_t hi) {
  std::vector<Region> out;
  for (const Region& r : in) {
    const std::uint64_t a = std::max(r.at, lo), b = std::min(r.at + r.size, hi);
    if (a < b) out.push_back({a, b - a, r.seed, r.first + (a - r.at), r.add});
  }
  return out;
}

/// A device buffer a worker made, and what the contract says it holds.
struct Entry {
  DeviceBuffer buffer;               // plain buffers
  std::optional<UploadBatch> batch;  // batch uploads: the buffer is batch->buffer
  std::vector<Region> regions;       // every other byte is unspecified
  TimelinePoint ready;               // the contents are complete once reached
  /// The compute queue whose work wrote the contents; null when ferry's own transfer calls
  /// wrote them (ferry orders its later calls on the buffer after those by itself).
  Queue writer;
  Queue reader;           // the queue whose compute reads this buffer (see Shared::shared_reads)
  bool verified = false;  // downloaded and compared at least once
  std::string history;    // how it was made, for failure messages

  DeviceBuffer& buf() { return batch ? batch->buffer : buffer; }
};

/// State every thread of the case shares.
struct Shared {
  Device dev;
  Transfer* transfer = nullptr;
  std::vector<Queue> compute;  // owners: the default compute queue, and a second one where possible
  Queue executor;
  std::uint64_t seed = 0;
  /// Compute on two queues may read one buffer. Off by default: the release of a buffer read
  /// by two queues' compute is ordered after only the queue recorded last as its user, so its
  /// block can be reused while the other reader's compute still reads it (wrong bytes in that
  /// compute's output). Without it, the first compute on a buffer picks the one queue whose
  /// compute reads it from then on.
  bool shared_reads = false;
  std::atomic<bool> stop{false};
  std::atomic<bool> compute_supported{true};
  std::array<std::atomic<std::uint64_t>, kOps> counts{};
  std::atomic<std::uint64_t> cross_queue_computes{0};
  std::atomic<std::uint64_t> verified_bytes{0};
  std::array<std::atomic<std::uint64_t>, kWorkers> progress{};
  std::array<std::atomic<unsigned>, kWorkers> current{};

  std::mutex mutex;
  std::vector<std::string> failures;  // the first few, reported by the case's thread
  std::uint64_t failure_count = 0;

  /// Record a failure and stop every worker (doctest assertions stay on the case's thread).
  void fail(const std::string& what) {
    std::lock_guard lock(mutex);
    ++failure_count;
    if (failures.size() < 16) failures.push_back(what);
    stop = true;
  }
};

enum class Form : unsigned { host, span, views, batch };
constexpr std::array<const char*, 4> kFormNames{"download (HostBuffer)", "download (span)", "download (views)",
                                                "download (batch)"};

class Worker {
 public:
  Worker(Shared& shared, unsigned index, std::uint64_t ops)
      : s_(shared),
        index_(index),
        ops_(ops),
        rng_(shared.seed ^ (0x9e3779b97f4a7c15ull * (index + 1))),
        next_pattern_((static_cast<std::uint64_t>(index) + 1) << 32) {}

  void run() {
    try {
      for (op_ = 0; op_ < ops_ && !s_.stop; ++op_) {
        step();
        s_.progress[index_] = op_ + 1;
      }
      drain();
    } catch (const std::exception& e) {
      s_.fail(where() + ": " + e.what());
    }
    live_.clear();  // after a failure: releases are stream-ordered, nothing blocks
  }

 private:
  // ---- randomness ---------------------------------------------------------------------------
  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  bool chance(unsigned percent) { return uniform(0, 99) < percent; }
  /// Mostly small buffers (the calls, not the bytes, are under test); a few above the 128 KiB
  /// at which malloc maps memory of its own, so that host memory freed too early is unmapped.
  std::uint64_t random_size() {
    const std::uint64_t k = uniform(0, 99);
    if (k < 75) return uniform(1, 8 * KiB);
    if (k < 97) return uniform(8 * KiB, 128 * KiB);
    return uniform(128 * KiB, 3 * MiB / 2);
  }
  /// Consecutive buffers get consecutive pattern seeds: distinct patterns (mod 251) among the
  /// last 250 buffers of a worker, so bytes of another buffer do not pass for this one's.
  std::uint64_t next_seed() { return next_pattern_++; }
  Queue& any_queue() { return s_.compute[uniform(0, s_.compute.size() - 1)]; }
  Transfer& xfer() { return *s_.transfer; }

  std::string where() const {
    std::string op = current_ < kOps ? kOpNames[current_] : "drain";
    return "seed " + hex(s_.seed) + " worker " + std::to_string(index_) + " op " + std::to_string(op_) + " (" +
           op + ")";
  }
  void fail(const std::string& what) { s_.fail(where() + ": " + what); }

  /// An upload's strategy and options: mostly ferry's upload; now and then the bench's
  /// references in public-API terms (blocking: the host waits for the copy; executor_owned: a
  /// block of the executor filled by upload_into); the owner's wait left to the caller
  /// sometimes.
  struct Plan {
    Strategy strategy = Strategy::owner_owned;
    UploadOptions options{};
  };
  Plan upload_plan(bool executor_owned_allowed) {
    Plan p;
    const std::uint64_t k = uniform(0, 99);
    if (k < 8) p.strategy = Strategy::blocking;
    else if (k < 15 && executor_owned_allowed) p.strategy = Strategy::executor_owned;
    p.options.overlap = chance(25);
    p.options.owner_waits = chance(80);
    return p;
  }

  /// `n` bytes of `h` from `offset` uploaded for `owner` with the plan's strategy.
  Upload pinned_upload_with(const Plan& p, const HostBuffer& h, bool range, std::uint64_t offset, std::uint64_t n,
                            Queue& owner) {
    if (p.strategy == Strategy::executor_owned) {
      Upload up;
      up.buffer = s_.dev.pool().allocate(n, s_.executor);
      // The destination's owner is the executor: the owner's wait is placed here.
      up.ready = xfer().upload_into(h, offset, n, up.buffer, 0, {.owner_waits = false});
      if (p.options.owner_waits) owner.wait(up.ready);
      return up;
    }
    Upload up = range ? xfer().upload(h, offset, n, owner, p.options) : xfer().upload(h, owner, p.options);
    if (p.strategy == Strategy::blocking) up.ready.wait(std::chrono::hours(1));
    return up;
  }

  /// With owner_waits off, either place the owner's wait here or leave it out: ferry orders
  /// its own later calls on the buffer (compute, downloads, copies, release) after the copy.
  void maybe_owner_wait(bool owner_waits, Queue& owner, const TimelinePoint& ready) {
    if (!owner_waits && chance(50)) owner.wait(ready);
  }

  // ---- the operations -----------------------------------------------------------------------
  Op pick() {
    const std::uint64_t k = uniform(0, 99);
    Op op = k < 18   ? Op::pinned_upload
            : k < 24 ? Op::pinned_range_upload
            : k < 31 ? Op::pageable_upload
            : k < 37 ? Op::batch_upload
            : k < 41 ? Op::upload_into_fresh
            : k < 43 ? Op::upload_into_overwrite
            : k < 44 ? Op::upload_into_many
            : k < 50 ? Op::copy
            : k < 59 ? Op::compute
            : k < 65 ? Op::download_host
            : k < 70 ? Op::download_span
            : k < 75 ? Op::download_views
            : k < 78 ? Op::download_batch
            : k < 84 ? Op::release
            : k < 89 ? Op::release_after
            : k < 91 ? Op::drop
            : k < 97 ? Op::transfer_sync
                     : Op::queue_sync;
    const bool makes = op <= Op::compute && op != Op::upload_into_overwrite;
    const bool needs_entry = op >= Op::upload_into_overwrite && op <= Op::drop;
    if (makes && live_.size() >= kMaxLive) op = chance(50) ? Op::release : Op::release_after;
    if (needs_entry && live_.empty()) op = Op::pinned_upload;
    if (op == Op::compute && !s_.compute_supported) op = Op::copy;
    if (op == Op::download_batch && !has_batch()) op = Op::download_views;
    if (op == Op::upload_into_overwrite && !has_plain()) op = Op::upload_into_fresh;
    return op;
  }

  bool has_batch() const {
    return std::any_of(live_.begin(), live_.end(), [](const Entry& e) { return e.batch.has_value(); });
  }
  bool has_plain() const {
    return std::any_of(live_.begin(), live_.end(), [](const Entry& e) { return !e.batch.has_value(); });
  }
  std::size_t pick_entry() { return uniform(0, live_.size() - 1); }
  std::size_t pick_entry(bool batch) {
    std::vector<std::size_t> of_kind;
    for (std::size_t i = 0; i < live_.size(); ++i) {
      if (live_[i].batch.has_value() == batch) of_kind.push_back(i);
    }
    return of_kind[uniform(0, of_kind.size() - 1)];
  }

  void step() {
    const Op op = pick();
    current_ = static_cast<unsigned>(op);
    s_.current[index_] = current_;
    ++s_.counts[current_];
    switch (op) {
      case Op::pinned_upload: pinned_upload(false); break;
      case Op::pinned_range_upload: pinned_upload(true); break;
      case Op::pageable_upload: pageable_upload(); break;
      case Op::batch_upload: batch_upload(); break;
      case Op::upload_into_fresh: upload_into_fresh(); break;
      case Op::upload_into_overwrite: upload_into_overwrite(); break;
      case Op::upload_into_many: upload_into_many(); break;
      case Op::copy: copy(); break;
      case Op::compute: compute(); break;
      case Op::download_host: verify(live_[pick_entry()], Form::host); break;
      case Op::download_span: verify(live_[pick_entry()], Form::span); break;
      case Op::download_views: verify(live_[pick_entry()], Form::views); break;
      case Op::download_batch: verify(live_[pick_entry(true)], Form::batch); break;
      case Op::release:
      case Op::release_after:
      case Op::drop: release(pick_entry(), op); break;
      case Op::transfer_sync: transfer_sync(); break;
      case Op::queue_sync: queue_sync(); break;
      case Op::count: break;
    }
  }

  void add(Entry e) {
    if (e.regions.empty()) return;  // nothing to check: the buffer is dropped (released)
    live_.push_back(std::move(e));
  }

  static std::string mode_name(Strategy s) { return std::string(ferry_bench::to_string(s)); }

  /// Pinned source, handle dropped right after the call: the transfer keeps the memory alive
  /// until the copy has completed (pool.hpp, HostBuffer).
  void pinned_upload(bool range) {
    const std::uint64_t n = random_size();
    const std::uint64_t before = range ? uniform(0, 4 * KiB) : 0, after = range ? uniform(0, 4 * KiB) : 0;
    const std::uint64_t seed = next_seed();
    Queue& owner = any_queue();
    const Plan p = upload_plan(true);
    Upload up;
    {
      HostBuffer h = s_.dev.host_pool().allocate(before + n + after);
      const std::span<std::byte> all = h.span();
      std::fill(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(before), kGuard);
      fill_pattern(all.subspan(before, n), seed);
      std::fill(all.begin() + static_cast<std::ptrdiff_t>(before + n), all.end(), kGuard);
      up = pinned_upload_with(p, h, range, before, n, owner);
    }
    finish_upload(std::move(up), p, owner, n, seed,
                  std::string(range ? "pinned range upload " : "pinned upload ") + std::to_string(n) + " B (" +
                      mode_name(p.strategy) + ") for " + owner.name());
  }

  /// Pageable source, overwritten as soon as the call returns (the contract allows it).
  void pageable_upload() {
    const std::uint64_t n = random_size();
    const std::uint64_t seed = next_seed();
    Queue& owner = any_queue();
    const Plan p = upload_plan(false);
    std::vector<std::byte> source(n);
    fill_pattern(source, seed);
    Upload up = xfer().upload(std::span<const std::byte>(source), owner, p.options);
    if (p.strategy == Strategy::blocking) up.ready.wait(std::chrono::hours(1));
    std::fill(source.begin(), source.end(), kScribble);
    finish_upload(std::move(up), p, owner, n, seed,
                  "pageable upload " + std::to_string(n) + " B (" + mode_name(p.strategy) + ") for " + owner.name());
  }

  void finish_upload(Upload up, const Plan& p, Queue& owner, std::uint64_t n, std::uint64_t seed,
                     std::string history) {
    if (up.buffer.size() != n) fail(history + ": the buffer has " + std::to_string(up.buffer.size()) + " bytes");
    const Queue want_owner = p.strategy == Strategy::executor_owned ? s_.executor : owner;
    if (!(up.buffer.owner() == want_owner)) fail(history + ": the buffer's owner is " + up.buffer.owner().name());
    last_executor_point_ = up.ready;
    maybe_owner_wait(p.options.owner_waits, owner, up.ready);
    Entry e;
    e.buffer = std::move(up.buffer);
    e.regions = {{0, n, seed, 0, 0}};
    e.ready = up.ready;
    e.history = std::move(history);
    add(std::move(e));
  }

  /// A batch of pageable and pinned sources (pinned handles dropped, pageable ones
  /// overwritten, right after the call).
  void batch_upload() {
    const std::size_t k = uniform(1, 6);
    Queue& owner = any_queue();
    const Plan p = upload_plan(false);
    std::vector<std::vector<std::byte>> pageable;
    std::vector<HostBuffer> pinned;
    std::vector<HostView> views;
    std::vector<std::uint64_t> seeds;
    pageable.reserve(k);
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint64_t n = chance(80) ? uniform(1, 32 * KiB) : uniform(32 * KiB, 3 * MiB / 2);
      seeds.push_back(next_seed());
      std::span<std::byte> bytes;
      if (chance(30)) {
        pinned.push_back(s_.dev.host_pool().allocate(n));
        bytes = pinned.back().span();
      } else {
        pageable.emplace_back(n);
        bytes = pageable.back();
      }
      fill_pattern(bytes, seeds.back());
      views.push_back({bytes.data(), n});
    }
    UploadBatch b = xfer().upload(std::span<const HostView>(views), owner, p.options);
    if (p.strategy == Strategy::blocking) b.ready.wait(std::chrono::hours(1));
    pinned.clear();
    for (auto& v : pageable) std::fill(v.begin(), v.end(), kScribble);
    std::string history = "batch upload of " + std::to_string(k) + " (" + mode_name(p.strategy) + ") for " + owner.name();
    if (b.offsets.size() != k || b.views.size() != k) {
      fail(history + ": " + std::to_string(b.offsets.size()) + " offsets, " + std::to_string(b.views.size()) + " views");
      return;
    }
    Entry e;
    for (std::size_t i = 0; i < k; ++i) {
      if (b.offsets[i] % 256 != 0 || b.views[i].size != views[i].size ||
          b.offsets[i] + views[i].size > b.buffer.size()) {
        fail(history + ": input " + std::to_string(i) + " at offset " + std::to_string(b.offsets[i]) + ", view of " +
             std::to_string(b.views[i].size) + " B, buffer of " + std::to_string(b.buffer.size()) + " B");
        return;
      }
      e.regions.push_back({b.offsets[i], views[i].size, seeds[i], 0, 0});
    }
    maybe_owner_wait(p.options.owner_waits, owner, b.ready);
    e.ready = b.ready;
    e.history = std::move(history);
    e.batch = std::move(b);
    add(std::move(e));
  }

  /// upload_into a destination allocated here; the source's handle is dropped at once.
  void upload_into_fresh() {
    const std::uint64_t n = random_size();
    const std::uint64_t extra = chance(50) ? 0 : uniform(1, 4 * KiB);
    Queue& owner = any_queue();
    Entry e;
    e.buffer = s_.dev.pool().allocate(n + extra, owner);
    const std::uint64_t seed = next_seed();
    UploadIntoOptions o;
    o.owner_waits = chance(80);
    {
      HostBuffer h = s_.dev.host_pool().allocate(n);
      fill_pattern(h.span(), seed);
      e.ready = xfer().upload_into(h, e.buffer, o);
    }
    last_executor_point_ = e.ready;
    maybe_owner_wait(o.owner_waits, owner, e.ready);
    e.regions = {{0, n, seed, 0, 0}};
    e.history = "upload_into " + std::to_string(n) + " of " + std::to_string(n + extra) + " B for " + owner.name();
    add(std::move(e));
  }

  /// upload_into a buffer that holds data already and may still be read by work in flight on
  /// its owner or another queue: the copy waits for that work; a shorter source keeps the tail.
  void upload_into_overwrite() {
    Entry& e = live_[pick_entry(false)];
    const std::uint64_t size = e.buf().size();
    const std::uint64_t n = chance(50) ? size : uniform(1, size);
    const std::uint64_t seed = next_seed();
    UploadIntoOptions o;
    o.owner_waits = chance(80);
    TimelinePoint done;
    {
      HostBuffer h = s_.dev.host_pool().allocate(n);
      fill_pattern(h.span(), seed);
      done = xfer().upload_into(h, e.buf(), o);
    }
    last_executor_point_ = done;
    Queue owner = e.buf().owner();
    maybe_owner_wait(o.owner_waits, owner, done);
    overwritten(e, n, seed, done, "upload_into");
  }

  /// Record that `e`'s first `n` bytes were overwritten with pattern `seed` by a copy that
  /// completes at `done`; the bytes past them keep what they held.
  static void overwritten(Entry& e, std::uint64_t n, std::uint64_t seed, const TimelinePoint& done, const char* what) {
    std::vector<Region> regions{{0, n, seed, 0, 0}};
    for (const Region& r : clip(e.regions, n, e.buf().size())) regions.push_back(r);
    e.regions = std::move(regions);
    e.ready = done;
    e.writer = Queue{};
    e.verified = false;
    e.history = std::string(what) + " " + std::to_string(n) + " B over (" + e.history.substr(0, 200) + ")";
  }

  /// One several-destination upload_into over 1 to 4 live buffers, each from its start: from
  /// as many HostBuffers (each of a random length up to its buffer's), or whole from ranges of
  /// one HostBuffer. The buffers lend themselves to the call's list and take themselves back.
  void upload_into_many() {
    std::vector<std::size_t> picks;
    const std::size_t want = uniform(1, 4);
    for (std::size_t tries = 0; tries < 8 && picks.size() < want; ++tries) {
      const std::size_t i = pick_entry(false);
      if (std::find(picks.begin(), picks.end(), i) == picks.end()) picks.push_back(i);
    }
    const bool ranges = chance(30);
    std::vector<std::uint64_t> lengths, seeds, offsets;
    std::uint64_t total = 0;
    for (std::size_t i : picks) {
      const std::uint64_t size = live_[i].buf().size();
      lengths.push_back(ranges || chance(50) ? size : uniform(1, size));
      seeds.push_back(next_seed());
      offsets.push_back(total);
      total += lengths.back();
    }
    UploadIntoOptions o;
    o.owner_waits = chance(80);
    TimelinePoint done;
    {
      std::vector<DeviceBuffer> into;
      for (std::size_t i : picks) into.push_back(std::move(live_[i].buf()));
      struct GiveBack {  // also when the call throws
        std::vector<Entry>& live;
        const std::vector<std::size_t>& picks;
        std::vector<DeviceBuffer>& into;
        ~GiveBack() {
          for (std::size_t k = 0; k < picks.size(); ++k) live[picks[k]].buf() = std::move(into[k]);
        }
      } give_back{live_, picks, into};
      std::vector<HostBuffer> hosts;
      std::vector<const HostBuffer*> from;
      if (ranges) {
        hosts.push_back(s_.dev.host_pool().allocate(total));
        for (std::size_t k = 0; k < picks.size(); ++k) {
          fill_pattern(hosts[0].span().subspan(offsets[k], lengths[k]), seeds[k]);
        }
        done = xfer().upload_into(hosts[0], std::span<const std::uint64_t>(offsets), std::span<const DeviceBuffer>(into), o);
      } else {
        for (std::size_t k = 0; k < picks.size(); ++k) {
          hosts.push_back(s_.dev.host_pool().allocate(lengths[k]));
          fill_pattern(hosts.back().span(), seeds[k]);
        }
        for (const HostBuffer& h : hosts) from.push_back(&h);
        done = xfer().upload_into(std::span<const HostBuffer* const>(from), std::span<const DeviceBuffer>(into), o);
      }
    }
    last_executor_point_ = done;
    for (std::size_t k = 0; k < picks.size(); ++k) {
      Entry& e = live_[picks[k]];
      Queue owner = e.buf().owner();
      maybe_owner_wait(o.owner_waits, owner, done);
      overwritten(e, lengths[k], seeds[k], done, "upload_into (several)");
    }
  }

  /// Release an input right after a call that reads it, once its bytes were checked: the
  /// release is ordered after the read.
  void maybe_release_source(std::size_t i) {
    if (live_[i].verified && chance(25)) release_now(i, chance(50) ? Op::release : Op::drop);
  }

  void copy() {
    const std::size_t i = pick_entry();
    Entry& src = live_[i];
    Queue& owner = any_queue();
    const std::uint64_t size = src.buf().size();
    const std::uint64_t bytes = chance(40) ? 0 : uniform(1, size);
    const std::uint64_t n = bytes == 0 ? size : bytes;
    const std::uint64_t extra = chance(50) ? 0 : uniform(1, 4 * KiB);
    Entry e;
    e.buffer = s_.dev.pool().allocate(n + extra, owner);
    e.ready = xfer().copy(src.buf(), e.buffer, bytes);
    last_executor_point_ = e.ready;
    e.regions = clip(src.regions, 0, n);
    e.history = "copy of " + std::to_string(n) + " B for " + owner.name() + " from (" + src.history.substr(0, 200) + ")";
    maybe_release_source(i);
    add(std::move(e));
  }

  void compute() {
    const std::size_t i = pick_entry();
    Entry& in = live_[i];
    Queue q = in.reader && !s_.shared_reads ? in.reader : any_queue();
    if (!in.reader) in.reader = q;
    const std::uint32_t units = static_cast<std::uint32_t>(uniform(1, 3));
    Entry e;
    e.buffer = s_.dev.pool().allocate(in.buf().size(), q);
    // Work of one compute queue is ordered for another only by an explicit wait.
    if (in.writer && !(in.writer == q)) q.wait(in.ready);
    try {
      run_synthetic_compute(q, in.buf(), e.buffer, units);
    } catch (const Error& err) {
      if (err.code() != ErrorCode::unsupported) throw;
      s_.compute_supported = false;  // no kernel on this backend: the other calls go on
      return;
    }
    if (!(in.buf().owner() == q)) ++s_.cross_queue_computes;
    e.ready = q.mark();
    e.writer = q;
    e.regions = in.regions;
    for (Region& r : e.regions) r.add = (r.add + 1) & 0xFFu;  // + 1 however many passes
    e.history = "compute x" + std::to_string(units) + " on " + q.name() + " of (" + in.history.substr(0, 200) + ")";
    maybe_release_source(i);
    add(std::move(e));
  }

  // ---- verification -------------------------------------------------------------------------

  /// Compare `data` (the buffer's bytes from `r.at` on) with region `r`; report a difference.
  bool check(const Entry& e, Form form, const Region& r, const std::byte* data) {
    const std::span<const std::byte> got(data, r.size);
    std::int64_t first = -1;
    if (r.first == 0) {
      first = first_mismatch(got, r.seed, static_cast<int>(r.add));
    } else {
      for (std::uint64_t j = 0; j < r.size && first < 0; ++j) {
        if (got[j] != expected(r, j)) first = static_cast<std::int64_t>(j);
      }
    }
    if (first < 0) return true;
    std::uint64_t wrong = 0;
    for (std::uint64_t j = 0; j < r.size; ++j) wrong += got[j] != expected(r, j) ? 1 : 0;
    const auto j = static_cast<std::uint64_t>(first);
    fail(std::string(kFormNames[static_cast<unsigned>(form)]) + " of a buffer from [" + e.history + "]: byte " +
         std::to_string(r.at + j) + " is " +
         hex(static_cast<unsigned>(got[j])) + ", want " + hex(static_cast<unsigned>(expected(r, j))) + "; " +
         std::to_string(wrong) + " of the " + std::to_string(r.size) + " bytes at [" + std::to_string(r.at) + ", " +
         std::to_string(r.at + r.size) + ") are wrong");
    return false;
  }

  bool guard_intact(const char* what, std::span<const std::byte> bytes) {
    for (std::size_t j = 0; j < bytes.size(); ++j) {
      if (bytes[j] != kGuard) {
        fail(std::string(what) + ": a guard byte next to the destination was overwritten (byte " + std::to_string(j) +
             " of " + std::to_string(bytes.size()) + ")");
        return false;
      }
    }
    return true;
  }

  /// Download every byte the contract defines through `form` and compare. With `then`, the
  /// buffer is released (that way) right after the download call, before the bytes arrive.
  void verify(Entry& e, Form form, Op then = Op::count) {
    if (form == Form::batch && !e.batch) form = Form::views;
    std::uint64_t bytes = 0;
    for (const Region& r : e.regions) bytes += r.size;
    bool ok = true;
    const std::uint64_t size = e.buf().size();
    switch (form) {
      case Form::host: {
        const std::uint64_t offset = uniform(0, 4 * KiB), tail = uniform(0, 64);
        HostBuffer h = s_.dev.host_pool().allocate(offset + size + tail);
        std::fill(h.span().begin(), h.span().end(), kGuard);
        const TimelinePoint done = xfer().download(e.buf(), h, offset);
        last_executor_point_ = done;
        release_buffer(e, then, done);
        done.wait();
        for (const Region& r : e.regions) ok = ok && check(e, form, r, h.data() + offset + r.at);
        ok = ok && guard_intact("download (HostBuffer)", h.span().first(offset)) &&
             guard_intact("download (HostBuffer)", h.span().subspan(offset + size));
        break;
      }
      case Form::span: {
        const std::uint64_t tail = uniform(0, 64);
        std::vector<std::byte> host(size + tail, kGuard);
        xfer().download(e.buf(), std::span<std::byte>(host));
        release_buffer(e, then, {});
        for (const Region& r : e.regions) ok = ok && check(e, form, r, host.data() + r.at);
        ok = ok && guard_intact("download (span)", std::span<const std::byte>(host).subspan(size));
        break;
      }
      case Form::views: {
        // Every region in one to three pieces, plus a few random ranges that overlap them,
        // in random order, into one arena with guard gaps (sometimes none) in between.
        struct Piece {
          Region region;  // what the view must receive
          std::uint64_t at = 0;  // where it lands in the arena
        };
        std::vector<Piece> pieces;
        for (const Region& r : e.regions) {
          const std::uint64_t parts = std::min<std::uint64_t>(uniform(1, 3), r.size);
          std::uint64_t start = 0;
          for (std::uint64_t p = 0; p < parts; ++p) {
            const std::uint64_t end = p + 1 == parts ? r.size : uniform(start + 1, r.size - (parts - p - 1));
            pieces.push_back({{r.at + start, end - start, r.seed, r.first + start, r.add}, 0});
            start = end;
          }
        }
        for (std::uint64_t x = uniform(0, 2); x > 0 && !e.regions.empty(); --x) {
          const Region& r = e.regions[uniform(0, e.regions.size() - 1)];
          const std::uint64_t a = uniform(0, r.size - 1), b = uniform(a + 1, r.size);
          pieces.push_back({{r.at + a, b - a, r.seed, r.first + a, r.add}, 0});
        }
        std::shuffle(pieces.begin(), pieces.end(), rng_);
        std::uint64_t arena_bytes = 0;
        for (Piece& p : pieces) {
          arena_bytes += uniform(0, 1) == 0 ? 0 : uniform(1, 64);
          p.at = arena_bytes;
          arena_bytes += p.region.size;
        }
        arena_bytes += 64;
        std::vector<std::byte> arena(arena_bytes, kGuard);
        std::vector<DownloadView> views;
        for (const Piece& p : pieces) views.push_back({p.region.at, arena.data() + p.at, p.region.size});
        xfer().download(e.buf(), std::span<const DownloadView>(views));
        release_buffer(e, then, {});
        std::vector<bool> written(arena_bytes, false);
        for (const Piece& p : pieces) {
          ok = ok && check(e, form, p.region, arena.data() + p.at);
          std::fill(written.begin() + static_cast<std::ptrdiff_t>(p.at),
                    written.begin() + static_cast<std::ptrdiff_t>(p.at + p.region.size), true);
        }
        for (std::uint64_t j = 0; j < arena_bytes && ok; ++j) {
          if (!written[j] && arena[j] != kGuard) {
            fail("download (views): the guard byte " + std::to_string(j) + " between destinations was overwritten");
            ok = false;
          }
        }
        break;
      }
      case Form::batch: {
        const UploadBatch& b = *e.batch;
        std::vector<std::vector<std::byte>> host;
        std::vector<HostSpan> spans;
        host.reserve(b.views.size());
        for (const DeviceView& v : b.views) {
          host.emplace_back(v.size);
          spans.push_back({host.back().data(), v.size});
        }
        xfer().download(b, std::span<const HostSpan>(spans));
        release_buffer(e, then, {});
        // Regions of a batch entry are its inputs, in order (batches are never overwritten).
        for (std::size_t i = 0; i < e.regions.size() && ok; ++i) ok = check(e, form, e.regions[i], host[i].data());
        break;
      }
    }
    if (ok) {
      e.verified = true;
      s_.verified_bytes += bytes;
    }
  }

  TimelinePoint some_point() {
    const std::uint64_t k = uniform(0, 2);
    if (k == 0 && !last_executor_point_.empty()) return last_executor_point_;
    if (k == 1) return s_.executor.mark();
    return any_queue().mark();
  }

  /// Release `e`'s buffer the way `how` says (Op::count: keep it).
  void release_buffer(Entry& e, Op how, const TimelinePoint& read) {
    if (how == Op::release) {
      e.buf().release();
    } else if (how == Op::release_after) {
      e.buf().release_after(!read.empty() && chance(50) ? read : some_point());
    } else if (how == Op::drop) {
      DeviceBuffer gone = std::move(e.buf());  // the destructor releases
    }
  }

  void erase(std::size_t i) {
    if (i + 1 != live_.size()) live_[i] = std::move(live_.back());
    live_.pop_back();
  }

  void release_now(std::size_t i, Op how) {
    release_buffer(live_[i], how, {});
    erase(i);
  }

  /// Release an entry; one not checked yet is downloaded first -- sometimes in the same
  /// step, the release issued right after the download call.
  void release(std::size_t i, Op how) {
    Entry& e = live_[i];
    if (!e.verified) {
      const Form form = static_cast<Form>(uniform(0, 3));
      if (chance(50)) {
        verify(e, form, how);
        erase(i);
        return;
      }
      verify(e, form);
      if (s_.stop) return;
    }
    release_now(i, how);
  }

  void transfer_sync() {
    const TimelinePoint before = last_executor_point_;
    xfer().synchronize();
    if (!before.reached()) fail("a copy enqueued before Transfer::synchronize is not complete after it");
  }

  void queue_sync() {
    const std::uint64_t k = uniform(0, s_.compute.size());
    Queue q = k < s_.compute.size() ? s_.compute[k] : s_.executor;
    const TimelinePoint before = q.mark();
    q.synchronize();
    if (!before.reached()) fail("work enqueued before Queue::synchronize on " + q.name() + " is not complete after it");
  }

  /// The end: every buffer not checked yet is checked, then released.
  void drain() {
    current_ = kOps;
    while (!live_.empty() && !s_.stop) {
      const std::uint64_t k = uniform(0, 2);
      release(live_.size() - 1, k == 0 ? Op::release : k == 1 ? Op::release_after : Op::drop);
    }
  }

  Shared& s_;
  unsigned index_;
  std::uint64_t ops_;
  std::mt19937_64 rng_;
  std::uint64_t next_pattern_;
  std::uint64_t op_ = 0;
  unsigned current_ = kOps;
  std::vector<Entry> live_;
  TimelinePoint last_executor_point_;  // the latest point a Transfer call of this worker returned
};

/// Reads the pool's budget and validates its invariants until told to stop.
void monitor(Shared& s, const std::atomic<bool>& done, std::uint64_t& rounds) {
  PoolBudget last;
  auto fail = [&](const std::string& what) { s.fail("seed " + hex(s.seed) + " monitor round " + std::to_string(rounds) + ": " + what); };
  while (!done && !s.stop) {
    try {
      const PoolBudget b = s.dev.pool().get_budget();
      if (b.active_bytes > b.reserved_bytes) fail("active bytes exceed reserved bytes");
      if (b.requested_bytes > b.active_bytes) fail("requested bytes exceed active (rounded) bytes");
      if (b.peak_reserved_bytes < b.reserved_bytes || b.peak_active_bytes < b.active_bytes ||
          b.peak_stranded_bytes < b.stranded_bytes)
        fail("a peak is below its current value");
      if (b.peak_reserved_bytes < last.peak_reserved_bytes || b.peak_active_bytes < last.peak_active_bytes ||
          b.allocations < last.allocations || b.segment_allocations < last.segment_allocations ||
          b.pending_reuses < last.pending_reuses || b.immediate_reuses < last.immediate_reuses)
        fail("a counter or peak decreased");
      std::uint64_t per_queue = 0;
      for (const QueueBudget& q : b.queues) {
        per_queue += q.active_bytes;
        if (q.peak_active_bytes < q.active_bytes) fail("queue " + q.queue_name + ": peak below active");
      }
      if (per_queue > b.active_bytes) fail("the queues' active bytes add up to more than the pool's");
      s.dev.pool().validate();
      last = b;
    } catch (const std::exception& e) {
      fail(e.what());
    }
    ++rounds;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Aborts the process when the case does not finish in time: a hang must fail the suite, not
/// stall it until an outer timeout kills it without a word.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds limit, std::function<std::string()> describe)
      : thread_([this, limit, describe = std::move(describe)] {
          std::unique_lock lock(mutex_);
          if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
          const std::string what = describe();
          std::fflush(stdout);
          std::fprintf(stderr, "FAILED: stress: not finished within %lld s: %s\n", static_cast<long long>(limit.count()),
                       what.c_str());
          std::fflush(stderr);
          std::abort();
        }) {}
  ~Watchdog() { finish(); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void finish() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

/// The suite's default: seconds on the host backend and on lavapipe under validation (20000
/// operations take ~6 s and ~8 s on two cores); a quarter of that under FERRY_TEST_SMALL.
std::uint64_t default_ops() { return conformance::small() ? 5000 : 20000; }

}  // namespace

CONFORMANCE_CASE("stress: threads share a device and a transfer; every call mixed, every byte checked") {
  Device dev = conformance::open_device();
  const std::uint64_t defaults = default_ops();
  const std::uint64_t ops = env_number("FERRY_STRESS_OPS").value_or(defaults);
  REQUIRE_MESSAGE(ops > 0, "FERRY_STRESS_OPS must be > 0");
  const std::uint64_t seed = env_number("FERRY_STRESS_SEED").value_or(kDefaultSeed);
  const std::uint64_t scale = std::max<std::uint64_t>(1, (ops + defaults - 1) / defaults);
  const auto deadline = std::chrono::seconds(env_number("FERRY_STRESS_DEADLINE_S").value_or(120 * scale));

  Shared s;
  s.dev = dev;
  s.seed = seed;
  s.shared_reads = env_number("FERRY_STRESS_SHARED_READS").value_or(0) != 0;
  s.compute.push_back(dev.queue(QueueRole::compute));
  Queue second = conformance::try_create_queue(dev, QueueRole::compute, "stress-compute-2");
  if (second) {
    s.compute.push_back(second);
  } else {
    MESSAGE("one compute queue only: every buffer is owned by the default compute queue and compute runs there");
  }
  std::printf("stress: %llu ops, %u worker threads, seed %s (FERRY_STRESS_OPS, FERRY_STRESS_SEED), %zu compute queue(s), "
              "deadline %lld s\n",
              static_cast<unsigned long long>(ops), kWorkers, hex(seed).c_str(), s.compute.size(),
              static_cast<long long>(deadline.count()));
  std::fflush(stdout);
  MESSAGE("stress: " << ops << " ops, " << kWorkers << " worker threads, seed " << hex(seed) << ", "
                     << s.compute.size() << " compute queue(s)"
                     << std::string(s.shared_reads ? ", shared reads" : ""));

  // A small staging ring (3 x 1 MiB): the larger pageable and batch transfers wrap around it,
  // so its slots are reused across calls of every thread.
  TransferOptions options;
  options.staging_chunk_bytes = 1 * MiB;
  options.staging_chunks = 3;
  auto transfer = std::make_unique<Transfer>(dev, options);
  s.transfer = transfer.get();
  s.executor = transfer->executor();

  const auto start = std::chrono::steady_clock::now();
  Watchdog watchdog(deadline, [&] {
    std::string what = "seed " + hex(seed) + ";";
    for (unsigned w = 0; w < kWorkers; ++w) {
      const unsigned op = s.current[w];
      what += " worker " + std::to_string(w) + " at op " + std::to_string(s.progress[w].load()) + " (" +
              (op < kOps ? kOpNames[op] : "drain") + ");";
    }
    return what;
  });

  std::atomic<bool> workers_done{false};
  std::uint64_t rounds = 0;
  std::thread monitor_thread([&] { monitor(s, workers_done, rounds); });
  {
    std::vector<std::unique_ptr<Worker>> workers;
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < kWorkers; ++w) {
      workers.push_back(std::make_unique<Worker>(s, w, ops / kWorkers + (w < ops % kWorkers ? 1 : 0)));
    }
    for (auto& w : workers) threads.emplace_back([&w] { w->run(); });
    for (auto& t : threads) t.join();
  }
  workers_done = true;
  monitor_thread.join();

  // Every buffer is released: nothing is active; the pool is consistent once all is idle.
  try {
    transfer->synchronize();
    for (Queue& q : s.compute) q.synchronize();
    const PoolBudget b = dev.pool().get_budget();
    CHECK_MESSAGE(b.active_bytes == 0, b.active_bytes << " bytes still active after every buffer was released");
    dev.pool().validate();
  } catch (const std::exception& e) {
    FAIL_CHECK("seed " << hex(seed) << ": after the workers: " << std::string(e.what()));
  }
  transfer.reset();  // waits for its copies; then no pinned memory is left
  CHECK_MESSAGE(dev.host_pool().pinned_bytes() == 0,
                dev.host_pool().pinned_bytes() << " pinned bytes left after the transfer and every host buffer are gone");
  watchdog.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  {
    std::lock_guard lock(s.mutex);
    for (const std::string& f : s.failures) FAIL_CHECK(f);
    CHECK_MESSAGE(s.failure_count == 0, s.failure_count << " failure(s); rerun with FERRY_STRESS_SEED=" << hex(seed)
                                                        << " FERRY_STRESS_OPS=" << ops);
  }
  std::ostringstream summary;
  summary << "stress: " << seconds << " s;";
  for (std::size_t i = 0; i < kOps; ++i) summary << (i ? ", " : " ") << kOpNames[i] << " " << s.counts[i].load();
  summary << "; cross-queue computes " << s.cross_queue_computes.load() << "; " << s.verified_bytes.load()
          << " bytes checked; monitor rounds " << rounds;
  if (!s.compute_supported) summary << "; synthetic compute unsupported: skipped";
  MESSAGE(summary.str());
  CHECK(rounds > 0);
  if (s.failure_count == 0 && ops >= 2000) {
    // The mix reached every call (each has a weight of at least 2 of 100).
    for (std::size_t i = 0; i < kOps; ++i) {
      if (static_cast<Op>(i) == Op::compute && !s.compute_supported) continue;
      CHECK_MESSAGE(s.counts[i].load() > 0, (std::string(kOpNames[i]) + " never ran"));
    }
  }
}
