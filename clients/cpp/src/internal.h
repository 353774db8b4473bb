// The client's internals: the generated stubs, channels, the lease engine,
// the sessions, the background threads and the tests' hooks. Not installed
// (CMakeLists.txt installs include/sluice only); the tests and the
// benchmark include it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/client.h"
#include "sluice_internal/doorman/doorman.grpc.pb.h"
#include "sluice_internal/quotaservice/quota_service.grpc.pb.h"
#include "sluice_internal/sluice/v1/leases.grpc.pb.h"
#include "sluice_internal/sluice/v1/limits.grpc.pb.h"

namespace sluice {

// pb names the generated messages and stubs. They are compiled under
// Sluice's private proto packages (sluice_internal.doorman, …; see
// cmake/SluiceProtoc.cmake), so that an application's own copies of the
// same .proto files link and load beside them; their gRPC method paths are
// the wire's ("/doorman.Capacity/GetCapacity").
namespace pb {
namespace doorman = ::sluice_internal::doorman;
namespace quotaservice = ::sluice_internal::quotaservice;
namespace v1 = ::sluice_internal::sluice::v1;
}  // namespace pb

namespace detail {

// Worker is one of the client's background threads: always joined, never
// detached. join() (and the destructor) joins the thread, except on the
// thread itself — the client closed or destroyed from a callback running
// on it (Resource::on_change, Options::on_session_lost) — where a join
// would deadlock: the thread is then handed to the reaper, which joins it
// once it has finished (reap(), from the next Client constructed or
// closed), or when the process exits. The function's captures (the
// thread's strong reference to its owner) are destroyed on the thread
// before it counts as finished. Movable, not copyable; not thread-safe (one
// owner, under the owner's lock).
class Worker {
 public:
  Worker() = default;
  template <class F>
  explicit Worker(F f);
  Worker(Worker&&) noexcept = default;
  Worker& operator=(Worker&& o) noexcept;
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { join(); }

  // join joins the thread (at once if it has finished), or, called on the
  // thread itself, hands it to the reaper. Does nothing without a thread.
  void join() noexcept;
  // done reports whether the thread's function has returned (true without
  // a thread).
  bool done() const { return !done_ || done_->load(); }
  bool joinable() const { return t_.joinable(); }

 private:
  std::thread t_;
  std::shared_ptr<std::atomic<bool>> done_;
};

template <class F>
Worker::Worker(F f) : done_(std::make_shared<std::atomic<bool>>(false)) {
  t_ = std::thread([f = std::move(f), done = done_]() mutable {
    {
      F run = std::move(f);
      run();
    }
    done->store(true);
  });
}

// reap joins the threads handed to the reaper that have finished; it never
// waits for one still running, nor joins the calling thread. Thread-safe.
void reap() noexcept;
// reaper_pending is the number of threads the reaper holds, not yet joined
// (for the tests).
size_t reaper_pending();

// steady_now is the steady clock in seconds.
double steady_now();
// system_now is Unix seconds.
double system_now();
// set_deadline bounds ctx by timeout from now.
void set_deadline(grpc::ClientContext& ctx, double timeout_seconds);
// split_addresses splits "a:1,b:2" into addresses; throws InvalidArgument
// for none.
std::vector<std::string> split_addresses(const std::string& addresses);

// Channels are the client's channels, one per server address, made on
// first use. Thread-safe.
class Channels {
 public:
  explicit Channels(const std::optional<TLS>& tls);
  std::shared_ptr<grpc::Channel> get(const std::string& addr);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;
  grpc::ChannelArguments args_;
};

// jitter01 is the uniform draw in [0, 1) of every jittered delay: the
// lease backoff (Retry) and Charon's retry policy (Sessions::retry_delay).
double jitter01();

// The lease client's constants kept in src/leases.cc
// (clients/vectors/constants.json names them there), declared here for the
// tests.
extern const double kDefaultRefresh;    // a lease without a refresh interval; the idle wait
extern const double kMaxBackoff;        // the most the lease backoff grows to (Retry's hi)
extern const double kRequestTimeout;    // a GetCapacity
extern const double kWatchUnsupported;  // before trying a Watch the server lacks again
extern const int kMaxRedirects;         // mastership redirects one request follows

// Retry is capped exponential backoff with jitter, never longer than the
// last refresh interval.
class Retry {
 public:
  Retry(double lo = 0.1, double hi = kMaxBackoff) : lo_(lo), hi_(hi) {}
  double failed() { return failed(jitter01()); }
  // failed with the jitter draw u in [0, 1] (the tests fix it).
  double failed(double u);
  void succeeded(double interval);
  double lo() const { return lo_; }
  double hi() const { return hi_; }

