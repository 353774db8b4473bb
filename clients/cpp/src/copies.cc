// Copy-limited resources in sessions (Charon's job).
//
// A copy-limited resource is a counting semaphore per (resource, domain):
// copies are held in a session that the client opens on first use
// (sluice.v1.Limits/OpenSession) and keeps alive in the background over the
// KeepAlive stream, renewing it every third of its ttl. When the session
// ends — closed, its stream broken, its ttl passed without a keep-alive —
// the server releases everything it held, so the copies of a process that
// dies come back by themselves. A Hold releases what it still holds when it
// is destroyed (RAII), as Charon's Python client did with a context manager.
//
// This is the Go client's behaviour (client/limits: ReserveCopies, Hold,
// Seize; docs/charon.md), including the paper's retry policy and fail-open.
//
// Source: charon-paper.md, sections 3.1 (reserve, release, transfer,
// seize), 3.2 (implicit release, the retry policy) and 4.3 (degraded modes,
// session cleanup).
#include <google/protobuf/duration.pb.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "internal.h"

namespace sluice {
namespace detail {
namespace {

// CallTimeout: the caller's timeout passed (not the server's slowness).
class CallTimeout : public DeadlineExceeded {
 public:
  CallTimeout() : DeadlineExceeded("the call's timeout passed") {}
};

google::protobuf::Duration duration(double seconds) {
  google::protobuf::Duration d;
  int64_t ns = static_cast<int64_t>(std::llround(seconds * 1e9));
  d.set_seconds(ns / 1000000000);
  d.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return d;
}

double seconds_of(const google::protobuf::Duration& d) { return static_cast<double>(d.seconds()) + d.nanos() / 1e9; }

// client_code: a code that is the caller's to fix, never failed open.
bool client_code(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::OUT_OF_RANGE:
      return true;
    default:
      return false;
  }
}

// session_gone: a NOT_FOUND answer about the session (the server no longer
// knows it) rather than the resource or the transfer.
bool session_gone(const grpc::Status& st) {
  if (st.error_code() != grpc::StatusCode::NOT_FOUND) return false;
  const std::string& m = st.error_message();
  return m.rfind("session_id:", 0) == 0 || m.find("unknown session") != std::string::npos;
}

int64_t check_range(int64_t n, int64_t least) {
  if (n < 1 || n > kMaxCopies) throw InvalidArgument("copies " + std::to_string(n) + " outside [1, 2^53]");
  if (least < 0 || least > n) {
    throw InvalidArgument("min copies " + std::to_string(least) + " outside [0, " + std::to_string(n) + "]");
  }
  return least == 0 ? n : least;
}

}  // namespace

// --- Session -------------------------------------------------------------------------

double Session::ttl() const {
  std::lock_guard<std::mutex> l(mu_);
  return ttl_;
}
void Session::set_ttl(double t) {
  std::lock_guard<std::mutex> l(mu_);
  ttl_ = t;
}
double Session::acked() const {
  std::lock_guard<std::mutex> l(mu_);
  return acked_;
}
void Session::set_acked(double t) {
  std::lock_guard<std::mutex> l(mu_);
  acked_ = t;
}
bool Session::ended() const {
  std::lock_guard<std::mutex> l(mu_);
  return ended_;
}
bool Session::lost() const {
  std::lock_guard<std::mutex> l(mu_);
  return lost_;
}
std::string Session::error_message() const {
  std::lock_guard<std::mutex> l(mu_);
  return message_;
}

void Session::check(const std::string& what) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!ended_) return;
  if (lost_) throw SessionLost(what + ": " + message_);
  throw Closed(what + ": " + message_);
}

bool Session::finish(bool lost, const std::string& message, bool cancel_stream) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (ended_) return false;
    ended_ = true;
    lost_ = lost;
    message_ = message;
  }
  if (cancel_stream) cancel();
  return true;
}

void Session::cancel() {
  std::lock_guard<std::mutex> l(mu_);
  if (call_ != nullptr) call_->TryCancel();
}

void Session::set_call(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> l(mu_);
  call_ = ctx;
  if (ctx != nullptr && ended_) ctx->TryCancel();
}

// --- Sessions ------------------------------------------------------------------------

Sessions::Sessions(std::function<std::string()> server, std::shared_ptr<Channels> channels, const Options& o)
    : server_(std::move(server)),
      channels_(std::move(channels)),
      call_timeout_(o.call_timeout.count()),
      session_ttl_(o.session_ttl.count()),
      backoff_unit_(o.backoff_unit.count()),
      fail_open_(o.fail_open),
      on_session_lost_(o.on_session_lost) {}

