package io.github.sluicerl.sluice.interop;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import com.google.gson.JsonPrimitive;
import io.github.sluicerl.sluice.Allowance;
import io.github.sluicerl.sluice.Hold;
import io.github.sluicerl.sluice.OverLimitException;
import io.github.sluicerl.sluice.RateLimiter;
import io.github.sluicerl.sluice.Resource;
import io.github.sluicerl.sluice.SluiceClient;
import io.github.sluicerl.sluice.SluiceException;
import io.github.sluicerl.sluice.Tls;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;

/**
 * Java's interop driver: the cross-language interop suite's JSON-lines
 * protocol (docs/python.md, "The interop driver") over the Java library.
 *
 * <pre>scripts/interop-driver java --server 127.0.0.1:15000 --client-id java-1</pre>
 *
 * It reads one JSON object per line on standard input and writes one JSON
 * object per line answering it, in order, on standard output; logs go to
 * standard error. Any failure answers {"error":{"code":CODE,"message":...}}
 * with CODE a gRPC code's name, and the driver keeps serving; "close"
 * closes the client and exits 0, as does the end of standard input.
 */
public final class Driver {
  /** The burst of every rate limiter bound to a lease. */
  static final Duration BURST = Duration.ofMillis(100);

  /** An error answer: a gRPC code's name and a message. */
  static final class Failure extends Exception {
    private static final long serialVersionUID = 1L;
    final String code;

    Failure(String code, String message) {
      super(message);
      this.code = code;
    }
  }

  private final SluiceClient client;
  private final Map<String, Resource> res = new HashMap<>();
  private final Map<String, RateLimiter> limiters = new HashMap<>();
  private final Map<Long, Hold> holds = new HashMap<>();
  private long nextHold;

  Driver(SluiceClient client) {
    this.client = client;
  }

