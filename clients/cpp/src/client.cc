// sluice::Client: the three jobs over one set of channels.
#include <iostream>

#include "internal.h"

namespace sluice {

Client::Client(const std::string& addresses, Options options)
    : Client(addresses, std::move(options), detail::Hooks{}) {}

Client::Client(const std::string& addresses, Options options, detail::Hooks hooks) : options_(std::move(options)) {
  detail::reap();  // threads left by clients closed from their own callbacks
  auto addrs = detail::split_addresses(addresses);
  if (options_.call_timeout.count() <= 0 || options_.session_ttl.count() <= 0 || options_.backoff_unit.count() <= 0) {
    throw InvalidArgument("call_timeout, session_ttl and backoff_unit must be > 0");
  }
  id_ = options_.client_id.empty() ? new_client_id() : options_.client_id;
  channels_ = std::make_shared<detail::Channels>(options_.tls);
  leases_ = std::make_shared<detail::Leases>(id_, addrs, channels_, options_.mode, options_.push, hooks);
  std::weak_ptr<detail::Leases> w = leases_;
  std::string first = addrs.front();
  sessions_ = std::make_shared<detail::Sessions>(
      [w, first] {
        auto l = w.lock();
        return l ? l->server() : first;
      },
      channels_, options_);
}

Client::~Client() {
  try {
    close();
  } catch (const std::exception& e) {
    std::cerr << "sluice: closing the client: " << e.what() << "\n";
  }
}

std::string Client::server() const { return leases_->server(); }

void Client::check_open() const {
  if (closed_.load()) throw Closed("client closed");
}

Resource Client::resource(const std::string& resource_id, double wants, int64_t priority) {
  check_open();
  return leases_->resource(resource_id, wants, priority);
}

void Client::set_kill_switch(bool on) { leases_->set_kill_switch(on); }

namespace {
google::protobuf::Duration to_duration(double seconds) {
  google::protobuf::Duration d;
  int64_t ns = static_cast<int64_t>(seconds * 1e9 + (seconds >= 0 ? 0.5 : -0.5));
  d.set_seconds(ns / 1000000000);
  d.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return d;
}
double seconds_of(const google::protobuf::Duration& d) { return static_cast<double>(d.seconds()) + d.nanos() / 1e9; }
}  // namespace

Allowance Client::allow(const AllowRequest& r) {
  check_open();
  pb::v1::AllowRequest req;
  req.set_resource(r.resource);
  req.set_domain(r.domain);
  req.set_tokens(r.tokens);
  req.set_min_tokens(r.min_tokens);
  if (r.max_wait) {
    if (r.max_wait->count() < 0) throw InvalidArgument("max_wait is negative");
    *req.mutable_max_wait() = to_duration(r.max_wait->count());
  }
  pb::v1::AllowResponse resp;
  grpc::ClientContext ctx;
  detail::set_deadline(ctx, r.timeout ? r.timeout->count() : options_.call_timeout.count());
  grpc::Status st = pb::v1::Limits::NewStub(channels_->get(server()))->Allow(&ctx, req, &resp);
  if (!st.ok()) throw_status(st, "Allow " + r.resource + "/" + r.domain);
  Allowance a;
  a.status = pb::v1::AllowResponse::Status_Name(resp.status());
  a.granted = resp.granted();
  a.wait = Seconds(seconds_of(resp.wait()));
  if (resp.has_retry_after()) a.retry_after = Seconds(seconds_of(resp.retry_after()));
  a.remaining = resp.remaining();
  a.limit = resp.limit();
  a.bucket = resp.bucket();
  return a;
}

Allowance Client::allow(const std::string& resource, const std::string& domain, int64_t tokens) {
  AllowRequest r;
  r.resource = resource;
  r.domain = domain;
  r.tokens = tokens;
  return allow(r);
}

QuotaAllowance Client::quota_allow(const std::string& ns, const std::string& bucket, int64_t tokens,
                                   std::optional<Seconds> max_wait) {
  check_open();
  pb::quotaservice::AllowRequest req;
  req.set_namespace_(ns);
  req.set_bucket_name(bucket);
  req.set_tokens_requested(tokens);
  if (max_wait) {
    req.set_max_wait_time_override(true);
    req.set_max_wait_millis_override(static_cast<int64_t>(max_wait->count() * 1000));
  }
  pb::quotaservice::AllowResponse resp;
  grpc::ClientContext ctx;
  detail::set_deadline(ctx, options_.call_timeout.count());
  grpc::Status st = pb::quotaservice::QuotaService::NewStub(channels_->get(server()))->Allow(&ctx, req, &resp);
  if (!st.ok()) throw_status(st, "QuotaService.Allow " + ns + "/" + bucket);
  QuotaAllowance q;
  q.status = pb::quotaservice::AllowResponse::Status_Name(resp.status());
  q.granted = resp.tokens_granted();
  q.wait = Seconds(resp.wait_millis() / 1000.0);
  return q;
}

Hold Client::reserve_copies(const ReserveRequest& request) {
  check_open();
  return sessions_->reserve(request);
}

Hold Client::reserve_copies(const std::string& resource, const std::string& domain, int64_t copies,
                            int64_t min_copies) {
  ReserveRequest r;
  r.resource = resource;
  r.domain = domain;
  r.copies = copies;
  r.min_copies = min_copies;
  return reserve_copies(r);
}

Hold Client::seize(const std::string& transfer_id, std::optional<Seconds> timeout) {
  check_open();
  return sessions_->seize(transfer_id, timeout);
}

void Client::close(Seconds timeout) {
  if (closed_.exchange(true)) return;
  leases_->close(timeout.count());
  sessions_->close();
  detail::reap();
}

namespace detail {
Seconds Access::refresh_step(Client& c) { return Seconds(c.leases_->step()); }
int64_t Access::capacity_requests(Client& c) { return c.leases_->requests(); }
}  // namespace detail

}  // namespace sluice
