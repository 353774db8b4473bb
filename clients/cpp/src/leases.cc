// Leases (Doorman's job): shares of a resource's capacity, kept fresh in the
// background and enforced locally.
//
// A Client keeps all of its resources in one bulk doorman.Capacity/GetCapacity
// request, sent at the smallest refresh interval among its leases (stretched
// to at least 5 s) and at once when a resource is added. It keeps Doorman's
// 5-second rule: it never sends a resource's request more often than once
// every kMinRequestInterval, counted from the arrival of the answer to the
// last request carrying it. A request is due when a resource is new (sent at
// once), when its wants changed or it holds no valid lease (as soon as its
// 5 s end), when its refresh interval has passed, or kExpiryMargin before
// its lease expires. A request carries every resource outside its 5 s
// window; one due only for refreshes waits (less than 5 s, never past those
// leases' margin) for the resources inside their windows, so that a
// resource sent alone rejoins the others in one bulk request. It follows
// mastership redirects, retries failures with capped exponential backoff and
// jitter (moving to the master named by Discovery, or the next address), and
// when a lease expires without renewal falls back to its mode.
//
// When the server offers it, the client also keeps one sluice.v1.Leases/Watch
// stream open and applies the leases pushed on it when they are newer than
// the one it holds (by the decision's sequence); against a server without
// the stream it polls only, trying the stream again every 5 minutes.
//
// This is the Go client's behaviour (client package; docs/client.md) and the
// Python client's (clients/python/src/sluice/leases.py).
//
// Source: doorman-design.md, "Client operation", "Client library",
// "Optimistic, pessimistic and safe mode operation".
#include <cmath>
#include <iostream>
#include <sstream>
#include <limits>

#include "internal.h"

namespace sluice {
namespace detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMinInterval = 5.0;        // kMinRequestInterval
constexpr double kMargin = 0.5;             // kExpiryMargin
constexpr double kDiscoveryTimeout = 1.0;   // a Discovery, after a failure

void check_wants(double wants) {
  if (std::isnan(wants) || std::isinf(wants) || wants < 0) {
    std::ostringstream m;
    m << "wants " << wants << " must be finite and >= 0";
    throw InvalidArgument(m.str());
  }
}

}  // namespace

// Declared in internal.h (the tests read them).
const double kDefaultRefresh = 5.0;     // a lease without a refresh interval; the idle wait
const double kMaxBackoff = 10.0;
const double kRequestTimeout = 5.0;     // a GetCapacity
const double kWatchUnsupported = 300.0; // before trying a Watch the server lacks again
const int kMaxRedirects = 3;

// --- ResourceState ----------------------------------------------------------------

ResourceState::ResourceState(Leases* l, std::string rid, double w, int64_t prio, Mode m)
    : leases(l), id(std::move(rid)), priority(prio), mode(m), wants(w) {}

double ResourceState::effective(double now) const {
  if (released) return 0;
  if (leases->killed()) return kInf;
  if (has_lease && expiry > now) return capacity;
  switch (mode) {
    case Mode::kOptimistic: return wants;
    case Mode::kPessimistic: return 0;
    case Mode::kSafe: break;
  }
  if (safe_known) return safe < 0 ? kInf : safe;
  return 0;
}

void ResourceState::change_locked(double now) {
  double cur = effective(now);
  if (cur != current) {
    current = cur;
    ++seq;
  }
}

// deliver tells the listeners the newest capacity, holding no lock while
// they run; one thread delivers at a time, newest value last.
void ResourceState::deliver() {
  {
    std::lock_guard<std::mutex> l(mu);
    if (delivering) return;
    delivering = true;
  }
  for (;;) {
    std::vector<std::shared_ptr<std::function<void(double)>>> due;
    double cur;
    {
      std::lock_guard<std::mutex> l(mu);
      cur = current;
      for (auto& e : listeners) {
        if (e.seen < seq) {
          e.seen = seq;
          due.push_back(e.f);
        }
      }
      if (due.empty()) {
        delivering = false;
        return;
      }
    }
    for (auto& f : due) {
      try {
        (*f)(cur);
      } catch (const std::exception& e) {  // a listener's failure is its own
        std::cerr << "sluice: a listener of " << id << " failed: " << e.what() << "\n";
      }
    }
  }
}

