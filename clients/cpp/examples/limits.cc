// Server-side limits: ask before each login (a token bucket per user).
//
//   example_limits [HOST:PORT]
#include <cstdio>
#include <string>
#include <vector>

#include "sluice/sluice.h"

int main(int argc, char** argv) {
  sluice::Client client(argc > 1 ? argv[1] : "127.0.0.1:15000");
  std::vector<std::string> statuses;
  for (int attempt = 1; attempt <= 6; ++attempt) {
    sluice::AllowRequest req;
    req.resource = "logins";
    req.domain = "user-42";
    req.max_wait = sluice::Seconds(0);
    sluice::Allowance a = client.allow(req);  // sluice.v1.Limits/Allow
    statuses.push_back(a.status);
    if (a.ok()) {
      std::printf("login %d: allowed (%.0f left of %lld)\n", attempt, a.remaining, static_cast<long long>(a.limit));
    } else {
      std::printf("login %d: %s, retry after %.2f s\n", attempt, a.status.c_str(),
                  a.retry_after.value_or(sluice::Seconds(0)).count());
    }
  }
  if (statuses != std::vector<std::string>{"OK", "OK", "OK", "OK", "OK", "REJECTED_TIMEOUT"}) {
    return std::fprintf(stderr, "unexpected statuses\n"), 1;
  }

  sluice::QuotaAllowance q = client.quota_allow("logins", "user-7");  // quotaservice.QuotaService/Allow
  std::printf("the quota service: %s\n", q.status.c_str());

  try {
    client.allow("logins", "not a user");
    return std::fprintf(stderr, "a bad domain was accepted\n"), 1;
  } catch (const sluice::InvalidArgument& e) {  // the server names the field
    std::printf("refused: %s: %s\n", e.code_name().c_str(), e.message().c_str());
  }
  return 0;
}
