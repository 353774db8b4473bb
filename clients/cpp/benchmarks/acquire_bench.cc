// Acquire overhead of a lease's limiter (Google Benchmark).
//
//   SLUICE_CPP_BENCHMARKS=ON clients/cpp/build.sh   # needs Debian's libbenchmark-dev
//   <build dir>/sluice_bench
//
// The limiter is bound to a resource whose lease (from an in-process
// doorman.Capacity test server) is 10^9 permits per second, so every call is
// admitted and the loop measures the library alone: acquire() (blocking,
// admitted at once), try_acquire() admitted, and try_acquire() refused (on a
// limiter at 1 permit per second); the same with several threads.
#include <benchmark/benchmark.h>

#include <chrono>
#include <thread>

#include "../tests/capacity_server.h"
#include "sluice/sluice.h"

namespace {

using sluice::test::CapacityServer;
using sluice::test::FakeClock;

// Leased is a client holding a lease of 10^9 permits per second and the
// limiter bound to it, shared by every benchmark.
struct Leased {
  FakeClock clock;
  CapacityServer server{clock, 1e9, 600};
  sluice::Client client;
  sluice::Resource res;
  std::shared_ptr<sluice::RateLimiter> limiter;
  Leased() : client(server.addr, options()), res(client.resource("bench", 1e9)), limiter(res.rate_limiter()) {
    clock.t = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    while (limiter->rate() < 1e9) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  static sluice::Options options() {
    sluice::Options o;
    o.push = false;
    return o;
  }
};

Leased& leased() {
  static Leased* l = new Leased;  // never destroyed: benchmarks may run on other threads until exit
  return *l;
}

void BM_AcquireAdmitted(benchmark::State& state) {
  auto& lim = *leased().limiter;
  for (auto _ : state) benchmark::DoNotOptimize(lim.acquire());
}
BENCHMARK(BM_AcquireAdmitted)->ThreadRange(1, 2);

void BM_TryAcquireAdmitted(benchmark::State& state) {
  auto& lim = *leased().limiter;
  for (auto _ : state) benchmark::DoNotOptimize(lim.try_acquire());
}
BENCHMARK(BM_TryAcquireAdmitted)->ThreadRange(1, 2);

void BM_TryAcquireRefused(benchmark::State& state) {
  static sluice::RateLimiter slow(1, 0);
  slow.try_acquire();
  for (auto _ : state) benchmark::DoNotOptimize(slow.try_acquire());
}
BENCHMARK(BM_TryAcquireRefused);

void BM_GaugePermit(benchmark::State& state) {
  static sluice::Gauge g(1e6);
  for (auto _ : state) {
    auto p = g.try_hold();
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_GaugePermit);

}  // namespace