pb::doorman::ResourceRequest ResourceState::request(double now, uint64_t* gen) {
  std::lock_guard<std::mutex> l(mu);
  pb::doorman::ResourceRequest r;
  r.set_resource_id(id);
  r.set_priority(priority);
  r.set_wants(wants);
  if (has_lease && expiry > now) {
    auto* h = r.mutable_has();
    h->set_expiry_time(static_cast<int64_t>(expiry));
    h->set_refresh_interval(static_cast<int64_t>(refresh));
    h->set_capacity(capacity);
  }
  *gen = wants_gen;
  return r;
}

void ResourceState::sent(double at, uint64_t gen) {
  std::lock_guard<std::mutex> l(mu);
  requested = true;
  sent_at = at;
  sent_gen = gen;
}

Schedule ResourceState::schedule(double now) {
  std::lock_guard<std::mutex> l(mu);
  if (!requested) return Schedule{now, now, 0, false};
  double ready = sent_at + kMinInterval;
  if (wants_gen != sent_gen || !has_lease || !(expiry > now)) return Schedule{ready, ready, 0, false};
  double interval = std::max(refresh, kMinInterval);
  double due = sent_at + interval;
  double latest = expiry - kMargin;
  if (latest < due) return Schedule{ready, std::max(latest, ready), 0, false};
  return Schedule{ready, due, latest, true};
}

void ResourceState::grant(double cap, double exp, double ri, std::optional<double> safe_cap, int64_t s, bool pushed,
                          double now) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (released || ((pushed || s != 0) && s <= lease_seq)) return;  // released, or older than the lease held
    lease_seq = std::max(lease_seq, s);
    has_lease = true;
    capacity = cap;
    expiry = exp;
    refresh = ri;
    if (safe_cap) {
      safe = *safe_cap;
      safe_known = true;
    }
    change_locked(now);
  }
  deliver();
}

void ResourceState::expire(double now) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (has_lease && !(expiry > now)) has_lease = false;
    change_locked(now);
  }
  deliver();
}

void ResourceState::set_wants(double w) {
  bool changed;
  {
    std::lock_guard<std::mutex> l(mu);
    if (released) throw Closed("resource " + id + " was released");
    changed = wants != w;
    wants = w;
    if (changed) ++wants_gen;
    change_locked(leases->clock());
  }
  if (changed) leases->poke();
}

void ResourceState::ask_total() {
  {
    std::lock_guard<std::mutex> l(ask_mu);
    set_wants(leases->sum_wants(*this));
  }
  deliver();
}

bool ResourceState::mark_released() {
  {
    std::lock_guard<std::mutex> l(mu);
    if (released) return false;
    released = true;
    change_locked(leases->clock());
  }
  deliver();
  return true;
}

std::pair<std::vector<std::shared_ptr<ResourceState>>, double> plan(
    const std::vector<std::shared_ptr<ResourceState>>& states, double now) {
  std::optional<double> nxt, join, limit;
  bool due = false, must_go = false;
  std::vector<std::shared_ptr<ResourceState>> send;
  for (const auto& r : states) {
    Schedule s = r->schedule(now);
    if (s.ready > now) {
      join = join ? std::max(*join, s.ready) : s.ready;
      nxt = nxt ? std::min(*nxt, s.due) : s.due;
      continue;
    }
    send.push_back(r);
    if (s.due > now) {
      nxt = nxt ? std::min(*nxt, s.due) : s.due;
      continue;
    }
    due = true;
    if (!s.has_latest) {
      must_go = true;
    } else {
      limit = limit ? std::min(*limit, s.latest) : s.latest;
    }
  }
  if (!due) return {{}, nxt ? *nxt - now : kDefaultRefresh};
  if (!must_go && join && limit && *join <= *limit) return {{}, *join - now};  // wait for the others' windows
  return {std::move(send), 0.0};
}

