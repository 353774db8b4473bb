package io.github.sluicerl.sluice.examples;

import io.github.sluicerl.sluice.Allowance;
import io.github.sluicerl.sluice.InvalidArgumentException;
import io.github.sluicerl.sluice.SluiceClient;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** Server-side limits: ask before each login (a token bucket per user). Args: [HOST:PORT]. */
public final class LimitsExample {
  public static void main(String[] args) { // SluiceException is unchecked
    String addr = args.length > 0 ? args[0] : "127.0.0.1:15000";
    // A generous call timeout (the default is 1 s): the first call also connects, and the
    // test command runs this on a loaded machine.
    try (SluiceClient client = SluiceClient.builder(addr).callTimeout(Duration.ofSeconds(30)).build()) {
      List<String> statuses = new ArrayList<>();
      for (int attempt = 1; attempt <= 6; attempt++) {
        Allowance a = client.allow("logins", "user-42", 1, 0, Duration.ZERO);
        statuses.add(a.status());
        if (a.ok()) {
          System.out.printf("login %d: allowed (%.0f left of %d)%n", attempt, a.remaining(), a.limit());
        } else {
          System.out.printf("login %d: %s, retry after %s%n", attempt, a.status(),
              a.retryAfter().map(d -> d.toMillis() + " ms").orElse("never"));
        }
      }
      if (!statuses.equals(List.of("OK", "OK", "OK", "OK", "OK", "REJECTED_TIMEOUT"))) {
        throw new AssertionError(statuses);
      }
      try {
        client.allow("logins", "not a user", 1);
        throw new AssertionError("a bad domain was allowed");
      } catch (InvalidArgumentException e) { // the server names the field
        System.out.println("refused: " + e.codeName() + ": " + e.getMessage());
      }
    }
  }
}
