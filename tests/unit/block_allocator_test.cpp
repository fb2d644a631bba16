// SPDX-License-Identifier: MIT
// Unit tests of ferry::detail::BlockAllocator, the pool's backend-free allocation algorithm (the
// pool contract, include/ferry/pool.hpp): size policy, splitting and coalescing, the
// stream-ordering rules, the "stranding" scenario, footprint, and a long randomized run checked
// against validate() and a brute-force oracle. Seed of the randomized run: FERRY_UNIT_SEED; its
// length (operations per configuration, default 100000): FERRY_ALLOCATOR_OPS, raised by
// tools/stress-long.sh. Both are printed on every run.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <vector>

#include "block_allocator.hpp"

using ferry::detail::BlockAllocator;
using ferry::detail::FreePoint;
using Placement = BlockAllocator::Placement;
using Request = BlockAllocator::Request;

namespace {

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint32_t A = 1, B = 2, C = 3;

const BlockAllocator::Reached never = [](const FreePoint&) { return false; };
const BlockAllocator::Reached always = [](const FreePoint&) { return true; };
/// Reached once `timeline` has completed `value`; other timelines never.
BlockAllocator::Reached reached_upto(std::uint32_t timeline, std::uint64_t value) {
  return [=](const FreePoint& fp) { return fp.timeline == timeline && fp.value <= value; };
}

Request req(std::uint64_t bytes, std::uint32_t first_user, bool allow_pending = false,
            std::uint32_t owner = 0) {
  return Request{bytes, owner != 0 ? owner : first_user, first_user, allow_pending};
}

void expect_valid(const BlockAllocator& a) {
  const std::string s = a.validate();
  if (!s.empty()) FAIL(s);
}

/// Allocate and require success.
Placement must(BlockAllocator& a, const Request& r,
               const BlockAllocator::Reached& reached = never) {
  auto p = a.allocate(r, reached);
  REQUIRE(p.has_value());
  expect_valid(a);
  return *p;
}

const BlockAllocator::Block& block_at(const BlockAllocator& a, std::uint64_t seg,
                                      std::uint64_t off) {
  return a.segments().at(seg).blocks.at(off);
}

/// Allocate the rest of a lone small segment (requests <= 1 MiB stay in the small class).
std::vector<Placement> fill(BlockAllocator& a, std::uint32_t t) {
  std::vector<Placement> out;
  while (a.free_bytes() > 0) out.push_back(must(a, req(std::min(a.free_bytes(), MiB), t)));
  return out;
}

std::size_t block_count(const BlockAllocator& a, std::uint64_t seg) {
  return a.segments().at(seg).blocks.size();
}

}  // namespace

TEST_CASE("size policy") {
  BlockAllocator a;
  SUBCASE("round_size aligns to 512") {
    CHECK(a.round_size(0) == 512);
    CHECK(a.round_size(1) == 512);
    CHECK(a.round_size(512) == 512);
    CHECK(a.round_size(513) == 1024);
    CHECK(a.round_size(MiB + 1) == MiB + 512);
    BlockAllocator b(BlockAllocator::Config{.alignment = 256});
    CHECK(b.round_size(257) == 512);
  }
  SUBCASE("segment_size_for") {
    CHECK(a.segment_size_for(1) == 2 * MiB);
    CHECK(a.segment_size_for(MiB) == 2 * MiB);
    CHECK(a.segment_size_for(MiB + 1) == 20 * MiB);
    CHECK(a.segment_size_for(10 * MiB - 512) == 20 * MiB);
    CHECK(a.segment_size_for(10 * MiB) == 10 * MiB);  // not < 10 MiB: own segment
    CHECK(a.segment_size_for(11 * MiB) == 12 * MiB);
    CHECK(a.segment_size_for(32 * MiB) == 32 * MiB);
    CHECK(a.segment_size_for(32 * MiB + 1) == 34 * MiB);
  }
  SUBCASE("is_small") {
    CHECK(a.is_small(1));
    CHECK(a.is_small(MiB));
    CHECK_FALSE(a.is_small(MiB + 1));
    CHECK_FALSE(a.is_small(64 * MiB));
  }
}

