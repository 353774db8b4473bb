// The library against a real `sluice server` on loopback (the binary named
// by SLUICE_BIN, as the interop suite sets it): leases, Allow, the quota
// service's Allow, copies in sessions, errors. Skipped without SLUICE_BIN.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "internal.h"
#include "sluice/sluice.h"

using namespace std::chrono_literals;

namespace {

const char* kConfig = R"(
resources:
  - identifier_glob: "fair/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: "safe/*"
    capacity: 10
    safe_capacity: 2
    algorithm: {kind: STATIC, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
limits:
  resources:
    api:
      domains:
        small: {size: 3, fill_rate: 0.0001, wait_timeout: 0s}
    sandboxes:
      algorithm: copies
      domain_limit: 2
      global_limit: 3
)";

// Server runs `sluice server` on a free loopback port for the whole suite.
class Server : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* bin = std::getenv("SLUICE_BIN");
    if (bin == nullptr || *bin == 0) return;
    char dir[] = "/tmp/sluice-cpp-test-XXXXXX";
    if (mkdtemp(dir) == nullptr) return;
    std::string cfg = std::string(dir) + "/config.yaml";
    std::ofstream(cfg) << kConfig;
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      close(fds[0]);
      execl(bin, bin, "server", "--config", cfg.c_str(), "--listen", "127.0.0.1:0", "--log-level", "error",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
    char line[256] = {0};
    if (fgets(line, sizeof line, out_) == nullptr) return;
    std::string l(line);
    const std::string prefix = "listening on ";
    if (l.rfind(prefix, 0) != 0) return;
    addr = l.substr(prefix.size());
    while (!addr.empty() && (addr.back() == '\n' || addr.back() == '\r')) addr.pop_back();
    drain_ = std::thread([f = out_] {
      char buf[4096];
      while (fread(buf, 1, sizeof buf, f) > 0) {
      }
    });
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    if (drain_.joinable()) drain_.join();
  }
  static std::string addr;

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::thread drain_;
};
std::string Server::addr;

const auto* env = ::testing::AddGlobalTestEnvironment(new Server);

#define NEED_SERVER()                                                        \
  if (Server::addr.empty()) GTEST_SKIP() << "SLUICE_BIN names no sluice binary"

bool eventually(const std::function<bool()>& cond, double seconds = 30) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

sluice::Options named(const std::string& id) {
  sluice::Options o;
  o.client_id = id;
  return o;
}

}  // namespace

TEST(Server, ALeaseAndItsLimiter) {
  NEED_SERVER();
  std::shared_ptr<sluice::RateLimiter> lim;
  {
    sluice::Client c(Server::addr);
    auto r = c.resource("fair/cpp-lease", 40);
    lim = r.rate_limiter(0.1);
    ASSERT_TRUE(eventually([&] { return r.capacity() == 40; }));
    EXPECT_EQ(lim->rate(), 40);
    auto lease = r.lease();
    ASSERT_TRUE(lease.has_value());
    EXPECT_EQ(lease->refresh_interval.count(), 5);
    // 20 permits at 40/s with 0.1 s of burst (4 stored) take at least
    // (20 - 1 - 4) / 40 s, however loaded the machine (no upper bound: a
    // stalled thread only takes longer).
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) lim->acquire(1, 30s);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took.count(), (20 - 1 - 4) / 40.0 * 0.95);
  }
  EXPECT_EQ(lim->rate(), 0);  // closed: released
}

TEST(Server, FairSharesAndARelease) {
  NEED_SERVER();
  sluice::Client a(Server::addr, named("cpp-a")), b(Server::addr, named("cpp-b"));
  auto ra = a.resource("fair/cpp-shares", 80);
  ASSERT_TRUE(eventually([&] { return ra.capacity() == 80; }));
  auto rb = b.resource("fair/cpp-shares", 80);
  ASSERT_TRUE(eventually([&] { return rb.capacity() > 0; }));
  EXPECT_LE(ra.capacity() + rb.capacity(), 100);
  ASSERT_TRUE(eventually([&] { return ra.capacity() == 50 && rb.capacity() == 50; }, 60));
  ra.release();
  EXPECT_TRUE(eventually([&] { return rb.capacity() == 80; }));  // pushed at once, or at b's next refresh
}

TEST(Server, SafeCapacityIsSent) {
  NEED_SERVER();
  sluice::Client c(Server::addr);
  auto r = c.resource("safe/x", 5);
  EXPECT_TRUE(eventually([&] { return r.safe_capacity().value_or(0) == 2; }));
}

TEST(Server, Allow) {
  NEED_SERVER();
  sluice::Client c(Server::addr);
  std::vector<sluice::Allowance> got;
  for (int i = 0; i < 4; ++i) {
    sluice::AllowRequest req;
    req.resource = "api";
    req.domain = "small";
    req.max_wait = sluice::Seconds(0);
    got.push_back(c.allow(req));
  }
  EXPECT_EQ(got[0].status, "OK");
  EXPECT_EQ(got[2].status, "OK");
  EXPECT_EQ(got[3].status, "REJECTED_TIMEOUT");
  EXPECT_EQ(got[0].granted, 1);
  EXPECT_EQ(got[3].granted, 0);
  EXPECT_TRUE(got[0].ok());
  EXPECT_FALSE(got[3].ok());
  EXPECT_TRUE(got[3].retry_after.has_value());
  EXPECT_EQ(got[0].limit, 3);
  EXPECT_EQ(c.allow("nosuch", "x").status, "REJECTED_NO_BUCKET");
  try {
    c.allow("api", "no spaces");
    ADD_FAILURE() << "a bad domain was accepted";
  } catch (const sluice::InvalidArgument& e) {
    EXPECT_NE(e.message().find("domain"), std::string::npos) << e.message();
  }
}

TEST(Server, QuotaServiceAllow) {
  NEED_SERVER();
  sluice::Client c(Server::addr);
  auto q = c.quota_allow("api", "quota");
  EXPECT_EQ(q.status, "REJECTED_NO_BUCKET");
  EXPECT_FALSE(q.ok());
  EXPECT_EQ(c.quota_allow("api", "bad name").status, "REJECTED_INVALID_REQUEST");
}

TEST(Server, CopiesInASession) {
  NEED_SERVER();
  sluice::Client a(Server::addr), b(Server::addr);
  {
    sluice::Hold h = a.reserve_copies("sandboxes", "d1", 2);
    EXPECT_EQ(h.copies(), 2);
    EXPECT_FALSE(h.degraded());
    EXPECT_FALSE(h.session_id().empty());
    EXPECT_EQ(h.reservation().domain_limit, 2);
    EXPECT_EQ(h.reservation().global_limit.value_or(0), 3);
    try {
      b.reserve_copies("sandboxes", "d1");
      ADD_FAILURE() << "over the domain limit";
    } catch (const sluice::OverLimit& e) {
      EXPECT_EQ(e.code_name(), "RESOURCE_EXHAUSTED");
    }
    h.release(1);
    EXPECT_EQ(h.copies(), 1);
    EXPECT_THROW(h.release(2), sluice::FailedPrecondition);
    sluice::Hold h2 = b.reserve_copies("sandboxes", "d1");
    EXPECT_EQ(h2.copies(), 1);
    sluice::Hold moved = std::move(h2);  // movable: still held once
    EXPECT_EQ(moved.copies(), 1);
  }  // the destructors released the rest
  sluice::Hold h3 = b.reserve_copies("sandboxes", "d2", 3, 1);
  EXPECT_EQ(h3.copies(), 2);  // the domain's limit
}

TEST(Server, ReserveWaitsForCopies) {
  NEED_SERVER();
  sluice::Options fast;
  fast.backoff_unit = 50ms;
  sluice::Client a(Server::addr), b(Server::addr, fast);
  sluice::Hold h = a.reserve_copies("sandboxes", "wait", 2);
  auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    h.release();
  });
  sluice::ReserveRequest req;
  req.resource = "sandboxes";
  req.domain = "wait";
  req.max_wait = 10s;
  sluice::Hold h2 = b.reserve_copies(req);
  t.join();
  EXPECT_EQ(h2.copies(), 1);
  EXPECT_GE(h2.attempts(), 2);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
}

TEST(Server, TransferAndSeize) {
  NEED_SERVER();
  sluice::Client a(Server::addr), b(Server::addr);
  sluice::Hold h = a.reserve_copies("sandboxes", "t", 2);
  std::string tid = h.transfer(1);
  EXPECT_EQ(h.copies(), 1);
  a.close();  // closing a's session does not release staged copies
  sluice::Hold got = b.seize(tid);
  EXPECT_EQ(got.resource(), "sandboxes");
  EXPECT_EQ(got.domain(), "t");
  EXPECT_EQ(got.copies(), 1);
  EXPECT_THROW(b.seize(tid), sluice::NotFound);  // once
}

TEST(Server, CloseReleasesTheSession) {
  NEED_SERVER();
  auto a = std::make_unique<sluice::Client>(Server::addr);
  sluice::Hold h = a->reserve_copies("sandboxes", "closing", 2);
  a->close();
  EXPECT_EQ(h.copies(), 0);
  EXPECT_THROW(h.release(1), sluice::Closed);
  {
    sluice::Client b(Server::addr);
    sluice::Hold h2 = b.reserve_copies("sandboxes", "closing", 2);
    EXPECT_EQ(h2.copies(), 2);
  }
  EXPECT_THROW(a->reserve_copies("sandboxes", "closing"), sluice::Closed);
}

TEST(Server, CopyErrors) {
  NEED_SERVER();
  sluice::Client c(Server::addr);
  EXPECT_THROW(c.reserve_copies("sandboxes", "d", 0), sluice::InvalidArgument);
  EXPECT_THROW(c.reserve_copies("sandboxes", "d", 2, 3), sluice::InvalidArgument);
  EXPECT_THROW(c.reserve_copies("nosuch", "d"), sluice::NotFound);
  EXPECT_THROW(c.reserve_copies("api", "small"), sluice::FailedPrecondition);
  EXPECT_THROW(c.seize(""), sluice::InvalidArgument);
}

TEST(Server, UnreachableServer) {
  sluice::Options o;
  o.call_timeout = 500ms;
  {
    sluice::Client c("127.0.0.1:1", o);
    try {
      c.allow("api", "x");
      ADD_FAILURE() << "an unreachable server answered";
    } catch (const sluice::Unavailable& e) {
      EXPECT_EQ(e.code_name(), "UNAVAILABLE");
    }
    sluice::Hold h = c.reserve_copies("sandboxes", "d", 3, 1);  // fail-open: the minimum, by the client alone
    EXPECT_TRUE(h.degraded());
    EXPECT_EQ(h.copies(), 1);
    h.release();
  }
  o.fail_open = false;
  sluice::Client c("127.0.0.1:1", o);
  EXPECT_THROW(c.reserve_copies("sandboxes", "d"), sluice::Unavailable);
}

// A client destroyed by its on_session_lost, which runs on the session's
// keep-alive thread: that thread cannot join itself; the reaper joins it
// once it returns. The session is lost by closing it from outside (whoever
// knows its id may), so that the server answers its next keep-alive
// NOT_FOUND.
TEST(Server, AClientDestroyedInOnSessionLost) {
  NEED_SERVER();
  sluice::detail::reap();
  ASSERT_TRUE(eventually([] {
    sluice::detail::reap();
    return sluice::detail::reaper_pending() == 0;
  }));
  std::mutex mu;
  std::condition_variable cv;
  bool lost = false;
  std::thread::id where;
  std::string why;
  std::unique_ptr<sluice::Client> c;
  sluice::Options o;
  o.session_ttl = 1s;  // a keep-alive every third of a second
  o.on_session_lost = [&](const std::string&, const sluice::Error& e) {
    std::lock_guard<std::mutex> l(mu);
    where = std::this_thread::get_id();
    why = e.message();
    c.reset();  // closed and gone, on its own keep-alive thread
    lost = true;
    cv.notify_all();
  };
  c = std::make_unique<sluice::Client>(Server::addr, o);
  sluice::Hold h = c->reserve_copies("sandboxes", "lost", 1);
  ASSERT_EQ(h.copies(), 1);
  {
    auto stub = sluice::pb::v1::Limits::NewStub(grpc::CreateChannel(Server::addr, grpc::InsecureChannelCredentials()));
    sluice::pb::v1::CloseSessionRequest req;
    req.set_session_id(h.session_id());
    sluice::pb::v1::CloseSessionResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    grpc::Status st = stub->CloseSession(&ctx, req, &resp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, 30s, [&] { return lost; }));
  }
  EXPECT_NE(where, std::this_thread::get_id());
  EXPECT_NE(why.find("no longer knows it"), std::string::npos) << why;  // NOT_FOUND, not the ttl passing
  EXPECT_EQ(h.copies(), 0);
  EXPECT_THROW(h.release(), sluice::SessionLost);
  EXPECT_TRUE(eventually([] {
    sluice::detail::reap();
    return sluice::detail::reaper_pending() == 0;
  }));
}
