package io.github.sluicerl.sluice;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * clients/vectors/*.json, the behaviour the four clients share as data
 * (docs/clients.md, "The vectors"), read with Gson for the *VectorsTest
 * classes.
 *
 * <p>The directory: the system property {@code sluice.vectors} (the
 * interop suite's JUnit run passes it), else the environment variable
 * {@code SLUICE_VECTORS}, else {@code clients/vectors} (or {@code vectors},
 * from {@code clients/java} under Maven) found walking up from the working
 * directory.
 */
final class Vectors {
  private Vectors() {}

  static final String PROPERTY = "sluice.vectors";
  static final String ENV = "SLUICE_VECTORS";

  /** The vectors' directory; fails the test naming where it looked. */
  static Path dir() {
    String p = System.getProperty(PROPERTY);
    if (p == null || p.isEmpty()) {
      p = System.getenv(ENV);
    }
    if (p != null && !p.isEmpty()) {
      Path d = Path.of(p);
      if (!Files.isRegularFile(d.resolve("limiter.json"))) {
        throw new AssertionError(d + " (from -D" + PROPERTY + " or $" + ENV + ") holds no limiter.json");
      }
      return d;
    }
    Path wd = Path.of(System.getProperty("user.dir")).toAbsolutePath();
    for (Path d = wd; d != null; d = d.getParent()) {
      for (Path c : List.of(d.resolve("clients").resolve("vectors"), d.resolve("vectors"))) {
        if (Files.isRegularFile(c.resolve("limiter.json")) && Files.isRegularFile(c.resolve("refresh.json"))) {
          return c;
        }
      }
    }
    throw new AssertionError("clients/vectors not found above " + wd + "; set -D" + PROPERTY + " or $" + ENV);
  }

  /** The file {@code name} ("limiter.json") as a JSON object. */
  /**
   * Quiets the client's logger to SEVERE (failing open warns) and returns
   * the level it had, for {@link #restoreLog}.
   */
  static Level quietLog() {
    Logger log = Logger.getLogger("io.github.sluicerl.sluice");
    Level was = log.getLevel();
    log.setLevel(Level.SEVERE);
    return was;
  }

  /** Gives the client's logger back the level {@link #quietLog} returned. */
  static void restoreLog(Level was) {
    Logger.getLogger("io.github.sluicerl.sluice").setLevel(was);
  }

  static JsonObject read(String name) {
    Path f = dir().resolve(name);
    try {
      return JsonParser.parseString(Files.readString(f, StandardCharsets.UTF_8)).getAsJsonObject();
    } catch (IOException e) {
      throw new UncheckedIOException(f.toString(), e);
    }
  }

  /** A number of the files: a JSON number, or the string "inf" (infinity). */
  static double num(JsonElement e) {
    if (e.isJsonPrimitive() && e.getAsJsonPrimitive().isString()) {
      if (e.getAsString().equals("inf")) {
        return Double.POSITIVE_INFINITY;
      }
      throw new AssertionError("a string number other than \"inf\": " + e);
    }
    return e.getAsDouble();
  }

  /** o.key as a number; def when absent. */
  static double num(JsonObject o, String key, double def) {
    return o.has(key) ? num(o.get(key)) : def;
  }

  /** o.key as a string; "" when absent. */
  static String str(JsonObject o, String key) {
    return o.has(key) ? o.get(key).getAsString() : "";
  }

  /** o.key, an array of objects, as a list (empty when absent). */
  static List<JsonObject> objects(JsonObject o, String key) {
    List<JsonObject> l = new ArrayList<>();
    if (o.has(key)) {
      for (JsonElement e : o.getAsJsonArray(key)) {
        l.add(e.getAsJsonObject());
      }
    }
    return l;
  }

  /** o.key, an array of strings or numbers, as strings (empty when absent). */
  static List<String> strings(JsonObject o, String key) {
    List<String> l = new ArrayList<>();
    if (o.has(key)) {
      JsonArray a = o.getAsJsonArray(key);
      for (JsonElement e : a) {
        l.add(e.getAsString());
      }
    }
    return l;
  }

  /** o.key, an array of numbers, as doubles (empty when absent). */
  static List<Double> nums(JsonObject o, String key) {
    List<Double> l = new ArrayList<>();
    if (o.has(key)) {
      for (JsonElement e : o.getAsJsonArray(key)) {
        l.add(num(e));
      }
    }
    return l;
  }

  /** got equals want, or lies within tolerance of it (infinities equal only themselves). */
  static boolean near(double got, double want, double tolerance) {
    return got == want || Math.abs(got - want) <= tolerance;
  }
}
