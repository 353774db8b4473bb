// The lease client's refresh: one bulk request, Doorman's 5-second rule,
// fallbacks, redirects, failover, pushes and release — stepped by hand on a
// fake clock against an in-process doorman.Capacity test server on loopback.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "capacity_server.h"
#include "internal.h"
#include "sluice/sluice.h"

namespace {

using sluice::test::CapacityServer;
using sluice::test::FakeClock;
using sluice::test::manual_client;


// step is one turn of c's refresh loop; it returns the seconds until the next.
double step(sluice::Client& c) { return sluice::detail::Access::refresh_step(c).count(); }

// run runs the refresh loop for seconds of the fake clock, as the refresh
// thread would: a step, then the clock moved to the next one.
void run(sluice::Client& c, FakeClock& clock, double seconds) {
  double end = clock.now() + seconds;
  for (;;) {
    double wait = step(c);
    if (clock.now() + wait > end) {
      clock.advance(end - clock.now());
      return;
    }
    clock.advance(std::max(wait, 0.001));
  }
}

}  // namespace

TEST(Leases, OneBulkRequestPerRefreshIntervalFor1000Resources) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  std::vector<sluice::Resource> rs;
  for (int i = 0; i < 1000; ++i) rs.push_back(c.resource("bulk/" + std::to_string(i), 1));
  step(c);
  EXPECT_EQ(s.counts(), std::vector<int>{1000});  // added before the first step: one request
  for (auto& r : rs) ASSERT_EQ(r.capacity(), 1);
  run(c, clock, 50);  // ten refresh intervals of 5 s
  auto got = s.counts();
  EXPECT_EQ(std::vector<int>(got.begin() + 1, got.end()), std::vector<int>(10, 1000));
  EXPECT_EQ(sluice::detail::Access::capacity_requests(c), 11);
  c.close();
  ASSERT_FALSE(s.released.empty());
  EXPECT_EQ(s.released.back().size(), 1000u);  // every lease given back in one request
}

TEST(Leases, AResourceAddedLaterRejoinsTheBulkRequest) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto a = c.resource("a", 1);
  auto b = c.resource("b", 1);
  step(c);
  clock.advance(2);
  auto cc = c.resource("c", 1);  // new: sent at once, alone (a and b are in their window)
  step(c);
  EXPECT_EQ(s.counts(), (std::vector<int>{2, 1}));
  run(c, clock, 30);
  auto got = s.counts();
  ASSERT_GT(got.size(), 2u);
  for (size_t i = 2; i < got.size(); ++i) EXPECT_EQ(got[i], 3) << "request " << i;
}

TEST(Leases, The5SecondRuleHoldsBackAChangeOfWants) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 10);
  step(c);
  clock.advance(1);
  r.set_wants(20);
  double wait = step(c);
  EXPECT_EQ(s.counts().size(), 1u);  // not within 5 s of the last
  EXPECT_NEAR(wait, 4, 1e-6);
  clock.advance(wait);
  step(c);
  ASSERT_EQ(s.requests.size(), 2u);
  EXPECT_EQ(s.requests[1].resource(0).wants(), 20);
  EXPECT_TRUE(s.requests[1].resource(0).has_has());
  EXPECT_EQ(r.capacity(), 20);
}

TEST(Leases, SafeCapacityAfterTheLeaseExpires) {
  FakeClock clock;
  CapacityServer s(clock, 100, 10);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 5);
  step(c);
  EXPECT_EQ(r.capacity(), 5);
  EXPECT_TRUE(r.lease().has_value());
  EXPECT_EQ(r.safe_capacity().value_or(-1), 1.5);
  s.stop();  // unreachable from now on
  run(c, clock, 12);
  EXPECT_FALSE(r.lease().has_value());
  EXPECT_EQ(r.capacity(), 1.5);  // the safe capacity the server sent
}

TEST(Leases, FallbackModes) {
  struct {
    sluice::Mode mode;
    double want;
  } cases[] = {{sluice::Mode::kPessimistic, 0}, {sluice::Mode::kOptimistic, 5}};
  for (auto& tc : cases) {
    FakeClock clock;
    CapacityServer s(clock, 100, 10);
    auto client = manual_client(s.addr, clock, tc.mode);
    sluice::Client& c = *client;
    auto r = c.resource("a", 5);
    step(c);
    s.stop();
    run(c, clock, 12);
    EXPECT_EQ(r.capacity(), tc.want);
  }
}

TEST(Leases, AMastershipRedirectIsFollowed) {
  FakeClock clock;
  CapacityServer master(clock), other(clock);
  other.master = master.addr;
  auto client = manual_client(other.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 3);
  step(c);
  EXPECT_EQ(r.capacity(), 3);
  EXPECT_EQ(c.server(), master.addr);
  EXPECT_EQ(other.requests.size(), 1u);
  EXPECT_EQ(master.requests.size(), 1u);
}

