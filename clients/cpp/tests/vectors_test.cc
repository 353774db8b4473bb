// The shared test vectors (clients/vectors/*.json; docs/clients.md, "The
// vectors") on the C++ client, as the Go and Java tests run them:
//
//   limiter.json    RateLimiter through its ..._at twins, and again through
//                   its Clock parameter (the methods without a time);
//   refresh.json    the lease client's refresh planner: a manual Client
//                   (detail::Hooks) on a fake clock against a scripted
//                   doorman.Capacity server on loopback;
//   retry.json      Charon's retry policy (Sessions::retry_delay: fixed
//                   draws, bounds, whole reserve_copies schedules against a
//                   scripted sluice.v1.Limits server on fake time, the
//                   statuses asked again) and the lease backoff
//                   (detail::Retry, and through a manual client);
//   errors.json     each gRPC code's exception type (throw_status, and a
//                   reserve_copies answered that code: raised or failed
//                   open), and the conditions' types;
//   constants.json  each constant where the data says C++ keeps it.
//
// The files are read from SLUICE_VECTORS_DIR: the environment variable
// when set, else the directory CMakeLists.txt compiled in
// (clients/vectors). Where C++ differs from another client the data says
// so (a "cpp" entry, a call that is Go's alone), and this test reads it
// from there; nothing in a file is passed over without a check.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "capacity_server.h"
#include "internal.h"
#include "sluice/sluice.h"

#ifndef SLUICE_VECTORS_DIR
#error "SLUICE_VECTORS_DIR (clients/vectors) is set by CMakeLists.txt"
#endif

namespace {

using json = nlohmann::json;
namespace pb = sluice::pb;
using sluice::detail::Access;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kExact = 1e-9;

// vectors_dir is where the vector files are: $SLUICE_VECTORS_DIR, else the
// build's clients/vectors.
std::string vectors_dir() {
  const char* env = std::getenv("SLUICE_VECTORS_DIR");
  if (env != nullptr && *env != 0) return env;
  return SLUICE_VECTORS_DIR;
}

json read(const std::string& name) {
  std::string path = vectors_dir() + "/" + name;
  std::ifstream f(path);
  if (!f) {
    throw std::runtime_error("cannot read " + path + " (SLUICE_VECTORS_DIR names the directory of the vectors)");
  }
  json v = json::parse(f);
  if (!v.contains("about") || !v.contains("schema")) throw std::runtime_error(path + " has no about or schema");
  return v;
}

// num is a JSON number, or "inf".
double num(const json& j) {
  if (j.is_string()) {
    if (j.get<std::string>() == "inf") return kInf;
    throw std::runtime_error("a string number other than \"inf\": " + j.dump());
  }
  return j.get<double>();
}

double num(const json& j, const char* key, double dflt) { return j.contains(key) ? num(j.at(key)) : dflt; }

// Quiet silences std::cerr while it lives (failing open and losing a
// session say so there, as they should).
struct Quiet {
  std::ostringstream sink;
  std::streambuf* old = std::cerr.rdbuf(sink.rdbuf());
  ~Quiet() { std::cerr.rdbuf(old); }
};

// dead_address is a loopback address nothing listens on.
std::string dead_address() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    throw std::runtime_error("no free loopback port");
  }
  close(fd);  // closed: nothing listens there
  return "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

// A test's clock starts at 0 (FakeClock{0}): the fake wall clock of a
// manual client, in Unix seconds, or the fake time of a reserve.
using sluice::test::FakeClock;

// vectors_client is the tests' manual_client (capacity_server.h), as
// client "vectors".
std::unique_ptr<sluice::Client> vectors_client(const std::string& addr, FakeClock& clock,
                                              sluice::Mode mode = sluice::Mode::kSafe) {
  return sluice::test::manual_client(addr, clock, mode, "vectors");
}

// ---------------------------------------------------------------------------------------------
// limiter.json

