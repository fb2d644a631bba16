// SPDX-License-Identifier: MIT
// ferry-bench: where a step loop's time goes. A thread polls the completion of each step's
// copy and of each step's compute while the loop runs and stamps when it first sees each
// reached; the host stamps when it issued each step. Polling costs one core and resolves a
// few microseconds, far below the steps' milliseconds.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace ferry_bench {

/// The step time of a loop in its steady state. The loop's first steps pay one-time costs
/// that a long training loop amortizes (a pool growing its segments, first submissions), so
/// a step loop is timed from the completion of its step `warm` - 1 to the completion of its
/// last step. The host sees a step complete when it waits for it: before issuing step i it
/// waits for step i - inflight, and at the end for the last step. With too few steps for
/// that, the whole loop is timed.
class StepClock {
 public:
  using clock_type = std::chrono::steady_clock;
  static constexpr int warm = 3;
  StepClock(int steps, int inflight) : steps_(steps), inflight_(inflight), start_(clock_type::now()) {}
  /// The host's wait for step i - inflight returned, before it issues step i.
  void waited(int i) {
    if (i == warm - 1 + inflight_) from_ = clock_type::now();
  }
  /// The loop's last step was seen complete: the steady-state step time and, in `with_warmup`,
  /// the whole loop's time per step (ms).
  double step_ms(double* with_warmup = nullptr) const {
    const auto end = clock_type::now();
    auto ms = [](clock_type::time_point a, clock_type::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    if (with_warmup != nullptr) *with_warmup = ms(start_, end) / steps_;
    if (warm - 1 + inflight_ >= steps_) return ms(start_, end) / steps_;
    return ms(from_, end) / (steps_ - warm);
  }

 private:
  int steps_, inflight_;
  clock_type::time_point start_, from_{};
};

/// Medians over a loop's steps (after the first `skip`), in milliseconds.
struct StepTimes {
  bool measured = false;
  double host_lead_ms = 0;       ///< step i-1's compute done minus step i issued (> 0: host ahead)
  double copy_period_ms = 0;     ///< copy i done minus copy i-1 done
  double copy_after_step_ms = 0; ///< copy i done minus step i-1's compute done
  double use_after_copy_ms = 0;  ///< step i's compute done minus copy i done
  double step_period_ms = 0;     ///< step i's compute done minus step i-1's
  [[nodiscard]] std::string text() const;
};

class StepTrace {
 public:
  using clock_type = std::chrono::steady_clock;
  /// `reached(kind, i)`: whether step i's copy (kind 0) or compute (kind 1) is complete; it is
  /// called from the polling thread only for steps already issued.
  StepTrace(std::size_t steps, std::function<bool(int kind, std::size_t i)> reached)
      : reached_(std::move(reached)), issued_at_(steps), done_at_{std::vector<clock_type::time_point>(steps),
                                                                  std::vector<clock_type::time_point>(steps)} {
    poller_ = std::thread([this] { poll(); });
  }
  ~StepTrace() { stop(); }
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  /// Step i was issued at `at` (called in step order, once whatever `reached` needs for
  /// step i is in place).
  void issued(std::size_t i, clock_type::time_point at) {
    issued_at_[i] = at;
    issued_.store(i + 1, std::memory_order_release);
  }
  /// Wait until every issued step's copy and compute were seen complete, then stop polling.
  void stop() {
    if (!poller_.joinable()) return;
    stop_.store(true, std::memory_order_release);
    poller_.join();
  }
  [[nodiscard]] StepTimes summary(std::size_t skip = 3) const;

 private:
  // A query that throws (a lost device) ends the trace: the loop's own waits report the
  // error, and the summary says the steps were not traced.
  void poll() {
    std::size_t next[2] = {0, 0};
    try {
      for (;;) {
        const std::size_t n = issued_.load(std::memory_order_acquire);
        const bool stopping = stop_.load(std::memory_order_acquire);
        for (int k = 0; k < 2; ++k) {
          while (next[k] < n && reached_(k, next[k])) done_at_[k][next[k]++] = clock_type::now();
        }
        if (stopping && next[0] == n && next[1] == n) return;
      }
    } catch (...) {
      failed_.store(true, std::memory_order_release);
    }
  }

  std::function<bool(int, std::size_t)> reached_;
  std::vector<clock_type::time_point> issued_at_;
  std::vector<clock_type::time_point> done_at_[2];
  std::atomic<std::size_t> issued_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::thread poller_;
};

}  // namespace ferry_bench