// --- Leases ---------------------------------------------------------------------------

Leases::Leases(std::string client_id, std::vector<std::string> addrs, std::shared_ptr<Channels> channels, Mode mode,
               bool push, const Hooks& hooks)
    : id(std::move(client_id)),
      addrs_(std::move(addrs)),
      channels_(std::move(channels)),
      mode_(mode),
      push_(push),
      clock_(hooks.wall_clock),
      manual_(hooks.manual),
      request_timeout_(hooks.request_timeout),
      addr_(addrs_.front()) {}

std::string Leases::server() const {
  std::lock_guard<std::mutex> l(mu_);
  return addr_;
}

int64_t Leases::requests() const {
  std::lock_guard<std::mutex> l(mu_);
  return requests_;
}

void Leases::poke() {
  {
    std::lock_guard<std::mutex> l(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

// start_locked starts the threads, each holding a strong reference: the
// Leases outlives them even when the Client is destroyed from a listener
// running on one of them.
void Leases::start_locked() {
  if (manual_ || refresh_thread_.joinable()) return;
  auto self = shared_from_this();
  refresh_thread_ = Worker([self] { self->refresh_loop(); });
  if (push_) watch_thread_ = Worker([self] { self->watch_loop(); });
}

bool Leases::begin_call(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return false;
  call_ctx_ = ctx;
  return true;
}

void Leases::end_call() {
  std::lock_guard<std::mutex> l(mu_);
  call_ctx_ = nullptr;
}

bool Leases::wait_stop(double seconds) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, std::chrono::duration<double>(std::min(seconds, 1e6)), [this] { return stop_; });
  return stop_;
}

void Leases::refresh_loop() {
  double wait = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (wait > 0) {
        cv_.wait_for(l, std::chrono::duration<double>(std::min(wait, 1e6)), [this] { return stop_ || woken_; });
      }
      woken_ = false;
      if (stop_) return;
    }
    try {
      wait = step();
    } catch (const std::exception& e) {  // never let the thread die
      std::cerr << "sluice: refresh step failed: " << e.what() << "\n";
      wait = kMaxBackoff;
    }
  }
}

void Leases::watch_loop() {
  Retry retry;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
    }
    bool opened = false;
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      watch_ctx_ = &ctx;
    }
    auto stub = pb::v1::Leases::NewStub(channels_->get(server()));
    pb::v1::WatchRequest req;
    req.set_holder_id(id);
    auto reader = stub->Watch(&ctx, req);
    pb::v1::WatchResponse resp;
    while (reader->Read(&resp)) {
      opened = true;
      if (resp.leases_size() > 0) apply_pushed(resp.leases());
    }
    grpc::Status st = reader->Finish();
    {
      std::lock_guard<std::mutex> l(mu_);
      watch_ctx_ = nullptr;
      if (stop_) return;
    }
    if (opened) retry.succeeded(0.1);
    double wait = retry.failed();
    if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED) wait = kWatchUnsupported;
    if (wait_stop(wait)) return;
  }
}

Resource Leases::resource(const std::string& rid, double wants, int64_t priority) {
  if (rid.empty()) throw InvalidArgument("empty resource id");
  check_wants(wants);
  std::shared_ptr<ResourceState> s;
  auto h = std::make_shared<HandleData>();
  h->wants = wants;
  bool fresh = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) throw Closed("client closed");
    auto it = resources_.find(rid);
    if (it != resources_.end()) {
      s = it->second;
      if (s->priority != priority) {
        throw InvalidArgument("resource " + rid + " is held at priority " + std::to_string(s->priority) + ", not " +
                              std::to_string(priority));
      }
    } else {
      s = std::make_shared<ResourceState>(this, rid, wants, priority, mode_);
      resources_[rid] = s;
      fresh = true;
      start_locked();
    }
    s->handles.insert(h);
  }
  if (fresh) {
    poke();
  } else {
    s->ask_total();
  }
  return Resource(shared_from_this(), s, h);
}