// run_limiter runs one case's steps; through_clock: on a limiter with a
// Clock, with the methods that take no time (try_acquire, set_rate,
// tokens; acquire(n, 0 s) where the case waits 0 or forever — it returns 0
// s, or throws DeadlineExceeded taking nothing, and never blocks — and
// reserve_at(clock(), n) where the case waits, since a blocking acquire
// would sleep for real).
void run_limiter(const json& c, double tol, bool through_clock) {
  FakeClock clock{0};
  sluice::Clock fake = [&clock] { return clock.now(); };
  sluice::RateLimiter lim(num(c.at("rate")), num(c.at("max_burst_seconds")), through_clock ? fake : nullptr);
  int k = 0;
  for (const auto& s : c.at("steps")) {
    ++k;
    double at = num(s.at("at"));
    clock.set(at);
    const std::string op = s.at("op").get<std::string>();
    auto permits = static_cast<int64_t>(num(s, "permits", 1));
    std::string where = "step " + std::to_string(k) + " (" + op + " at " + std::to_string(at) + " s)";
    if (op == "acquire") {
      double want = num(s.at("wait"));
      double got;
      if (!through_clock) {
        got = lim.reserve_at(at, permits);
      } else if (want == 0) {
        try {
          got = lim.acquire(permits, sluice::Seconds(0)).count();
        } catch (const sluice::DeadlineExceeded& e) {
          ADD_FAILURE() << where << ": " << e.what();
          got = kInf;
        }
      } else if (std::isinf(want)) {
        EXPECT_THROW(lim.acquire(permits, sluice::Seconds(0)), sluice::DeadlineExceeded) << where;
        got = kInf;
      } else {
        got = lim.reserve_at(clock.now(), permits);
      }
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(got)) << where << ": waits " << got << " s, want never";
      } else {
        EXPECT_NEAR(got, want, tol) << where;
      }
    } else if (op == "try_acquire") {
      bool want = s.at("ok").get<bool>();
      bool got = through_clock ? lim.try_acquire(permits) : lim.try_acquire_at(at, permits);
      EXPECT_EQ(got, want) << where;
    } else if (op == "set_rate") {
      if (through_clock) {
        lim.set_rate(num(s.at("rate")));
      } else {
        lim.set_rate_at(at, num(s.at("rate")));
      }
      EXPECT_EQ(lim.rate(), num(s.at("rate"))) << where;
    } else if (op == "tokens") {
      double want = num(s.at("tokens"));
      double got = through_clock ? lim.tokens() : lim.tokens_at(at);
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(got) && got > 0) << where << ": " << got << " tokens, want inf";
      } else {
        EXPECT_NEAR(got, want, tol) << where;
      }
    } else {
      ADD_FAILURE() << where << ": an op this test does not know";
    }
  }
}

TEST(Vectors, LimiterAt) {
  json v = read("limiter.json");
  double tol = v.at("tolerance").get<double>();
  ASSERT_FALSE(v.at("cases").empty());
  for (const auto& c : v.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    run_limiter(c, tol, false);
  }
}

TEST(Vectors, LimiterThroughItsClock) {
  json v = read("limiter.json");
  double tol = v.at("tolerance").get<double>();
  for (const auto& c : v.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    run_limiter(c, tol, true);
  }
}

// ---------------------------------------------------------------------------------------------
// refresh.json

// ScriptedCapacity is refresh.json's server: every resource of a
// GetCapacity gets the case's lease for it (expiry floor(epoch + t) +
// lease_length), and the request is recorded (t, wants). ReleaseCapacity
// succeeds, unrecorded.
class ScriptedCapacity final : public pb::doorman::Capacity::Service {
 public:
  struct Recorded {
    double at;
    std::map<std::string, double> wants;
    bool operator==(const Recorded& o) const { return at == o.at && wants == o.wants; }
  };

  ScriptedCapacity(FakeClock& clock, double epoch, json script) : clock_(clock), epoch_(epoch), script_(std::move(script)) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    addr = "127.0.0.1:" + std::to_string(port);
  }
  ~ScriptedCapacity() override { stop(); }
  void stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
      server_.reset();
    }
  }

  grpc::Status GetCapacity(grpc::ServerContext*, const pb::doorman::GetCapacityRequest* req,
                           pb::doorman::GetCapacityResponse* resp) override {
    double now = clock_.now();
    Recorded rec{now - epoch_, {}};
    for (const auto& r : req->resource()) {
      rec.wants[r.resource_id()] = r.wants();
      if (!script_.contains(r.resource_id())) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no lease scripted for " + r.resource_id());
      }
      const json& l = script_.at(r.resource_id());
      auto* rr = resp->add_response();
      rr->set_resource_id(r.resource_id());
      rr->mutable_gets()->set_capacity(num(l.at("capacity")));
      rr->mutable_gets()->set_expiry_time(static_cast<int64_t>(std::floor(now)) + l.at("lease_length").get<int64_t>());
      rr->mutable_gets()->set_refresh_interval(l.at("refresh_interval").get<int64_t>());
      if (l.contains("safe_capacity")) rr->set_safe_capacity(num(l.at("safe_capacity")));
    }
    std::lock_guard<std::mutex> lk(mu_);
    requests_.push_back(std::move(rec));
    return grpc::Status::OK;
  }
  grpc::Status ReleaseCapacity(grpc::ServerContext*, const pb::doorman::ReleaseCapacityRequest*,
                               pb::doorman::ReleaseCapacityResponse*) override {
    return grpc::Status::OK;
  }
  std::vector<Recorded> recorded() {
    std::lock_guard<std::mutex> lk(mu_);
    return requests_;
  }

  std::string addr;

 private:
  FakeClock& clock_;
  const double epoch_;
  const json script_;
  std::mutex mu_;
  std::vector<Recorded> requests_;
  std::unique_ptr<grpc::Server> server_;
};

std::ostream& operator<<(std::ostream& o, const ScriptedCapacity::Recorded& r) {
  o << r.at << " s {";
  const char* sep = "";
  for (const auto& [k, w] : r.wants) {
    o << sep << k << ": " << w;
    sep = ", ";
  }
  return o << "}";
}

sluice::Mode mode_of(const std::string& m) {
  if (m == "safe") return sluice::Mode::kSafe;
  if (m == "pessimistic") return sluice::Mode::kPessimistic;
  if (m == "optimistic") return sluice::Mode::kOptimistic;
  throw std::runtime_error("a mode this test does not know: " + m);
}

