// Test helpers: a fake clock and an in-process doorman.Capacity server on
// loopback (the tests and the benchmark share them).
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "internal.h"  // sluice::pb::doorman

namespace sluice {
namespace test {

// FakeClock is a hand-moved clock, in Unix seconds (from start).
struct FakeClock {
  explicit FakeClock(double start = 1800000000.0) : t(start) {}
  std::mutex mu;
  double t;
  double now() {
    std::lock_guard<std::mutex> l(mu);
    return t;
  }
  void set(double v) {
    std::lock_guard<std::mutex> l(mu);
    t = v;
  }
  void advance(double s) {
    std::lock_guard<std::mutex> l(mu);
    t += s;
  }
};

// CapacityServer is a doorman.Capacity test server on loopback: it grants
// what is wanted (at most capacity per resource) for lease_length seconds of
// the fake clock, and records every request. A master address set makes it
// answer as a non-master naming that address.
class CapacityServer final : public sluice::pb::doorman::Capacity::Service {
 public:
  explicit CapacityServer(FakeClock& clock, double capacity = 100, int lease_length = 20, int refresh = 5)
      : clock_(clock), capacity_(capacity), lease_length_(lease_length), refresh_(refresh) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    addr = "127.0.0.1:" + std::to_string(port);
  }
  ~CapacityServer() override { stop(); }

  grpc::Status GetCapacity(grpc::ServerContext* ctx, const sluice::pb::doorman::GetCapacityRequest* req,
                           sluice::pb::doorman::GetCapacityResponse* resp) override {
    if (hook) hook(ctx);
    std::lock_guard<std::mutex> l(mu);
    requests.push_back(*req);
    if (!master.empty()) {
      resp->mutable_mastership()->set_master_address(master);
      return grpc::Status::OK;
    }
    auto now = static_cast<int64_t>(clock_.now());
    for (const auto& r : req->resource()) {
      auto* rr = resp->add_response();
      rr->set_resource_id(r.resource_id());
      rr->set_safe_capacity(1.5);
      rr->mutable_gets()->set_capacity(std::min(r.wants(), capacity_));
      rr->mutable_gets()->set_expiry_time(now + lease_length_);
      rr->mutable_gets()->set_refresh_interval(refresh_);
    }
    return grpc::Status::OK;
  }
  grpc::Status ReleaseCapacity(grpc::ServerContext*, const sluice::pb::doorman::ReleaseCapacityRequest* req,
                               sluice::pb::doorman::ReleaseCapacityResponse*) override {
    std::lock_guard<std::mutex> l(mu);
    released.emplace_back(req->resource_id().begin(), req->resource_id().end());
    return grpc::Status::OK;
  }
  grpc::Status Discovery(grpc::ServerContext*, const sluice::pb::doorman::DiscoveryRequest*,
                         sluice::pb::doorman::DiscoveryResponse* resp) override {
    std::lock_guard<std::mutex> l(mu);
    resp->set_is_master(master.empty());
    resp->mutable_mastership()->set_master_address(master.empty() ? addr : master);
    return grpc::Status::OK;
  }
  void stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
      server_.reset();
    }
  }
  // counts is the number of resources in each request received.
  std::vector<int> counts() {
    std::lock_guard<std::mutex> l(mu);
    std::vector<int> out;
    for (auto& r : requests) out.push_back(r.resource_size());
    return out;
  }

  std::string addr;
  std::string master;
  // hook, when set (before the first request), runs at the start of each
  // GetCapacity, outside mu: a test's way to hold a call in flight.
  std::function<void(grpc::ServerContext*)> hook;
  std::mutex mu;
  std::vector<sluice::pb::doorman::GetCapacityRequest> requests;
  std::vector<std::vector<std::string>> released;

 private:
  FakeClock& clock_;
  double capacity_;
  int lease_length_, refresh_;
  std::unique_ptr<grpc::Server> server_;
};

// manual_client is a client on the fake clock with no refresh thread: the
// test steps its refresh loop (step, run) through the internal hooks.
inline std::unique_ptr<sluice::Client> manual_client(const std::string& addresses, FakeClock& clock,
                                                     sluice::Mode mode = sluice::Mode::kSafe,
                                                     const std::string& client_id = "test-client") {
  sluice::Options o;
  o.client_id = client_id;
  o.push = false;
  o.mode = mode;
  sluice::detail::Hooks h;
  h.wall_clock = [&clock] { return clock.now(); };
  h.manual = true;
  return sluice::detail::Access::client(addresses, o, h);
}

}  // namespace test
}  // namespace sluice