 private:
  double lo_, hi_;
  int failures_ = 0;
  double interval_ = 0;
};

// Hooks are the tests' controls of a Client, kept out of the public
// headers. wall_clock returns Unix seconds (empty: the system clock);
// manual: no refresh thread, the owner calls Access::refresh_step;
// request_timeout bounds each GetCapacity and Discovery of the refresh
// loop, in seconds (0: 5 s for a GetCapacity, 1 s for a Discovery).
struct Hooks {
  std::function<double()> wall_clock;
  bool manual = false;
  double request_timeout = 0;
};

// HandleData is one Resource handle's own state.
struct HandleData {
  std::mutex mu;
  double wants = 0;
  bool closed = false;
};

class Leases;

// Schedule is when a resource may next be sent (ready), when it should be
// (due), and until when a request due only for its refresh may wait to
// travel with others (latest; has_latest false: it must go when due).
struct Schedule {
  double ready = 0, due = 0, latest = 0;
  bool has_latest = false;
};

// ResourceState is one resource's lease, shared by its handles; its fields
// are guarded by mu.
class ResourceState {
 public:
  ResourceState(Leases* leases, std::string id, double wants, int64_t priority, Mode mode);

  double effective(double now) const;  // mu held
  void change_locked(double now);
  void deliver();
  pb::doorman::ResourceRequest request(double now, uint64_t* gen);
  void sent(double at, uint64_t gen);
  Schedule schedule(double now);
  void grant(double capacity, double expiry, double refresh, std::optional<double> safe, int64_t seq, bool pushed,
             double now);
  void expire(double now);
  void set_wants(double wants);
  void ask_total();
  bool mark_released();

  Leases* const leases;
  const std::string id;
  const int64_t priority;
  const Mode mode;

  mutable std::mutex mu;
  double wants;
  bool has_lease = false;
  double capacity = 0, expiry = 0, refresh = 0;
  int64_t lease_seq = 0;
  double safe = 0;
  bool safe_known = false;
  bool released = false;
  std::set<std::shared_ptr<HandleData>> handles;  // guarded by the Leases' mu
  std::mutex ask_mu;
  // Notifications.
  double current = 0;
  uint64_t seq = 1;
  struct Listener {
    std::shared_ptr<std::function<void(double)>> f;
    uint64_t seen;
  };
  std::vector<Listener> listeners;
  bool delivering = false;
  // Doorman's 5-second rule.
  bool requested = false;
  double sent_at = 0;
  uint64_t wants_gen = 0, sent_gen = 0;
};

// plan decides at now, by the 5-second rule, whether a bulk request is due
// and what it carries (every resource outside its window). Returns the
// resources to send and how long until one is due (0: now).
std::pair<std::vector<std::shared_ptr<ResourceState>>, double> plan(
    const std::vector<std::shared_ptr<ResourceState>>& states, double now);

// Leases is the lease side of a Client: its resources, the refresh thread
// and the watch thread. The threads hold a strong reference to it while
// they run; close() stops them (cancelling the call in flight) and joins
// them (Worker).
class Leases : public std::enable_shared_from_this<Leases> {
 public:
  Leases(std::string client_id, std::vector<std::string> addrs, std::shared_ptr<Channels> channels, Mode mode,
         bool push, const Hooks& hooks);

  double clock() const { return clock_ ? clock_() : system_now(); }
  std::string server() const;
  bool killed() const { return killed_.load(); }
  void poke();
  Resource resource(const std::string& id, double wants, int64_t priority);
  double sum_wants(ResourceState& s);
  void release_handle(const std::shared_ptr<ResourceState>& s, const std::shared_ptr<HandleData>& h, double timeout);
  void set_kill_switch(bool on);
  void close(double timeout);
  double step();
  void apply_pushed(const google::protobuf::RepeatedPtrField<pb::v1::PushedLease>& leases);
  int64_t requests() const;

  const std::string id;

 private:
  void start_locked();
  void refresh_loop();
  void watch_loop();
  std::vector<std::shared_ptr<ResourceState>> states();
  void release_ids(const std::vector<std::string>& ids, double timeout);
  bool follow(const pb::doorman::GetCapacityRequest& req, pb::doorman::GetCapacityResponse* resp, grpc::Status* err);
  double apply(const pb::doorman::GetCapacityResponse& resp, const std::vector<std::shared_ptr<ResourceState>>& sent,
               double now);
  void use(const std::string& addr);
  void rotate();
  std::optional<double> next_expiry();
  bool wait_stop(double seconds);
  // begin_call registers ctx as the refresh loop's call in flight, for
  // close() to cancel; false (nothing registered) once closing.
  bool begin_call(grpc::ClientContext* ctx);
  void end_call();

  const std::vector<std::string> addrs_;
  std::shared_ptr<Channels> channels_;
  const Mode mode_;
  const bool push_;
  std::function<double()> clock_;
  const bool manual_;
  const double request_timeout_;  // 0: the defaults
  std::atomic<bool> killed_{false};
  Retry retry_;

  mutable std::mutex mu_;
  std::string addr_;
  std::map<std::string, std::shared_ptr<ResourceState>> resources_;
  bool closed_ = false;
  bool woken_ = false;
  bool stop_ = false;
  std::condition_variable cv_;
  Worker refresh_thread_, watch_thread_;
  grpc::ClientContext* watch_ctx_ = nullptr;
  grpc::ClientContext* call_ctx_ = nullptr;  // the refresh loop's call in flight
  int64_t requests_ = 0;

