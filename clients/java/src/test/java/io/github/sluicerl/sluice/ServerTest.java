package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Against a real `sluice server` (the binary named by SLUICE_BIN, as the interop suite sets it). */
class ServerTest {
  static final String CONFIG = String.join("\n",
      "resources:",
      "  - identifier_glob: \"fair/*\"",
      "    capacity: 100",
      "    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}",
      "limits:",
      "  resources:",
      "    api:",
      "      domains:",
      "        small: {size: 3, fill_rate: 0.0001, wait_timeout: 0s}",
      "    sandboxes:",
      "      algorithm: copies",
      "      domain_limit: 2",
      "      global_limit: 3",
      "");

  static Process server;
  static String addr;

  @BeforeAll
  static void startServer() throws Exception {
    String bin = System.getenv("SLUICE_BIN");
    Assumptions.assumeTrue(bin != null && !bin.isEmpty(), "SLUICE_BIN names no sluice binary");
    Path cfg = Files.createTempFile("sluice-java", ".yaml");
    Files.writeString(cfg, CONFIG);
    server = new ProcessBuilder(bin, "server", "--config", cfg.toString(), "--listen", "127.0.0.1:0", "--log-level",
        "error").redirectError(ProcessBuilder.Redirect.INHERIT).start();
    BufferedReader r = new BufferedReader(new InputStreamReader(server.getInputStream()));
    String line = r.readLine();
    assertTrue(line != null && line.startsWith("listening on "), "server said " + line);
    addr = line.substring("listening on ".length()).strip();
    Thread drain = new Thread(() -> {
      try {
        while (r.readLine() != null) {
          // discard
        }
      } catch (Exception e) {
        // ended
      }
    });
    drain.setDaemon(true);
    drain.start();
  }

  /**
   * A client of the server with a generous call timeout (the default is
   * 1 s): the first call also connects, on a loaded machine.
   */
  static SluiceClient.Builder clientBuilder() {
    return SluiceClient.builder(addr).callTimeout(Duration.ofSeconds(30));
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (server != null) {
      server.destroy();
      server.waitFor();
    }
  }

  // No throws clause: SluiceException is unchecked and close() throws nothing,
  // so this compiles only while that holds.
  @Test
  void allowIsExactAndBadInputNamesTheField() {
    try (SluiceClient c = clientBuilder().build()) {
      int ok = 0;
      for (int i = 0; i < 5; i++) {
        Allowance a = c.allow("api", "small", 1, 0, Duration.ZERO);
        ok += a.ok() ? 1 : 0;
      }
      assertEquals(3, ok);
      Allowance rejected = c.allow("api", "small", 1, 0, Duration.ZERO);
      assertEquals("REJECTED_TIMEOUT", rejected.status());
      assertEquals(0, rejected.granted());
      assertTrue(rejected.retryAfter().isEmpty() || !rejected.retryAfter().get().isNegative(), rejected.toString());
      assertEquals("REJECTED_NO_BUCKET", c.allow("nosuch", "x", 1).status());
      InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> c.allow("api", "no spaces", 1));
      assertEquals("INVALID_ARGUMENT", e.codeName());
    }
  }

  @Test
  void copiesTryWithResourcesTransferSeizeAndClose() {
    try (SluiceClient a = clientBuilder().failOpen(false).build();
        SluiceClient b = clientBuilder().failOpen(false).build()) {
      try (Hold h = a.reserveCopies("sandboxes", "t1", 3, 1, null)) {
        assertEquals(2, h.copies()); // the domain's limit
        assertEquals(1, h.attempts());
        assertTrue(!h.waited().isNegative(), h.waited().toString());
        OverLimitException over =
            assertThrows(OverLimitException.class, () -> b.reserveCopies("sandboxes", "t1", 1));
        assertEquals(1, over.attempts());
        assertEquals(2, over.reservation().domainHolds());
        String tid = h.transfer(1, Duration.ofSeconds(30));
        assertEquals(1, h.copies());
        try (Hold s = b.seize(tid, Duration.ofSeconds(5))) {
          assertEquals(1, s.copies());
          assertEquals("t1", s.domain());
        }
      } // released the rest
      try (Hold h = b.reserveCopies("sandboxes", "t1", 2)) {
        assertEquals(2, h.copies());
      }
      assertThrows(NotFoundException.class, () -> a.reserveCopies("nosuch", "d", 1));
      assertThrows(FailedPreconditionException.class, () -> a.reserveCopies("api", "small", 1));
      assertThrows(InvalidArgumentException.class, () -> a.reserveCopies("sandboxes", "d", 0));
      Hold kept = a.reserveCopies("sandboxes", "t2", 2);
      assertEquals(2, kept.copies());
      a.close(); // closes the session: the server releases its copies
      assertTrue(kept.err() instanceof ClosedException);
      kept.close(); // the copies are gone already: nothing to do, nothing thrown
      assertEquals(0, kept.copies());
      try (Hold h = b.reserveCopies("sandboxes", "t2", 2)) {
        assertEquals(2, h.copies());
      }
    }
  }

  @Test
  void aLeaseFromTheRealServerDrivesTheLimiter() throws Exception {
    try (SluiceClient c = clientBuilder().build()) {
      Resource r = c.resource("fair/java", 40);
      RateLimiter lim = r.rateLimiter(Duration.ofMillis(100));
      long deadline = System.nanoTime() + 30_000_000_000L;
      while (r.lease().isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      assertEquals(40, r.capacity());
      assertEquals(40, lim.getRate());
      r.setWants(60); // inside the 5 s window: sent when it ends, or pushed
      deadline = System.nanoTime() + 30_000_000_000L;
      while (r.capacity() != 60 && System.nanoTime() < deadline) {
        Thread.sleep(20);
      }
      assertEquals(60, r.capacity());
    }
  }
}
