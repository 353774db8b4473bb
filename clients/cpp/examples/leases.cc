// Leases: a share of db/replica's 100 queries per second, enforced locally.
//
//   example_leases [HOST:PORT]
#include <chrono>
#include <cstdio>
#include <thread>

#include "sluice/sluice.h"

using namespace std::chrono_literals;

template <class F>
bool wait_for(F ready) {  // the first lease comes within a round trip
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

int main(int argc, char** argv) {
  sluice::Client client(argc > 1 ? argv[1] : "127.0.0.1:15000");  // one per process; closing releases every lease
  sluice::Resource replica = client.resource("db/replica", 20);    // 20 queries per second
  auto limiter = replica.rate_limiter(0.1);                         // follows the lease; 0.1 s of burst

  if (!wait_for([&] { return replica.lease().has_value(); })) return std::fprintf(stderr, "no lease\n"), 1;
  std::printf("lease: %g queries/s (safe capacity %g)\n", replica.capacity(), replica.safe_capacity().value_or(0));

  int sent = 0;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 1s) {
    limiter->acquire(1, 1s);  // blocks for its turn; never waits on the network
    ++sent;                   // ... run one query here
  }
  std::printf("sent %d queries in 1 s\n", sent);
  if (sent > 20 * 1.1 + 1) return std::fprintf(stderr, "too many: %d\n", sent), 1;

  // An in-flight limit: at most floor(capacity) at once.
  sluice::Resource tx = client.resource("db/tx-slots", 3);
  auto slots = tx.gauge();
  if (!wait_for([&] { return slots->capacity() >= 3; })) return std::fprintf(stderr, "no lease for db/tx-slots\n"), 1;
  {
    sluice::Gauge::Permit p = slots->hold(1s);  // released at the end of the block
    std::printf("in a transaction: %lld of %g slots held\n", static_cast<long long>(slots->in_use()), slots->capacity());
  }
  return 0;
}
