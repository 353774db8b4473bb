package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonObject;
import io.github.sluicerl.sluice.proto.v1.ReserveResponse;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.logging.Level;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * clients/vectors/errors.json on the Java client. For each gRPC code: the
 * name and number are grpc-java's {@link Status.Code}; the class named for
 * Java (in the file's Java namespace; {@code SluiceException} itself where
 * Java has no class of its own for the code) is exactly the class of
 * {@code SluiceException.of} for the code, carrying it; and through the
 * wire, against a scripted Limits server answering the code — to the
 * session's opening and to the reserve, with fail-open on and off — a
 * reserve of copies throws that class when the file says the code is the
 * caller's, and fails open (a degraded hold of the minimum; with fail-open
 * off, the class) when it says fail_open; {@code allow} throws that class
 * for every code. The caller's own timeout is raised, never failed open,
 * while a request's call timeout fails open, as DEADLINE_EXCEEDED's entry
 * says. For each condition: the class named is thrown for it, with the
 * code named.
 *
 * <p>Source: the gRPC status codes; charon-paper.md, sections 3.1 (client
 * errors) and 4.3 (degraded modes).
 */
class ErrorVectorsTest {
  static JsonObject v;
  static String ns;
  static Level level;

  @BeforeAll
  static void read() {
    v = Vectors.read("errors.json");
    ns = v.getAsJsonObject("namespaces").get("java").getAsString();
    level = Vectors.quietLog();
  }

  @AfterAll
  static void restore() {
    Vectors.restoreLog(level);
  }

  /** The Java class the file names. */
  static Class<?> javaClass(String name) {
    try {
      Class<?> c = Class.forName(ns + "." + name);
      assertTrue(SluiceException.class.isAssignableFrom(c), name + " is no SluiceException");
      return c;
    } catch (ClassNotFoundException e) {
      throw new AssertionError("errors.json names " + ns + "." + name + ", which does not exist", e);
    }
  }

  /** What call threw (failing if it returned). */
  static SluiceException thrown(String what, Callable<?> call) {
    Object r;
    try {
      r = call.call();
    } catch (SluiceException e) {
      return e;
    } catch (Exception e) {
      throw new AssertionError(what + ": threw " + e + ", not a SluiceException", e);
    }
    throw new AssertionError(what + ": returned " + r + ", want an exception");
  }

  static void expect(String what, Class<?> cls, Status.Code code, SluiceException e) {
    assertSame(cls, e.getClass(), what + ": " + e);
    assertEquals(code, e.code(), what);
    assertEquals(code.name(), e.codeName(), what);
  }