std::unique_ptr<pb::v1::Limits::Stub> Sessions::stub() { return pb::v1::Limits::NewStub(channels_->get(server_())); }

double Sessions::timeout(std::optional<double> deadline) const {
  if (!deadline) return call_timeout_;
  double left = *deadline - now();
  if (left <= 0) throw CallTimeout();
  return std::min(call_timeout_, left);
}

// session is the live session, opening one if there is none (one
// OpenSession at a time; concurrent callers wait for it).
std::shared_ptr<Session> Sessions::session(std::optional<double> deadline) {
  {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      if (closed_) throw Closed("client closed");
      if (cur_ && !cur_->ended()) return cur_;
      if (!opening_) break;
      if (deadline) {
        if (cv_.wait_for(l, std::chrono::duration<double>(std::max(0.0, *deadline - now()))) ==
                std::cv_status::timeout &&
            now() >= *deadline) {
          throw CallTimeout();
        }
      } else {
        cv_.wait(l);
      }
    }
    opening_ = true;
  }
  std::shared_ptr<Session> s;
  try {
    s = open(deadline);
  } catch (...) {
    {
      std::lock_guard<std::mutex> l(mu_);
      opening_ = false;
    }
    cv_.notify_all();
    throw;
  }
  bool closed;
  {
    std::lock_guard<std::mutex> l(mu_);
    opening_ = false;
    closed = closed_;
    if (!closed) {
      cur_ = s;
      // The keep-alive threads of sessions that ended before have
      // finished, or are finishing: join those (at once), keep the rest.
      threads_.erase(std::remove_if(threads_.begin(), threads_.end(), [](const Worker& w) { return w.done(); }),
                     threads_.end());
      auto self = shared_from_this();
      threads_.emplace_back([self, s] { self->keepalive(s); });
    }
  }
  cv_.notify_all();
  if (closed) {
    end(s);
    throw Closed("client closed");
  }
  return s;
}

std::shared_ptr<Session> Sessions::open(std::optional<double> deadline) {
  pb::v1::OpenSessionRequest req;
  *req.mutable_ttl() = duration(session_ttl_);
  pb::v1::OpenSessionResponse resp;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout(deadline));
  grpc::Status st = stub()->OpenSession(&ctx, req, &resp);
  if (!st.ok()) throw_status(st, "OpenSession");
  if (resp.session_id().empty()) throw Unavailable("OpenSession: an answer without a session_id");
  double ttl = resp.has_ttl() ? seconds_of(resp.ttl()) : 0;
  return std::make_shared<Session>(resp.session_id(), ttl > 0 ? ttl : session_ttl_, steady_now());
}

void Sessions::lose(const std::shared_ptr<Session>& s, const std::string& cause) {
  std::string msg = "session " + s->id.substr(0, 8) + "… lost: " + cause;
  if (!s->finish(true, msg)) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cur_ == s) cur_.reset();
  }
  std::cerr << "sluice: session lost, its holds are gone: " << cause << "\n";
  if (on_session_lost_) {
    try {
      on_session_lost_(s->id, SessionLost(msg));
    } catch (const std::exception& e) {
      std::cerr << "sluice: on_session_lost failed: " << e.what() << "\n";
    }
  }
}

// end ends s (closed) and asks the server to release its holds (best
// effort, within 2 s).
void Sessions::end(const std::shared_ptr<Session>& s) {
  if (!s->finish(false, "client closed: the session's copies were released", false)) return;
  pb::v1::CloseSessionRequest req;
  req.set_session_id(s->id);
  pb::v1::CloseSessionResponse resp;
  grpc::ClientContext ctx;
  set_deadline(ctx, 2.0);
  (void)stub()->CloseSession(&ctx, req, &resp);
  s->cancel();
}

void Sessions::close() {
  std::shared_ptr<Session> s;
  std::vector<Worker> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    s = std::move(cur_);
    cur_.reset();
    threads.swap(threads_);
  }
  cv_.notify_all();
  if (s) end(s);  // cancels its keep-alive stream; the threads of ended sessions are returning already
  // Joined at once, or, on the thread itself (closed from on_session_lost),
  // by the reaper once it returns (Worker).
  for (auto& t : threads) t.join();
}

bool Sessions::sleep_closed(double seconds) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::duration<double>(std::max(0.0, seconds)), [this] { return closed_; });
  return closed_;
}

// retry_delay is the paper's jitter(2^i) in backoff units: uniform in
// [v - v/4, v + v/4) for v = 2^i units.
double Sessions::retry_delay(double unit, int i, double u) {
  double v = unit * std::pow(2.0, std::min(std::max(i, 0), 100));
  return v * 0.75 + u * v * 0.5;
}

