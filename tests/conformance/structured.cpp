// SPDX-License-Identifier: MIT
// Structured transfers: upload_structured and download_structured through one description of
// a structure's leaves (ferry_leaves), with empty leaves at the start, middle and end, a
// structure whose leaves are all empty, every kind of leaf, and the structured calls' bad
// input.
#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include "conformance.hpp"
#include "reference.hpp"

using namespace ferry;
using conformance::fill_pattern;

namespace {

constexpr auto kInvalid = ErrorCode::invalid_argument;

/// Expect invalid_argument whose message contains every string of `needles`.
template <class Fn>
void expect_invalid(Fn&& fn, std::initializer_list<std::string> needles, const char* what) {
  try {
    fn();
    FAIL_CHECK(std::string(what) << ": expected invalid_argument, nothing was thrown");
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == kInvalid, std::string(what) << ": " << e.message());
    for (const auto& n : needles) {
      CHECK_MESSAGE(e.message().find(n) != std::string::npos, std::string(what) << ": '" << n << "' missing in " << e.message());
    }
  }
}

/// One sparse feature of a KeyedJaggedTensor-like batch; any of its leaves may be empty.
struct Feature {
  std::vector<std::int64_t> values;
  std::vector<std::int32_t> lengths;
  std::vector<float> weights;
  bool operator==(const Feature&) const = default;
};

/// A structure with every kind of leaf: vectors (in a vector of features), a std::array, a
/// HostSpan onto caller memory, and a trailing vector.
struct Sample {
  std::vector<Feature> features;
  std::array<std::int32_t, 5> header{};
  HostSpan raw{};
  std::vector<std::byte> tail;
};

struct DeviceFeature {
  DeviceView values, lengths, weights;
};
struct DeviceSample {
  std::vector<DeviceFeature> features;
  DeviceView header, raw, tail;
};

template <maybe_const<Sample> S, class Leaf>
DeviceSample ferry_leaves(S& s, Leaf&& leaf) {
  DeviceSample d;
  for (auto& f : s.features) d.features.push_back({leaf(f.values), leaf(f.lengths), leaf(f.weights)});
  d.header = leaf(s.header);
  d.raw = leaf(s.raw);
  d.tail = leaf(s.tail);
  return d;
}

static_assert(Uploadable<Sample>);
static_assert(Downloadable<Sample>);
static_assert(!Downloadable<const Sample>);
static_assert(!Uploadable<Feature>);  // the constrained ferry_leaves is not offered for it

/// Feature k with `n` values (0: every leaf empty); weights only when `weighted`.
Feature make_feature(std::uint64_t k, std::size_t n, bool weighted) {
  Feature f;
  for (std::size_t i = 0; i < n; ++i) {
    f.values.push_back(static_cast<std::int64_t>(k << 40 | i));
    if (weighted) f.weights.push_back(static_cast<float>(i % 97) / 8.0f + static_cast<float>(k));
  }
  if (n > 0) f.lengths.assign(n / 3 + 1, static_cast<std::int32_t>(k));
  return f;
}

/// Every leaf's bytes as ferry_leaves lists them, for checks against the batch.
std::vector<std::uint64_t> leaf_sizes(const Sample& s) {
  std::vector<std::uint64_t> sizes;
  (void)ferry_leaves(s, [&](const auto& leaf) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(leaf)>, HostSpan>) {
      sizes.push_back(leaf.size);
    } else {
      sizes.push_back(std::size(leaf) * sizeof(leaf[0]));
    }
    return DeviceView{};
  });
  return sizes;
}

/// A copy of `s` with every leaf's contents cleared and its size kept; `raw` points at `memory`.
Sample cleared_like(const Sample& s, std::vector<std::byte>& memory) {
  Sample c = s;
  for (auto& f : c.features) {
    std::fill(f.values.begin(), f.values.end(), 0);
    std::fill(f.lengths.begin(), f.lengths.end(), 0);
    std::fill(f.weights.begin(), f.weights.end(), 0.0f);
  }
  c.header.fill(0);
  memory.assign(s.raw.size, std::byte{0});
  c.raw = {memory.empty() ? nullptr : memory.data(), memory.size()};
  std::fill(c.tail.begin(), c.tail.end(), std::byte{0});
  return c;
}

