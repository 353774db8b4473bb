// The client's background threads are joined, never detached: by close()
// and the destructors, and — when the client is closed or destroyed from a
// callback running on one of its own threads — by the reaper once that
// thread returns (src/threads.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "capacity_server.h"
#include "internal.h"
#include "sluice/sluice.h"

using namespace std::chrono_literals;

namespace {

using sluice::test::CapacityServer;
using sluice::test::FakeClock;

// eventually polls cond until it holds, for at most seconds (a generous
// bound: it fails only a test that would never pass).
bool eventually(const std::function<bool()>& cond, double seconds = 30) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// reaped: the reaper has joined every thread handed to it.
bool reaped() {
  sluice::detail::reap();
  return sluice::detail::reaper_pending() == 0;
}

}  // namespace

TEST(Threads, AWorkerIsJoinedByItsOwner) {
  ASSERT_TRUE(eventually(reaped));
  std::atomic<bool> ran{false};
  {
    sluice::detail::Worker w([&ran] { ran = true; });
    EXPECT_TRUE(w.joinable());
  }  // joined here
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(sluice::detail::reaper_pending(), 0u);  // joined by its owner, not handed over
}

TEST(Threads, AWorkerReleasedOnItsOwnThreadIsJoinedByTheReaper) {
  ASSERT_TRUE(eventually(reaped));
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  auto holder = std::make_shared<std::unique_ptr<sluice::detail::Worker>>();
  std::promise<void> go;
  auto started = go.get_future().share();
  *holder = std::make_unique<sluice::detail::Worker>([holder, started, &mu, &cv, &released] {
    started.wait();
    holder->reset();  // the Worker destroyed on its own thread: handed to the reaper
    std::lock_guard<std::mutex> l(mu);
    released = true;
    cv.notify_all();
  });
  go.set_value();
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 30s, [&] { return released; }));
  }
  EXPECT_EQ(holder->get(), nullptr);
  EXPECT_TRUE(eventually(reaped));  // joined once it returned
}

// A client destroyed by a listener running on its refresh thread: the
// refresh thread cannot join itself; the lease engine lives on until the
// thread returns, and the reaper joins it then.
TEST(Threads, AClientDestroyedInAListenerOnItsRefreshThread) {
  ASSERT_TRUE(eventually(reaped));
  FakeClock clock;
  CapacityServer s(clock);
  // The first GetCapacity waits for the listener, so that the lease
  // reaches it on the refresh thread (not on this one, in on_change).
  std::promise<void> registered;
  auto gate = registered.get_future().share();
  s.hook = [gate](grpc::ServerContext* ctx) {
    while (gate.wait_for(5ms) != std::future_status::ready && !ctx->IsCancelled()) {
    }
  };
  sluice::Options o;
  o.client_id = "destroyed-in-a-listener";
  o.push = false;
  auto client = std::make_unique<sluice::Client>(s.addr, o);  // threaded
  std::optional<sluice::Resource> r = client->resource("r", 5);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread::id where;
  r->on_change([&](double capacity) {
    std::lock_guard<std::mutex> l(mu);
    if (capacity != 5 || done) return;  // the fallback first, then the lease; then 0 once released
    where = std::this_thread::get_id();
    r.reset();       // the last handle: the lease given back
    client.reset();  // the Client closed and gone, on its own refresh thread
    done = true;
    cv.notify_all();
  });
  registered.set_value();
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 30s, [&] { return done; }));
  }
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_TRUE(eventually(reaped));
  std::lock_guard<std::mutex> l(s.mu);
  ASSERT_FALSE(s.released.empty());
  EXPECT_EQ(s.released[0], std::vector<std::string>{"r"});
}

// close() from the test's thread cancels the GetCapacity in flight and
// joins the refresh thread. The call's deadline is made 10 minutes here: a
// close that waited for the call instead of cancelling it would not return
// within the test's generous 30 s.
TEST(Threads, CloseCancelsTheCallInFlight) {
  FakeClock clock;
  CapacityServer s(clock);
  std::mutex mu;
  std::condition_variable cv;
  bool called = false, cancelled = false;
  s.hook = [&](grpc::ServerContext* ctx) {
    {
      std::lock_guard<std::mutex> l(mu);
      called = true;
      cv.notify_all();
    }
    while (!ctx->IsCancelled()) std::this_thread::sleep_for(5ms);
    std::lock_guard<std::mutex> l(mu);
    cancelled = true;
    cv.notify_all();
  };
  sluice::Options o;
  o.push = false;
  sluice::detail::Hooks h;
  h.request_timeout = 600;
  auto c = sluice::detail::Access::client(s.addr, o, h);
  auto r = c->resource("r", 5);
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 30s, [&] { return called; }));
  }
  auto closing = std::async(std::launch::async, [&] { c->close(0.5s); });
  ASSERT_EQ(closing.wait_for(30s), std::future_status::ready) << "close() waited for the call in flight";
  closing.get();
  EXPECT_EQ(r.capacity(), 0);
  std::unique_lock<std::mutex> l(mu);
  EXPECT_TRUE(cv.wait_for(l, 30s, [&] { return cancelled; }));
}
