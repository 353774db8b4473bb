// The smooth rate limiter (Guava's SmoothBursty) on a fake clock, and the gauge.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "sluice/sluice.h"

using namespace std::chrono_literals;
using sluice::Gauge;
using sluice::RateLimiter;

namespace {

struct Step {
  double advance;
  int64_t permits;
};

struct TryCase {
  const char* name;
  double rate, burst;
  std::vector<Step> steps;
  std::vector<bool> want;
};

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(RateLimiter, TryAcquireAt) {
  const double inf = sluice::kUnlimited;
  std::vector<TryCase> cases = {
      {"the first permit is free, then one per interval", 10, 1, {{0, 1}, {0, 1}, {0.1, 1}, {0.05, 1}}, {true, false, true, false}},
      // 10 stored permits, then one more paid ahead (as Guava), then none.
      {"a burst stores at most max_burst_seconds", 10, 1, {{0, 1}, {5, 10}, {0, 1}, {0, 1}}, {true, true, true, false}},
      {"no burst stores nothing", 10, 0, {{0, 1}, {5, 1}, {0, 1}}, {true, true, false}},
      {"rate 0 admits nothing", 0, 1, {{0, 1}, {10, 1}}, {false, false}},
      {"inf admits everything", inf, 1, {{0, 1000000}, {0, 1000000}}, {true, true}},
      {"paying ahead makes the next caller wait", 10, 1, {{0, 5}, {0.1, 1}, {0.4, 1}}, {true, false, true}},
  };
  for (const auto& c : cases) {
    RateLimiter lim(c.rate, c.burst);
    double now = 0;
    std::vector<bool> got;
    for (const auto& s : c.steps) {
      now += s.advance;
      got.push_back(lim.try_acquire_at(now, s.permits));
    }
    EXPECT_EQ(got, c.want) << c.name;
  }
}

TEST(RateLimiter, ReserveAtPaysAhead) {
  RateLimiter lim(2, 1.0);
  EXPECT_EQ(lim.reserve_at(0, 1), 0);                 // free
  EXPECT_NEAR(lim.reserve_at(0, 4), 0.5, 1e-9);       // after the first's interval
  EXPECT_NEAR(lim.reserve_at(0, 1), 2.5, 1e-9);       // after the four
  EXPECT_NEAR(lim.tokens_at(0), -6.0, 1e-9);          // 6 permits at 2/s: 3 s paid ahead
}

TEST(RateLimiter, SetRateRetimesTheTimePaidAhead) {
  RateLimiter lim(10, 1.0);
  lim.reserve_at(0, 1);
  lim.reserve_at(0, 10);     // paid ahead until 1.1
  lim.set_rate_at(0.1, 20);  // 1.0 s still owed at 10/s is 0.5 s at 20/s
  EXPECT_NEAR(lim.reserve_at(0.1, 1), 0.5, 1e-9);
}

TEST(RateLimiter, SetRateKeepsTheTimeStored) {
  RateLimiter lim(10, 1.0);
  lim.try_acquire_at(0, 1);
  EXPECT_NEAR(lim.tokens_at(10), 10, 1e-9);  // a full store: 1 s
  lim.set_rate_at(10, 20);
  EXPECT_NEAR(lim.tokens_at(10), 20, 1e-9);  // still 1 s, at 20/s
}

TEST(RateLimiter, LeavingRate0StoresNothing) {
  RateLimiter lim(0, 1.0);
  lim.set_rate_at(50, 10);
  EXPECT_TRUE(lim.try_acquire_at(50, 1));
  EXPECT_FALSE(lim.try_acquire_at(50, 1));
}

TEST(RateLimiter, InvalidRatesCountAs0) {
  for (double r : {-1.0, std::nan("")}) {
    RateLimiter lim(r);
    EXPECT_EQ(lim.rate(), 0);
    EXPECT_FALSE(lim.try_acquire());
  }
}

TEST(RateLimiter, AnInjectedClock) {
  double t = 1000;
  RateLimiter lim(4, 0.0, [&t] { return t; });
  EXPECT_TRUE(lim.try_acquire());
  EXPECT_FALSE(lim.try_acquire());
  t += 0.25;
  EXPECT_TRUE(lim.try_acquire());
  EXPECT_NEAR(lim.tokens(), -1, 1e-9);
}

TEST(RateLimiter, AcquireFailsAtOncePastItsTimeout) {
  RateLimiter lim(0.01, 0);
  lim.acquire();
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(lim.acquire(1, 100ms), sluice::DeadlineExceeded);  // the next permit is 100 s away
  EXPECT_LT(since(start), 30);  // did not wait for it
  EXPECT_GT(lim.tokens(), -1.01);  // nothing taken
  try {
    lim.acquire(1, 100ms);
  } catch (const sluice::Error& e) {
    EXPECT_EQ(e.code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(e.code_name(), "DEADLINE_EXCEEDED");
  }
}

TEST(RateLimiter, AcquireWaitsItsTurn) {
  RateLimiter lim(50, 0);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) lim.acquire(1, 10s);
  EXPECT_GE(since(start), 5.0 / 50 * 0.9);
}

TEST(RateLimiter, TryAcquireWithATimeout) {
  RateLimiter lim(20, 0);
  EXPECT_TRUE(lim.try_acquire());
  EXPECT_FALSE(lim.try_acquire(1, 10ms));
  EXPECT_TRUE(lim.try_acquire(1, 5s));
}

TEST(RateLimiter, AWaiterAtRate0WakesOnARateChange) {
  RateLimiter lim(0);
  std::atomic<double> got{-1};
  std::thread t([&] { got = lim.acquire(1, 30s).count(); });
  std::this_thread::sleep_for(50ms);
  lim.set_rate(100);
  t.join();
  EXPECT_GE(got.load(), 0);
  EXPECT_LT(got.load(), 30);
}

TEST(RateLimiter, AcquireAtRate0TimesOut) {
  RateLimiter lim(0);
  EXPECT_THROW(lim.acquire(1, 50ms), sluice::DeadlineExceeded);
}

TEST(RateLimiter, IsThreadSafe) {
  RateLimiter lim(1000, 0.0);
  std::atomic<int64_t> admitted{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      // Until 100 are admitted (a fifth of a second unloaded), however slow the machine.
      while (admitted.load() < 100 && since(start) < 60) {
        if (lim.try_acquire()) ++admitted;
      }
    });
  }
  for (auto& t : ts) t.join();
  double elapsed = since(start);
  EXPECT_LE(admitted.load(), 1000 * elapsed + 1);
  EXPECT_GE(admitted.load(), 100);
}

