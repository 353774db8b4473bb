package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonObject;
import io.github.sluicerl.sluice.proto.v1.ReserveResponse;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.logging.Level;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * clients/vectors/retry.json on the Java client. "charon": Charon's retry
 * policy of {@link SluiceClient#reserveCopies} — each delay for its fixed
 * draw ({@code Sessions.retryDelay}, and through a {@code Sessions} whose
 * jitter is fixed), the bounds at both ends and for the real random draw,
 * whole schedules (a reserve against a scripted Limits server that always
 * rejects, on a fake clock and sleep: when each Reserve reached the
 * server, the attempts and the wait reported), and which answer statuses
 * are asked again. "leases": the lease client's backoff ({@code
 * Leases.Retry}) at both ends of the jitter and for random draws, and
 * through a manually stepped client whose server is down.
 *
 * <p>The schedules and statuses of the call "request" are Go's {@code
 * limits.Client.Request} (retry.json's schema; docs/clients.md: Java has no
 * request of hits with retries, its {@code allow} asks once): for those
 * the test checks that Java still has no such call, so that one added
 * must run them.
 *
 * <p>Source: charon-paper.md, section 3.2; doorman-design.md, "Client
 * library" (retries).
 */
class RetryVectorsTest {
  static final double EXACT = 1e-9;
  /** retry.json's calls that Java does not have (Go's only), with the method name Java would give one. */
  static final java.util.Map<String, String> GO_ONLY = java.util.Map.of("request", "request");

  static JsonObject charon;
  static JsonObject leases;
  static Level level;

  @BeforeAll
  static void read() {
    JsonObject v = Vectors.read("retry.json");
    charon = v.getAsJsonObject("charon");
    leases = v.getAsJsonObject("leases");
    level = Vectors.quietLog();
  }

  @AfterAll
  static void restore() {
    Vectors.restoreLog(level);
  }

  /** A clock and sleep the test owns: sleeping moves the clock. */
  static final class FakeTime {
    private double t = 5000;

    synchronized double now() {
      return t;
    }

    synchronized void sleep(double s) {
      assertTrue(s > 0, "slept " + s + " s");
      t += s;
    }
  }

  /** A Sessions of the client's, against addr on ch, with backoff unit and fail-open on. */
  static Sessions sessions(String addr, Channels ch, double unit, ScheduledThreadPoolExecutor ex) {
    // A call timeout of 30 s (real time): the schedules are on fake time,
    // and a loaded machine must not turn a slow loopback call into a
    // DEADLINE_EXCEEDED that fails open.
    return new Sessions(() -> addr, ch, 30.0, 10.0, true, unit, null, ex);
  }