// run_refresh drives one case as the schema says: at each t visited, the
// events at t, one refresh step, the capacity checks at t; the next t is
// the earliest of t + the step's wait, the next event and the next check;
// stop once it would pass 'until'.
void run_refresh(const json& c, double epoch) {
  FakeClock clock{0};
  clock.set(epoch);
  ScriptedCapacity srv(clock, epoch, c.at("server"));
  auto client = vectors_client(srv.addr, clock, mode_of(c.at("mode").get<std::string>()));
  std::deque<sluice::Resource> all;                  // every handle made, alive until the end
  std::map<std::string, sluice::Resource*> handles;  // each resource's latest
  const json& events = c.at("events");
  const json checks = c.contains("capacity") ? c.at("capacity") : json::array();
  const double until = num(c.at("until"));
  size_t e = 0, k = 0;
  double at = 0;
  for (int steps = 0;; ++steps) {
    ASSERT_LT(steps, 10000) << "still stepping at " << at << " s";
    for (; e < events.size() && num(events[e].at("at")) == at; ++e) {
      const json& ev = events[e];
      const std::string rid = ev.at("resource").get<std::string>();
      const std::string op = ev.at("op").get<std::string>();
      if (op == "add") {
        all.push_back(client->resource(rid, num(ev.at("wants"))));
        handles[rid] = &all.back();
      } else if (op == "set_wants") {
        handles.at(rid)->set_wants(num(ev.at("wants")));
      } else if (op == "release") {
        handles.at(rid)->release();
      } else {
        FAIL() << "at " << at << " s: an event this test does not know: " << op;
      }
    }
    double wait = Access::refresh_step(*client).count();
    ASSERT_EQ(clock.now(), epoch + at) << "the step moved the clock";
    for (; k < checks.size() && num(checks[k].at("at")) == at; ++k) {
      const json& ck = checks[k];
      const std::string rid = ck.at("resource").get<std::string>();
      double want = num(ck.at("capacity"));
      double got = handles.at(rid)->capacity();
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(got) && got > 0) << "capacity of " << rid << " at " << at << " s: " << got;
      } else {
        EXPECT_EQ(got, want) << "capacity of " << rid << " at " << at << " s";
      }
    }
    double next = at + wait;
    if (e < events.size()) next = std::min(next, num(events[e].at("at")));
    if (k < checks.size()) next = std::min(next, num(checks[k].at("at")));
    if (next > until) break;
    ASSERT_GE(next, at) << "the step asked to go back in time: " << wait << " s at " << at << " s";
    at = next;
    clock.set(epoch + at);
  }
  EXPECT_EQ(e, events.size()) << "events that never came";
  EXPECT_EQ(k, checks.size()) << "checks that never came";
  std::vector<ScriptedCapacity::Recorded> want;
  for (const auto& r : c.at("requests")) {
    ScriptedCapacity::Recorded w{num(r.at("at")), {}};
    for (const auto& [id, x] : r.at("wants").items()) w.wants[id] = num(x);
    want.push_back(std::move(w));
  }
  EXPECT_EQ(srv.recorded(), want) << "the requests the server recorded";
  client->close();
}

TEST(Vectors, Refresh) {
  json v = read("refresh.json");
  double epoch = num(v.at("epoch"));
  ASSERT_FALSE(v.at("cases").empty());
  for (const auto& c : v.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    run_refresh(c, epoch);
  }
}

// ---------------------------------------------------------------------------------------------
// retry.json, charon

// ScriptedLimits is a sluice.v1.Limits server for the copies: OpenSession
// opens "session-1" with the ttl asked; KeepAlive acknowledges every
// keep-alive; Reserve fails with `fails` when set, else answers `status`
// (granting what was asked on OK), recording when (on `clock`) each came;
// Release fails NOT_FOUND naming the session when `release_lost`, else
// succeeds; CloseSession succeeds.
class ScriptedLimits final : public pb::v1::Limits::Service {
 public:
  explicit ScriptedLimits(FakeClock& clock) : clock_(clock) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    addr = "127.0.0.1:" + std::to_string(port);
  }
  ~ScriptedLimits() override {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }

  grpc::Status OpenSession(grpc::ServerContext*, const pb::v1::OpenSessionRequest* req,
                           pb::v1::OpenSessionResponse* resp) override {
    resp->set_session_id("session-1");
    *resp->mutable_ttl() = req->ttl();
    return grpc::Status::OK;
  }
  grpc::Status KeepAlive(grpc::ServerContext*,
                         grpc::ServerReaderWriter<pb::v1::KeepAliveResponse, pb::v1::KeepAliveRequest>* rw) override {
    pb::v1::KeepAliveRequest req;
    while (rw->Read(&req)) {
      pb::v1::KeepAliveResponse resp;
      resp.set_session_id(req.session_id());
      resp.mutable_ttl()->set_seconds(10);
      if (!rw->Write(resp)) break;
    }
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext*, const pb::v1::CloseSessionRequest*,
                            pb::v1::CloseSessionResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Reserve(grpc::ServerContext*, const pb::v1::ReserveRequest* req, pb::v1::ReserveResponse* resp) override {
    std::lock_guard<std::mutex> l(mu);
    reserves.push_back(clock_.now());
    if (fails != grpc::StatusCode::OK) return grpc::Status(fails, "scripted " + sluice::code_name(fails));
    resp->set_status(status);
    if (status == pb::v1::ReserveResponse::OK) resp->set_granted(req->copies());
    resp->set_domain_limit(1);
    resp->set_domain_holds(1);
    resp->set_global_holds(1);
    return grpc::Status::OK;
  }
  grpc::Status Release(grpc::ServerContext*, const pb::v1::ReleaseRequest*, pb::v1::ReleaseResponse*) override {
    std::lock_guard<std::mutex> l(mu);
    if (release_lost) return grpc::Status(grpc::StatusCode::NOT_FOUND, "session_id: unknown session session-1");
    return grpc::Status::OK;
  }

  std::string addr;
  std::mutex mu;
  grpc::StatusCode fails = grpc::StatusCode::OK;
  pb::v1::ReserveResponse::Status status = pb::v1::ReserveResponse::REJECTED_OVER_LIMIT;
  bool release_lost = false;
  std::vector<double> reserves;

 private:
  FakeClock& clock_;
  std::unique_ptr<grpc::Server> server_;
};