double Leases::sum_wants(ResourceState& s) {
  std::vector<std::shared_ptr<HandleData>> hs;
  {
    std::lock_guard<std::mutex> l(mu_);
    hs.assign(s.handles.begin(), s.handles.end());
  }
  double sum = 0;
  for (auto& h : hs) {
    std::lock_guard<std::mutex> l(h->mu);
    sum += h->wants;
  }
  return sum;
}

void Leases::release_handle(const std::shared_ptr<ResourceState>& s, const std::shared_ptr<HandleData>& h,
                            double timeout) {
  bool last;
  {
    std::lock_guard<std::mutex> l(mu_);
    s->handles.erase(h);
    last = s->handles.empty();
    auto it = resources_.find(s->id);
    if (last && it != resources_.end() && it->second == s) resources_.erase(it);
  }
  if (!last) {
    s->ask_total();
    return;
  }
  if (!s->mark_released()) return;
  release_ids({s->id}, timeout);
}

void Leases::release_ids(const std::vector<std::string>& ids, double timeout) {
  pb::doorman::ReleaseCapacityRequest req;
  req.set_client_id(id);
  for (auto& i : ids) req.add_resource_id(i);
  pb::doorman::ReleaseCapacityResponse resp;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  grpc::Status st = pb::doorman::Capacity::NewStub(channels_->get(server()))->ReleaseCapacity(&ctx, req, &resp);
  if (!st.ok()) throw_status(st, "ReleaseCapacity");
}

void Leases::set_kill_switch(bool on) {
  if (killed_.exchange(on) == on) return;
  double now = clock();
  for (auto& s : states()) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->change_locked(now);
    }
    s->deliver();
  }
}

void Leases::close(double timeout) {
  std::vector<std::shared_ptr<ResourceState>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& kv : resources_) all.push_back(kv.second);
    resources_.clear();
    stop_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    if (call_ctx_ != nullptr) call_ctx_->TryCancel();
  }
  cv_.notify_all();
  for (auto& s : all) s->mark_released();
  // Joined at once, or, on the thread itself (closed from a listener), by
  // the reaper once it returns (Worker). start_locked cannot run again:
  // closed_ is set.
  refresh_thread_.join();
  watch_thread_.join();
  if (!all.empty()) {
    std::vector<std::string> ids;
    for (auto& s : all) ids.push_back(s->id);
    try {
      release_ids(ids, timeout);
    } catch (const Error&) {
      // best effort: the server lets the leases expire
    }
  }
}

std::vector<std::shared_ptr<ResourceState>> Leases::states() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::shared_ptr<ResourceState>> out;
  out.reserve(resources_.size());
  for (auto& kv : resources_) out.push_back(kv.second);
  return out;
}

double Leases::step() {
  double now = clock();
  auto all = states();
  for (auto& s : all) s->expire(now);
  auto [send, wait] = plan(all, now);
  double nxt = wait;
  if (wait <= 0) {
    pb::doorman::GetCapacityRequest req;
    req.set_client_id(id);
    std::vector<uint64_t> gens;
    gens.reserve(send.size());
    for (auto& s : send) {
      uint64_t gen;
      *req.add_resource() = s->request(now, &gen);
      gens.push_back(gen);
    }
    pb::doorman::GetCapacityResponse resp;
    grpc::Status err;
    if (!follow(req, &resp, &err)) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) return 0;
      }
      nxt = retry_.failed();
      rotate();
    } else {
      now = clock();
      for (size_t i = 0; i < send.size(); ++i) send[i]->sent(now, gens[i]);
      double interval = apply(resp, send, now);
      nxt = plan(states(), now).second;
      retry_.succeeded(interval);
    }
  }
  if (auto exp = next_expiry()) nxt = std::max(std::min(nxt, *exp - clock()), 0.0);
  return nxt;
}