TEST_CASE("basic: split, coalesce, idle segments") {
  BlockAllocator a;
  a.add_segment(7, 2 * MiB, A, true);
  expect_valid(a);
  CHECK(a.free_bytes() == 2 * MiB);

  const Placement p1 = must(a, req(1000, A));
  const Placement p2 = must(a, req(3000, A));
  CHECK(p1.segment == 7);
  CHECK(p1.offset == 0);
  CHECK(p1.size == 1024);
  CHECK_FALSE(p1.wait.pending());
  CHECK_FALSE(p1.pending_reuse);
  CHECK(p2.offset == 1024);  // best fit takes the front of the remainder
  CHECK(p2.size == 3072);
  CHECK(p2.offset % 512 == 0);
  CHECK(block_count(a, 7) == 3);
  CHECK(a.free_bytes() == 2 * MiB - 4096);
  CHECK(block_at(a, 7, 4096).size == 2 * MiB - 4096);
  CHECK(a.idle_segments().empty());

  SUBCASE("release in order coalesces back to one block") {
    CHECK(a.release(7, p1.offset, {}) == 1024);
    expect_valid(a);
    CHECK(block_count(a, 7) == 3);  // hole, p2, tail
    CHECK(a.release(7, p2.offset, {}) == 3072);
    expect_valid(a);
    CHECK(block_count(a, 7) == 1);
    CHECK(a.idle_segments() == std::vector<std::uint64_t>{7});
    CHECK(a.remove_segment(7) == 2 * MiB);
    expect_valid(a);
    CHECK(a.segments().empty());
    CHECK(a.free_bytes() == 0);
  }
  SUBCASE("middle block freed last merges both neighbours") {
    const std::vector<Placement> rest = fill(a, A);
    CHECK(rest.size() == 2);
    a.release(7, p1.offset, {});
    for (const Placement& p : rest) a.release(7, p.offset, {});
    expect_valid(a);
    CHECK(block_count(a, 7) == 3);
    a.release(7, p2.offset, {});
    expect_valid(a);
    CHECK(block_count(a, 7) == 1);
  }
  SUBCASE("size classes do not share segments") {
    CHECK_FALSE(a.allocate(req(2 * MiB, A), never).has_value());  // large vs small segment
    a.add_segment(8, 40 * MiB, A, false);
    CHECK(a.allocate(req(4 * KiB, B), never)->segment == 7);  // small requests: small segment
    // A large request does not carve a segment more than medium_segment bigger than it.
    CHECK_FALSE(a.allocate(req(12 * MiB, A), never).has_value());
    const Placement big = must(a, req(25 * MiB, A));
    CHECK(big.segment == 8);
  }
}

// One 2 MiB small segment, filled by one block, released with FreePoint{A, 5}.
TEST_CASE("stream ordering of a pending block") {
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  const Placement whole = must(a, req(MiB, A));
  const Placement other = must(a, req(MiB, A));
  a.release(1, whole.offset, {A, 5});
  expect_valid(a);
  CHECK(a.pending_blocks() == 1);
  CHECK(a.free_by_timeline().at(A) == MiB);

  SUBCASE("same timeline: usable at once, no wait") {
    const Placement p = must(a, req(4 * KiB, A));
    CHECK_FALSE(p.pending_reuse);
    CHECK_FALSE(p.wait.pending());
    CHECK(a.pending_blocks() == 1);  // the remainder keeps the free point
    CHECK(a.free_by_timeline().at(A) == MiB - 4 * KiB);
  }
  SUBCASE("other timeline, not reached: nullopt") {
    CHECK_FALSE(a.allocate(req(4 * KiB, B), never).has_value());
    CHECK_FALSE(a.allocate(req(4 * KiB, B), reached_upto(A, 4)).has_value());
    CHECK_FALSE(a.allocate(req(4 * KiB, B), reached_upto(B, 99)).has_value());
    expect_valid(a);
    // C, a third queue's timeline, is the owner of the requests below.
    CHECK(a.unusable_free_bytes(req(4 * KiB, B), C, never) == MiB);
    CHECK(a.unusable_free_bytes(req(4 * KiB, A), C, never) == 0);
    CHECK(a.unusable_free_bytes(req(4 * KiB, B), C, reached_upto(A, 5)) == 0);
    CHECK(a.unusable_free_bytes(req(4 * MiB, B), C, never) == 0);  // other size class
    // The owner reuses its own pending blocks: not stranded, whoever writes first.
    CHECK(a.unusable_free_bytes(req(4 * KiB, B), A, never) == 0);
    // A request that may wait for a free point strands nothing.
    CHECK(a.unusable_free_bytes(req(4 * KiB, B, true), C, never) == 0);
  }
  SUBCASE("other timeline, reached: no wait") {
    const Placement p = must(a, req(4 * KiB, B), reached_upto(A, 5));
    CHECK_FALSE(p.pending_reuse);
    CHECK_FALSE(p.wait.pending());
  }
  SUBCASE("other timeline, allow_pending: waits for the free point") {
    const Placement p = must(a, req(4 * KiB, B, true));
    CHECK(p.pending_reuse);
    CHECK(p.wait.timeline == A);
    CHECK(p.wait.value == 5);
    CHECK(p.offset == whole.offset);
  }
  SUBCASE("refresh cleans reached blocks and coalesces") {
    CHECK(a.refresh(reached_upto(A, 4)) == 0);
    CHECK(a.pending_blocks() == 1);
    a.release(1, other.offset, {});  // clean, next to the pending one: not merged
    expect_valid(a);
    CHECK(block_count(a, 1) == 2);
    CHECK(a.idle_segments().empty());
    CHECK(a.refresh(reached_upto(A, 5)) == MiB);
    expect_valid(a);
    CHECK(a.pending_blocks() == 0);
    CHECK(block_count(a, 1) == 1);
    CHECK(a.free_by_timeline().at(0) == 2 * MiB);
    CHECK(a.idle_segments() == std::vector<std::uint64_t>{1});
  }
}