  @TestFactory
  List<DynamicTest> codes() {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject e : Vectors.objects(v, "codes")) {
      tests.add(DynamicTest.dynamicTest(e.get("code").getAsString(), () -> code(e)));
    }
    assertEquals(Status.Code.values().length - 1, tests.size(), "errors.json: one entry per code other than OK");
    return tests;
  }

  static void code(JsonObject e) throws Exception {
    String name = e.get("code").getAsString();
    Status.Code code = Status.Code.valueOf(name);
    assertEquals(e.get("number").getAsInt(), code.value(), name + "'s number");
    Class<?> cls = javaClass(e.get("java").getAsString());
    expect("SluiceException.of", cls, code, SluiceException.of(code, "m", null));
    expect("SluiceException.of a StatusRuntimeException", cls, code,
        SluiceException.of(Status.fromCode(code).withDescription("d").asRuntimeException(), "Call"));

    String charon = e.get("charon").getAsString();
    assertTrue(charon.equals("caller") || charon.equals("fail_open"), "charon " + charon);
    Status answer = Status.fromCode(code).withDescription("scripted " + name);
    LimitsServer srv = new LimitsServer(() -> 0);
    try {
      for (String path : new String[] {"OpenSession", "Reserve"}) {
        srv.openFails = path.equals("OpenSession") ? answer : null;
        srv.reserveFails = path.equals("Reserve") ? answer : null;
        for (boolean open : new boolean[] {true, false}) {
          String what = path + " answering " + name + ", fail-open " + open;
          // A call timeout of 30 s: only the server's answer may decide (a
          // slow loopback call on a loaded machine must not fail open).
          try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).failOpen(open)
              .callTimeout(java.time.Duration.ofSeconds(30)).build()) {
            if (charon.equals("fail_open") && open) {
              Hold h = c.reserveCopies("gpus", "acme", 3, 2, null);
              assertTrue(h.degraded(), what + ": " + h);
              assertEquals(2, h.copies(), what);
              h.close();
            } else {
              expect(what, cls, code, thrown(what, () -> c.reserveCopies("gpus", "acme", 3, 2, null)));
            }
          }
        }
      }
      srv.openFails = null;
      srv.reserveFails = null;
      srv.allowFails = answer;
      try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).callTimeout(java.time.Duration.ofSeconds(30)).build()) {
        expect("Allow answering " + name, cls, code, thrown("allow", () -> c.allow("api", "x", 1)));
      }
    } finally {
      srv.stop();
    }
  }

  /**
   * The schema: "The caller's own deadline or cancellation is not a code
   * the service answered: it is always raised", while a request's own
   * call timeout (constants.json's call_timeout) is the service's
   * DEADLINE_EXCEEDED, which Charon's calls handle as the file's entry for
   * it says. A server slow to open the session, then one slow to reserve:
   * a reserve with its own timeout under the call timeout raises it; one
   * whose call timeout passes first fails open (fail-open on).
   */
  @TestFactory
  List<DynamicTest> theCallersTimeoutIsRaised() {
    String charon = "";
    for (JsonObject e : Vectors.objects(v, "codes")) {
      if (e.get("code").getAsString().equals("DEADLINE_EXCEEDED")) {
        charon = e.get("charon").getAsString();
      }
    }
    assertEquals("fail_open", charon, "this test knows DEADLINE_EXCEEDED as a code Charon's calls fail open on");
    Class<?> cls = javaClass("DeadlineExceededException");
    List<DynamicTest> tests = new ArrayList<>();
    for (String path : new String[] {"OpenSession", "Reserve"}) {
      tests.add(DynamicTest.dynamicTest(path + " slow", () -> {
        LimitsServer srv = new LimitsServer(() -> 0);
        srv.reserveStatus = ReserveResponse.Status.OK;
        srv.openDelay = path.equals("OpenSession") ? 3000 : 0;
        try {
          try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).build()) { // call timeout 1 s
            if (path.equals("Reserve")) {
              c.reserveCopies("gpus", "warm-up", 1).close(); // the session opens first
              srv.reserveDelay = 3000;
            }
            expect("the caller's timeout of 0.2 s during " + path, cls, Status.Code.DEADLINE_EXCEEDED,
                thrown("reserve", () -> c.reserveCopies("gpus", "acme", 3, 2, null, java.time.Duration.ofMillis(200))));
          }
          try (SluiceClient c = SluiceClient.builder(srv.addr).push(false)
              .callTimeout(java.time.Duration.ofMillis(200)).build()) {
            if (path.equals("Reserve")) {
              srv.reserveDelay = 0;
              c.reserveCopies("gpus", "warm-up", 1).close();
              srv.reserveDelay = 3000;
            }
            Hold h = c.reserveCopies("gpus", "acme", 3, 2, null, java.time.Duration.ofSeconds(30));
            assertTrue(h.degraded(), "the call timeout of 0.2 s passing during " + path + ": " + h);
            assertEquals(2, h.copies());
          }
        } finally {
          srv.stop();
        }
      }));
    }
    return tests;
  }

  @TestFactory
  List<DynamicTest> conditions() throws Exception {
    Map<String, Callable<SluiceException>> triggers = Map.of(
        "closed", ErrorVectorsTest::closed,
        "session_lost", ErrorVectorsTest::sessionLost,
        "over_limit", ErrorVectorsTest::overLimit);
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject k : Vectors.objects(v, "conditions")) {
      String cond = k.get("condition").getAsString();
      tests.add(DynamicTest.dynamicTest(cond, () -> {
        Callable<SluiceException> t = triggers.get(cond);
        assertNotNull(t, "condition " + cond + " is not known to this test");
        expect(cond, javaClass(k.get("java").getAsString()), Status.Code.valueOf(k.get("code").getAsString()), t.call());
      }));
    }
    assertFalse(tests.isEmpty(), "errors.json has no conditions");
    return tests;
  }

  /** A closed client and a released handle refuse calls; returns the client's error, having checked the handle's is the same class. */
  static SluiceException closed() throws Exception {
    LimitsServer srv = new LimitsServer(() -> 0);
    try {
      SluiceClient c = SluiceClient.builder(srv.addr).push(false).manual(() -> 1_800_000_000.0).build();
      Resource r = c.resource("a", 1);
      r.close(); // released (its ReleaseCapacity finds no Capacity service here: logged)
      SluiceException handle = thrown("setWants on a released handle", () -> {
        r.setWants(2);
        return null;
      });
      c.close();
      for (Callable<?> call : List.<Callable<?>>of(() -> c.resource("b", 1), () -> c.allow("api", "x", 1),
          () -> c.reserveCopies("gpus", "acme", 1))) {
        assertSame(handle.getClass(), thrown("a call on a closed client", call).getClass());
      }
      return thrown("resource on a closed client", () -> c.resource("b", 1));
    } finally {
      srv.stop();
    }
  }

  /** A hold whose session's keep-alive the server ends (NOT_FOUND): its err(). */
  static SluiceException sessionLost() throws Exception {
    LimitsServer srv = new LimitsServer(() -> 0);
    srv.reserveStatus = ReserveResponse.Status.OK;
    srv.keepAliveFails = Status.NOT_FOUND.withDescription("session_id: unknown session");
    try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).build()) {
      Hold h = c.reserveCopies("gpus", "acme", 1);
      assertFalse(h.degraded());
      long end = System.nanoTime() + 10_000_000_000L;
      while (h.err() == null && System.nanoTime() < end) {
        Thread.sleep(10);
      }
      SluiceException e = h.err();
      if (e == null) {
        fail("the hold's session was not lost within 10 s");
      }
      return e;
    } finally {
      srv.stop();
    }
  }

  /** A reserve always rejected, asked once. */
  static SluiceException overLimit() throws Exception {
    LimitsServer srv = new LimitsServer(() -> 0);
    try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).build()) {
      return thrown("a reserve over the limit", () -> c.reserveCopies("gpus", "acme", 1));
    } finally {
      srv.stop();
    }
  }
}
