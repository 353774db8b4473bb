// RateLimiter (Guava's SmoothBursty) and Gauge; see include/sluice/ratelimit.h.
#include "sluice/ratelimit.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "sluice/errors.h"

namespace sluice {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// How many rate changes a waiter can follow while it sleeps; waiters wake
// at every change, so more are never needed.
constexpr size_t kKeepChanges = 64;

double sanitize(double rate) { return rate > 0 ? rate : 0.0; }  // negative, zero or NaN: 0

// retime_factor is how the time still to wait stretches when the rate goes
// from old to new: old / new; infinity (wait for the next change) when it
// becomes 0; 0 (at once) when it leaves 0 or infinity, or becomes infinity.
double retime_factor(double old_rate, double new_rate) {
  if (old_rate == 0) return 0;
  if (new_rate == 0) return kInf;
  if (std::isinf(new_rate) || std::isinf(old_rate)) return 0;
  return old_rate / new_rate;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class CV, class Lock>
void wait_seconds(CV& cv, Lock& lock, double seconds) {
  if (std::isinf(seconds)) {
    cv.wait(lock);
  } else if (seconds > 0) {
    cv.wait_for(lock, std::chrono::duration<double>(std::min(seconds, 1e6)));
  }
}

}  // namespace

RateLimiter::RateLimiter(double rate, double max_burst_seconds, Clock clock)
    : clock_(std::move(clock)), burst_(max_burst_seconds > 0 ? max_burst_seconds : 0.0) {
  set_params(sanitize(rate));
}

double RateLimiter::now() const { return clock_ ? clock_() : steady_seconds(); }

void RateLimiter::set_params(double rate) {
  rate_ = rate;
  if (std::isinf(rate)) {
    interval_ = 0;
    max_stored_ = kInf;
  } else if (rate > 0) {
    interval_ = 1.0 / rate;
    max_stored_ = burst_ * rate;
  } else {
    interval_ = 0;
    max_stored_ = 0;
  }
}

// resync stores the permits accrued since the next free time, at most the
// burst (Guava's resync).
void RateLimiter::resync(double now) {
  if (now > next_free_) {
    if (interval_ > 0) stored_ = std::min(max_stored_, stored_ + (now - next_free_) / interval_);
    next_free_ = now;
  }
}

RateLimiter::Outcome RateLimiter::reserve(double now, int64_t permits, double limit, double* at, Claim* claim) {
  if (rate_ == 0) return kNever;
  if (std::isinf(rate_)) {
    *at = now;
    return kFree;
  }
  if (!started_) {
    started_ = true;
    stored_ = 0;
    next_free_ = now;
  }
  double found_next = next_free_, found_stored = stored_;
  resync(now);
  double when = std::max(next_free_, now);
  *at = when;
  if (when > limit) {
    next_free_ = found_next;
    stored_ = found_stored;
    return kLate;
  }
  double spend = std::min(static_cast<double>(permits), stored_);
  stored_ -= spend;
  next_free_ = when + (static_cast<double>(permits) - spend) * interval_;
  if (claim != nullptr) *claim = Claim{found_next, found_stored, next_free_, gen_};
  return kTaken;
}

// refund gives back a claim if nothing was taken since and the rate did not
// change.
void RateLimiter::refund(const Claim& c) {
  if (c.gen == gen_ && next_free_ == c.end) {
    next_free_ = c.found_next;
    stored_ = c.found_stored;
  }
}

double RateLimiter::rate() const {
  std::lock_guard<std::mutex> l(mu_);
  return rate_;
}

void RateLimiter::set_rate(double rate) { set_rate_at(now(), rate); }

void RateLimiter::set_rate_at(double now, double rate) {
  rate = sanitize(rate);
  {
    std::lock_guard<std::mutex> l(mu_);
    double old = rate_;
    if (rate == old) return;
    if (std::isinf(old)) {
      set_params(rate);
      stored_ = max_stored_;
      next_free_ = now;
    } else if (!started_ || old == 0) {
      set_params(rate);
      stored_ = 0;
      next_free_ = now;
    } else {
      resync(now);
      double seconds_stored = stored_ * interval_;
      set_params(rate);
      if (rate > 0 && !std::isinf(rate)) {
        stored_ = std::min(max_stored_, seconds_stored / interval_);
        if (next_free_ > now) next_free_ = now + (next_free_ - now) * old / rate;
      } else if (rate == 0) {
        stored_ = 0;
      }
    }
    started_ = true;
    ++gen_;
    changes_.push_back(Change{gen_, now, retime_factor(old, rate)});
    if (changes_.size() > kKeepChanges) changes_.pop_front();
  }
  cv_.notify_all();
}

bool RateLimiter::try_acquire(int64_t permits, Seconds timeout) {
  if (permits <= 0) return true;
  if (timeout.count() <= 0) {
    std::lock_guard<std::mutex> l(mu_);
    double t = now(), at;
    Outcome o = reserve(t, permits, t, &at, nullptr);
    return o == kFree || o == kTaken;
  }
  return wait(permits, timeout.count()) >= 0;
}

bool RateLimiter::try_acquire_at(double now, int64_t permits) {
  if (permits <= 0) return true;
  std::lock_guard<std::mutex> l(mu_);
  double at;
  Outcome o = reserve(now, permits, now, &at, nullptr);
  return o == kFree || o == kTaken;
}

double RateLimiter::reserve_at(double now, int64_t permits) {
  if (permits <= 0) return 0;
  std::lock_guard<std::mutex> l(mu_);
  double at = now;
  Outcome o = reserve(now, permits, kInf, &at, nullptr);
  if (o == kNever) return kInf;
  return std::max(0.0, at - now);
}

Seconds RateLimiter::acquire(int64_t permits) {
  if (permits <= 0) return Seconds(0);
  return Seconds(wait(permits, kInf));
}

Seconds RateLimiter::acquire(int64_t permits, Seconds timeout) {
  if (permits <= 0) return Seconds(0);
  double waited = wait(permits, std::max(0.0, timeout.count()));
  if (waited < 0) {
    std::ostringstream m;
    m << "no " << permits << " permit(s) within " << timeout.count() << " s at " << rate() << " permits/s";
    throw DeadlineExceeded(m.str());
  }
  return Seconds(waited);
}

Seconds RateLimiter::acquire_until(int64_t permits, std::chrono::steady_clock::time_point deadline) {
  return acquire(permits, std::chrono::duration_cast<Seconds>(deadline - std::chrono::steady_clock::now()));
}

double RateLimiter::wait(int64_t permits, double timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const double start = now();
  const double deadline = std::isinf(timeout) ? kInf : start + std::max(0.0, timeout);
  for (bool first = true;; first = false) {
    double t = first ? start : now(), at = t;
    Claim claim;
    Outcome o = reserve(t, permits, deadline, &at, &claim);
    if (o == kFree || (o == kTaken && at <= t)) return t - start;  // admitted at once: one clock read
    if (o == kLate) return -1;
    if (o == kNever) {
      if (t >= deadline) return -1;
      uint64_t gen = gen_;
      while (gen_ == gen && t < deadline) {
        wait_seconds(cv_, l, deadline - t);
        t = now();
      }
      continue;
    }
    uint64_t gen = gen_;
    for (;;) {
      t = now();
      if (at <= t) return t - start;
      if (t >= deadline) {
        refund(claim);
        return -1;
      }
      wait_seconds(cv_, l, std::min(at, deadline) - t);
      if (gen_ != gen) {
        // The rate changed: the turn moves as the schedule did.
        for (const Change& c : changes_) {
          if (c.gen > gen && at > c.at) {
            if (c.factor == 0) {
              at = c.at;
            } else if (std::isinf(c.factor)) {
              at = kInf;
            } else {
              at = c.at + (at - c.at) * c.factor;
            }
          }
        }
        gen = gen_;
      }
    }
  }
}

double RateLimiter::tokens() const { return tokens_at(now()); }

double RateLimiter::tokens_at(double now) const {
  std::lock_guard<std::mutex> l(mu_);
  if (std::isinf(rate_)) return kInf;
  if (rate_ == 0 || !started_) return 0;
  if (now >= next_free_) return std::min(max_stored_, stored_ + (now - next_free_) * rate_);
  return stored_ - (next_free_ - now) * rate_;
}

// --- Gauge --------------------------------------------------------------------------

Gauge::Permit& Gauge::Permit::operator=(Permit&& o) noexcept {
  if (this != &o) {
    release();
    g_ = o.g_;
    o.g_ = nullptr;
  }
  return *this;
}

void Gauge::Permit::release() {
  if (g_ != nullptr) {
    Gauge* g = g_;
    g_ = nullptr;
    g->release();
  }
}

Gauge::Gauge(double capacity) { set_locked(capacity); }

void Gauge::set_locked(double c) {
  if (!(c > 0)) c = 0;
  capacity_ = c;
  slots_ = std::isinf(c) ? kInf : std::floor(c);
}

double Gauge::capacity() const {
  std::lock_guard<std::mutex> l(mu_);
  return capacity_;
}

int64_t Gauge::in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

void Gauge::set_capacity(double capacity) {
  std::lock_guard<std::mutex> l(mu_);
  set_locked(capacity);
  wake_locked();
}

void Gauge::wake_locked() {
  while (!waiters_.empty() && static_cast<double>(in_use_) < slots_) {
    Waiter* w = waiters_.front();
    waiters_.pop_front();
    ++in_use_;
    w->granted = true;
    w->cv.notify_one();
  }
}

bool Gauge::try_acquire() {
  std::lock_guard<std::mutex> l(mu_);
  if (static_cast<double>(in_use_) < slots_ && waiters_.empty()) {
    ++in_use_;
    return true;
  }
  return false;
}

bool Gauge::acquire_for(std::optional<Seconds> timeout) {
  std::unique_lock<std::mutex> l(mu_);
  if (static_cast<double>(in_use_) < slots_ && waiters_.empty()) {
    ++in_use_;
    return true;
  }
  Waiter w;
  waiters_.push_back(&w);
  if (timeout) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(*timeout);
    w.cv.wait_until(l, deadline, [&] { return w.granted; });
  } else {
    w.cv.wait(l, [&] { return w.granted; });
  }
  if (w.granted) return true;  // granted meanwhile: keep it
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &w));
  return false;
}

void Gauge::acquire() { acquire_for(std::nullopt); }

void Gauge::acquire(Seconds timeout) {
  if (!acquire_for(timeout)) {
    throw DeadlineExceeded("no slot of the gauge within " + std::to_string(timeout.count()) + " s");
  }
}

void Gauge::release() {
  std::lock_guard<std::mutex> l(mu_);
  if (in_use_ > 0) --in_use_;
  wake_locked();
}

Gauge::Permit Gauge::hold() {
  acquire();
  return Permit(this);
}

Gauge::Permit Gauge::hold(Seconds timeout) {
  acquire(timeout);
  return Permit(this);
}

Gauge::Permit Gauge::try_hold() { return try_acquire() ? Permit(this) : Permit(); }

}  // namespace sluice