// Layout of one small segment: free blocks separated by allocated guards.
TEST_CASE("preference: a usable block beats a better-fitting pending one") {
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  const Placement p4k = must(a, req(4 * KiB, A));
  must(a, req(512, A));  // guard
  const Placement p8k = must(a, req(8 * KiB, A));
  must(a, req(512, A));  // guard
  const Placement p16k = must(a, req(16 * KiB, A));
  must(a, req(512, A));  // guard
  const std::vector<Placement> tail = fill(a, A);

  SUBCASE("best-fit usable block, even though a pending one fits better") {
    a.release(1, p4k.offset, {A, 1});
    a.release(1, p8k.offset, {});
    for (const Placement& t : tail) a.release(1, t.offset, {});
    const Placement p = must(a, req(4 * KiB, B, true));
    CHECK(p.offset == p8k.offset);
    CHECK_FALSE(p.pending_reuse);
    const Placement q = must(a, req(4 * KiB, B, true));  // the rest of the 8 KiB block
    CHECK(q.offset == p8k.offset + 4 * KiB);
    // The next usable block is the big clean tail: still preferred over the exact pending fit.
    const Placement r = must(a, req(4 * KiB, B, true));
    CHECK(r.offset == tail.front().offset);
    CHECK_FALSE(r.pending_reuse);
  }
  SUBCASE("only pending blocks: best-fit pending block with its wait point") {
    a.release(1, p4k.offset, {A, 1});
    a.release(1, p16k.offset, {C, 2});
    CHECK_FALSE(a.allocate(req(4 * KiB, B), never).has_value());  // no allow_pending
    const Placement p = must(a, req(4 * KiB, B, true));
    CHECK(p.offset == p4k.offset);
    CHECK((p.pending_reuse && p.wait.timeline == A && p.wait.value == 1));
    const Placement q = must(a, req(8 * KiB, B, true));
    CHECK(q.offset == p16k.offset);
    CHECK((q.pending_reuse && q.wait.timeline == C && q.wait.value == 2));
  }
  SUBCASE("a block pending on the requester's own timeline counts as usable") {
    a.release(1, p4k.offset, {A, 1});
    a.release(1, p16k.offset, {C, 2});
    const Placement p = must(a, req(4 * KiB, C, true));
    CHECK(p.offset == p16k.offset);
    CHECK_FALSE(p.pending_reuse);
  }
}

// Four adjacent 4 KiB blocks x[0..3]; the rest of the segment is allocated (two blocks).
TEST_CASE("coalescing only merges blocks with identical free points") {
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  std::vector<std::uint64_t> x;
  for (int i = 0; i < 4; ++i) x.push_back(must(a, req(4 * KiB, A)).offset);
  fill(a, A);

  SUBCASE("pending A@3 and A@7 stay apart, so A@3 is reusable once 3 is reached") {
    a.release(1, x[1], {A, 3});
    a.release(1, x[2], {A, 7});
    expect_valid(a);
    CHECK(block_count(a, 1) == 6);
    CHECK(a.pending_blocks() == 2);
    CHECK(a.refresh(reached_upto(A, 6)) == 4 * KiB);  // x[1] is clean, x[2] still needs 7
    CHECK(block_at(a, 1, x[1]).free_point.timeline == 0);
    CHECK(block_at(a, 1, x[2]).free_point.value == 7);
  }
  SUBCASE("pending A with pending A at the same value merge") {
    a.release(1, x[1], {A, 5});
    a.release(1, x[2], {A, 5});
    expect_valid(a);
    CHECK(block_count(a, 1) == 5);
    CHECK(block_at(a, 1, x[1]).size == 8 * KiB);
    CHECK(a.pending_blocks() == 1);
  }
  SUBCASE("pending A next to clean, next to pending B: no merge") {
    a.release(1, x[1], {A, 3});
    a.release(1, x[2], {});
    a.release(1, x[3], {B, 3});
    expect_valid(a);
    CHECK(block_count(a, 1) == 6);
    CHECK(a.pending_blocks() == 2);
    CHECK(a.refresh(reached_upto(A, 3)) == 4 * KiB);  // A becomes clean, merges with x[2]
    expect_valid(a);
    CHECK(block_count(a, 1) == 5);
    CHECK(block_at(a, 1, x[1]).size == 8 * KiB);
    CHECK(a.refresh(always) == 4 * KiB);
    expect_valid(a);
    CHECK(block_count(a, 1) == 4);
    CHECK(block_at(a, 1, x[1]).size == 12 * KiB);
  }
  SUBCASE("clean with clean, middle last") {
    a.release(1, x[0], {});
    a.release(1, x[2], {});
    CHECK(block_count(a, 1) == 6);
    a.release(1, x[1], {});
    expect_valid(a);
    CHECK(block_count(a, 1) == 4);
    CHECK(block_at(a, 1, x[0]).size == 12 * KiB);
  }
  SUBCASE("refresh cleans several neighbours at once") {
    a.release(1, x[0], {A, 1});
    a.release(1, x[1], {B, 1});
    a.release(1, x[2], {A, 2});
    a.release(1, x[3], {B, 2});
    CHECK(block_count(a, 1) == 6);
    CHECK(a.refresh(always) == 16 * KiB);
    expect_valid(a);
    CHECK(block_count(a, 1) == 3);
    CHECK(block_at(a, 1, x[0]).size == 16 * KiB);
    CHECK(a.pending_blocks() == 0);
  }
}

