// An application with its own doorman.proto stubs (package doorman) and
// Sluice's client in one process (tests/embedding/CMakeLists.txt).
//
//   embedding HOST:PORT
//
// against a sluice server whose fair/* resources are FAIR_SHARE of 100: it
// checks that both copies of doorman.proto are in protobuf's descriptor
// pool, asks for a lease with its own stub, and takes one with Sluice's
// client. Prints what it found; exits 0 when all of it worked, 1 otherwise.
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "doorman/doorman.grpc.pb.h"
#include "sluice/sluice.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: embedding HOST:PORT\n";
    return 2;
  }
  const std::string addr = argv[1];
  int failures = 0;
  auto check = [&failures](bool ok, const std::string& what) {
    std::cout << (ok ? "ok   " : "FAIL ") << what << "\n";
    if (!ok) ++failures;
  };

  // Both files loaded, under their own names.
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  const auto* mine = pool->FindFileByName("doorman/doorman.proto");
  check(mine != nullptr && mine->package() == "doorman", "the application's doorman/doorman.proto, package doorman");
  check(pool->FindFileByName("sluice_internal/doorman/doorman.proto") != nullptr,
        "Sluice's sluice_internal/doorman/doorman.proto");
  check(doorman::Capacity::service_full_name() == std::string("doorman.Capacity"),
        "the application's doorman.Capacity service");

  // The application's own stub, on the wire.
  {
    auto stub = doorman::Capacity::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
    doorman::GetCapacityRequest req;
    req.set_client_id("embedding-own-stub");
    auto* r = req.add_resource();
    r->set_resource_id("fair/embedding-own");
    r->set_priority(0);
    r->set_wants(10);
    doorman::GetCapacityResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status st = stub->GetCapacity(&ctx, req, &resp);
    check(st.ok(), "GetCapacity with the application's stub: " + (st.ok() ? std::string("OK") : st.error_message()));
    check(st.ok() && resp.response_size() == 1 && resp.response(0).gets().capacity() == 10,
          "the application's stub got a lease of 10");
  }

  // Sluice's client, on the same wire.
  {
    sluice::Options o;
    o.client_id = "embedding-sluice";
    sluice::Client client(addr, o);
    sluice::Resource res = client.resource("fair/embedding-sluice", 5);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (res.capacity() != 5 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    check(res.capacity() == 5, "Sluice's client got a lease of 5 (capacity " + std::to_string(res.capacity()) + ")");
    try {
      sluice::Allowance a = client.allow("nosuch", "x");
      check(a.status == "REJECTED_NO_BUCKET", "Sluice's client: Allow answered " + a.status);
    } catch (const sluice::Error& e) {
      check(false, std::string("Sluice's client: Allow threw ") + e.what());
    }
  }
  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}