TEST(Leases, FailoverToTheNextAddress) {
  FakeClock clock;
  std::string dead_addr;
  {
    CapacityServer dead(clock);
    dead_addr = dead.addr;
  }
  CapacityServer alive(clock);
  auto client = manual_client(dead_addr + "," + alive.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 3);
  run(c, clock, 5);
  EXPECT_EQ(r.capacity(), 3);
  EXPECT_EQ(c.server(), alive.addr);
}

TEST(Leases, PushedLeasesApplyWhenNewer) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 50);
  step(c);
  auto push = [&](double capacity, int64_t seq) {
    google::protobuf::RepeatedPtrField<sluice::pb::v1::PushedLease> ls;
    auto* pl = ls.Add();
    pl->set_resource_id("a");
    pl->set_capacity(capacity);
    pl->set_expiry_time(static_cast<int64_t>(clock.now()) + 30);
    pl->set_refresh_interval(5);
    pl->set_sequence(seq);
    sluice::detail::Access::leases(c).apply_pushed(ls);
  };
  push(40, 7);
  EXPECT_EQ(r.capacity(), 40);
  push(10, 6);
  EXPECT_EQ(r.capacity(), 40);  // older than the lease held
}

TEST(Leases, HandlesShareALeaseAndReleaseItWithTheLast) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto a = c.resource("x", 2);
  auto b = c.resource("x", 3);
  EXPECT_EQ(a.total_wants(), 5);
  std::vector<double> seen;
  a.on_change([&](double v) { seen.push_back(v); });
  step(c);
  EXPECT_EQ(a.capacity(), 5);
  EXPECT_EQ(b.capacity(), 5);
  b.release();
  EXPECT_EQ(a.total_wants(), 2);
  EXPECT_TRUE(s.released.empty());
  a.release();
  ASSERT_EQ(s.released.size(), 1u);
  EXPECT_EQ(s.released[0], std::vector<std::string>{"x"});
  EXPECT_EQ(a.capacity(), 0);
  EXPECT_EQ(seen, (std::vector<double>{0, 5, 0}));
  EXPECT_THROW(a.set_wants(1), sluice::Closed);
}

TEST(Leases, AHandleGoingOutOfScopeReleasesIt) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  {
    auto r = c.resource("scoped", 1);
    step(c);
  }
  ASSERT_EQ(s.released.size(), 1u);
  EXPECT_EQ(s.released[0], std::vector<std::string>{"scoped"});
}

TEST(Leases, CloseReleasesEveryLease) {
  FakeClock clock;
  CapacityServer s(clock);
  sluice::Options o;
  o.client_id = "closing";
  o.push = false;
  auto c = std::make_unique<sluice::Client>(s.addr, o);  // a real (threaded) client
  std::vector<sluice::Resource> rs;
  for (int i = 0; i < 3; ++i) rs.push_back(c->resource("r" + std::to_string(i), 1));
  auto limiter = rs[0].rate_limiter();
  c.reset();  // the destructor closes
  ASSERT_FALSE(s.released.empty());
  auto last = s.released.back();
  std::sort(last.begin(), last.end());
  EXPECT_EQ(last, (std::vector<std::string>{"r0", "r1", "r2"}));
  for (auto& r : rs) EXPECT_EQ(r.capacity(), 0);
  EXPECT_EQ(limiter->rate(), 0);
}

TEST(Leases, ClosedClientRefuses) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  c.close();
  EXPECT_THROW(c.resource("r9", 1), sluice::Closed);
}

TEST(Leases, KillSwitch) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  auto r = c.resource("a", 1);
  auto lim = r.rate_limiter();
  c.set_kill_switch(true);
  EXPECT_TRUE(std::isinf(r.capacity()));
  EXPECT_TRUE(std::isinf(lim->rate()));
  c.set_kill_switch(false);
  EXPECT_EQ(r.capacity(), 0);
}

TEST(Leases, BadWants) {
  FakeClock clock;
  CapacityServer s(clock);
  auto client = manual_client(s.addr, clock);
  sluice::Client& c = *client;
  for (double w : {-1.0, std::nan(""), sluice::kUnlimited}) {
    try {
      c.resource("a", w);
      ADD_FAILURE() << "wants " << w << " accepted";
    } catch (const sluice::InvalidArgument& e) {
      EXPECT_EQ(e.code_name(), "INVALID_ARGUMENT");
    }
  }
  EXPECT_THROW(c.resource("", 1), sluice::InvalidArgument);
}