// T = executor's timeline, Q = the owner queue's timeline.
TEST_CASE("stranding in miniature") {
  constexpr std::uint32_t T = 1, Q = 2;
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, T, true);
  const Placement used = must(a, req(MiB, T));
  must(a, req(MiB, T));  // keeps the other half busy
  a.release(1, used.offset, {Q, 10});

  SUBCASE("executor without allow_pending: the pool must grow") {
    CHECK_FALSE(a.allocate(req(MiB, T), never).has_value());
    CHECK(a.unusable_free_bytes(req(MiB, T), T, never) == MiB);
  }
  SUBCASE("the owner's own timeline reuses it at once") {
    const Placement p = must(a, req(MiB, Q));
    CHECK(p.offset == used.offset);
    CHECK_FALSE(p.pending_reuse);
  }
  SUBCASE("owner-owned, executor first user, allow_pending: reuse with a wait") {
    const Placement p = must(a, req(MiB, T, true, Q));
    CHECK(p.offset == used.offset);
    CHECK(p.pending_reuse);
    CHECK(p.wait.timeline == Q);
    CHECK(p.wait.value == 10);
  }
  SUBCASE("once Q reaches the point the executor gets it without a wait") {
    const Placement p = must(a, req(MiB, T), reached_upto(Q, 10));
    CHECK_FALSE(p.pending_reuse);
  }
}

TEST_CASE("footprint: owner-owned vs executor-owned loop") {
  constexpr std::uint32_t T = 1, Q = 2;
  constexpr std::uint64_t size = MiB;
  std::uint64_t next_id = 1;
  // Q has completed everything but the last `lag` steps.
  auto run = [&](BlockAllocator& a, const Request& r, std::uint64_t lag) {
    for (std::uint64_t step = 1; step <= 1000; ++step) {
      const auto reached = [&](const FreePoint& fp) {
        return fp.timeline == Q && fp.value + lag < step;
      };
      auto p = a.allocate(r, reached);
      if (!p) {
        a.add_segment(next_id++, a.segment_size_for(size), r.owner, a.is_small(size));
        p = a.allocate(r, reached);
      }
      REQUIRE(p.has_value());
      a.release(p->segment, p->offset, {Q, step});
      expect_valid(a);
    }
  };
  SUBCASE("owner-owned: one segment, even if Q never catches up") {
    BlockAllocator a;
    run(a, req(size, T, true, Q), 1000);
    CHECK(a.segments().size() == 1);
  }
  SUBCASE("executor-owned: the last two frees are stranded, the pool grows") {
    BlockAllocator a;
    run(a, req(size, T, false, T), 2);
    CHECK(a.segments().size() > 1);
    CHECK(a.segments().size() <= 2);  // one block per step still in flight, no more
  }
}