double Sessions::retry_delay(int i) { return retry_delay(backoff_unit_, i, test_jitter ? test_jitter() : jitter01()); }

// keepalive keeps s alive until it ends or the client closes: one stream at
// a time, renewing every third of the ttl; a broken stream is reopened at
// once, then after backoff sleeps within what is left of the ttl. s is lost
// when the server answers NOT_FOUND, or when its ttl passes without a
// renewal the server confirmed.
void Sessions::keepalive(std::shared_ptr<Session> s) {
  int i = 0;
  for (;;) {
    bool acked = false;
    StreamEnd how = stream(s, &acked);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (s->ended() || closed_) return;
    }
    if (acked) i = 0;
    if (how == StreamEnd::kNotFound) {
      lose(s, "the server no longer knows it");
      return;
    }
    if (how == StreamEnd::kExpired) {
      lose(s, "not renewed within its ttl");
      return;
    }
    double left = s->acked() + s->ttl() - steady_now();
    if (left <= 0) {
      lose(s, "not renewed within its ttl (" + std::to_string(s->ttl()) + " s)");
      return;
    }
    if (i > 0) {
      if (sleep_closed(std::min(retry_delay(i), left)) || s->ended()) return;
    }
    ++i;
  }
}

Sessions::StreamEnd Sessions::stream(const std::shared_ptr<Session>& s, bool* acked) {
  grpc::ClientContext ctx;
  auto st = stub();
  auto rw = st->KeepAlive(&ctx);
  s->set_call(&ctx);
  std::mutex m;
  std::condition_variable cv;
  bool stop = false, expired = false;
  std::thread writer([&] {
    pb::v1::KeepAliveRequest req;
    req.set_session_id(s->id);
    if (!rw->Write(req)) return;
    std::unique_lock<std::mutex> l(m);
    for (;;) {
      if (cv.wait_for(l, std::chrono::duration<double>(s->interval()), [&] { return stop; })) return;
      if (s->ended()) return;
      if (steady_now() - s->acked() >= s->ttl()) {
        expired = true;
        ctx.TryCancel();
        return;
      }
      l.unlock();
      bool ok = rw->Write(req);
      l.lock();
      if (!ok) return;
    }
  });
  pb::v1::KeepAliveResponse resp;
  while (rw->Read(&resp)) {
    if (resp.has_ttl() && seconds_of(resp.ttl()) > 0) s->set_ttl(seconds_of(resp.ttl()));
    s->set_acked(steady_now());
    *acked = true;
  }
  {
    std::lock_guard<std::mutex> l(m);
    stop = true;
  }
  cv.notify_all();
  // Read returned false: the call is over (the server's status arrived, or
  // the call failed or was cancelled), so a Write in progress fails at
  // once. No TryCancel here: it would replace the server's status
  // (NOT_FOUND: the session is gone) with CANCELLED, and the loss would be
  // found only when the ttl passed.
  writer.join();
  grpc::Status status = rw->Finish();
  s->set_call(nullptr);
  if (expired) return StreamEnd::kExpired;
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) return StreamEnd::kNotFound;
  return StreamEnd::kBroken;
}

Hold Sessions::fail_open(const ReserveRequest& r, int64_t least, double start, int attempts, const Error& cause) {
  if (!fail_open_) {
    if (cause.code() == grpc::StatusCode::UNAVAILABLE) throw Unavailable(cause.message());
    throw_status(cause.status());
  }
  std::cerr << "sluice: limits service unreachable or failing (" << cause.what() << "); granting " << least
            << " copies of " << r.resource << "/" << r.domain << " by itself\n";
  auto d = std::make_unique<Hold::Data>();
  d->sessions = shared_from_this();
  d->resource = r.resource;
  d->domain = r.domain;
  d->copies = least;
  d->waited = now() - start;
  d->attempts = attempts;
  return Hold(std::move(d));
}