void Leases::use(const std::string& addr) {
  std::lock_guard<std::mutex> l(mu_);
  addr_ = addr;
}

// follow sends req to the current server, following mastership redirects
// (at most kMaxRedirects).
bool Leases::follow(const pb::doorman::GetCapacityRequest& req, pb::doorman::GetCapacityResponse* resp, grpc::Status* err) {
  std::string addr = server();
  for (int redirects = 0;; ++redirects) {
    use(addr);
    grpc::ClientContext ctx;
    set_deadline(ctx, request_timeout_ > 0 ? request_timeout_ : kRequestTimeout);
    resp->Clear();
    if (!begin_call(&ctx)) {
      *err = grpc::Status(grpc::StatusCode::CANCELLED, "client closed");
      return false;
    }
    grpc::Status st = pb::doorman::Capacity::NewStub(channels_->get(addr))->GetCapacity(&ctx, req, resp);
    end_call();
    if (!st.ok()) {
      *err = st;
      return false;
    }
    if (!resp->has_mastership()) {
      std::lock_guard<std::mutex> l(mu_);
      ++requests_;
      return true;
    }
    const std::string& master = resp->mastership().master_address();
    if (master.empty() || master == addr || redirects >= kMaxRedirects) {
      *err = grpc::Status(grpc::StatusCode::UNAVAILABLE, "GetCapacity to " + addr + ": not the master");
      return false;
    }
    addr = master;
  }
}

double Leases::apply(const pb::doorman::GetCapacityResponse& resp, const std::vector<std::shared_ptr<ResourceState>>& sent,
                     double now) {
  std::map<std::string, ResourceState*> by_id;
  for (auto& s : sent) by_id[s->id] = s.get();
  double nxt = 0;
  for (const auto& rr : resp.response()) {
    auto it = by_id.find(rr.resource_id());
    if (it == by_id.end()) continue;
    const auto& g = rr.gets();
    double ri = g.refresh_interval() > 0 ? static_cast<double>(g.refresh_interval()) : kDefaultRefresh;
    std::optional<double> safe;
    if (rr.has_safe_capacity()) safe = rr.safe_capacity();
    it->second->grant(g.capacity(), static_cast<double>(g.expiry_time()), ri, safe, g.sequence(), false, now);
    ri = std::max(ri, kMinInterval);
    if (nxt == 0 || ri < nxt) nxt = ri;
  }
  return nxt > 0 ? nxt : kDefaultRefresh;
}

void Leases::apply_pushed(const google::protobuf::RepeatedPtrField<pb::v1::PushedLease>& leases) {
  double now = clock();
  for (const auto& pl : leases) {
    std::shared_ptr<ResourceState> s;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = resources_.find(pl.resource_id());
      if (it == resources_.end()) continue;
      s = it->second;
    }
    double ri = pl.refresh_interval() > 0 ? static_cast<double>(pl.refresh_interval()) : kDefaultRefresh;
    s->grant(pl.capacity(), static_cast<double>(pl.expiry_time()), ri, std::nullopt, pl.sequence(), true, now);
  }
}

// rotate, after a failure, moves to the master named by Discovery on the
// configured addresses, or else to the next address.
void Leases::rotate() {
  if (addrs_.size() < 2) return;
  std::string cur = server();
  size_t start = 0;
  for (size_t i = 0; i < addrs_.size(); ++i) {
    if (addrs_[i] == cur) start = i + 1;
  }
  for (size_t k = 0; k < addrs_.size(); ++k) {
    const std::string& a = addrs_[(start + k) % addrs_.size()];
    grpc::ClientContext ctx;
    set_deadline(ctx, request_timeout_ > 0 ? request_timeout_ : kDiscoveryTimeout);
    pb::doorman::DiscoveryResponse d;
    if (!begin_call(&ctx)) return;  // closing
    grpc::Status st =
        pb::doorman::Capacity::NewStub(channels_->get(a))->Discovery(&ctx, pb::doorman::DiscoveryRequest(), &d);
    end_call();
    if (!st.ok()) continue;
    if (!d.mastership().master_address().empty()) {
      use(d.mastership().master_address());
      return;
    }
  }
  use(addrs_[start % addrs_.size()]);
}