// ---------------------------------------------------------------------------------------------
// Randomized run: validate() after every operation, plus a shadow model (live blocks never
// overlap, no byte is reused before its free point allows, accounting adds up) and a
// brute-force oracle of allocate()'s choice.
namespace {

std::uint64_t seed_from_env() {
  const char* env = std::getenv("FERRY_UNIT_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 0x5eedf0e77ull;
}

/// Operations per randomized run: FERRY_ALLOCATOR_OPS when set and > 0, else 100000 (fast
/// enough for every test run; the long stress run asks for millions).
std::size_t ops_from_env() {
  const char* env = std::getenv("FERRY_ALLOCATOR_OPS");
  const unsigned long long n = env != nullptr ? std::strtoull(env, nullptr, 0) : 0;
  return n > 0 ? static_cast<std::size_t>(n) : 100'000;
}

class RandomRun {
 public:
  RandomRun(BlockAllocator::Config config, std::uint64_t seed) : a_(config), rng_(seed) {
    timelines_ = 2 + static_cast<std::uint32_t>(rng_() % 3);
    completed_.assign(timelines_ + 1, 0);
    issued_.assign(timelines_ + 1, 0);
  }

  void run(std::size_t ops) {
    for (op_ = 0; op_ < ops; ++op_) {
      const std::uint64_t k = uniform(0, 99);
      if (k < 45 && live_.size() < 400) allocate();
      else if (k < 85 && !live_.empty()) release();
      else if (k < 93) advance();
      else if (k < 97) refresh();
      else if (k < 98) check_unusable();
      else trim();
      check_cheap();
      if (op_ % 1000 == 0) check_shadow();
    }
    check_shadow();
    MESSAGE("timelines " << timelines_ << ", allocations " << allocations_ << ", segments added "
                         << segments_added_ << ", pending reuses " << pending_reuses_);
    CHECK(pending_reuses_ > 0);  // the run exercises every path
    CHECK(segments_removed_ > 0);
  }

 private:
  struct Live { std::uint64_t segment, offset, size; };
  struct Piece { std::uint64_t end; FreePoint fp; };
  struct Candidate { std::uint64_t segment, offset, size; FreePoint fp; bool usable; };

  std::uint64_t uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  std::uint32_t timeline() { return static_cast<std::uint32_t>(uniform(1, timelines_)); }
  bool reached(const FreePoint& fp) const { return fp.value <= completed_[fp.timeline]; }
  [[noreturn]] void fail(const std::string& what) const {
    FAIL("op " << op_ << ": " << what);
    std::abort();  // not reached: FAIL throws
  }
  void ensure(bool ok, const char* what) const {
    if (!ok) fail(what);
  }

  std::uint64_t random_size() {
    const std::uint64_t k = uniform(0, 99);
    if (k < 60) return uniform(1, 64 * KiB);
    if (k < 97) return uniform(64 * KiB, 4 * MiB);
    return uniform(4 * MiB, 32 * MiB);
  }

  /// Free blocks the request may take, per the size-class and waste rules.
  std::vector<Candidate> candidates(const Request& r) const {
    const std::uint64_t rounded = a_.round_size(r.bytes);
    const bool small = a_.is_small(r.bytes);
    std::vector<Candidate> out;
    for (const auto& [id, seg] : a_.segments()) {
      if (seg.small != small) continue;
      for (const auto& [off, b] : seg.blocks) {
        if (b.allocated || b.size < rounded) continue;
        if (!small && b.size - rounded > a_.config().medium_segment) continue;
        const bool usable = !b.free_point.pending() || b.free_point.timeline == r.first_user ||
                            reached(b.free_point);
        out.push_back({id, off, b.size, b.free_point, usable});
      }
    }
    return out;
  }

  void allocate() {
    const Request r{random_size(), timeline(), timeline(), uniform(0, 1) == 1};
    const std::vector<Candidate> cands = candidates(r);
    std::uint64_t best_usable = UINT64_MAX, best_pending = UINT64_MAX;
    for (const Candidate& c : cands) {
      std::uint64_t& best = c.usable ? best_usable : best_pending;
      best = std::min(best, c.size);
    }
    const bool any_usable = best_usable != UINT64_MAX;
    const bool expect_pending = !any_usable && r.allow_pending && best_pending != UINT64_MAX;
    const bool expect_none = !any_usable && !expect_pending;

    std::optional<Placement> p = a_.allocate(r, reached_);
    ensure(expect_none == !p, "allocate and the oracle disagree on whether a block fits");
    if (!p) {
      check_cheap();
      const std::uint64_t id = next_id_++;
      const std::uint64_t size = a_.segment_size_for(r.bytes);
      a_.add_segment(id, size, r.owner, a_.is_small(r.bytes));
      reserved_ += size;
      ++segments_added_;
      check_cheap();
      p = a_.allocate(r, reached_);
      ensure(p && p->segment == id && !p->pending_reuse, "growing did not serve the request");
    } else {
      const Candidate* c = nullptr;
      for (const Candidate& x : cands) if (x.segment == p->segment && x.offset == p->offset) c = &x;
      if (c == nullptr) fail("placement is not at a free block of the request's class");
      ensure(c->size == (expect_pending ? best_pending : best_usable), "not the best fit");
      if (p->pending_reuse != expect_pending) fail("pending_reuse differs from the oracle");
      if (p->pending_reuse) {
        ensure(p->wait.pending() && p->wait.timeline == c->fp.timeline &&
                   p->wait.value == c->fp.value, "wait point is not the block's free point");
        ensure(p->wait.timeline != r.first_user && !reached(p->wait), "needless wait");
        ++pending_reuses_;
      } else if (p->wait.pending() || !c->usable) {
        fail("block taken without a wait is not usable");
      }
    }
    if (p->size != a_.round_size(r.bytes) || p->offset % a_.config().alignment != 0 ||
        p->offset + p->size > a_.segments().at(p->segment).size)
      fail("placement has a bad size or offset");
    auto& shadow = live_by_segment_[p->segment];
    auto next = shadow.lower_bound(p->offset);
    ensure(next == shadow.end() || next->first >= p->offset + p->size, "overlaps the next block");
    ensure(next == shadow.begin() || std::prev(next)->second <= p->offset,
           "overlaps the previous block");
    claim_freed(r, *p);
    shadow.emplace(p->offset, p->offset + p->size);
    live_.push_back({p->segment, p->offset, p->size});
    live_bytes_ += p->size;
    ++allocations_;
  }

  /// The safety property itself, independent of the allocator's bookkeeping: every byte of
  /// the placement was freed at a point the first user may pass (clean, its own timeline,
  /// reached) or that its wait point covers.
  void claim_freed(const Request& r, const Placement& p) {
    auto& m = freed_[p.segment];
    const std::uint64_t lo = p.offset, hi = p.offset + p.size;
    auto it = m.lower_bound(lo);
    if (it != m.begin() && std::prev(it)->second.end > lo) --it;
    while (it != m.end() && it->first < hi) {
      const auto [start, piece] = *it;
      const FreePoint& fp = piece.fp;
      const bool covered =
          p.pending_reuse && p.wait.timeline == fp.timeline && p.wait.value >= fp.value;
      ensure(fp.timeline == r.first_user || reached(fp) || covered,
             "reuses bytes whose free point is neither reached nor waited for");
      it = m.erase(it);
      if (start < lo) m.emplace(start, Piece{lo, fp});
      if (piece.end > hi) m.emplace(hi, Piece{piece.end, fp});
    }
  }

  void release() {
    const std::size_t i = uniform(0, live_.size() - 1);
    const Live l = live_[i];
    live_[i] = live_.back();
    live_.pop_back();
    FreePoint fp;
    if (uniform(0, 9) >= 3) {
      fp.timeline = timeline();
      fp.value = uniform(0, 4) == 0 ? uniform(0, completed_[fp.timeline]) : ++issued_[fp.timeline];
    }
    if (a_.release(l.segment, l.offset, fp) != l.size) fail("release returned a wrong size");
    live_by_segment_[l.segment].erase(l.offset);
    if (fp.pending()) freed_[l.segment].emplace(l.offset, Piece{l.offset + l.size, fp});
    live_bytes_ -= l.size;
  }

  void advance() {
    const std::uint32_t t = timeline();
    const std::uint64_t step = uniform(0, 9) == 0 ? issued_[t] : uniform(1, 8);
    completed_[t] = std::min(issued_[t], completed_[t] + step);
  }

  std::uint64_t clean_bytes() const {
    auto it = a_.free_by_timeline().find(0);
    return it == a_.free_by_timeline().end() ? 0 : it->second;
  }

  void refresh() {
    const std::uint64_t before = clean_bytes();
    const std::uint64_t cleaned = a_.refresh(reached_);
    if (clean_bytes() != before + cleaned) fail("refresh's count does not match clean bytes");
    for (const auto& [id, seg] : a_.segments())
      for (const auto& [off, b] : seg.blocks)
        ensure(b.allocated || !b.free_point.pending() || !reached(b.free_point),
               "refresh left a reached block pending");
  }

  void check_unusable() {
    const std::uint64_t bytes = random_size();
    const std::uint32_t t = timeline(), owner = timeline();
    const bool allow_pending = uniform(0, 3) == 0;
    std::uint64_t expect = 0;
    for (const auto& [id, seg] : a_.segments()) {
      if (allow_pending || seg.small != a_.is_small(bytes)) continue;
      for (const auto& [off, b] : seg.blocks)
        if (!b.allocated && b.free_point.pending() && b.free_point.timeline != t &&
            b.free_point.timeline != owner && !reached(b.free_point))
          expect += b.size;
    }
    ensure(a_.unusable_free_bytes(Request{bytes, owner, t, allow_pending}, owner, reached_) == expect,
           "unusable_free_bytes is wrong");
  }

  void trim() {
    for (std::uint64_t id : a_.idle_segments()) {
      if (!live_by_segment_[id].empty()) fail("idle segment holds a live block");
      if (uniform(0, 1) == 0) continue;
      const std::uint64_t size = a_.segments().at(id).size;
      if (a_.remove_segment(id) != size) fail("remove_segment returned a wrong size");
      reserved_ -= size;
      live_by_segment_.erase(id);
      freed_.erase(id);
      ++segments_removed_;
    }
  }

  void check_cheap() const {
    const std::string s = a_.validate();
    if (!s.empty()) fail("validate: " + s);
    if (a_.free_bytes() + live_bytes_ != reserved_) fail("free + live != reserved");
  }

  void check_shadow() const {
    std::uint64_t total = 0;
    std::size_t allocated = 0;
    for (const auto& [id, seg] : a_.segments()) {
      total += seg.size;
      auto sh = live_by_segment_.find(id);
      for (const auto& [off, b] : seg.blocks) {
        if (!b.allocated) continue;
        ++allocated;
        ensure(sh != live_by_segment_.end() && sh->second.contains(off) &&
                   sh->second.at(off) == off + b.size, "allocated block unknown to the shadow");
      }
    }
    if (allocated != live_.size()) fail("allocated block count differs from the shadow model");
    if (total != reserved_) fail("segment sizes do not add up to reserved");
  }

  BlockAllocator a_;
  std::mt19937_64 rng_;
  std::uint32_t timelines_ = 0;
  std::vector<std::uint64_t> completed_, issued_;
  const BlockAllocator::Reached reached_ = [this](const FreePoint& fp) { return reached(fp); };
  std::vector<Live> live_;
  std::map<std::uint64_t, std::map<std::uint64_t, std::uint64_t>> live_by_segment_;  // off -> end
  std::map<std::uint64_t, std::map<std::uint64_t, Piece>> freed_;  // pending frees, by offset
  std::uint64_t live_bytes_ = 0, reserved_ = 0, next_id_ = 1;
  std::size_t op_ = 0, allocations_ = 0, pending_reuses_ = 0;
  std::size_t segments_added_ = 0, segments_removed_ = 0;
};

}  // namespace

TEST_CASE("an allocated block keeps the request's user pointer until it is released") {
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  int first = 0, second = 0;
  Request r1 = req(4 * KiB, A);
  r1.user = &first;
  Request r2 = req(8 * KiB, A);
  r2.user = &second;
  const Placement p1 = must(a, r1);
  const Placement p2 = must(a, r2);
  CHECK(block_at(a, 1, p1.offset).user == &first);
  CHECK(block_at(a, 1, p2.offset).user == &second);
  a.release(1, p1.offset, FreePoint{A, 3});
  CHECK(block_at(a, 1, p1.offset).user == nullptr);  // free blocks hold none
  CHECK(block_at(a, 1, p2.offset).user == &second);  // the neighbour is untouched
  const Placement again = must(a, req(4 * KiB, A));  // A reuses its own pending block
  CHECK(again.offset == p1.offset);
  CHECK(block_at(a, 1, again.offset).user == nullptr);
  expect_valid(a);
}

TEST_CASE("many pending blocks of another queue: one question, then the clean block") {
  // A loader's pattern: 200 small blocks freed on the owner's timeline A, none reached yet,
  // before the clean rest of the segment. The request of the executor B takes the clean rest
  // and asks about A once (its oldest free point), not once per block.
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  std::vector<Placement> blocks;
  for (int i = 0; i < 200; ++i) blocks.push_back(must(a, req(4 * KiB, A)));
  for (std::size_t i = 0; i < blocks.size(); i += 2) a.release(1, blocks[i].offset, FreePoint{A, i + 1});
  REQUIRE(a.pending_blocks() == 100);
  int asked = 0;
  const auto p = a.allocate(req(4 * KiB, B, /*allow_pending=*/true), [&](const FreePoint& fp) {
    ++asked;
    CHECK(fp.timeline == A);
    CHECK(fp.value == 1);  // the oldest
    return false;
  });
  REQUIRE(p.has_value());
  CHECK_FALSE(p->pending_reuse);
  CHECK(p->offset == 200 * 4 * KiB);  // the front of the clean rest
  CHECK(asked == 1);
  expect_valid(a);
}

TEST_CASE("allocate asks Reached about a timeline only when earlier answers do not decide") {
  // 32 blocks of 64 KiB, freed on timeline A at values 1..32 in offset order (the walk order
  // for equal sizes), separated so that none coalesce; and 32 more freed on timeline C.
  BlockAllocator a;
  a.add_segment(1, 2 * MiB, A, true);
  a.add_segment(2, 2 * MiB, C, true);
  std::vector<Placement> on_a, on_c;
  for (int i = 0; i < 32; ++i) on_a.push_back(must(a, req(64 * KiB, A)));
  for (int i = 0; i < 32; ++i) on_c.push_back(must(a, req(64 * KiB, C)));
  REQUIRE(a.free_bytes() == 0);
  for (std::size_t i = 0; i < on_a.size(); ++i) {
    a.release(on_a[i].segment, on_a[i].offset, FreePoint{A, i + 1});
    a.release(on_c[i].segment, on_c[i].offset, FreePoint{C, i + 1});
  }
  expect_valid(a);
  std::map<std::uint32_t, int> asked;
  auto counting = [&](std::uint64_t upto_a) {
    return BlockAllocator::Reached([&asked, upto_a](const FreePoint& fp) {
      ++asked[fp.timeline];
      return fp.timeline == A && fp.value <= upto_a;
    });
  };

  SUBCASE("nothing reached: one question per timeline, then the pending choice") {
    const auto p = a.allocate(req(64 * KiB, B, /*allow_pending=*/true), counting(0));
    REQUIRE(p.has_value());
    CHECK(p->pending_reuse);
    CHECK(p->wait.timeline == A);
    CHECK(p->wait.value == 1);  // best fit: the first block of the walk
    CHECK(asked[A] == 1);       // values 2..32 follow from "1 not reached"
    CHECK(asked[C] == 1);
    expect_valid(a);
  }
  SUBCASE("nothing reached, no pending allowed: the pool must grow") {
    CHECK_FALSE(a.allocate(req(64 * KiB, B), counting(0)).has_value());
    CHECK(asked[A] == 1);
    CHECK(asked[C] == 1);
  }
  SUBCASE("the first block reached is taken at once") {
    const auto p = a.allocate(req(64 * KiB, B), counting(1));
    REQUIRE(p.has_value());
    CHECK_FALSE(p->pending_reuse);
    CHECK(p->segment == on_a[0].segment);
    CHECK(p->offset == on_a[0].offset);
    CHECK(asked[A] == 1);
    CHECK(asked.count(C) == 0);
  }
  SUBCASE("of one size, the oldest free point comes first, wherever it lies") {
    // Allocate the first block on A again and free it at a high value: A@40 now lies at the
    // lowest offset, A@2 after it. Blocks of one size are tried oldest point first, so A@2 is
    // asked about (reached) and taken; A@40 is never asked about.
    const auto first = must(a, req(64 * KiB, A));
    CHECK(first.offset == on_a[0].offset);
    a.release(first.segment, first.offset, FreePoint{A, 40});
    const auto p = a.allocate(req(64 * KiB, B), counting(5));
    REQUIRE(p.has_value());
    CHECK_FALSE(p->pending_reuse);
    CHECK(p->offset == on_a[1].offset);  // A@2, reached
    CHECK(asked[A] == 1);
    expect_valid(a);
  }
  SUBCASE("sizes above a size whose oldest point is not reached are still tried") {
    // A lone 64 KiB block freed on A at 10 (not reached) and a 128 KiB block freed on A at 2
    // (two neighbours freed at one point merge): the 64 KiB size answers "no", the 128 KiB
    // size is tried next and serves the request.
    BlockAllocator b;
    b.add_segment(1, 2 * MiB, A, true);
    std::vector<Placement> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(must(b, req(64 * KiB, A)));
    b.release(1, blocks[0].offset, FreePoint{A, 10});
    b.release(1, blocks[2].offset, FreePoint{A, 2});
    b.release(1, blocks[3].offset, FreePoint{A, 2});
    expect_valid(b);
    std::map<std::uint32_t, int> asked_b;
    const auto p = b.allocate(req(64 * KiB, B), [&](const FreePoint& fp) {
      ++asked_b[fp.timeline];
      return fp.value <= 5;
    });
    REQUIRE(p.has_value());
    CHECK_FALSE(p->pending_reuse);
    CHECK(p->offset == blocks[2].offset);  // the front of the 128 KiB block freed at A@2
    CHECK(asked_b[A] == 2);                // A@10 for 64 KiB, A@2 for 128 KiB
    expect_valid(b);
  }
}

TEST_CASE("randomized sequences keep every invariant") {
  const std::uint64_t seed = seed_from_env();
  const std::size_t ops = ops_from_env();
  std::printf("ferry-unit: randomized seed %llu (override with FERRY_UNIT_SEED), %zu operations per run "
              "(FERRY_ALLOCATOR_OPS)\n",
              static_cast<unsigned long long>(seed), ops);
  INFO("seed " << seed << ", " << ops << " operations");
  SUBCASE("default size policy") { RandomRun({}, seed).run(ops); }
  SUBCASE("small segments and alignment 256") {
    RandomRun({.alignment = 256, .small_request = 64 * KiB, .small_segment = 256 * KiB,
               .medium_request = MiB, .medium_segment = 4 * MiB, .large_round = 256 * KiB},
              seed ^ 0x9e3779b97f4a7c15ull)
        .run(ops);
  }
}
