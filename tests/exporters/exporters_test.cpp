// SPDX-License-Identifier: MIT
// Exporters test: builds snapshots from a real host-backend run (the bench's executor_owned
// reference and ferry's owner_owned), writes all four formats and checks their framing here. The Python checker
// (check_exporters.py) runs this program with FERRY_EXPORTERS_OUT=DIR and then checks the files
// against the PyTorch fixture, the JSON schema, XML and trace-event rules.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <unistd.h>

#include "ferry/export.hpp"
#include "ferry/ferry.hpp"
#include "ferry/testing.hpp"
#include "reference.hpp"

namespace {

namespace fs = std::filesystem;

// A few uploads, temporaries and releases with one strategy, on a fresh host device.
ferry::MemorySnapshot run_host(ferry_bench::Strategy strategy) {
  auto dev = ferry::Device::open({.backend = ferry::Backend::host, .host_latency_us = 0});
  auto compute = dev.queue(ferry::QueueRole::compute);
  ferry::Transfer xfer(dev);
  ferry_bench::ReferenceUploads uploads(dev, xfer, compute);
  constexpr std::uint64_t bytes = 3u << 20;  // a "large" (20 MiB segment) request
  auto src = dev.host_pool().allocate(bytes);
  std::vector<ferry::TimelinePoint> marks;
  for (int i = 0; i < 4; ++i) {
    if (i >= 2) marks[static_cast<std::size_t>(i - 2)].wait();
    auto up = uploads.upload(strategy, src, {.tag = "input \"<&>\" " + std::to_string(i)});
    auto tmp = dev.pool().allocate(bytes, compute, {.tag = "temporary"});
    ferry::run_synthetic_compute(compute, up.buffer, tmp, 1);
    auto small = dev.pool().allocate(512, compute, {.tag = "small"});  // a "small" segment
    small.release();
    tmp.release();
    up.buffer.release();
    marks.push_back(compute.mark());
  }
  compute.synchronize();
  xfer.synchronize();
  // One block still allocated, so every block state can appear.
  auto held = dev.pool().allocate(bytes, compute, {.tag = "held"});
  return dev.pool().snapshot();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path out_dir() {
  if (const char* env = std::getenv("FERRY_EXPORTERS_OUT"); env && *env) {
    fs::create_directories(env);
    return env;
  }
  auto dir = fs::temp_directory_path() / ("ferry-exporters-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("exporters write all four formats from a host run") {
  const fs::path dir = out_dir();
  std::vector<std::pair<std::string, ferry::MemorySnapshot>> columns;
  for (auto strategy : {ferry_bench::Strategy::executor_owned, ferry_bench::Strategy::owner_owned}) {
    const std::string name(ferry_bench::to_string(strategy));
    ferry::MemorySnapshot snap = run_host(strategy);
    CHECK(!snap.events.empty());
    CHECK(!snap.segments.empty());
    CHECK(!snap.activity.empty());

    ferry::write_memory_viz_pickle(snap, dir / (name + ".pickle"));
    ferry::write_json(snap, dir / (name + ".json"));
    ferry::write_chrome_trace(snap, dir / (name + ".trace.json"));

    const std::string pickle = slurp(dir / (name + ".pickle"));
    REQUIRE(pickle.size() > 4);
    CHECK(pickle.substr(0, 2) == std::string("\x80\x02", 2));  // PROTO 2
    CHECK(pickle.back() == '.');                                // STOP
    CHECK(pickle == ferry::to_memory_viz_pickle(snap));

    const std::string trace = slurp(dir / (name + ".trace.json"));
    CHECK(trace.find("\"traceEvents\"") != std::string::npos);
    CHECK(trace.find("\"thread_name\"") != std::string::npos);
    columns.emplace_back(name, std::move(snap));
  }
  ferry::write_html_report(columns, dir / "report.html");
  const std::string html = slurp(dir / "report.html");
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("data-strategy=\"executor_owned\"") != std::string::npos);
  CHECK(html.find("data-strategy=\"owner_owned\"") != std::string::npos);
  if (!std::getenv("FERRY_EXPORTERS_OUT")) fs::remove_all(dir);
}

TEST_CASE("exporters handle an empty snapshot") {
  ferry::MemorySnapshot empty;
  CHECK(ferry::to_memory_viz_pickle(empty).back() == '.');
  CHECK(ferry::to_chrome_trace(empty).find("traceEvents") != std::string::npos);
  CHECK(ferry::to_html_report({{"empty", empty}}).find("</html>") != std::string::npos);
}

TEST_CASE("exporters report the path they cannot write") {
  // Every writer throws backend_error naming itself and the path, at the caller's line where
  // the compiler fills a defaulted std::source_location from the call site (not clang < 17).
  ferry::MemorySnapshot empty;
  const fs::path bad = "/nonexistent-ferry-dir/x";
  const std::pair<const char*, std::function<void()>> writers[] = {
      {"write_memory_viz_pickle", [&] { ferry::write_memory_viz_pickle(empty, bad); }},
      {"write_chrome_trace", [&] { ferry::write_chrome_trace(empty, bad); }},
      {"write_html_report", [&] { ferry::write_html_report(empty, bad); }},
      {"write_html_report", [&] { ferry::write_html_report({{"empty", empty}}, bad); }},
      {"write_json", [&] { ferry::write_json(empty, bad); }},
  };
  for (const auto& writer : writers) {
    const std::string name = writer.first;
    CAPTURE(name);
    try {
      writer.second();
      FAIL("nothing thrown");
    } catch (const ferry::Error& e) {
      CHECK(e.code() == ferry::ErrorCode::backend_error);
      CHECK(e.message().find(name) != std::string::npos);
      CHECK(e.message().find("nonexistent-ferry-dir") != std::string::npos);
#if !defined(__clang__) || __clang_major__ >= 17
      CHECK(std::string_view(e.where().file_name()).ends_with("exporters_test.cpp"));
#endif
    }
  }
}
