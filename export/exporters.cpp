// SPDX-License-Identifier: MIT
// The ferry-export library (include/ferry/export.hpp): PyTorch memory_viz pickle, Chrome
// trace-event JSON and the self-contained HTML report. The documented JSON form stays in
// libferry (src/snapshot.cpp).
//
// All of this is plain text/byte formatting over a MemorySnapshot value: no device, no vendor
// code, no libferry internals; strings and files go through the helpers libferry's to_json
// uses too (common/json.hpp, common/write_file.hpp).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ferry/export.hpp"
#include "json.hpp"
#include "write_file.hpp"

namespace ferry {
namespace {

// ---- stream mapping shared by the exporters ----------------------------------------------------

// PyTorch's default stream is 0; ferry's first compute queue plays that role.
struct StreamMap {
  std::uint32_t default_queue = 0;  // 0 = none (queue ids start at 1)
  explicit StreamMap(const MemorySnapshot& s) {
    for (const auto& q : s.queues) {
      if (q.role == "compute" && (default_queue == 0 || q.id < default_queue)) default_queue = q.id;
    }
  }
  [[nodiscard]] std::uint64_t operator()(std::uint32_t queue) const { return queue == default_queue ? 0 : queue; }
};

// ---- pickle (protocol 2) -----------------------------------------------------------------------

// Writes the opcodes PyTorch's pickler itself uses for these types; memory_viz's JavaScript
// unpickler understands exactly this subset. Containers are filled in batches of 1000 items per
// MARK, like Python's pickler (memory_viz spreads each batch into a function call).
class Pickler {
 public:
  static constexpr std::size_t batch = 1000;

  Pickler() {
    out_ += '\x80';  // PROTO
    out_ += '\x02';
  }
  void empty_dict() { out_ += '}'; }
  void empty_list() { out_ += ']'; }
  void mark() { out_ += '('; }
  void setitems() { out_ += 'u'; }
  void appends() { out_ += 'e'; }
  void tuple2() { out_ += '\x86'; }
  void none() { out_ += 'N'; }
  void boolean(bool v) { out_ += v ? '\x88' : '\x89'; }  // NEWTRUE / NEWFALSE
  void stop() { out_ += '.'; }

  void integer(std::int64_t v) {
    if (v >= 0 && v < 0x100) {
      out_ += 'K';  // BININT1
      out_ += static_cast<char>(v);
    } else if (v >= 0 && v < 0x10000) {
      out_ += 'M';  // BININT2
      le(static_cast<std::uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';  // BININT: 4-byte signed
      le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
    } else {
      long1(static_cast<std::uint64_t>(v), v < 0);
    }
  }
  void integer(std::uint64_t v) {
    if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
      integer(static_cast<std::int64_t>(v));
    } else {
      long1(v, false);
    }
  }
  void integer(std::uint32_t v) { integer(static_cast<std::int64_t>(v)); }
  void integer(int v) { integer(static_cast<std::int64_t>(v)); }

  void floating(double v) {
    out_ += 'G';  // BINFLOAT: big-endian IEEE 754 double
    const auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 7; i >= 0; --i) out_ += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  void str(std::string_view s) {
    out_ += 'X';  // BINUNICODE: u32 length + UTF-8 bytes
    le(s.size(), 4);
    out_.append(s);
  }
  // Dict helpers: key then value, inside a mark/setitems pair.
  template <class V>
  void item(std::string_view key, const V& value) {
    str(key);
    put(value);
  }
  void put(std::string_view v) { str(v); }
  void put(const std::string& v) { str(v); }
  void put(const char* v) { str(v); }
  void put(bool v) { boolean(v); }
  void put(double v) { floating(v); }
  void put(std::uint64_t v) { integer(v); }
  void put(std::int64_t v) { integer(v); }
  void put(std::uint32_t v) { integer(v); }
  void put(int v) { integer(v); }