  friend class ResourceState;
};

// Session is a session the client opened.
class Session {
 public:
  Session(std::string id, double ttl, double now) : id(std::move(id)), ttl_(ttl), acked_(now) {}
  const std::string id;
  double ttl() const;
  void set_ttl(double t);
  double acked() const;
  void set_acked(double t);
  // ended reports whether the session has ended; lost whether it was lost
  // (rather than closed by the client).
  bool ended() const;
  // err throws the session's error if it has ended, prefixed with what.
  void check(const std::string& what) const;
  // finish ends the session (false if it had ended already); cancels its
  // keep-alive stream unless cancel is false.
  bool finish(bool lost, const std::string& message, bool cancel = true);
  void cancel();
  void set_call(grpc::ClientContext* ctx);
  double interval() const { return std::max(ttl() / 3, 0.001); }
  std::string error_message() const;
  bool lost() const;

 private:
  mutable std::mutex mu_;
  double ttl_;
  double acked_;
  bool ended_ = false, lost_ = false;
  std::string message_;
  grpc::ClientContext* call_ = nullptr;
};

// Sessions is the copy side of a Client: its session, kept alive in the
// background by a keep-alive thread per session (holding a strong
// reference to it), and the calls on copies. close() ends the session
// (cancelling its stream) and joins the threads (Worker).
class Sessions : public std::enable_shared_from_this<Sessions> {
 public:
  Sessions(std::function<std::string()> server, std::shared_ptr<Channels> channels, const Options& o);
  std::unique_ptr<pb::v1::Limits::Stub> stub();
  double call_timeout() const { return call_timeout_; }
  Hold reserve(const ReserveRequest& r);
  Hold seize(const std::string& transfer_id, std::optional<Seconds> timeout);
  void lose(const std::shared_ptr<Session>& s, const std::string& cause);
  void close();
  // retry_delay is the sleep after the i-th rejection: the paper's
  // jitter(2^i) in backoff units, with the draw u in [0, 1).
  static double retry_delay(double unit, int i, double u);
  double retry_delay(int i);

  // The tests' hooks (clients/vectors/retry.json), set before the first
  // call: the retry policy's jitter draw (empty: jitter01), and reserve's
  // clock and its sleep between attempts (empty: steady_now, and a wait
  // that ends early when the client closes).
  std::function<double()> test_jitter, test_clock;
  std::function<void(double)> test_sleep;

 private:
  std::shared_ptr<Session> session(std::optional<double> deadline);
  std::shared_ptr<Session> open(std::optional<double> deadline);
  void end(const std::shared_ptr<Session>& s);
  double timeout(std::optional<double> deadline) const;
  double now() const { return test_clock ? test_clock() : steady_now(); }
  void keepalive(std::shared_ptr<Session> s);
  // stream runs one keep-alive stream; returns whether a renewal was
  // confirmed and how it ended.
  enum class StreamEnd { kBroken, kNotFound, kExpired };
  StreamEnd stream(const std::shared_ptr<Session>& s, bool* acked);
  Hold fail_open(const ReserveRequest& r, int64_t least, double start, int attempts, const Error& cause);
  bool sleep_closed(double seconds);

  std::function<std::string()> server_;
  std::shared_ptr<Channels> channels_;
  const double call_timeout_, session_ttl_, backoff_unit_;
  const bool fail_open_;
  std::function<void(const std::string&, const Error&)> on_session_lost_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Session> cur_;
  bool opening_ = false;
  bool closed_ = false;
  std::vector<Worker> threads_;  // the keep-alive threads; finished ones are joined as sessions open
};


// Access opens a Client's internals to the tests (the attorney of
// Client's private constructor and members).
struct Access {
  // client is a Client built with hooks.
  static std::unique_ptr<Client> client(const std::string& addresses, Options options, Hooks hooks) {
    return std::unique_ptr<Client>(new Client(addresses, std::move(options), std::move(hooks)));
  }
  static Leases& leases(Client& c) { return *c.leases_; }
  static Sessions& sessions(Client& c) { return *c.sessions_; }
  // refresh_step is one turn of the refresh loop: applies fallbacks to
  // expired leases, sends one bulk GetCapacity if one is due, and returns
  // the seconds until the next turn.
  static Seconds refresh_step(Client& c);
  // capacity_requests is the number of GetCapacity requests answered.
  static int64_t capacity_requests(Client& c);
};

}  // namespace detail

struct Hold::Data {
  std::shared_ptr<detail::Sessions> sessions;
  std::shared_ptr<detail::Session> session;  // null: degraded
  std::string resource, domain;
  std::vector<std::string> groups;
  Reservation reservation;
  double waited = 0;
  int attempts = 1;
  mutable std::mutex mu;
  int64_t copies = 0;
};

}  // namespace sluice