Hold Sessions::reserve(const ReserveRequest& r) {
  const int64_t least = check_range(r.copies, r.min_copies);
  const double start = now();
  std::optional<double> deadline;
  if (r.timeout) deadline = start + r.timeout->count();
  const double max_wait = r.max_wait.count();
  bool reopened = false;
  for (int i = 1;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) throw Closed("client closed");
    }
    std::shared_ptr<Session> s;
    try {
      s = session(deadline);
    } catch (const CallTimeout&) {
      throw;
    } catch (const Error& e) {
      if (client_code(e.code())) throw;
      return fail_open(r, least, start, i, e);
    }
    pb::v1::ReserveRequest req;
    req.set_session_id(s->id);
    req.set_resource(r.resource);
    req.set_domain(r.domain);
    req.set_copies(r.copies);
    req.set_min_copies(least);
    *req.mutable_max_wait() = duration(0);
    pb::v1::ReserveResponse m;
    grpc::ClientContext ctx;
    set_deadline(ctx, timeout(deadline));
    grpc::Status st = stub()->Reserve(&ctx, req, &m);
    if (!st.ok()) {
      if (client_code(st.error_code())) {
        if (session_gone(st) && !reopened) {
          lose(s, "the server no longer knows it");
          reopened = true;
          continue;
        }
        throw_status(st, "Reserve " + r.resource + "/" + r.domain);
      }
      std::string msg = st.error_message().empty() ? code_name(st.error_code()) : st.error_message();
      return fail_open(r, least, start, i, Error(st.error_code(), "Reserve: " + msg));
    }
    bool ok = m.status() == pb::v1::ReserveResponse::OK;
    if ((ok && !(least <= m.granted() && m.granted() <= r.copies)) ||
        m.status() == pb::v1::ReserveResponse::STATUS_UNSPECIFIED) {
      std::ostringstream msg;
      msg << "Reserve: an answer with status " << m.status() << " granting " << m.granted() << " of [" << least
          << ", " << r.copies << "]";
      return fail_open(r, least, start, i, Unavailable(msg.str()));
    }
    double waited = now() - start;
    Reservation res;
    res.domain_limit = m.domain_limit();
    if (m.has_global_limit()) res.global_limit = m.global_limit();
    res.domain_holds = m.domain_holds();
    res.global_holds = m.global_holds();
    for (const auto& g : m.groups()) res.groups.push_back(GroupHolds{g.name(), g.limit(), g.holds()});
    res.unlimited = m.unlimited();
    if (ok) {
      auto d = std::make_unique<Hold::Data>();
      d->sessions = shared_from_this();
      d->session = s;
      d->resource = r.resource;
      d->domain = r.domain;
      for (const auto& g : res.groups) d->groups.push_back(g.name);
      d->reservation = std::move(res);
      d->copies = m.granted();
      d->waited = waited;
      d->attempts = i;
      return Hold(std::move(d));
    }
    std::ostringstream msg;
    msg << r.resource << "/" << r.domain << " over limit: not even " << least << " copies fit (domain holds "
        << res.domain_holds << " of " << res.domain_limit;
    if (res.global_limit) msg << ", all domains " << res.global_holds << " of " << *res.global_limit;
    for (const auto& g : res.groups) msg << ", group " << g.name << " " << g.holds << " of " << g.limit;
    msg << "); " << i << " attempts in " << waited << " s";
    double d = std::min(max_wait - waited, retry_delay(i));
    if (d <= 0) throw OverLimit(msg.str());
    if (deadline && now() + d > *deadline) throw OverLimit(msg.str());
    if (test_sleep) {
      test_sleep(d);
    } else if (sleep_closed(d)) {
      throw Closed("client closed");
    }
    ++i;
  }
}

Hold Sessions::seize(const std::string& transfer_id, std::optional<Seconds> to) {
  if (transfer_id.empty()) throw InvalidArgument("empty transfer id");
  std::optional<double> deadline;
  if (to) deadline = now() + to->count();
  bool reopened = false;
  for (;;) {
    auto s = session(deadline);
    pb::v1::SeizeRequest req;
    req.set_session_id(s->id);
    req.set_transfer_id(transfer_id);
    pb::v1::SeizeResponse m;
    grpc::ClientContext ctx;
    set_deadline(ctx, timeout(deadline));
    grpc::Status st = stub()->Seize(&ctx, req, &m);
    if (!st.ok()) {
      if (session_gone(st) && !reopened) {
        lose(s, "the server no longer knows it");
        reopened = true;
        continue;
      }
      throw_status(st, "Seize");
    }
    if (m.copies() < 1) throw Unavailable("Seize: an answer seizing " + std::to_string(m.copies()) + " copies");
    auto d = std::make_unique<Hold::Data>();
    d->sessions = shared_from_this();
    d->session = s;
    d->resource = m.resource();
    d->domain = m.domain();
    d->groups.assign(m.groups().begin(), m.groups().end());
    d->copies = m.copies();
    return Hold(std::move(d));
  }
}

}  // namespace detail

// --- Hold ----------------------------------------------------------------------------------

namespace {
const Reservation kNoReservation;
const std::string kEmpty;
}  // namespace