  // A list of `n` items written by `each(i)`, in batches.
  template <class F>
  void list(std::size_t n, F&& each) {
    empty_list();
    for (std::size_t start = 0; start < n; start += batch) {
      mark();
      for (std::size_t i = start; i < std::min(n, start + batch); ++i) each(i);
      appends();
    }
  }

  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  void le(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  // LONG1: little-endian two's complement, as few bytes as keep the sign right.
  void long1(std::uint64_t v, bool negative) {
    std::string bytes;
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((v >> (8 * i)) & 0xff);
    const char fill = negative ? '\xff' : '\0';
    while (bytes.size() > 1 && bytes.back() == fill &&
           ((static_cast<unsigned char>(bytes[bytes.size() - 2]) & 0x80) != 0) == negative) {
      bytes.pop_back();
    }
    if (!negative && (static_cast<unsigned char>(bytes.back()) & 0x80) != 0) bytes += '\0';
    out_ += '\x8a';
    out_ += static_cast<char>(bytes.size());
    out_ += bytes;
  }

  std::string out_;
};

// One memory_viz trace entry.
struct TraceEntry {
  std::string_view action;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::uint64_t time_us = 0;
  std::string_view user_metadata;
};

// The pool's events as memory_viz trace entries, closing every free_requested with a
// free_completed (see snapshot.hpp: memory_viz releases blocks only on free_completed).
std::vector<TraceEntry> trace_entries(const MemorySnapshot& s, const StreamMap& stream) {
  std::vector<TraceEntry> out;
  out.reserve(s.events.size() + 16);
  std::map<std::uint64_t, TraceEntry> pending;  // addr -> its free_requested
  auto complete = [&](std::map<std::uint64_t, TraceEntry>::iterator it, std::uint64_t time_us) {
    TraceEntry e = it->second;
    e.action = "free_completed";
    e.time_us = time_us;
    out.push_back(e);
    return pending.erase(it);
  };
  for (const auto& ev : s.events) {
    TraceEntry e{to_string(ev.kind), ev.address, ev.size, stream(ev.queue_id), ev.time_ns / 1000, ev.tag};
    switch (ev.kind) {
      case PoolEventKind::alloc:
        if (auto it = pending.find(ev.address); it != pending.end()) complete(it, e.time_us);
        break;
      case PoolEventKind::free_requested:
        if (auto it = pending.find(ev.address); it != pending.end()) complete(it, e.time_us);
        pending.emplace(ev.address, e);
        break;
      case PoolEventKind::free_completed:
        pending.erase(ev.address);
        break;
      case PoolEventKind::segment_alloc:
        break;
      case PoolEventKind::segment_free:
        for (auto it = pending.lower_bound(ev.address); it != pending.end() && it->first < ev.address + ev.size;) {
          it = complete(it, e.time_us);
        }
        break;
    }
    out.push_back(e);
  }
  if (!pending.empty()) {
    // Blocks the snapshot still shows as allocated or pending keep their free_requested only.
    std::set<std::uint64_t> still_active;
    for (const auto& seg : s.segments) {
      for (const auto& b : seg.blocks) {
        if (b.state != BlockStateKind::inactive) still_active.insert(b.address);
      }
    }
    const std::uint64_t end_us = out.empty() ? 0 : out.back().time_us;
    for (auto it = pending.begin(); it != pending.end();) {
      it = still_active.contains(it->first) ? std::next(it) : complete(it, end_us);
    }
  }
  return out;
}

void pickle_allocator_settings(Pickler& p) {
  // The caching-allocator policy ferry's pool follows (pool.hpp): PyTorch's defaults.
  p.empty_dict();
  p.mark();
  p.item("PYTORCH_CUDA_ALLOC_CONF", "");
  p.item("max_split_size", -1);
  p.item("garbage_collection_threshold", 0.0);
  p.item("expandable_segments", false);
  p.item("pinned_num_register_threads", 1);
  p.item("release_lock_on_cudamalloc", false);
  p.item("pinned_use_cuda_host_register", false);
  p.item("graph_capture_record_stream_reuse", false);
  p.str("roundup_power2_divisions");
  p.empty_dict();
  p.mark();
  for (std::uint64_t k = 1; k <= 32768; k *= 2) p.item(std::to_string(k), 0);
  p.setitems();
  p.setitems();
}

// ---- text helpers --------------------------------------------------------------------------------

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string_view category(std::string_view activity) {
  if (activity.starts_with("copy")) return "copy";
  if (activity.starts_with("wait")) return "wait";
  if (activity.starts_with("compute")) return "compute";
  return "other";
}

// ---- timelines (shared by the HTML report) ------------------------------------------------------

struct Series {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> points;  // (time_ns, bytes) after each change
  std::uint64_t peak = 0;
};

// Allocated bytes: +size at alloc, -size at the first of free_requested / free_completed (the
// pool's own active_bytes accounting). Reserved bytes: segment_alloc / segment_free.
std::pair<Series, Series> timelines(const MemorySnapshot& s) {
  Series allocated, reserved;
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // addr -> size
  std::int64_t a = 0, r = 0;
  auto push = [](Series& series, std::uint64_t t, std::int64_t v) {
    const auto value = static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
    series.points.emplace_back(t, value);
    series.peak = std::max(series.peak, value);
  };
  for (const auto& e : s.events) {
    switch (e.kind) {
      case PoolEventKind::alloc:
        live[e.address] = e.size;
        a += static_cast<std::int64_t>(e.size);
        push(allocated, e.time_ns, a);
        break;
      case PoolEventKind::free_requested:
      case PoolEventKind::free_completed:
        if (auto it = live.find(e.address); it != live.end()) {
          a -= static_cast<std::int64_t>(it->second);
          live.erase(it);
          push(allocated, e.time_ns, a);
        }
        break;
      case PoolEventKind::segment_alloc:
        r += static_cast<std::int64_t>(e.size);
        push(reserved, e.time_ns, r);
        break;
      case PoolEventKind::segment_free:
        r -= static_cast<std::int64_t>(e.size);
        push(reserved, e.time_ns, r);
        break;
    }
  }
  return {std::move(allocated), std::move(reserved)};
}

// ---- XML/SVG text helpers ----------------------------------------------------------------------------

std::string xml_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') {
          o += ' ';
        } else {
          o += c;
        }
    }
  }
  return o;
}