/// Sparse features only: a structure whose leaves may all be empty, or which may have none.
struct Sparse {
  std::vector<Feature> features;
};

template <maybe_const<Sparse> S, class Leaf>
std::vector<DeviceView> ferry_leaves(S& s, Leaf&& leaf) {
  std::vector<DeviceView> d;
  for (auto& f : s.features) d.insert(d.end(), {leaf(f.values), leaf(f.lengths), leaf(f.weights)});
  return d;
}

/// A structure whose second visit lists one leaf more than its first: breaks the rule that
/// the leaves depend only on the shape.
struct Unstable {
  std::vector<std::byte> a = std::vector<std::byte>(100);
  mutable int visits = 0;
};

template <maybe_const<Unstable> S, class Leaf>
std::vector<DeviceView> ferry_leaves(S& s, Leaf&& leaf) {
  std::vector<DeviceView> d{leaf(s.a)};
  if (s.visits++ > 0) d.push_back(leaf(s.a));
  return d;
}

}  // namespace

CONFORMANCE_CASE("structured: round trip with empty leaves at the start, middle and end") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  // Leaves empty first (feature 0), in runs in the middle (features 3 and 4, and every
  // unweighted feature's weights) and last (the tail); a raw leaf of caller memory.
  Sample s;
  for (std::uint64_t k = 0; k < 9; ++k) {
    const std::size_t n = k == 0 || k == 3 || k == 4 ? 0 : 1 + k * 777;
    s.features.push_back(make_feature(k, n, k % 2 == 0));
  }
  s.header = {1, 2, 3, 4, 5};
  std::vector<std::byte> raw(4099);
  fill_pattern(raw, 61);
  s.raw = {raw.data(), raw.size()};
  const std::vector<std::uint64_t> sizes = leaf_sizes(s);
  REQUIRE(sizes.size() == 9 * 3 + 3);
  CHECK(sizes.front() == 0);
  CHECK(sizes.back() == 0);

  ferry_bench::ReferenceUploads uploads(dev, xfer, owner);
  for (const bool blocking : {false, true}) {
    CAPTURE(blocking);
    // blocking: the reference strategy, a copy on the owner queue waited for by the host.
    auto [batch, shape] = upload_structured(blocking ? uploads.on_owner() : xfer, s, owner);
    if (blocking) batch.ready.wait();
    REQUIRE(batch.views.size() == sizes.size());
    REQUIRE(shape.features.size() == s.features.size());
    // The shape holds the batch's views in ferry_leaves order; empty leaves have size 0 at an
    // aligned offset inside the buffer.
    std::vector<DeviceView> listed;
    for (const auto& f : shape.features) listed.insert(listed.end(), {f.values, f.lengths, f.weights});
    listed.insert(listed.end(), {shape.header, shape.raw, shape.tail});
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(i);
      CHECK(listed[i].size == sizes[i]);
      CHECK(listed[i].offset == batch.views[i].offset);
      CHECK(batch.offsets[i] % 256 == 0);
      CHECK(batch.offsets[i] + sizes[i] <= batch.buffer.size());
    }
    // Back into a structure of the same shape whose leaves were cleared.
    std::vector<std::byte> raw_back;
    Sample back = cleared_like(s, raw_back);
    download_structured(xfer, batch, back);
    int bad = 0;
    for (std::size_t k = 0; k < s.features.size(); ++k) bad += !(back.features[k] == s.features[k]);
    CHECK_MESSAGE(bad == 0, bad << " of " << s.features.size() << " features came back wrong");
    CHECK(back.header == s.header);
    CHECK(raw_back == raw);
    CHECK(back.tail.empty());
    batch.buffer.release();
  }
}