  private static String str(JsonObject c, String k) throws Failure {
    JsonElement e = c.get(k);
    if (e == null || e.isJsonNull()) {
      return "";
    }
    if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isString()) {
      throw new Failure("INVALID_ARGUMENT", k + " is not a string");
    }
    return e.getAsString();
  }

  private static double num(JsonObject c, String k, String op) throws Failure {
    JsonElement e = c.get(k);
    if (e == null || e.isJsonNull()) {
      throw new Failure("INVALID_ARGUMENT", op + ": no " + k);
    }
    if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isNumber()) {
      throw new Failure("INVALID_ARGUMENT", op + ": " + k + " is not a number");
    }
    return e.getAsDouble();
  }

  private static long integer(JsonObject c, String k, long dflt) throws Failure {
    JsonElement e = c.get(k);
    if (e == null || e.isJsonNull()) {
      return dflt;
    }
    if (!e.isJsonPrimitive() || !e.getAsJsonPrimitive().isNumber()) {
      throw new Failure("INVALID_ARGUMENT", k + " is not a number");
    }
    double d = e.getAsDouble();
    if (d != Math.rint(d)) {
      throw new Failure("INVALID_ARGUMENT", k + " " + d + " is not an integer");
    }
    return (long) d;
  }

  private Resource resource(String id) throws Failure {
    Resource r = res.get(id);
    if (r == null) {
      throw new Failure("NOT_FOUND", "no resource '" + id + "' (send resource first)");
    }
    return r;
  }

  private static JsonObject ok() {
    JsonObject o = new JsonObject();
    o.addProperty("ok", true);
    return o;
  }

  /** Answers one command; the library's failures are its unchecked SluiceException. */
  JsonObject handle(JsonObject c, String op) throws Failure {
    JsonObject out = new JsonObject();
    switch (op) {
      case "resource": {
        String id = str(c, "id");
        if (res.containsKey(id)) {
          throw new Failure("ALREADY_EXISTS", "resource '" + id + "' is leased already (use set_wants)");
        }
        Resource r = client.resource(id, num(c, "wants", "resource"));
        res.put(id, r);
        limiters.put(id, r.rateLimiter(BURST));
        return ok();
      }
      case "set_wants":
        resource(str(c, "id")).setWants(num(c, "wants", "set_wants"));
        return ok();
      case "capacity": {
        double cap = resource(str(c, "id")).capacity();
        out.addProperty("capacity", Double.isInfinite(cap) ? -1 : cap);
        return out;
      }
      case "run": {
        String id = str(c, "id");
        resource(id);
        double seconds = c.has("seconds") ? num(c, "seconds", "run") : 0;
        if (!(seconds >= 0 && seconds <= 600)) {
          throw new Failure("INVALID_ARGUMENT", "run: seconds " + seconds + " outside [0, 600]");
        }
        RateLimiter lim = limiters.get(id);
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        long n = 0;
        while (true) {
          long left = deadline - System.nanoTime();
          if (left <= 0 || !lim.tryAcquire(1, Duration.ofNanos(left))) {
            break;
          }
          n++;
        }
        out.addProperty("acquired", n);
        return out;
      }
      case "release": {
        String id = str(c, "id");
        Resource r = resource(id);
        res.remove(id);
        limiters.remove(id);
        r.release();
        return ok();
      }
      case "allow": {
        long tokens = Math.max(integer(c, "tokens", 1), 1);
        Allowance a = client.allow(str(c, "resource"), str(c, "domain"), tokens, 0, Duration.ZERO);
        out.addProperty("status", a.status());
        out.addProperty("granted", a.granted());
        return out;
      }
      case "reserve": {
        Hold h;
        try {
          h = client.reserveCopies(str(c, "resource"), str(c, "domain"), integer(c, "copies", 1), integer(c, "min", 0),
              null);
        } catch (OverLimitException e) {
          out.addProperty("granted", 0);
          out.add("hold", JsonNull.INSTANCE);
          return out;
        }
        nextHold++;
        holds.put(nextHold, h);
        out.addProperty("granted", h.copies());
        out.addProperty("hold", nextHold);
        return out;
      }
      case "free": {
        JsonElement e = c.get("hold");
        Hold h = null;
        if (e != null && e.isJsonPrimitive() && e.getAsJsonPrimitive().isNumber()) {
          h = holds.remove(e.getAsLong());
        }
        if (h == null) {
          throw new Failure("NOT_FOUND", "free: no such hold");
        }
        h.release();
        return ok();
      }
      case "close":
        client.close();
        return ok();
      default:
        throw new Failure("INVALID_ARGUMENT", "unknown op '" + op + "'");
    }
  }

  static JsonObject error(String code, String message) {
    JsonObject e = new JsonObject();
    e.addProperty("code", code);
    e.addProperty("message", message == null ? "" : message);
    JsonObject o = new JsonObject();
    o.add("error", e);
    return o;
  }

  public static void main(String[] args) throws IOException {
    String server = null, id = null, ca = null, cert = null, key = null;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--server": server = args[i + 1]; break;
        case "--client-id": id = args[i + 1]; break;
        case "--tls-ca": ca = args[i + 1]; break;
        case "--tls-cert": cert = args[i + 1]; break;
        case "--tls-key": key = args[i + 1]; break;
        default:
          System.err.println("driver: unknown flag " + args[i]);
          System.exit(2);
      }
    }
    if (server == null || id == null || args.length % 2 != 0) {
      System.err.println("usage: Driver --server HOST:PORT --client-id ID [--tls-ca F [--tls-cert F --tls-key F]]");
      System.exit(2);
    }
    SluiceClient.Builder b = SluiceClient.builder(server).clientId(id).callTimeout(Duration.ofSeconds(5))
        .sessionTtl(Duration.ofSeconds(5)).failOpen(false);
    if (ca != null) {
      Tls.Builder t = Tls.builder().rootCertificates(Path.of(ca));
      if (cert != null) {
        t.keyPair(Path.of(cert), Path.of(key));
      }
      b.tls(t.build());
    }
    SluiceClient client = b.build();
    Driver d = new Driver(client);
    Gson gson = new GsonBuilder().disableHtmlEscaping().create();
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.strip();
      if (line.isEmpty()) {
        continue;
      }
      String op = null;
      JsonObject answer;
      try {
        JsonElement parsed = JsonParser.parseString(line);
        if (!parsed.isJsonObject()) {
          throw new Failure("INVALID_ARGUMENT", "a command is a JSON object");
        }
        JsonObject cmd = parsed.getAsJsonObject();
        JsonElement o = cmd.get("op");
        op = o instanceof JsonPrimitive && ((JsonPrimitive) o).isString() ? o.getAsString() : "";
        answer = d.handle(cmd, op);
      } catch (Failure e) {
        answer = error(e.code, e.getMessage());
      } catch (SluiceException e) {
        answer = error(e.codeName(), e.getMessage());
      } catch (com.google.gson.JsonParseException e) {
        answer = error("INVALID_ARGUMENT", "not a JSON command: " + e.getMessage());
      } catch (Exception e) {
        answer = error("UNKNOWN", e.getClass().getSimpleName() + ": " + e.getMessage());
      }
      out.println(gson.toJson(answer));
      out.flush();
      if ("close".equals(op) && !answer.has("error")) {
        System.exit(0);
      }
    }
    client.close();
    System.exit(0);
  }
}