TEST(Gauge, AdmitsFloorCapacity) {
  Gauge g(2.5);
  EXPECT_TRUE(g.try_acquire());
  EXPECT_TRUE(g.try_acquire());
  EXPECT_FALSE(g.try_acquire());
  EXPECT_EQ(g.in_use(), 2);
  g.set_capacity(1);  // never revokes a held slot
  g.release();
  EXPECT_FALSE(g.try_acquire());
  g.release();
  EXPECT_TRUE(g.try_acquire());
}

TEST(Gauge, WaitersFirstComeFirstServed) {
  Gauge g(1);
  g.acquire();
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) {
    ts.emplace_back([&, i] {
      g.acquire();
      {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);
      }
      g.release();
    });
    std::this_thread::sleep_for(30ms);  // queue them in order
  }
  g.release();
  for (auto& t : ts) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(Gauge, TimeoutAndPermits) {
  Gauge g(1);
  {
    Gauge::Permit p = g.hold(1s);
    EXPECT_EQ(g.in_use(), 1);
    EXPECT_THROW(g.hold(20ms), sluice::DeadlineExceeded);
    EXPECT_FALSE(g.try_hold());
    Gauge::Permit moved = std::move(p);  // movable: still one slot
    EXPECT_FALSE(p);
    EXPECT_TRUE(moved);
    EXPECT_EQ(g.in_use(), 1);
  }
  EXPECT_EQ(g.in_use(), 0);  // released at the end of the block
}

TEST(Gauge, ARisingCapacityWakesWaiters) {
  Gauge g(0);
  std::thread t([&] { g.acquire(5s); });
  std::this_thread::sleep_for(30ms);
  g.set_capacity(1);
  t.join();
  EXPECT_EQ(g.in_use(), 1);
}