CONFORMANCE_CASE("structured: a structure whose leaves are all empty is a valid batch that copies nothing") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Sparse s;
  for (std::uint64_t k = 0; k < 4; ++k) s.features.push_back(make_feature(k, 0, true));
  auto [batch, shape] = upload_structured(xfer, s, owner);
  // A live buffer of the owner, every view empty at offset 0.
  CHECK(batch.buffer.owner() == owner);
  CHECK(batch.buffer.size() >= 1);
  REQUIRE(shape.size() == 12);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    CHECK(shape[i].size == 0);
    CHECK(batch.offsets[i] == 0);
  }
  batch.ready.wait();
  Sparse back = s;
  download_structured(xfer, batch, back);
  CHECK(back.features == s.features);
  batch.buffer.release();
  // With staging disabled too: empty leaves need no staging.
  TransferOptions unstaged;
  unstaged.staging = false;
  Transfer bare(dev, unstaged);
  auto [bare_batch, bare_shape] = upload_structured(bare, s, owner);
  CHECK(bare_shape.size() == 12);
  download_structured(bare, bare_batch, back);
  // A structure with no leaf at all is not a batch.
  expect_invalid([&] { (void)upload_structured(xfer, Sparse{}, owner); }, {"ferry::upload_structured", "empty span"},
                 "structure without leaves");
  conformance::check_round_trip(dev, xfer);
}

CONFORMANCE_CASE("structured: bad input names the structured call and the leaf") {
  Device dev = conformance::open_device();
  Queue owner = dev.queue(QueueRole::compute);
  Transfer xfer(dev);
  Sparse s;
  for (std::uint64_t k = 0; k < 3; ++k) s.features.push_back(make_feature(k, 100 + k, k != 1));
  auto uploaded = upload_structured(xfer, s, owner);  // no structured binding: lambdas capture it
  UploadBatch& batch = uploaded.first;
  REQUIRE(uploaded.second.size() == 9);

  Sparse fewer = s;
  fewer.features.pop_back();
  expect_invalid([&] { download_structured(xfer, batch, fewer); },
                 {"ferry::download_structured", "6 leaves", "9 inputs"}, "fewer leaves than inputs");
  Sparse resized = s;
  resized.features[1].values.push_back(7);  // leaf 3
  expect_invalid([&] { download_structured(xfer, batch, resized); },
                 {"ferry::download_structured", "leaf 3", std::to_string(8 * 102) + " bytes"}, "a leaf of another size");
  // Refused calls write nothing.
  CHECK(resized.features[1].values.back() == 7);
  CHECK(fewer.features == std::vector<Feature>(s.features.begin(), s.features.begin() + 2));

  // Errors of the batch calls underneath name the structured call, then the batch call.
  Sample null_raw;
  null_raw.raw = {nullptr, 64};
  expect_invalid([&] { (void)upload_structured(xfer, null_raw, owner); },
                 {"ferry::upload_structured", "view 1", "null data pointer", "64 bytes"}, "null leaf with a size");
  std::vector<std::byte> shared(64);
  Sample aliased;
  aliased.raw = {shared.data(), shared.size()};
  aliased.tail.assign(64, std::byte{1});
  auto aliased_up = upload_structured(xfer, aliased, owner);
  const UploadBatch& aliased_batch = aliased_up.first;
  CHECK(aliased_up.second.tail.size == 64);
  Sample overlapping = aliased;
  overlapping.raw = {overlapping.tail.data(), overlapping.tail.size()};  // leaves 1 and 2 share memory
  expect_invalid([&] { download_structured(xfer, aliased_batch, overlapping); },
                 {"ferry::download_structured", "views 1 and 2", "overlap"}, "leaves that overlap");
  expect_invalid([&] { (void)upload_structured(xfer, Unstable{}, owner); },
                 {"ferry::upload_structured", "ferry_leaves visited 1 leaves"}, "leaves that change between visits");
  batch.buffer.release();
  expect_invalid([&] { download_structured(xfer, batch, s); }, {"ferry::download_structured"},
                 "download from a released batch");
  conformance::check_round_trip(dev, xfer);
}