struct ByteUnit {
  double scale;
  const char* name;
};
ByteUnit byte_unit(std::uint64_t max) {
  if (max >= (1ull << 30)) return {1.0 / static_cast<double>(1ull << 30), "GiB"};
  if (max >= (1ull << 20)) return {1.0 / static_cast<double>(1ull << 20), "MiB"};
  if (max >= (1ull << 10)) return {1.0 / 1024.0, "KiB"};
  return {1.0, "B"};
}

// "Nice" tick step for a range [0, max].
double tick_step(double max, int ticks) {
  if (max <= 0) return 1;
  const double raw = max / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string trim_number(double v) {
  std::string t = fixed(v, 2);
  while (t.find('.') != std::string::npos && (t.back() == '0' || t.back() == '.')) {
    const bool dot = t.back() == '.';
    t.pop_back();
    if (dot) break;
  }
  return t;
}

constexpr int plot_w = 480;    // plot area width (px)
constexpr int plot_h = 150;    // height of each memory plot (px)
constexpr int left_pad = 62;   // room for the y axis
constexpr int right_pad = 16;
constexpr int lane_h = 18;     // one queue lane
constexpr const char* color_allocated = "#4e79a7";
constexpr const char* color_reserved = "#e15759";

struct TimeAxis {
  std::uint64_t t0 = 0, t1 = 1;
  [[nodiscard]] double x(std::uint64_t t) const {
    const double f = static_cast<double>(t - std::min(t, t0)) / static_cast<double>(std::max<std::uint64_t>(t1 - t0, 1));
    return left_pad + std::clamp(f, 0.0, 1.0) * plot_w;
  }
};

TimeAxis time_axis(const MemorySnapshot& s) {
  std::uint64_t lo = UINT64_MAX, hi = 0;
  for (const auto& e : s.events) {
    lo = std::min(lo, e.time_ns);
    hi = std::max(hi, e.time_ns);
  }
  for (const auto& a : s.activity) {
    lo = std::min(lo, a.begin_ns);
    hi = std::max({hi, a.begin_ns, a.end_ns});
  }
  if (lo == UINT64_MAX) return {0, 1};
  return {lo, std::max(hi, lo + 1)};
}

void x_axis(std::ostringstream& o, const TimeAxis& ax, int y) {
  const double span_ms = static_cast<double>(ax.t1 - ax.t0) / 1e6;
  const double step = tick_step(span_ms, 5);
  o << "<line x1=\"" << left_pad << "\" y1=\"" << y << "\" x2=\"" << left_pad + plot_w << "\" y2=\"" << y
    << "\" class=\"axis\"/>\n";
  for (double v = 0; v <= span_ms * 1.0001; v += step) {
    const double x = left_pad + v / std::max(span_ms, 1e-12) * plot_w;
    o << "<line x1=\"" << fixed(x, 1) << "\" y1=\"" << y << "\" x2=\"" << fixed(x, 1) << "\" y2=\"" << y + 4
      << "\" class=\"axis\"/><text x=\"" << fixed(x, 1) << "\" y=\"" << y + 15 << "\" class=\"tick\" text-anchor=\"middle\">"
      << trim_number(v) << "</text>\n";
  }
  o << "<text x=\"" << left_pad + plot_w / 2 << "\" y=\"" << y + 29 << "\" class=\"label\" text-anchor=\"middle\">"
    << "time since first event (ms)</text>\n";
}

// One memory plot: a step line (downsampled to one max per pixel) with its y axis.
void memory_plot(std::ostringstream& o, const std::string& title, const Series& series, const char* color,
                 std::uint64_t y_max, const TimeAxis& ax, int top) {
  const ByteUnit unit = byte_unit(y_max);
  const double max_v = std::max(static_cast<double>(y_max) * unit.scale, 1e-9);
  const double step = tick_step(max_v, 4);
  const double top_v = std::ceil(max_v / step) * step;
  auto y = [&](std::uint64_t bytes) { return top + plot_h - static_cast<double>(bytes) * unit.scale / top_v * plot_h; };

  o << "<g class=\"plot\" transform=\"translate(0,0)\">\n";
  o << "<text x=\"" << left_pad << "\" y=\"" << top - 8 << "\" class=\"title\">" << xml_escape(title)
    << "</text>\n";
  o << "<rect x=\"" << left_pad << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
    << "\" class=\"frame\"/>\n";
  for (double v = 0; v <= top_v * 1.0001; v += step) {
    const double yy = top + plot_h - v / top_v * plot_h;
    o << "<line x1=\"" << left_pad - 4 << "\" y1=\"" << fixed(yy, 1) << "\" x2=\"" << left_pad + plot_w << "\" y2=\""
      << fixed(yy, 1) << "\" class=\"grid\"/><text x=\"" << left_pad - 6 << "\" y=\"" << fixed(yy + 3, 1)
      << "\" class=\"tick\" text-anchor=\"end\">" << trim_number(v) << "</text>\n";
  }
  o << "<text transform=\"translate(14," << top + plot_h / 2 << ") rotate(-90)\" class=\"label\" text-anchor=\"middle\">"
    << unit.name << "</text>\n";

  // Step line, at most a few points per pixel column: keep the max of each column and the
  // value at its end, so peaks survive downsampling.
  std::string pts;
  auto add = [&](double xx, double yy) { pts += fixed(xx, 1) + "," + fixed(yy, 1) + " "; };
  // Each pixel column with events becomes one vertical run at its centre: from the value
  // before the column, up to the column's max, to the value at its end.
  std::uint64_t current = 0, before = 0, col_max = 0;
  int column = -1;
  auto flush = [&] {
    if (column < 0) return;
    const double xx = std::min(column + 0.5, static_cast<double>(left_pad + plot_w));
    add(xx, y(before));
    add(xx, y(col_max));
    add(xx, y(current));
    before = current;
  };
  add(left_pad, y(0));
  for (const auto& [t, v] : series.points) {
    const int c = static_cast<int>(ax.x(t));
    if (c != column) {
      flush();
      column = c;
      col_max = v;
    }
    col_max = std::max(col_max, v);
    current = v;
  }
  flush();
  add(left_pad + plot_w, y(current));
  o << "<polyline points=\"" << pts << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\"/>\n";
  o << "<text x=\"" << left_pad + plot_w - 4 << "\" y=\"" << top + 12 << "\" class=\"tick\" text-anchor=\"end\">peak "
    << fixed(static_cast<double>(series.peak) * unit.scale, 3) << " " << unit.name << "</text>\n";
  o << "</g>\n";
}

const char* activity_color(std::string_view cat) {
  if (cat == "copy") return "#59a14f";
  if (cat == "compute") return "#f28e2b";
  if (cat == "wait") return "#bab0ac";
  return "#76b7b2";
}

int queue_lanes(std::ostringstream& o, const MemorySnapshot& s, const TimeAxis& ax, int top) {
  o << "<g class=\"queues\">\n<text x=\"" << left_pad << "\" y=\"" << top - 8
    << "\" class=\"title\">Queue activity</text>\n";
  std::vector<SnapshotQueue> queues = s.queues;
  for (const auto& a : s.activity) {
    if (std::none_of(queues.begin(), queues.end(), [&](const SnapshotQueue& q) { return q.id == a.queue_id; })) {
      queues.push_back({a.queue_id, "queue " + std::to_string(a.queue_id), "?"});
    }
  }
  std::sort(queues.begin(), queues.end(), [](const auto& l, const auto& r) { return l.id < r.id; });
  int y = top;
  for (const auto& q : queues) {
    o << "<g class=\"lane\" data-queue=\"" << q.id << "\"><text x=\"" << left_pad - 6 << "\" y=\"" << y + 12
      << "\" class=\"tick\" text-anchor=\"end\">" << xml_escape(q.name) << "</text><rect x=\"" << left_pad
      << "\" y=\"" << y << "\" width=\"" << plot_w << "\" height=\"" << lane_h - 4 << "\" class=\"frame\"/>\n";
    for (const auto& a : s.activity) {
      if (a.queue_id != q.id) continue;
      const double x0 = ax.x(a.begin_ns);
      const double x1 = a.end_ns > a.begin_ns ? ax.x(a.end_ns) : x0;
      o << "<rect x=\"" << fixed(x0, 1) << "\" y=\"" << y + 1 << "\" width=\"" << fixed(std::max(x1 - x0, 1.0), 1)
        << "\" height=\"" << lane_h - 6 << "\" fill=\"" << activity_color(category(a.name)) << "\"><title>"
        << xml_escape(a.name) << (a.bytes ? ", " + std::to_string(a.bytes) + " bytes" : std::string())
        << "</title></rect>\n";
    }
    o << "</g>\n";
    y += lane_h;
  }
  if (queues.empty()) {
    o << "<text x=\"" << left_pad << "\" y=\"" << y + 12 << "\" class=\"tick\">no queue activity recorded</text>\n";
    y += lane_h;
  }
  o << "</g>\n";
  return y;
}

void legend(std::ostringstream& o, int top) {
  struct Item {
    const char* color;
    const char* text;
    bool line;
  };
  const std::array<Item, 6> items{{{color_allocated, "allocated (active blocks)", true},
                                   {color_reserved, "reserved (cached segments)", true},
                                   {activity_color("copy"), "copy", false},
                                   {activity_color("compute"), "compute", false},
                                   {activity_color("wait"), "wait", false},
                                   {activity_color("other"), "other", false}}};
  o << "<g class=\"legend\">\n";
  int x = left_pad;
  for (const auto& it : items) {
    if (it.line) {
      o << "<line x1=\"" << x << "\" y1=\"" << top + 5 << "\" x2=\"" << x + 14 << "\" y2=\"" << top + 5
        << "\" stroke=\"" << it.color << "\" stroke-width=\"2\"/>";
    } else {
      o << "<rect x=\"" << x << "\" y=\"" << top << "\" width=\"14\" height=\"10\" fill=\"" << it.color << "\"/>";
    }
    o << "<text x=\"" << x + 18 << "\" y=\"" << top + 9 << "\" class=\"tick\">" << it.text << "</text>\n";
    x += 18 + 6 * static_cast<int>(std::strlen(it.text)) + 14;
    if (x > left_pad + plot_w - 60) {
      x = left_pad;
      top += 16;
    }
  }
  o << "</g>\n";
}

std::string mib_text(std::uint64_t bytes) { return fixed(static_cast<double>(bytes) / (1 << 20), 1) + " MiB"; }

void strategy_column(std::ostringstream& o, const std::string& label, const MemorySnapshot& s, std::uint64_t y_max) {
  const auto [allocated, reserved] = timelines(s);
  const TimeAxis ax = time_axis(s);
  const int lanes = static_cast<int>(std::max<std::size_t>(s.queues.size(), 1)) + 2;
  const int height = 40 + (plot_h + 60) * 2 + 30 + lanes * lane_h + 90;
  o << "<div class=\"column\">\n<h2>" << xml_escape(label) << "</h2>\n";
  o << "<table><tr><th>peak allocated</th><td>" << mib_text(allocated.peak) << "</td></tr><tr><th>peak reserved</th><td>"
    << mib_text(reserved.peak) << "</td></tr><tr><th>segments now</th><td>" << s.segments.size()
    << "</td></tr><tr><th>pool events</th><td>" << s.events.size() << "</td></tr><tr><th>queue spans</th><td>"
    << s.activity.size() << "</td></tr></table>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left_pad + plot_w + right_pad << "\" height=\""
    << height << "\" viewBox=\"0 0 " << left_pad + plot_w + right_pad << " " << height << "\">\n";
  o << "<g class=\"timeline\" data-strategy=\"" << xml_escape(label) << "\">\n";
  int top = 30;
  memory_plot(o, "Active memory timeline", allocated, color_allocated, y_max, ax, top);
  x_axis(o, ax, top + plot_h);
  top += plot_h + 60;
  memory_plot(o, "Active cached segment timeline", reserved, color_reserved, y_max, ax, top);
  x_axis(o, ax, top + plot_h);
  top += plot_h + 60;
  int bottom = queue_lanes(o, s, ax, top);
  x_axis(o, ax, bottom);
  legend(o, bottom + 42);
  o << "</g>\n</svg>\n</div>\n";
}

constexpr const char* report_css = R"(
body { font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 20px; }
h2 { font-size: 16px; margin: 4px 0; }
p.note { font-size: 12px; color: #555; max-width: 70em; }
.columns { display: flex; flex-wrap: wrap; gap: 18px; }
.column { flex: 0 0 auto; border: 1px solid #ddd; padding: 8px; }
table { font-size: 12px; border-collapse: collapse; margin-bottom: 4px; }
th { text-align: left; font-weight: normal; color: #555; padding-right: 10px; }
svg .axis { stroke: #333; stroke-width: 1; }
svg .grid { stroke: #e4e4e4; stroke-width: 1; }
svg .frame { fill: none; stroke: #bbb; stroke-width: 1; }
svg .tick { font-size: 10px; fill: #333; }
svg .label { font-size: 11px; fill: #333; }
svg .title { font-size: 13px; font-weight: bold; fill: #222; }
)";

}  // namespace

// ---- public entry points ---------------------------------------------------------------------------

std::string to_memory_viz_pickle(const MemorySnapshot& s) {
  const StreamMap stream(s);
  Pickler p;
  p.empty_dict();
  p.mark();

  p.str("segments");
  p.list(s.segments.size(), [&](std::size_t i) {
    const auto& g = s.segments[i];
    p.empty_dict();
    p.mark();
    p.item("device", 0);
    p.item("address", g.address);
    p.item("total_size", g.total_size);
    p.item("allocated_size", g.allocated_size);
    p.item("active_size", g.active_size);
    p.item("requested_size", g.requested_size);
    p.item("stream", stream(g.queue_id));
    p.item("segment_type", g.large ? "large" : "small");
    p.str("segment_pool_id");
    p.integer(0);
    p.integer(0);
    p.tuple2();
    p.item("is_expandable", false);
    p.str("blocks");
    p.list(g.blocks.size(), [&](std::size_t j) {
      const auto& b = g.blocks[j];
      p.empty_dict();
      p.mark();
      p.item("address", b.address);
      p.item("size", b.size);
      // PyTorch reports the last requested size of a free block; ferry has none: use the size.
      p.item("requested_size", b.state == BlockStateKind::active_allocated ? b.requested_size : b.size);
      p.item("state", to_string(b.state));
      p.setitems();
    });
    p.setitems();
  });

  p.str("device_traces");
  const std::vector<TraceEntry> trace = trace_entries(s, stream);
  p.list(1, [&](std::size_t) {
    p.list(trace.size(), [&](std::size_t i) {
      const auto& e = trace[i];
      p.empty_dict();
      p.mark();
      p.item("action", e.action);
      p.item("addr", e.addr);
      p.item("size", e.size);
      p.item("stream", e.stream);
      p.item("time_us", e.time_us);
      p.item("compile_context", "N/A");
      p.item("user_metadata", e.user_metadata);
      p.setitems();
    });
  });

  p.str("allocator_settings");
  pickle_allocator_settings(p);
  p.str("external_annotations");
  p.empty_list();

  p.setitems();
  p.stop();
  return p.take();
}

void write_memory_viz_pickle(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                             std::source_location where) {
  detail::write_file("write_memory_viz_pickle", to_memory_viz_pickle(snapshot), path, where);
}

std::string to_chrome_trace(const MemorySnapshot& s) {
  constexpr int pid = 1;
  std::string o = "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"device\": ";
  detail::append_json_string(o, s.device_name);
  o += ", \"backend\": ";
  detail::append_json_string(o, s.backend);
  o += "},\n\"traceEvents\": [\n";
  o += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, \"args\": {\"name\": ";
  detail::append_json_string(o, "ferry " + s.backend + ": " + s.device_name);
  o += "}}";
  std::set<std::uint32_t> named;
  for (const auto& q : s.queues) {
    o += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": " + std::to_string(q.id) +
         ", \"args\": {\"name\": ";
    detail::append_json_string(o, q.name + " (" + q.role + ")");
    o += "}},\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": 1, \"tid\": " + std::to_string(q.id) +
         ", \"args\": {\"sort_index\": " + std::to_string(q.id) + "}}";
    named.insert(q.id);
  }
  for (const auto& a : s.activity) {
    if (named.insert(a.queue_id).second) {
      o += ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": " + std::to_string(a.queue_id) +
           ", \"args\": {\"name\": \"queue " + std::to_string(a.queue_id) + "\"}}";
    }
  }
  // Spans of one queue, in begin order: complete events ("X"), never negative.
  std::vector<const QueueActivity*> spans;
  spans.reserve(s.activity.size());
  for (const auto& a : s.activity) spans.push_back(&a);
  std::stable_sort(spans.begin(), spans.end(), [](const QueueActivity* l, const QueueActivity* r) {
    return l->queue_id != r->queue_id ? l->queue_id < r->queue_id : l->begin_ns < r->begin_ns;
  });
  for (const QueueActivity* a : spans) {
    const bool observed = a->end_ns >= a->begin_ns && a->end_ns != 0;
    const std::uint64_t dur = observed ? a->end_ns - a->begin_ns : 0;
    o += ",\n{\"name\": ";
    detail::append_json_string(o, a->name);
    o += ", \"cat\": \"";
    o += category(a->name);
    o += "\", \"ph\": \"X\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(a->queue_id) +
         ", \"ts\": " + fixed(static_cast<double>(a->begin_ns) / 1e3, 3) +
         ", \"dur\": " + fixed(static_cast<double>(dur) / 1e3, 3) + ", \"args\": {\"bytes\": " +
         std::to_string(a->bytes) + ", \"end_observed\": " + (observed ? "true" : "false") + "}}";
  }
  // Pool footprint as counters (Perfetto draws them as tracks).
  const auto [allocated, reserved] = timelines(s);
  auto counters = [&](const Series& series, const char* name) {
    for (const auto& [t, v] : series.points) {
      o += ",\n{\"name\": \"" + std::string(name) + "\", \"ph\": \"C\", \"pid\": 1, \"ts\": " +
           fixed(static_cast<double>(t) / 1e3, 3) + ", \"args\": {\"bytes\": " + std::to_string(v) + "}}";
    }
  };
  counters(allocated, "pool allocated");
  counters(reserved, "pool reserved");
  o += "\n]}\n";
  return o;
}

void write_chrome_trace(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                        std::source_location where) {
  detail::write_file("write_chrome_trace", to_chrome_trace(snapshot), path, where);
}

std::string to_html_report(const std::vector<std::pair<std::string, MemorySnapshot>>& by_strategy) {
  // One y scale for all columns, so the footprints compare at a glance.
  std::uint64_t y_max = 1;
  for (const auto& [label, s] : by_strategy) {
    const auto [allocated, reserved] = timelines(s);
    y_max = std::max({y_max, allocated.peak, reserved.peak});
  }
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE html>\n"
       "<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
       "<title>ferry memory report</title>\n<style>"
    << report_css << "</style>\n</head>\n<body>\n<h1>ferry memory report</h1>\n";
  if (!by_strategy.empty()) {
    const auto& first = by_strategy.front().second;
    o << "<p class=\"note\">Device: " << xml_escape(first.device_name) << " (" << xml_escape(first.backend)
      << " backend). The <b>active memory timeline</b> is the bytes held by allocated blocks (falls at release); "
         "the <b>active cached segment timeline</b> is the bytes the pool holds from the backend (reserved). "
         "Both columns share one y scale. Queue spans are host-timed at enqueue; a span whose completion was "
         "not observed is drawn one pixel wide.</p>\n";
  }
  o << "<div class=\"columns\">\n";
  for (const auto& [label, s] : by_strategy) strategy_column(o, label, s, y_max);
  o << "</div>\n</body>\n</html>\n";
  return o.str();
}

void write_html_report(const std::vector<std::pair<std::string, MemorySnapshot>>& by_strategy,
                       const std::filesystem::path& path, std::source_location where) {
  detail::write_file("write_html_report", to_html_report(by_strategy), path, where);
}

void write_html_report(const MemorySnapshot& snapshot, const std::filesystem::path& path,
                       std::source_location where) {
  write_html_report({{snapshot.backend, snapshot}}, path, where);
}

}  // namespace ferry
