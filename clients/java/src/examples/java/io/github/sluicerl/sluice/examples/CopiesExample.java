package io.github.sluicerl.sluice.examples;

import io.github.sluicerl.sluice.Hold;
import io.github.sluicerl.sluice.OverLimitException;
import io.github.sluicerl.sluice.SluiceClient;
import java.time.Duration;

/** Copy-limited sessions: hold sandboxes while using them (Charon). Args: [HOST:PORT]. */
public final class CopiesExample {
  public static void main(String[] args) { // SluiceException is unchecked
    String addr = args.length > 0 ? args[0] : "127.0.0.1:15000";
    // Closing the client ends the session: the server releases what is left.
    // A generous call timeout (the default is 1 s): the first call also connects, and the
    // test command runs this on a loaded machine.
    try (SluiceClient client = SluiceClient.builder(addr).callTimeout(Duration.ofSeconds(30)).build()) {
      // Up to 3 sandboxes for tenant acme, at least 1, retrying up to 5 s.
      try (Hold hold = client.reserveCopies("sandboxes", "acme", 3, 1, Duration.ofSeconds(5))) {
        System.out.printf("holding %d sandboxes (acme's limit %d)%n", hold.copies(), hold.reservation().domainLimit());
        if (hold.copies() != 2) {
          throw new AssertionError("granted " + hold.copies());
        }
        try {
          client.reserveCopies("sandboxes", "acme", 1); // acme's limit is full: no wait
          throw new AssertionError("a third sandbox");
        } catch (OverLimitException e) {
          System.out.println("a third: " + e.codeName());
        }
        hold.release(1); // done with one early
        System.out.printf("still holding %d%n", hold.copies());
      } // leaving the block released the rest
      try (Hold again = client.reserveCopies("sandboxes", "acme", 2)) {
        System.out.printf("holding %d again%n", again.copies());
      }
    }
  }
}