std::optional<double> Leases::next_expiry() {
  double now = clock();
  std::optional<double> exp;
  for (auto& s : states()) {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->has_lease && s->expiry > now && (!exp || s->expiry < *exp)) exp = s->expiry;
  }
  return exp;
}

}  // namespace detail

// --- Resource ----------------------------------------------------------------------------

Resource::Resource(std::shared_ptr<detail::Leases> leases, std::shared_ptr<detail::ResourceState> state,
                   std::shared_ptr<detail::HandleData> handle)
    : leases_(std::move(leases)), state_(std::move(state)), handle_(std::move(handle)) {}

Resource::Resource(Resource&&) noexcept = default;

Resource& Resource::operator=(Resource&& o) noexcept {
  if (this != &o) {
    try {
      if (handle_) release();
    } catch (...) {
    }
    leases_ = std::move(o.leases_);
    state_ = std::move(o.state_);
    handle_ = std::move(o.handle_);
  }
  return *this;
}

Resource::~Resource() {
  if (!handle_) return;
  try {
    release();
  } catch (...) {
    // the server lets an unreleased lease expire
  }
}

const std::string& Resource::id() const { return state_->id; }
int64_t Resource::priority() const { return state_->priority; }

double Resource::wants() const {
  std::lock_guard<std::mutex> l(handle_->mu);
  return handle_->wants;
}

double Resource::total_wants() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->wants;
}

double Resource::capacity() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->effective(leases_->clock());
}

std::optional<Lease> Resource::lease() const {
  std::lock_guard<std::mutex> l(state_->mu);
  const auto& s = *state_;
  if (!s.has_lease || !(s.expiry > leases_->clock())) return std::nullopt;
  return Lease{s.capacity, s.expiry, Seconds(s.refresh)};
}

std::optional<double> Resource::safe_capacity() const {
  std::lock_guard<std::mutex> l(state_->mu);
  if (!state_->safe_known) return std::nullopt;
  return state_->safe;
}

void Resource::set_wants(double wants) {
  detail::check_wants(wants);
  {
    std::lock_guard<std::mutex> l(handle_->mu);
    if (handle_->closed) throw Closed("resource " + id() + " was released");
    handle_->wants = wants;
  }
  state_->ask_total();
}

void Resource::on_change(std::function<void(double)> listener) {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->change_locked(leases_->clock());
    state_->listeners.push_back({std::make_shared<std::function<void(double)>>(std::move(listener)), 0});
  }
  state_->deliver();
}

std::shared_ptr<RateLimiter> Resource::rate_limiter(double max_burst_seconds) {
  auto lim = std::make_shared<RateLimiter>(0.0, max_burst_seconds);
  std::weak_ptr<RateLimiter> w = lim;
  on_change([w](double c) {
    if (auto l = w.lock()) l->set_rate(c);
  });
  return lim;
}

std::shared_ptr<Gauge> Resource::gauge() {
  auto g = std::make_shared<Gauge>(0.0);
  std::weak_ptr<Gauge> w = g;
  on_change([w](double c) {
    if (auto l = w.lock()) l->set_capacity(c);
  });
  return g;
}

void Resource::release(Seconds timeout) {
  {
    std::lock_guard<std::mutex> l(handle_->mu);
    if (handle_->closed) return;
    handle_->closed = true;
  }
  leases_->release_handle(state_, handle_, timeout.count());
}

}  // namespace sluice
