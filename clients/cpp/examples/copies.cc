// Copy-limited sessions: hold sandboxes while using them (Charon).
//
//   example_copies [HOST:PORT]
#include <chrono>
#include <cstdio>

#include "sluice/sluice.h"

int main(int argc, char** argv) {
  sluice::Client client(argc > 1 ? argv[1] : "127.0.0.1:15000");  // closing ends the session: the server releases what is left
  {
    // Up to 3 sandboxes for tenant acme, at least 1, retrying up to 5 s.
    sluice::ReserveRequest req;
    req.resource = "sandboxes";
    req.domain = "acme";
    req.copies = 3;
    req.min_copies = 1;
    req.max_wait = std::chrono::seconds(5);
    sluice::Hold hold = client.reserve_copies(req);
    std::printf("holding %lld sandboxes (acme's limit %lld)\n", static_cast<long long>(hold.copies()),
                static_cast<long long>(hold.reservation().domain_limit));
    if (hold.copies() != 2) return std::fprintf(stderr, "want 2\n"), 1;
    try {
      client.reserve_copies("sandboxes", "acme");  // acme's limit is full: no wait
      return std::fprintf(stderr, "a third sandbox\n"), 1;
    } catch (const sluice::OverLimit& e) {
      std::printf("a third: %s\n", e.code_name().c_str());
    }
    hold.release(1);  // done with one early
    std::printf("still holding %lld\n", static_cast<long long>(hold.copies()));
  }  // the hold's destructor released the rest
  sluice::Hold again = client.reserve_copies("sandboxes", "acme", 2);
  std::printf("holding %lld again\n", static_cast<long long>(again.copies()));
  return again.copies() == 2 ? 0 : 1;
}