  static ScheduledThreadPoolExecutor executor() {
    ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "retry-vectors");
      t.setDaemon(true);
      return t;
    });
    ex.setRemoveOnCancelPolicy(true);
    return ex;
  }

  @Test
  void theDefaultBackoffUnitIsTheFilesUnit() throws Exception {
    double unit = charon.get("unit").getAsDouble();
    try (SluiceClient c = SluiceClient.builder("127.0.0.1:1").build()) {
      assertEquals(unit, ConstantVectorsTest.sessionsOf(c).backoffUnit, "SluiceClient.Builder.backoffUnit default");
    }
  }

  @Test
  void theExponentStopsAtMaxExponent() {
    int max = charon.get("max_exponent").getAsInt();
    double unit = charon.get("unit").getAsDouble();
    double top = unit * Math.pow(2, max) * 0.75;
    assertEquals(top, Sessions.retryDelay(unit, max, 0));
    assertEquals(top, Sessions.retryDelay(unit, max + 1, 0));
    assertEquals(top, Sessions.retryDelay(unit, max + 50, 0));
    assertEquals(top / 2, Sessions.retryDelay(unit, max - 1, 0));
  }

  @Test
  void charonDelays() {
    double unit = charon.get("unit").getAsDouble();
    List<JsonObject> ds = Vectors.objects(charon, "delays");
    assertFalse(ds.isEmpty());
    ScheduledThreadPoolExecutor ex = executor();
    try {
      Sessions s = sessions("127.0.0.1:1", new Channels(null), unit, ex); // never dialled
      for (JsonObject d : ds) {
        int i = d.get("attempt").getAsInt();
        double u = d.get("u").getAsDouble();
        double want = d.get("delay").getAsDouble();
        String what = "delay after rejection " + i + " drawing " + u;
        assertEquals(want, Sessions.retryDelay(unit, i, u), EXACT, what);
        s.jitter = () -> u;
        assertEquals(want, s.retryDelay(i), EXACT, what + " (Sessions' jitter)");
      }
    } finally {
      ex.shutdownNow();
    }
  }

  @Test
  void charonBounds() {
    List<JsonObject> bs = Vectors.objects(charon, "bounds");
    assertFalse(bs.isEmpty());
    ScheduledThreadPoolExecutor ex = executor();
    try {
      Sessions s = sessions("127.0.0.1:1", new Channels(null), 1.0, ex); // never dialled; the bounds are for unit 1 s
      for (JsonObject b : bs) {
        int i = b.get("attempt").getAsInt();
        double lo = b.get("min").getAsDouble(), hi = b.get("max").getAsDouble();
        assertEquals(lo, Sessions.retryDelay(1.0, i, 0), "the bottom after rejection " + i);
        double nearTop = Sessions.retryDelay(1.0, i, Math.nextDown(1.0));
        assertTrue(nearTop <= hi && hi - nearTop < 1e-6, "a draw just under 1 after rejection " + i + ": " + nearTop);
        // The real draw (ThreadLocalRandom), then a seeded one; both reach within a tenth of each end.
        for (boolean seeded : new boolean[] {false, true}) {
          if (seeded) {
            Random r = new Random(i);
            s.jitter = r::nextDouble;
          }
          double min = Double.POSITIVE_INFINITY, max = Double.NEGATIVE_INFINITY;
          for (int k = 0; k < 1000; k++) {
            double d = s.retryDelay(i);
            assertTrue(d >= lo && d <= hi, "delay after rejection " + i + ": " + d + " outside [" + lo + ", " + hi + "]");
            min = Math.min(min, d);
            max = Math.max(max, d);
          }
          double tenth = (hi - lo) / 10;
          assertTrue(min <= lo + tenth && max >= hi - tenth, "1000 draws in [" + min + ", " + max + "]");
        }
      }
    } finally {
      ex.shutdownNow();
    }
  }

  @TestFactory
  List<DynamicTest> charonSchedules() {
    List<DynamicTest> tests = new ArrayList<>();
    int ran = 0;
    for (JsonObject s : Vectors.objects(charon, "schedules")) {
      String call = s.get("call").getAsString();
      String name = s.get("name").getAsString();
      if (GO_ONLY.containsKey(call)) {
        tests.add(DynamicTest.dynamicTest(name + " [" + call + ": Go only; Java has none]", () -> noSuchCall(call)));
        continue;
      }
      assertEquals("reserve_copies", call, name + ": a call this test does not know");
      ran++;
      tests.add(DynamicTest.dynamicTest(name, () -> {
        List<Double> at = reserveAlwaysRejected(ReserveResponse.Status.REJECTED_OVER_LIMIT,
            s.get("unit").getAsDouble(), s.get("u").getAsDouble(), s.get("max_wait").getAsDouble());
        List<Double> want = Vectors.nums(s, "attempts_at");
        assertEquals(want.size(), at.size(), "requests at " + at + " s, want " + want + " s");
        for (int k = 0; k < want.size(); k++) {
          assertEquals(want.get(k), at.get(k), EXACT, "request " + (k + 1) + ": at " + at + " s, want " + want + " s");
        }
      }));
    }
    assertTrue(ran > 0, "retry.json has no reserve_copies schedule");
    return tests;
  }

  /**
   * Runs one reserve of copies (fail-open on) against a server answering
   * status each time, with jitter u, max wait maxWait, on fake time;
   * checks it ends with an OverLimitException reporting the attempts and
   * the wait, and returns when each Reserve reached the server (seconds
   * from the call's start).
   */
  static List<Double> reserveAlwaysRejected(ReserveResponse.Status status, double unit, double u, double maxWait)
      throws Exception {
    FakeTime time = new FakeTime();
    LimitsServer srv = new LimitsServer(time::now);
    srv.reserveStatus = status;
    ScheduledThreadPoolExecutor ex = executor();
    Channels ch = new Channels(null);
    Sessions s = sessions(srv.addr, ch, unit, ex);
    s.jitter = () -> u;
    s.clock = time::now;
    s.sleeper = time::sleep;
    try {
      double start = time.now();
      OverLimitException e = assertThrows(OverLimitException.class,
          () -> s.reserve("gpus", "initech", 1, 0, maxWait, Double.NaN));
      List<Double> at = new ArrayList<>();
      for (double t : srv.reserves()) {
        at.add(t - start);
      }
      assertEquals(at.size(), e.attempts(), "attempts reported");
      double last = at.isEmpty() ? 0 : at.get(at.size() - 1);
      assertEquals(last, Durations.seconds(e.waited()), EXACT, "waited reported");
      assertEquals(last, time.now() - start, EXACT, "returned after");
      return at;
    } finally {
      s.close();
      ex.shutdownNow();
      ch.close();
      srv.stop();
    }
  }

  /** Java has no public call named name (the data's Go-only call). */
  static void noSuchCall(String call) {
    String name = GO_ONLY.get(call);
    for (Method m : SluiceClient.class.getMethods()) {
      assertFalse(m.getName().equalsIgnoreCase(name) && Modifier.isPublic(m.getModifiers()),
          "SluiceClient." + m.getName() + " exists: run retry.json's '" + call + "' vectors on it");
    }
  }

  @Test
  void charonStatuses() throws Exception {
    JsonObject retried = charon.getAsJsonObject("retried_statuses");
    JsonObject fin = charon.getAsJsonObject("final_statuses");
    Set<String> calls = new HashSet<>(retried.keySet());
    calls.addAll(fin.keySet());
    for (String call : calls) {
      if (GO_ONLY.containsKey(call)) {
        noSuchCall(call);
        continue;
      }
      assertEquals("reserve_copies", call, "a call this test does not know");
      Set<String> classified = new HashSet<>();
      for (boolean again : new boolean[] {true, false}) {
        for (String name : Vectors.strings(again ? retried : fin, call)) {
          classified.add(name);
          ReserveResponse.Status st = ReserveResponse.Status.valueOf(name);
          List<Double> at = reserveAlwaysRejected(st, 1.0, 0.5, 10);
          assertEquals(again, at.size() > 1, name + ": " + at.size() + " attempts");
        }
      }
      for (ReserveResponse.Status st : ReserveResponse.Status.values()) {
        if (st != ReserveResponse.Status.OK && st != ReserveResponse.Status.STATUS_UNSPECIFIED
            && st != ReserveResponse.Status.UNRECOGNIZED) {
          assertTrue(classified.contains(st.name()), "retry.json says nothing of the rejection " + st);
        }
      }
    }
  }

  // --- leases ----------------------------------------------------------------

  @Test
  void leaseBackoffBounds() {
    assertEquals(leases.get("min_backoff").getAsDouble(), Leases.MIN_BACKOFF, "min_backoff");
    assertEquals(leases.get("max_backoff").getAsDouble(), Leases.MAX_BACKOFF, "max_backoff");
  }

  /** The delay after failures failed requests, the last success having recorded interval (0: none). */
  static double after(int failures, double interval, java.util.function.DoubleSupplier u) {
    Leases.Retry r = new Leases.Retry();
    if (interval > 0) {
      r.succeeded(interval);
    }
    double d = Double.NaN;
    for (int k = 0; k < failures; k++) {
      d = u == null ? r.failed() : r.failed(u.getAsDouble());
    }
    return d;
  }

  @TestFactory
  List<DynamicTest> leaseBackoff() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject k : Vectors.objects(leases, "cases")) {
      int failures = k.get("failures").getAsInt();
      double interval = k.get("interval").getAsDouble();
      double lo = k.get("min").getAsDouble(), hi = k.get("max").getAsDouble();
      String name = failures + " failures, interval " + interval + " s: [" + lo + ", " + hi + "] s";
      tests.add(DynamicTest.dynamicTest(name, () -> {
        assertEquals(lo, after(failures, interval, () -> 0), EXACT, "the bottom draw (u = 0)");
        assertEquals(hi, after(failures, interval, () -> 1), EXACT, "the top draw (u = 1)");
        Random seeded = new Random(failures * 1000L + (long) (interval * 100));
        double min = Double.POSITIVE_INFINITY, max = Double.NEGATIVE_INFINITY;
        for (int n = 0; n < 400; n++) {
          // Half the real draw (ThreadLocalRandom), half a seeded one.
          double d = n % 2 == 0 ? after(failures, interval, null) : after(failures, interval, seeded::nextDouble);
          assertTrue(d >= lo - EXACT && d <= hi + EXACT, d + " s outside [" + lo + ", " + hi + "]");
          min = Math.min(min, d);
          max = Math.max(max, d);
        }
        double tenth = (hi - lo) / 10;
        assertTrue(min <= lo + tenth && max >= hi - tenth, "400 draws in [" + min + ", " + max + "]");
      }));
    }
    assertFalse(tests.isEmpty(), "retry.json has no leases cases");
    return tests;
  }

  /**
   * The uncapped cases (no answer yet) through a manually stepped client
   * whose server is down: after n failed requests it steps again within
   * the case's bounds (the real draw).
   */
  @TestFactory
  List<DynamicTest> leaseBackoffThroughTheClient() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject k : Vectors.objects(leases, "cases")) {
      if (k.get("interval").getAsDouble() != 0) {
        continue; // a cap needs an answered request first: Leases.Retry above
      }
      int failures = k.get("failures").getAsInt();
      double lo = k.get("min").getAsDouble(), hi = k.get("max").getAsDouble();
      tests.add(DynamicTest.dynamicTest(failures + " failed requests: the next step in [" + lo + ", " + hi + "] s", () -> {
        int port;
        try (ServerSocket ss = new ServerSocket()) {
          ss.bind(new InetSocketAddress("127.0.0.1", 0));
          port = ss.getLocalPort();
        } // closed: nothing listens there
        double[] now = {1_800_000_000.0};
        try (SluiceClient c = SluiceClient.builder("127.0.0.1:" + port).push(false).manual(() -> now[0]).build()) {
          c.resource("a", 1);
          double d = Double.NaN;
          for (int n = 0; n < failures; n++) {
            d = c.leases().step();
            now[0] += d;
          }
          assertTrue(d >= lo - EXACT && d <= hi + EXACT, "after " + failures + " failures: " + d + " s");
        }
      }));
    }
    if (tests.isEmpty()) {
      fail("retry.json has no uncapped leases case");
    }
    return tests;
  }
}
