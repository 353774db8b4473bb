package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * clients/vectors/limiter.json — SmoothBursty as every client's limiter
 * has it — on {@link RateLimiter}, one dynamic test per case: a limiter of
 * the case's rate and burst on a fake {@link Ticker} set to each step's
 * time. acquire is {@code reserveAt} (the non-blocking twin of {@link
 * RateLimiter#acquire(int)}, as the schema names it), try_acquire {@link
 * RateLimiter#tryAcquire(int)}, set_rate {@link RateLimiter#setRate},
 * tokens {@link RateLimiter#tokens()}, all reading the fake ticker.
 *
 * <p>Java's one documented difference (docs/java.md, "Errors"): fewer than
 * one permit throws {@link IllegalArgumentException}, as Guava's; a step
 * asking for that expects the exception instead of an answer.
 *
 * <p>Source: guava-ratelimiter.md, "SmoothBursty", "setRate".
 */
class LimiterVectorsTest {
  static final long S = 1_000_000_000L;
  /** Step time 0 on the ticker: any point; not 0, so that nothing may assume the scale starts there. */
  static final long BASE = 1000 * S;

  /** A ticker the test sets. */
  static final class FakeTicker implements Ticker {
    final AtomicLong now = new AtomicLong(BASE);

    @Override
    public long read() {
      return now.get();
    }

    void setSeconds(double at) {
      now.set(BASE + Math.round(at * S));
    }
  }

  @TestFactory
  List<DynamicTest> limiterVectors() {
    JsonObject v = Vectors.read("limiter.json");
    double tol = v.get("tolerance").getAsDouble();
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject c : Vectors.objects(v, "cases")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").getAsString(), () -> run(c, tol)));
    }
    assertFalse(tests.isEmpty(), "limiter.json has no cases");
    return tests;
  }

  static void run(JsonObject c, double tol) {
    FakeTicker t = new FakeTicker();
    double rate = Vectors.num(c.get("rate"));
    RateLimiter lim = RateLimiter.create(rate, Durations.of(Vectors.num(c.get("max_burst_seconds"))), t);
    assertEquals(rate, lim.getRate(), "rate");
    int i = 0;
    for (JsonObject s : Vectors.objects(c, "steps")) {
      double at = Vectors.num(s.get("at"));
      t.setSeconds(at);
      String op = s.get("op").getAsString();
      double n = Vectors.num(s, "permits", 1);
      String where = "step " + i + " (" + op + " at " + at + " s)";
      if ((op.equals("acquire") || op.equals("try_acquire")) && n < 1) {
        // Java's documented difference: fewer than one permit is refused.
        int p = (int) n;
        assertThrows(IllegalArgumentException.class,
            () -> { if (op.equals("acquire")) lim.reserveAt(t.read(), p); else lim.tryAcquire(p); }, where);
        i++;
        continue;
      }
      if (n != Math.floor(n) || n > Integer.MAX_VALUE) {
        fail(where + ": " + n + " permits is no Java int");
      }
      int permits = (int) n;
      switch (op) {
        case "acquire": {
          double got = lim.reserveAt(t.read(), permits);
          double want = Vectors.num(s.get("wait"));
          assertTrue(Vectors.near(got, want, tol), where + ": " + permits + " permits wait " + got + " s, want " + want + " s");
          break;
        }
        case "try_acquire": {
          boolean want = s.get("ok").getAsBoolean();
          assertEquals(want, lim.tryAcquire(permits), where + ": " + permits + " permits");
          break;
        }
        case "set_rate": {
          double r = Vectors.num(s.get("rate"));
          lim.setRate(r);
          assertEquals(r, lim.getRate(), where);
          break;
        }
        case "tokens": {
          double got = lim.tokens();
          double want = Vectors.num(s.get("tokens"));
          assertTrue(Vectors.near(got, want, tol), where + ": tokens " + got + ", want " + want);
          break;
        }
        default:
          fail(where + ": unknown op " + op);
      }
      i++;
    }
  }
}
