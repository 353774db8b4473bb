package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.DoubleSupplier;
import org.junit.jupiter.api.Test;

/**
 * clients/vectors/constants.json: every constant the file names for Java
 * ("Class.NAME", or a default in parentheses, read from an object made
 * with the defaults) has the file's value; a name the file gives that this
 * test does not know fails, and so does one known here that the file no
 * longer names. A constant whose "java" is "" is one Java has no setting
 * for (the schema; docs/clients.md says why).
 */
class ConstantVectorsTest {
  /** The client's Sessions (its copies' side), to read the defaults it was built with. */
  static Sessions sessionsOf(SluiceClient c) throws ReflectiveOperationException {
    Field f = SluiceClient.class.getDeclaredField("sessions");
    f.setAccessible(true);
    return (Sessions) f.get(c);
  }

  @Test
  void constantVectors() throws Exception {
    JsonObject v = Vectors.read("constants.json");
    Map<String, DoubleSupplier> known = new LinkedHashMap<>();
    known.put("Leases.MIN_REQUEST_INTERVAL", () -> Leases.MIN_REQUEST_INTERVAL);
    known.put("Leases.EXPIRY_MARGIN", () -> Leases.EXPIRY_MARGIN);
    known.put("Leases.DEFAULT_REFRESH_INTERVAL", () -> Leases.DEFAULT_REFRESH_INTERVAL);
    known.put("Leases.MIN_BACKOFF", () -> Leases.MIN_BACKOFF);
    known.put("Leases.MAX_BACKOFF", () -> Leases.MAX_BACKOFF);
    known.put("Leases.WATCH_UNSUPPORTED", () -> Leases.WATCH_UNSUPPORTED);
    known.put("Leases.MAX_REDIRECTS", () -> Leases.MAX_REDIRECTS);
    known.put("Leases.REQUEST_TIMEOUT", () -> Leases.REQUEST_TIMEOUT);
    known.put("Sessions.MAX_COPIES", () -> Sessions.MAX_COPIES);
    known.put("(RateLimiter.create(rate) default)", () -> Durations.seconds(RateLimiter.create(1).getMaxBurst()));
    // The client's defaults, as built: nothing is sent until used.
    try (SluiceClient c = SluiceClient.builder("127.0.0.1:1").build()) {
      Sessions s = sessionsOf(c);
      known.put("(SluiceClient.Builder.backoffUnit default)", () -> s.backoffUnit);
      known.put("(SluiceClient.Builder.sessionTtl default)", () -> s.sessionTtl);
      known.put("(SluiceClient.Builder.callTimeout default)", () -> s.callTimeout);

      Set<String> used = new HashSet<>();
      List<String> errors = new ArrayList<>();
      List<JsonObject> cs = Vectors.objects(v, "constants");
      assertFalse(cs.isEmpty(), "constants.json has no constants");
      for (JsonObject k : cs) {
        String name = k.get("name").getAsString();
        String java = Vectors.str(k, "java");
        if (java.isEmpty()) {
          continue; // the schema: Java has no such setting
        }
        DoubleSupplier got = known.get(java);
        if (got == null) {
          errors.add(name + ": Java's " + java + " is not known to this test");
          continue;
        }
        used.add(java);
        double want = k.get("value").getAsDouble();
        if (got.getAsDouble() != want) {
          errors.add(name + ": Java's " + java + " is " + got.getAsDouble() + ", constants.json " + want);
        }
      }
      for (String n : known.keySet()) {
        if (!used.contains(n)) {
          errors.add(n + " is not in constants.json");
        }
      }
      assertTrue(errors.isEmpty(), String.join("\n", errors));
    }
  }

  @Test
  void maxCopiesIsEnforced() {
    // The 2^53 bound is the one the reserve checks before sending anything.
    JsonObject v = Vectors.read("constants.json");
    for (JsonObject k : Vectors.objects(v, "constants")) {
      if (k.get("name").getAsString().equals("max_copies")) {
        long max = k.get("value").getAsLong();
        assertEquals(max, Sessions.checkRange("copies", max, 0));
        assertEquals(InvalidArgumentException.class,
            org.junit.jupiter.api.Assertions.assertThrows(SluiceException.class,
                () -> Sessions.checkRange("copies", max + 1, 0)).getClass());
        return;
      }
    }
    org.junit.jupiter.api.Assertions.fail("constants.json has no max_copies");
  }
}