// Sessions of a client never dialled, with backoff unit `unit`.
std::shared_ptr<sluice::detail::Sessions> idle_sessions(double unit) {
  sluice::Options o;
  o.backoff_unit = sluice::Seconds(unit);
  return std::make_shared<sluice::detail::Sessions>([] { return std::string("127.0.0.1:1"); },
                                                     std::make_shared<sluice::detail::Channels>(std::nullopt), o);
}

TEST(Vectors, CharonDelays) {
  json ch = read("retry.json").at("charon");
  double unit = num(ch.at("unit"));
  auto s = idle_sessions(unit);
  ASSERT_FALSE(ch.at("delays").empty());
  for (const auto& d : ch.at("delays")) {
    int i = d.at("attempt").get<int>();
    double u = num(d.at("u")), want = num(d.at("delay"));
    EXPECT_NEAR(sluice::detail::Sessions::retry_delay(unit, i, u), want, kExact) << "rejection " << i << ", draw " << u;
    s->test_jitter = [u] { return u; };
    EXPECT_NEAR(s->retry_delay(i), want, kExact) << "rejection " << i << ", draw " << u << " (the Sessions' jitter)";
  }
}

TEST(Vectors, CharonExponentStopsAtMaxExponent) {
  json ch = read("retry.json").at("charon");
  int max = ch.at("max_exponent").get<int>();
  double unit = num(ch.at("unit"));
  double top = unit * std::pow(2.0, max) * 0.75;
  using S = sluice::detail::Sessions;
  EXPECT_EQ(S::retry_delay(unit, max, 0), top);
  EXPECT_EQ(S::retry_delay(unit, max + 1, 0), top);
  EXPECT_EQ(S::retry_delay(unit, max + 50, 0), top);
  EXPECT_EQ(S::retry_delay(unit, max - 1, 0), top / 2);
}

TEST(Vectors, CharonBounds) {
  json ch = read("retry.json").at("charon");
  auto s = idle_sessions(1.0);  // the bounds are for a unit of 1 s
  ASSERT_FALSE(ch.at("bounds").empty());
  for (const auto& b : ch.at("bounds")) {
    int i = b.at("attempt").get<int>();
    double lo = num(b.at("min")), hi = num(b.at("max"));
    SCOPED_TRACE("rejection " + std::to_string(i));
    EXPECT_EQ(sluice::detail::Sessions::retry_delay(1.0, i, 0), lo);
    double near_top = sluice::detail::Sessions::retry_delay(1.0, i, std::nextafter(1.0, 0.0));
    EXPECT_TRUE(near_top <= hi && hi - near_top < 1e-6) << "a draw just under 1: " << near_top;
    // The real draw (jitter01), then a seeded one: within the bounds, and
    // reaching within a tenth of each end.
    for (bool seeded : {false, true}) {
      std::mt19937_64 rng(static_cast<uint64_t>(i));
      if (seeded) {
        s->test_jitter = [&rng] { return std::uniform_real_distribution<double>(0, 1)(rng); };
      } else {
        s->test_jitter = nullptr;
      }
      double mn = kInf, mx = -kInf;
      for (int k = 0; k < 1000; ++k) {
        double d = s->retry_delay(i);
        ASSERT_TRUE(d >= lo && d <= hi) << d << " outside [" << lo << ", " << hi << "]";
        mn = std::min(mn, d);
        mx = std::max(mx, d);
      }
      double tenth = (hi - lo) / 10;
      EXPECT_TRUE(mn <= lo + tenth && mx >= hi - tenth) << "1000 draws in [" << mn << ", " << mx << "]";
    }
    s->test_jitter = nullptr;
  }
}

// The calls of retry.json that C++ does not have: Go's limits.Client.Request
// (docs/clients.md: Charon's request of hits with retries is Go's alone).
// has_request fails the test the day sluice::Client grows one, so that its
// schedules run then.
template <class T, class = void>
struct has_request : std::false_type {};
template <class T>
struct has_request<T, std::void_t<decltype(&T::request)>> : std::true_type {};
const std::map<std::string, bool> kGoOnlyCalls = {{"request", has_request<sluice::Client>::value}};

