// SPDX-License-Identifier: MIT
// What the probes (ferry-probe-cuda, ferry-probe-front-end) parse, print and reduce the same way:
// sizes with binary suffixes, comma lists, size labels, formatted text, medians and quantiles.
// JSON strings and files go through ferry's own helpers (common/json.hpp, common/write_file.hpp).
// Header-only; each probe is one translation unit.
#pragma once

#include <algorithm>
#include <exception>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace probe {

/// "64M", "1.5G", "4096", "16KiB" -> bytes (K/M/G binary). Throws std::runtime_error.
inline std::uint64_t parse_size(const std::string& s) {
  if (s.empty()) throw std::runtime_error("empty size");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string suffix(end);
  std::uint64_t mul = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mul = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") mul = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") mul = 1ull << 30;
  else if (!suffix.empty() && suffix != "B") throw std::runtime_error("bad size suffix in '" + s + "'");
  if (!(v > 0)) throw std::runtime_error("bad size '" + s + "'");
  return static_cast<std::uint64_t>(v * static_cast<double>(mul));
}

/// "a,b,c" -> {f("a"), f("b"), f("c")}; empty items are skipped, an empty list throws.
template <class T, class F>
std::vector<T> parse_list(const std::string& list, F f) {
  std::vector<T> out;
  std::size_t p = 0;
  while (p <= list.size()) {
    std::size_t c = list.find(',', p);
    if (c == std::string::npos) c = list.size();
    if (c > p) out.push_back(f(list.substr(p, c - p)));
    p = c + 1;
  }
  if (out.empty()) throw std::runtime_error("empty list");
  return out;
}

/// 64 MiB -> "64M" (the largest binary unit that divides it), else bytes.
inline std::string size_str(std::uint64_t b) {
  char buf[64];
  const auto u = [](std::uint64_t x) { return static_cast<unsigned long long>(x); };
  if (b % (1ull << 30) == 0) std::snprintf(buf, sizeof buf, "%lluG", u(b >> 30));
  else if (b % (1ull << 20) == 0) std::snprintf(buf, sizeof buf, "%lluM", u(b >> 20));
  else if (b % (1ull << 10) == 0) std::snprintf(buf, sizeof buf, "%lluK", u(b >> 10));
  else std::snprintf(buf, sizeof buf, "%lluB", u(b));
  return buf;
}

/// Appends printf-style formatted text to `out` (the probes build their JSON in memory and
/// write it with ferry's write-file helper).
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, again);
    out.resize(at + static_cast<std::size_t>(n));
  }
  va_end(again);
}

/// Nearest-rank quantile q in [0, 1]; 0 for no samples.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

/// Median (the mean of the two middle samples for an even count); 0 for no samples.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Walks a command line flag by flag: `while (args.next()) { if (args.flag() == "--n") n =
/// args.value(); ... }`. value() takes the word after the flag; a missing one throws.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  [[nodiscard]] const std::string& flag() const { return flag_; }
  std::string value() {
    if (i_ + 1 >= argc_) throw std::runtime_error(flag_ + " needs a value");
    return argv_[++i_];
  }
  [[nodiscard]] const char* program() const { return argv_[0]; }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string flag_;
};

/// A probe's main: `run(argc, argv)`'s exit status, or 1 after printing an exception as
/// "<program>: <what>" on stderr.
template <class Run>
int guarded_main(const char* program, Run run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace probe
