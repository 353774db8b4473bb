// Local enforcement of a lease: a smooth rate limiter and a gauge.
//
// RateLimiter has the semantics of Guava's SmoothBursty (the Go ratelimit
// package is the model): permits are issued at a steady rate, in permits
// per second; up to max_burst_seconds of unused permits are stored and
// handed out at once; a request for more permits than are available is
// granted as soon as the previous request's permits are paid for and makes
// the *next* request wait ("pays ahead"). Rate 0 admits nothing; infinity
// admits everything. Gauge is a counting semaphore for in-flight limits.
//
// Time is an input: a Clock (seconds on a monotonic scale) is injectable,
// and the non-blocking methods have ..._at(now) twins.
//
// Thread-safety: RateLimiter and Gauge are safe for concurrent use from
// many threads; a Gauge::Permit is owned by one thread at a time.
//
// Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
// "setRate"); doorman-design.md, "Client library" (GaugeResource).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>

namespace sluice {

// Seconds is a duration in seconds; std::chrono's durations convert to it
// (std::chrono::milliseconds(100) is Seconds(0.1)).
using Seconds = std::chrono::duration<double>;

// Clock returns the time in seconds on a monotonic scale. An empty Clock
// means std::chrono::steady_clock.
using Clock = std::function<double()>;

// kUnlimited is the rate (or capacity) that admits everything.
inline constexpr double kUnlimited = std::numeric_limits<double>::infinity();

// RateLimiter is a SmoothBursty rate limiter (Guava's semantics); see the
// file comment. It starts with nothing stored, at its first use. A rate
// change re-times the permits already paid ahead, and the blocked callers'
// turns, at the new rate. Thread-safe; neither copyable nor movable (bind
// it with a std::shared_ptr, as Resource::rate_limiter does).
class RateLimiter {
 public:
  // rate is in permits per second (0: nothing until set_rate; kUnlimited:
  // everything; negative or NaN count as 0); max_burst_seconds is how many
  // seconds of unused permits may be stored (Guava's default is 1; 0
  // stores nothing).
  explicit RateLimiter(double rate = 0, double max_burst_seconds = 1.0, Clock clock = nullptr);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // rate is the rate, in permits per second.
  double rate() const;
  // max_burst_seconds is how many seconds of unused permits may be stored.
  double max_burst_seconds() const { return burst_; }

  // set_rate sets the rate from now on; see set_rate_at.
  void set_rate(double rate);
  // set_rate_at sets the rate from now on: permits accrued until now count
  // at the old rate, stored permits keep the time they stand for, permits
  // paid ahead and blocked callers' turns are re-timed at the new rate.
  // Leaving rate 0 starts with nothing stored; leaving kUnlimited with a
  // full store. Setting the same rate does nothing.
  // Source: guava-ratelimiter.md, "setRate" (doSetRate).
  void set_rate_at(double now, double rate);

  // acquire blocks until permits are free and takes them; returns the
  // time waited (Guava's acquire). permits <= 0 returns 0 at once.
  Seconds acquire(int64_t permits = 1);
  // acquire with a timeout: throws sluice::DeadlineExceeded at once, taking
  // nothing, if the wait would pass timeout; at rate 0 it waits for a rate
  // change, at most timeout.
  Seconds acquire(int64_t permits, Seconds timeout);
  // acquire_until is acquire with a deadline on the steady clock.
  Seconds acquire_until(int64_t permits, std::chrono::steady_clock::time_point deadline);

  // try_acquire takes permits if they are free within timeout (0: now),
  // waiting for them if need be; returns false at once, taking nothing, if
  // they are not (Guava's tryAcquire(permits, timeout)).
  bool try_acquire(int64_t permits = 1, Seconds timeout = Seconds(0));
  // try_acquire_at is try_acquire with no wait, at time now.
  bool try_acquire_at(double now, int64_t permits = 1);
  // reserve_at takes permits at now, paying ahead, and returns how many
  // seconds after now the caller may act (infinity at rate 0, taking
  // nothing). Never blocks.
  double reserve_at(double now, int64_t permits = 1);

  // tokens is the permits available now: stored permits, or minus the
  // permits paid ahead (negative when callers are queued).
  double tokens() const;
  double tokens_at(double now) const;

 private:
  enum Outcome { kNever, kLate, kFree, kTaken };
  struct Claim {
    double found_next = 0, found_stored = 0, end = 0;
    uint64_t gen = 0;
  };
  struct Change {
    uint64_t gen;
    double at, factor;
  };
  double now() const;
  void set_params(double rate);
  void resync(double now);
  Outcome reserve(double now, int64_t permits, double limit, double* at, Claim* claim);
  void refund(const Claim& c);
  // wait returns the seconds waited, or a negative number when it timed out.
  double wait(int64_t permits, double timeout);

  Clock clock_;
  double burst_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  double rate_ = 0, interval_ = 0, max_stored_ = 0, stored_ = 0, next_free_ = 0;
  bool started_ = false;
  uint64_t gen_ = 0;
  std::deque<Change> changes_;  // the last rate changes, oldest first
};

// Gauge is a counting semaphore for in-flight limits: at most
// floor(capacity) holders at once (kUnlimited: unlimited; negative or NaN:
// 0). Lowering the capacity never revokes a held slot; it only stops new
// acquisitions until enough holders release. Waiters are served first
// come, first served. Thread-safe; neither copyable nor movable.
class Gauge {
 public:
  // Permit holds one slot of a gauge and gives it back when destroyed
  // (RAII). Movable, not copyable; an empty (moved-from) permit holds
  // nothing.
  class Permit {
   public:
    Permit() = default;
    Permit(Permit&& o) noexcept : g_(o.g_) { o.g_ = nullptr; }
    Permit& operator=(Permit&& o) noexcept;
    Permit(const Permit&) = delete;
    Permit& operator=(const Permit&) = delete;
    ~Permit() { release(); }
    // release gives the slot back now (once).
    void release();
    explicit operator bool() const { return g_ != nullptr; }

   private:
    friend class Gauge;
    explicit Permit(Gauge* g) : g_(g) {}
    Gauge* g_ = nullptr;
  };

  explicit Gauge(double capacity = 0);
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  double capacity() const;
  // in_use is the slots held now.
  int64_t in_use() const;
  // set_capacity changes the capacity at once and wakes the waiters that
  // now fit.
  void set_capacity(double capacity);

  // try_acquire takes a slot if one is free now (and nobody is waiting).
  bool try_acquire();
  // acquire blocks until a slot is free and takes it; give it back with
  // release().
  void acquire();
  // acquire with a timeout throws sluice::DeadlineExceeded without a slot.
  void acquire(Seconds timeout);
  // release gives a slot back; releasing more than is held does nothing.
  void release();

  // hold is acquire returning a Permit that releases the slot when it goes
  // out of scope.
  Permit hold();
  Permit hold(Seconds timeout);
  // try_hold is try_acquire as a Permit (empty when none was free).
  Permit try_hold();

 private:
  struct Waiter {
    bool granted = false;
    std::condition_variable cv;
  };
  void set_locked(double c);
  void wake_locked();
  bool acquire_for(std::optional<Seconds> timeout);

  mutable std::mutex mu_;
  double capacity_ = 0, slots_ = 0;
  int64_t in_use_ = 0;
  std::deque<Waiter*> waiters_;
};

}  // namespace sluice