struct Rejected {
  std::vector<double> at;  // when each Reserve reached the server, from the call's start
  double returned = 0;     // when the call returned, from its start
};

// reserve_rejected runs one reserve_copies (fail-open on) against a server
// that answers status each time, with jitter u, backoff unit `unit`, max
// wait max_wait, on fake time (the Sessions' clock and sleep); it must end
// with OverLimit, or a Hold when status is OK.
Rejected reserve_rejected(pb::v1::ReserveResponse::Status status, double unit, double u, double max_wait) {
  FakeClock time{0};
  time.set(5000);
  ScriptedLimits srv(time);
  srv.status = status;
  sluice::Options o;
  o.backoff_unit = sluice::Seconds(unit);
  o.call_timeout = sluice::Seconds(30);  // real time: a slow loopback call must not fail open
  sluice::Client c(srv.addr, o);
  auto& s = Access::sessions(c);
  s.test_jitter = [u] { return u; };
  s.test_clock = [&time] { return time.now(); };
  s.test_sleep = [&time](double d) {
    EXPECT_GT(d, 0) << "slept " << d << " s";
    time.advance(d);
  };
  sluice::ReserveRequest r;
  r.resource = "gpus";
  r.domain = "initech";
  r.max_wait = sluice::Seconds(max_wait);
  double start = time.now();
  Rejected out;
  try {
    sluice::Hold h = c.reserve_copies(r);
    EXPECT_EQ(status, pb::v1::ReserveResponse::OK) << "a hold, for a rejection";
  } catch (const sluice::OverLimit& e) {
    EXPECT_NE(status, pb::v1::ReserveResponse::OK) << e.what();
    std::lock_guard<std::mutex> l(srv.mu);
    std::string said = std::to_string(srv.reserves.size()) + " attempts";
    EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what() << ": want " << said;
  }
  out.returned = time.now() - start;
  {
    std::lock_guard<std::mutex> l(srv.mu);
    for (double t : srv.reserves) out.at.push_back(t - start);
  }
  c.close();
  return out;
}

TEST(Vectors, CharonSchedules) {
  json ch = read("retry.json").at("charon");
  int ran = 0, go_only = 0;
  for (const auto& s : ch.at("schedules")) {
    const std::string call = s.at("call").get<std::string>();
    SCOPED_TRACE(s.at("name").get<std::string>() + " [" + call + "]");
    if (kGoOnlyCalls.count(call) != 0) {
      EXPECT_FALSE(kGoOnlyCalls.at(call)) << "sluice::Client::" << call << " exists: run these schedules on it";
      ++go_only;
      continue;
    }
    ASSERT_EQ(call, "reserve_copies") << "a call this test does not know";
    ++ran;
    Rejected got = reserve_rejected(pb::v1::ReserveResponse::REJECTED_OVER_LIMIT, num(s.at("unit")), num(s.at("u")),
                                    num(s.at("max_wait")));
    std::vector<double> want;
    for (const auto& t : s.at("attempts_at")) want.push_back(num(t));
    ASSERT_EQ(got.at.size(), want.size()) << "requests at " << ::testing::PrintToString(got.at);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got.at[k], want[k], kExact) << "request " << k + 1;
    EXPECT_NEAR(got.returned, want.back(), kExact) << "returned after";
  }
  EXPECT_GT(ran, 0) << "retry.json has no reserve_copies schedule";
  std::cout << "[   NOTE   ] " << go_only << " schedules of Go's limits.Client.Request: C++ has no such call\n";
}