Hold::Hold(std::unique_ptr<Data> d) : d_(std::move(d)) {}
Hold::Hold() = default;
Hold::Hold(Hold&&) noexcept = default;

Hold& Hold::operator=(Hold&& o) noexcept {
  if (this != &o) {
    try {
      if (d_) release();
    } catch (...) {
    }
    d_ = std::move(o.d_);
  }
  return *this;
}

Hold::~Hold() {
  if (!d_) return;
  try {
    release();
  } catch (const Error&) {
    // the server releases them at the latest when the session ends
  }
}

int64_t Hold::copies() const {
  if (!d_) return 0;
  if (d_->session && d_->session->ended()) return 0;
  std::lock_guard<std::mutex> l(d_->mu);
  return d_->copies;
}

const std::string& Hold::resource() const { return d_ ? d_->resource : kEmpty; }
const std::string& Hold::domain() const { return d_ ? d_->domain : kEmpty; }
bool Hold::degraded() const { return d_ && !d_->session; }
std::string Hold::session_id() const { return d_ && d_->session ? d_->session->id : ""; }
const Reservation& Hold::reservation() const { return d_ ? d_->reservation : kNoReservation; }
int Hold::attempts() const { return d_ ? d_->attempts : 0; }
Seconds Hold::waited() const { return Seconds(d_ ? d_->waited : 0); }

namespace {

void check_op(const Hold::Data& d, const std::string& op, int64_t n) {
  std::string what = op + " of " + d.resource + "/" + d.domain;
  if (n < 1) throw InvalidArgument(op + " of " + std::to_string(n) + " copies of " + d.resource + "/" + d.domain + "; at least 1");
  if (d.session) d.session->check(what);
  if (n > d.copies) {
    throw FailedPrecondition(op + " of " + std::to_string(n) + " copies of " + d.resource + "/" + d.domain +
                             "; the hold has " + std::to_string(d.copies));
  }
}

[[noreturn]] void failed(Hold::Data& d, const std::string& op, const grpc::Status& st) {
  std::string what = op + " of " + d.resource + "/" + d.domain;
  if (d.session && detail::session_gone(st)) {
    d.sessions->lose(d.session, "the server no longer knows it");
    d.session->check(what);
  }
  throw_status(st, what);
}

}  // namespace

void Hold::release(std::optional<int64_t> copies, std::optional<Seconds> timeout) {
  if (!d_) return;
  std::lock_guard<std::mutex> l(d_->mu);
  int64_t n = copies ? *copies : d_->copies;
  if (!copies && n == 0) return;
  check_op(*d_, "release", n);
  if (!d_->session) {
    d_->copies -= n;
    return;
  }
  pb::v1::ReleaseRequest req;
  req.set_session_id(d_->session->id);
  req.set_resource(d_->resource);
  req.set_domain(d_->domain);
  req.set_copies(n);
  for (auto& g : d_->groups) req.add_groups(g);
  pb::v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  detail::set_deadline(ctx, timeout ? timeout->count() : d_->sessions->call_timeout());
  grpc::Status st = d_->sessions->stub()->Release(&ctx, req, &resp);
  if (!st.ok()) failed(*d_, "release", st);
  d_->copies -= n;
}

std::string Hold::transfer(int64_t copies, std::optional<Seconds> ttl, std::optional<Seconds> timeout) {
  if (!d_) throw FailedPrecondition("transfer of an empty hold");
  std::lock_guard<std::mutex> l(d_->mu);
  if (ttl && ttl->count() < 0) throw InvalidArgument("transfer ttl is negative");
  if (!d_->session) {
    throw FailedPrecondition("transfer of " + d_->resource + "/" + d_->domain + ": a degraded hold; the server holds nothing");
  }
  check_op(*d_, "transfer", copies);
  pb::v1::TransferRequest req;
  req.set_session_id(d_->session->id);
  req.set_resource(d_->resource);
  req.set_domain(d_->domain);
  req.set_copies(copies);
  for (auto& g : d_->groups) req.add_groups(g);
  if (ttl && ttl->count() > 0) *req.mutable_ttl() = detail::duration(ttl->count());
  pb::v1::TransferResponse resp;
  grpc::ClientContext ctx;
  detail::set_deadline(ctx, timeout ? timeout->count() : d_->sessions->call_timeout());
  grpc::Status st = d_->sessions->stub()->Transfer(&ctx, req, &resp);
  if (!st.ok()) failed(*d_, "transfer", st);
  if (resp.transfer_id().empty()) throw Unavailable("Transfer: an answer without a transfer_id");
  d_->copies -= copies;
  return resp.transfer_id();
}

}  // namespace sluice