TEST(Vectors, CharonStatuses) {
  json ch = read("retry.json").at("charon");
  const json& retried = ch.at("retried_statuses");
  const json& fin = ch.at("final_statuses");
  std::set<std::string> calls;
  for (const auto& [k, _] : retried.items()) calls.insert(k);
  for (const auto& [k, _] : fin.items()) calls.insert(k);
  for (const auto& call : calls) {
    if (kGoOnlyCalls.count(call) != 0) {
      EXPECT_FALSE(kGoOnlyCalls.at(call)) << "sluice::Client::" << call << " exists: check its statuses";
      continue;
    }
    ASSERT_EQ(call, "reserve_copies") << "a call this test does not know";
    std::set<std::string> classified;
    for (bool again : {true, false}) {
      const json& list = again ? retried : fin;
      if (!list.contains(call)) continue;
      for (const auto& n : list.at(call)) {
        const std::string name = n.get<std::string>();
        classified.insert(name);
        pb::v1::ReserveResponse::Status st;
        ASSERT_TRUE(pb::v1::ReserveResponse::Status_Parse(name, &st)) << "no ReserveResponse status " << name;
        Rejected got = reserve_rejected(st, 1.0, 0.5, 10);
        EXPECT_EQ(got.at.size() > 1, again) << name << ": " << got.at.size() << " attempts";
      }
    }
    const auto* d = pb::v1::ReserveResponse::Status_descriptor();
    for (int k = 0; k < d->value_count(); ++k) {
      const std::string name = d->value(k)->name();
      if (name == "OK" || name == "STATUS_UNSPECIFIED") continue;
      EXPECT_EQ(classified.count(name), 1u) << "retry.json says nothing of the rejection " << name;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// retry.json, leases

TEST(Vectors, LeaseBackoffBounds) {
  json l = read("retry.json").at("leases");
  sluice::detail::Retry r;  // the lease client's and the push stream's
  EXPECT_EQ(r.lo(), num(l.at("min_backoff")));
  EXPECT_EQ(r.hi(), num(l.at("max_backoff")));
}

// after is the delay after `failures` failed requests, the last success
// having recorded interval (0: none); u < 0: the real draw.
double after(int failures, double interval, const std::function<double()>& u) {
  sluice::detail::Retry r;
  if (interval > 0) r.succeeded(interval);
  double d = std::nan("");
  for (int k = 0; k < failures; ++k) d = u ? r.failed(u()) : r.failed();
  return d;
}

TEST(Vectors, LeaseBackoff) {
  json l = read("retry.json").at("leases");
  ASSERT_FALSE(l.at("cases").empty());
  for (const auto& c : l.at("cases")) {
    int failures = c.at("failures").get<int>();
    double interval = num(c.at("interval")), lo = num(c.at("min")), hi = num(c.at("max"));
    SCOPED_TRACE(std::to_string(failures) + " failures, interval " + std::to_string(interval) + " s");
    EXPECT_NEAR(after(failures, interval, [] { return 0.0; }), lo, kExact) << "the bottom draw (u = 0)";
    EXPECT_NEAR(after(failures, interval, [] { return 1.0; }), hi, kExact) << "the top draw (u = 1)";
    std::mt19937_64 rng(static_cast<uint64_t>(failures * 1000 + interval * 100));
    auto seeded = [&rng] { return std::uniform_real_distribution<double>(0, 1)(rng); };
    double mn = kInf, mx = -kInf;
    for (int n = 0; n < 400; ++n) {
      // Half the real draw (jitter01), half a seeded one.
      double d = n % 2 == 0 ? after(failures, interval, nullptr) : after(failures, interval, seeded);
      ASSERT_TRUE(d >= lo - kExact && d <= hi + kExact) << d << " s outside [" << lo << ", " << hi << "]";
      mn = std::min(mn, d);
      mx = std::max(mx, d);
    }
    double tenth = (hi - lo) / 10;
    EXPECT_TRUE(mn <= lo + tenth && mx >= hi - tenth) << "400 draws in [" << mn << ", " << mx << "]";
  }
}

// The cases through a manual client whose server is down: after n failed
// requests it steps again within the case's bounds (the real draw). The
// client records at least 5 s (its next refresh interval) at an answered
// request, so a capped case runs when its interval is one the client can
// record (>= 5 s): a scripted server grants it, then stops. The other
// capped cases (intervals under 5 s) are detail::Retry's alone, above.
TEST(Vectors, LeaseBackoffThroughTheClient) {
  json l = read("retry.json").at("leases");
  const double min_interval = sluice::kMinRequestInterval.count();
  int ran = 0;
  for (const auto& c : l.at("cases")) {
    int failures = c.at("failures").get<int>();
    double interval = num(c.at("interval")), lo = num(c.at("min")), hi = num(c.at("max"));
    if (interval != 0 && (interval < min_interval || interval != std::floor(interval))) continue;
    SCOPED_TRACE(std::to_string(failures) + " failed requests, interval " + std::to_string(interval) + " s");
    ++ran;
    FakeClock clock{0};
    clock.set(1800000000.0);
    std::unique_ptr<ScriptedCapacity> srv;
    std::string addr;
    if (interval > 0) {
      json script = {{"a", {{"capacity", 1}, {"lease_length", 3600}, {"refresh_interval", interval}}}};
      srv = std::make_unique<ScriptedCapacity>(clock, 1800000000.0, script);
      addr = srv->addr;
    } else {
      addr = dead_address();
    }
    auto client = vectors_client(addr, clock);
    auto r = client->resource("a", 1);
    if (srv) {
      double wait = Access::refresh_step(*client).count();
      ASSERT_EQ(srv->recorded().size(), 1u);
      EXPECT_EQ(wait, interval) << "the refresh asked for";
      srv->stop();  // down from now on
      clock.advance(wait);
    }
    double d = std::nan("");
    {
      Quiet q;
      for (int n = 0; n < failures; ++n) {
        d = Access::refresh_step(*client).count();
        clock.advance(d);
      }
    }
    EXPECT_TRUE(d >= lo - kExact && d <= hi + kExact) << "after " << failures << " failures: " << d << " s";
    client->close(sluice::Seconds(0.2));
  }
  EXPECT_GT(ran, 0) << "retry.json has no leases case the client can run";
}

// ---------------------------------------------------------------------------------------------
// errors.json

// kClasses are the types errors.json may name for C++ (namespace sluice).
const std::map<std::string, std::type_index> kClasses = {
    {"Error", typeid(sluice::Error)},
    {"Cancelled", typeid(sluice::Cancelled)},
    {"InvalidArgument", typeid(sluice::InvalidArgument)},
    {"DeadlineExceeded", typeid(sluice::DeadlineExceeded)},
    {"NotFound", typeid(sluice::NotFound)},
    {"AlreadyExists", typeid(sluice::AlreadyExists)},
    {"PermissionDenied", typeid(sluice::PermissionDenied)},
    {"ResourceExhausted", typeid(sluice::ResourceExhausted)},
    {"FailedPrecondition", typeid(sluice::FailedPrecondition)},
    {"Aborted", typeid(sluice::Aborted)},
    {"OutOfRange", typeid(sluice::OutOfRange)},
    {"Unimplemented", typeid(sluice::Unimplemented)},
    {"Internal", typeid(sluice::Internal)},
    {"Unavailable", typeid(sluice::Unavailable)},
    {"Unauthenticated", typeid(sluice::Unauthenticated)},
    {"Closed", typeid(sluice::Closed)},
    {"SessionLost", typeid(sluice::SessionLost)},
    {"OverLimit", typeid(sluice::OverLimit)},
};

// is checks that e is exactly the type named, carrying the code named.
::testing::AssertionResult is(const sluice::Error& e, const std::string& cls, const std::string& code) {
  auto it = kClasses.find(cls);
  if (it == kClasses.end()) return ::testing::AssertionFailure() << "errors.json names sluice::" << cls << ", unknown here";
  if (std::type_index(typeid(e)) != it->second) {
    return ::testing::AssertionFailure() << "a " << typeid(e).name() << " (" << e.what() << "), want sluice::" << cls;
  }
  if (e.code_name() != code) return ::testing::AssertionFailure() << "code " << e.code_name() << ", want " << code;
  return ::testing::AssertionSuccess();
}

TEST(Vectors, ErrorClasses) {
  json v = read("errors.json");
  ASSERT_EQ(v.at("namespaces").at("cpp").get<std::string>(), "sluice");
  std::set<int> numbers;
  for (const auto& c : v.at("codes")) {
    const std::string code = c.at("code").get<std::string>(), cls = c.at("cpp").get<std::string>();
    int number = c.at("number").get<int>();
    SCOPED_TRACE(code);
    numbers.insert(number);
    auto sc = static_cast<grpc::StatusCode>(number);
    EXPECT_EQ(sluice::code_name(sc), code) << "grpc::StatusCode " << number;
    try {
      sluice::throw_status(grpc::Status(sc, "scripted"), "Call");
      ADD_FAILURE() << "throw_status returned";
    } catch (const sluice::Error& e) {
      EXPECT_TRUE(is(e, cls, code));
      EXPECT_EQ(static_cast<int>(e.code()), number);
    }
  }
  // Every code but OK (0) is in the file.
  for (int n = 1; n <= 16; ++n) EXPECT_EQ(numbers.count(n), 1u) << "errors.json has no code " << n;
}

// A reserve_copies whose Reserve the server fails with each code: with
// fail-open on (the default) a 'caller' code is raised as its type and a
// 'fail_open' one yields a degraded hold of min_copies; with it off every
// code is raised as its type.
TEST(Vectors, ErrorCharon) {
  json v = read("errors.json");
  FakeClock time{0};
  ScriptedLimits srv(time);
  Quiet q;
  for (bool fail_open : {true, false}) {
    sluice::Options o;
    o.fail_open = fail_open;
    o.call_timeout = sluice::Seconds(30);  // real time: only the server's answer decides
    sluice::Client c(srv.addr, o);
    for (const auto& k : v.at("codes")) {
      const std::string code = k.at("code").get<std::string>(), cls = k.at("cpp").get<std::string>();
      const std::string charon = k.at("charon").get<std::string>();
      SCOPED_TRACE(code + (fail_open ? ", fail-open on" : ", fail-open off"));
      ASSERT_TRUE(charon == "caller" || charon == "fail_open") << charon;
      {
        std::lock_guard<std::mutex> l(srv.mu);
        srv.fails = static_cast<grpc::StatusCode>(k.at("number").get<int>());
      }
      try {
        sluice::Hold h = c.reserve_copies("gpus", "initech", 3, 2);
        EXPECT_TRUE(fail_open && charon == "fail_open") << "a hold";
        EXPECT_TRUE(h.degraded());
        EXPECT_EQ(h.copies(), 2);
      } catch (const sluice::Error& e) {
        EXPECT_FALSE(fail_open && charon == "fail_open") << "raised " << e.what();
        EXPECT_TRUE(is(e, cls, code));
      }
    }
    c.close();
  }
}

TEST(Vectors, ErrorConditions) {
  json v = read("errors.json");
  std::set<std::string> seen;
  for (const auto& k : v.at("conditions")) {
    const std::string cond = k.at("condition").get<std::string>(), cls = k.at("cpp").get<std::string>();
    const std::string code = k.at("code").get<std::string>();
    SCOPED_TRACE(cond);
    seen.insert(cond);
    FakeClock time{0};
    ScriptedLimits srv(time);
    Quiet q;
    sluice::Client c(srv.addr);
    try {
      if (cond == "closed") {
        // A call on a closed client, and on a released handle.
        auto r = Access::client(dead_address(), sluice::Options{}, sluice::detail::Hooks{[] { return 0.0; }, true, 0});
        auto h = r->resource("a", 1);
        try {
          h.release(sluice::Seconds(0.2));
        } catch (const sluice::Error&) {
          // the ReleaseCapacity failed (nothing listens): released here all the same
        }
        try {
          h.set_wants(2);
          ADD_FAILURE() << "set_wants on a released handle";
        } catch (const sluice::Error& e) {
          EXPECT_TRUE(is(e, cls, code)) << "set_wants on a released handle";
        }
        c.close();
        c.reserve_copies("gpus", "initech");
      } else if (cond == "session_lost") {
        std::unique_lock<std::mutex> l(srv.mu);
        srv.status = pb::v1::ReserveResponse::OK;
        l.unlock();
        sluice::Hold h = c.reserve_copies("gpus", "initech");
        ASSERT_FALSE(h.degraded());
        l.lock();
        srv.release_lost = true;  // the server no longer knows the session
        l.unlock();
        h.release();
      } else if (cond == "over_limit") {
        c.reserve_copies("gpus", "initech");  // rejected, no max wait
      } else {
        FAIL() << "a condition this test does not know";
      }
      ADD_FAILURE() << "nothing raised";
    } catch (const sluice::Error& e) {
      EXPECT_TRUE(is(e, cls, code));
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"closed", "session_lost", "over_limit"}));
}

// ---------------------------------------------------------------------------------------------
// constants.json

// Const is where C++ keeps a constant, as constants.json says it ('cpp'),
// and its value read from there.
struct Const {
  std::string cpp;
  double value;
};

TEST(Vectors, Constants) {
  json v = read("constants.json");
  const sluice::Options o;
  const sluice::detail::Retry retry;  // the lease client's and the push stream's
  const sluice::RateLimiter limiter;
  // Resource::rate_limiter's default burst is the RateLimiter's.
  FakeClock clock{0};
  auto client = vectors_client(dead_address(), clock);
  auto r = client->resource("a", 1);
  const double bound_burst = r.rate_limiter()->max_burst_seconds();
  EXPECT_EQ(bound_burst, limiter.max_burst_seconds()) << "Resource::rate_limiter()'s default burst";
  EXPECT_EQ(retry.hi(), sluice::detail::kMaxBackoff) << "the lease backoff's cap is kMaxBackoff";
  const std::map<std::string, Const> cpp = {
      {"min_request_interval", {"sluice::kMinRequestInterval", sluice::kMinRequestInterval.count()}},
      {"expiry_margin", {"sluice::kExpiryMargin", sluice::kExpiryMargin.count()}},
      {"default_refresh_interval", {"(kDefaultRefresh in src/leases.cc)", sluice::detail::kDefaultRefresh}},
      {"min_backoff", {"(detail::Retry's lo in src/internal.h)", retry.lo()}},
      {"max_backoff", {"(kMaxBackoff in src/leases.cc)", sluice::detail::kMaxBackoff}},
      {"watch_min_backoff", {"(detail::Retry's lo in src/internal.h)", retry.lo()}},
      {"watch_max_backoff", {"(detail::Retry's hi in src/internal.h)", retry.hi()}},
      {"watch_unsupported", {"(kWatchUnsupported in src/leases.cc)", sluice::detail::kWatchUnsupported}},
      {"max_redirects", {"(kMaxRedirects in src/leases.cc)", static_cast<double>(sluice::detail::kMaxRedirects)}},
      {"request_timeout", {"(kRequestTimeout in src/leases.cc)", sluice::detail::kRequestTimeout}},
      {"backoff_unit", {"(sluice::Options::backoff_unit default)", o.backoff_unit.count()}},
      {"session_ttl", {"(sluice::Options::session_ttl default)", o.session_ttl.count()}},
      {"call_timeout", {"(sluice::Options::call_timeout default)", o.call_timeout.count()}},
      {"max_copies", {"sluice::kMaxCopies", static_cast<double>(sluice::kMaxCopies)}},
      {"default_max_burst_seconds", {"(sluice::RateLimiter's max_burst_seconds default)", limiter.max_burst_seconds()}},
  };
  std::set<std::string> seen;
  for (const auto& k : v.at("constants")) {
    const std::string name = k.at("name").get<std::string>(), where = k.at("cpp").get<std::string>();
    const std::string unit = k.at("unit").get<std::string>();
    SCOPED_TRACE(name + " (" + where + ")");
    seen.insert(name);
    ASSERT_TRUE(unit == "seconds" || unit == "count") << unit;
    auto it = cpp.find(name);
    if (it == cpp.end()) {
      ADD_FAILURE() << "a constant this test does not know" << (where.empty() ? " (C++ has none: say so here)" : "");
      continue;
    }
    EXPECT_EQ(where, it->second.cpp) << "where C++ keeps it";
    if (unit == "count") {
      ASSERT_TRUE(k.at("value").is_number_integer());
      EXPECT_EQ(k.at("value").get<int64_t>(),
                name == "max_copies" ? sluice::kMaxCopies : static_cast<int64_t>(it->second.value));
    } else {
      EXPECT_EQ(num(k.at("value")), it->second.value);
    }
  }
  for (const auto& [name, _] : cpp) EXPECT_EQ(seen.count(name), 1u) << "constants.json no longer has " << name;
  client->close(sluice::Seconds(0.2));
}

}  // namespace
