package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.doorman.CapacityGrpc;
import io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest;
import io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse;
import io.github.sluicerl.sluice.proto.doorman.Lease;
import io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.ResourceResponse;
import io.github.sluicerl.sluice.proto.v1.LeasesGrpc;
import io.github.sluicerl.sluice.proto.v1.PushedLease;
import io.github.sluicerl.sluice.proto.v1.WatchRequest;
import io.github.sluicerl.sluice.proto.v1.WatchResponse;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.DoubleSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * The lease side of a {@link SluiceClient}: its resources, the refresh
 * thread and the watch stream.
 *
 * <p>All resources travel in one bulk {@code doorman.Capacity/GetCapacity},
 * sent at the smallest refresh interval among the leases (stretched to at
 * least 5 s) and at once when a resource is added. Doorman's 5-second rule:
 * a resource is never sent more often than once every {@link
 * #MIN_REQUEST_INTERVAL}, counted from the answer to the last request
 * carrying it. A request is due when a resource is new (at once), when its
 * wants changed or it holds no valid lease (when its 5 s end), when its
 * refresh interval has passed, or {@link #EXPIRY_MARGIN} before its lease
 * expires; it carries every resource outside its window, and one due only
 * for refreshes waits (less than 5 s, never past those leases' margin) for
 * the resources inside their windows, so that a resource sent alone
 * rejoins the others. It follows mastership redirects, retries failures
 * with capped exponential backoff and jitter (moving to the master named by
 * {@code Discovery}, or the next address), and keeps one {@code
 * sluice.v1.Leases/Watch} stream open for pushed leases (polling only,
 * trying again every 5 minutes, against a server without it).
 *
 * <p>This is the Go client's behaviour ({@code client}; docs/client.md).
 * Source: doorman-design.md, "Client operation", "Client library".
 */
final class Leases {
  private static final Logger log = Logger.getLogger("io.github.sluicerl.sluice");

  /** Doorman's 5-second rule, in seconds. */
  static final double MIN_REQUEST_INTERVAL = 5.0;
  /** How long before a lease's expiry it is refreshed at the latest, in seconds. */
  static final double EXPIRY_MARGIN = 0.5;
  /** The refresh interval of a lease whose answer gave none, in seconds. */
  static final double DEFAULT_REFRESH_INTERVAL = 5.0;
  static final double MIN_BACKOFF = 0.1;
  static final double MAX_BACKOFF = 10.0;
  /** How long a GetCapacity may take, in seconds. */
  static final double REQUEST_TIMEOUT = 5.0;
  /** How long before trying again a Watch stream the server does not offer, in seconds. */
  static final double WATCH_UNSUPPORTED = 300.0;
  static final int MAX_REDIRECTS = 3;

  final String id;
  final List<String> addrs;
  final Channels channels;
  final Mode mode;
  final boolean push;
  final DoubleSupplier clock;
  final boolean manual;
  final ScheduledExecutorService scheduler;
  volatile boolean killed;
  private final Retry retry = new Retry();
  private final Retry watchRetry = new Retry();
  private String addr; // guarded by this
  private final Map<String, LeaseState> resources = new LinkedHashMap<>(); // guarded by this
  private boolean closed; // guarded by this
  private Thread refresher; // guarded by this
  private Context.CancellableContext watch; // guarded by this
  private boolean woken; // guarded by this
  /** GetCapacity requests answered (for tests and measurements). */
  long requests; // guarded by this

  Leases(String id, List<String> addrs, Channels channels, Mode mode, boolean push, DoubleSupplier clock,
      boolean manual, ScheduledExecutorService scheduler) {
    this.id = id;
    this.addrs = addrs;
    this.channels = channels;
    this.mode = mode;
    this.push = push;
    this.clock = clock;
    this.manual = manual;
    this.scheduler = scheduler;
    this.addr = addrs.get(0);
  }

  double now() {
    return clock.getAsDouble();
  }

  static double checkWants(double w) throws InvalidArgumentException {
    if (Double.isNaN(w) || Double.isInfinite(w) || w < 0) {
      throw new InvalidArgumentException("wants " + w + " must be finite and >= 0");
    }
    return w;
  }

  /** Capped exponential backoff with jitter, never longer than the last refresh interval. */
  static final class Retry {
    int failures;
    double interval;

    synchronized double failed() {
      return failed(ThreadLocalRandom.current().nextDouble());
    }

    /** {@link #failed()} with the jitter draw u in [0, 1] (tests: retry.json's leases). */
    synchronized double failed(double u) {
      failures++;
      double d = Math.min(MIN_BACKOFF * Math.pow(2, Math.min(failures - 1, 20)), MAX_BACKOFF);
      d = d / 2 + u * d / 2;
      if (interval > 0) {
        d = Math.min(d, interval);
      }
      return d;
    }

    synchronized void succeeded(double i) {
      failures = 0;
      interval = Math.max(Math.min(i, MAX_BACKOFF), MIN_BACKOFF);
    }
  }

  // --- threads -------------------------------------------------------------

  /** Starts the refresh thread and the watch stream once (this held). */
  private void start() {
    if (refresher != null || manual) {
      return;
    }
    refresher = new Thread(this::refreshLoop, "sluice-refresh");
    refresher.setDaemon(true);
    refresher.start();
    if (push) {
      scheduler.execute(this::openWatch);
    }
  }

  synchronized void poke() {
    woken = true;
    notifyAll();
  }

  private void refreshLoop() {
    double wait = 0;
    while (true) {
      synchronized (this) {
        long deadline = System.nanoTime() + (long) (wait * 1e9);
        while (!woken && !closed) {
          long left = deadline - System.nanoTime();
          if (left <= 0) {
            break;
          }
          try {
            TimeUnit.NANOSECONDS.timedWait(this, left);
          } catch (InterruptedException e) {
            return;
          }
        }
        woken = false;
        if (closed) {
          return;
        }
      }
      try {
        wait = step();
      } catch (RuntimeException e) {
        log.log(Level.WARNING, "sluice: refresh step failed", e);
        wait = MAX_BACKOFF;
      }
    }
  }

  private void openWatch() {
    Context.CancellableContext ctx;
    synchronized (this) {
      if (closed) {
        return;
      }
      ctx = Context.current().withCancellation();
      watch = ctx;
    }
    String server = server();
    ctx.run(() -> LeasesGrpc.newStub(channels.get(server)).watch(WatchRequest.newBuilder().setHolderId(id).build(),
        new StreamObserver<WatchResponse>() {
          boolean opened;

          @Override
          public void onNext(WatchResponse r) {
            if (!opened) {
              opened = true;
              watchRetry.succeeded(MIN_BACKOFF);
            }
            if (r.getLeasesCount() > 0) {
              applyPushed(r.getLeasesList());
            }
          }

          @Override
          public void onError(Throwable t) {
            ended(Status.fromThrowable(t).getCode());
          }

          @Override
          public void onCompleted() {
            ended(Status.Code.OK);
          }

          private void ended(Status.Code code) {
            synchronized (Leases.this) {
              if (closed) {
                return;
              }
            }
            double wait = code == Status.Code.UNIMPLEMENTED ? WATCH_UNSUPPORTED : watchRetry.failed();
            try {
              scheduler.schedule(Leases.this::openWatch, (long) (wait * 1e3), TimeUnit.MILLISECONDS);
            } catch (java.util.concurrent.RejectedExecutionException e) {
              // closing
            }
          }
        }));
  }

  // --- resources -----------------------------------------------------------

  synchronized String server() {
    return addr;
  }

  private synchronized void use(String a) {
    addr = a;
  }

  Resource resource(String rid, double wants, int priority) throws SluiceException {
    if (rid == null || rid.isEmpty()) {
      throw new InvalidArgumentException("empty resource id");
    }
    checkWants(wants);
    LeaseState s;
    Resource h;
    boolean fresh;
    synchronized (this) {
      if (closed) {
        throw new ClosedException("client closed");
      }
      s = resources.get(rid);
      if (s != null) {
        if (s.priority != priority) {
          throw new InvalidArgumentException(
              "resource " + rid + " is held at priority " + s.priority + ", not " + priority);
        }
        h = new Resource(s, wants);
        s.handles.add(h);
        fresh = false;
      } else {
        s = new LeaseState(this, rid, wants, priority);
        h = new Resource(s, wants);
        s.handles.add(h);
        resources.put(rid, s);
        fresh = true;
        start();
      }
    }
    if (fresh) {
      poke();
    } else {
      s.askTotal();
    }
    return h;
  }

  double sumWants(LeaseState s) {
    List<Resource> hs;
    synchronized (this) {
      hs = new ArrayList<>(s.handles);
    }
    double sum = 0;
    for (Resource h : hs) {
      sum += h.wants();
    }
    return sum;
  }

  void releaseHandle(Resource h) throws SluiceException {
    LeaseState s = h.state;
    boolean last;
    synchronized (this) {
      s.handles.remove(h);
      last = s.handles.isEmpty();
      if (last && resources.get(s.id) == s) {
        resources.remove(s.id);
      }
    }
    if (!last) {
      s.askTotal();
      return;
    }
    if (!s.markReleased()) {
      return;
    }
    release(List.of(s.id), 2.0);
  }

  private void release(List<String> ids, double timeout) throws SluiceException {
    try {
      CapacityGrpc.newBlockingStub(channels.get(server()))
          .withDeadlineAfter((long) (timeout * 1e3), TimeUnit.MILLISECONDS)
          .releaseCapacity(ReleaseCapacityRequest.newBuilder().setClientId(id).addAllResourceId(ids).build());
    } catch (StatusRuntimeException e) {
      throw SluiceException.of(e, "ReleaseCapacity");
    }
  }

  void setKillSwitch(boolean on) {
    List<LeaseState> states;
    synchronized (this) {
      if (killed == on) {
        return;
      }
      killed = on;
      states = new ArrayList<>(resources.values());
    }
    double now = now();
    for (LeaseState s : states) {
      synchronized (s) {
        s.changeLocked(now);
      }
      s.deliver();
    }
  }

  /** Releases every lease (one ReleaseCapacity, best effort) and stops the thread and the stream. */
  void close(double timeout) {
    List<LeaseState> states;
    Thread t;
    Context.CancellableContext w;
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
      states = new ArrayList<>(resources.values());
      resources.clear();
      t = refresher;
      w = watch;
      notifyAll();
    }
    for (LeaseState s : states) {
      s.markReleased();
    }
    if (w != null) {
      w.cancel(null);
    }
    if (t != null && t != Thread.currentThread()) {
      try {
        t.join((long) ((REQUEST_TIMEOUT + 1) * 1e3));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    if (!states.isEmpty() && !manual) {
      List<String> ids = new ArrayList<>();
      for (LeaseState s : states) {
        ids.add(s.id);
      }
      try {
        release(ids, timeout);
      } catch (SluiceException e) {
        log.fine("sluice: releasing on close: " + e);
      }
    }
  }

  // --- the refresh step ----------------------------------------------------

  synchronized List<LeaseState> states() {
    return new ArrayList<>(resources.values());
  }

  private synchronized boolean isClosed() {
    return closed;
  }

  /**
   * Decides at now, by the 5-second rule, whether a bulk request is due and
   * what it carries. Returns the resources to send (empty: none) and sets
   * wait[0] to the seconds until one is due (0: now).
   */
  static List<LeaseState> plan(List<LeaseState> states, double now, double[] wait) {
    double next = Double.NaN, join = Double.NaN, limit = Double.NaN;
    boolean due = false, mustGo = false;
    List<LeaseState> send = new ArrayList<>();
    for (LeaseState r : states) {
      double[] sch = r.schedule(now);
      double ready = sch[0], at = sch[1], latest = sch[2];
      if (ready > now) {
        join = Double.isNaN(join) ? ready : Math.max(join, ready);
        next = Double.isNaN(next) ? at : Math.min(next, at);
        continue;
      }
      send.add(r);
      if (at > now) {
        next = Double.isNaN(next) ? at : Math.min(next, at);
        continue;
      }
      due = true;
      if (Double.isNaN(latest)) {
        mustGo = true;
      } else {
        limit = Double.isNaN(limit) ? latest : Math.min(limit, latest);
      }
    }
    if (!due) {
      wait[0] = Double.isNaN(next) ? DEFAULT_REFRESH_INTERVAL : next - now;
      return List.of();
    }
    if (!mustGo && !Double.isNaN(join) && !Double.isNaN(limit) && join <= limit) {
      wait[0] = join - now; // wait for the others' windows to end
      return List.of();
    }
    wait[0] = 0;
    return send;
  }

  /**
   * One turn of the refresh loop: applies the fallback to expired leases,
   * sends one bulk GetCapacity if one is due, and returns how many seconds
   * until the next turn (never past the earliest expiry).
   */
  double step() {
    double now = now();
    List<LeaseState> states = states();
    for (LeaseState s : states) {
      s.expire(now);
    }
    double[] wait = {0};
    List<LeaseState> send = plan(states, now, wait);
    double next;
    if (wait[0] > 0) {
      next = wait[0];
    } else {
      GetCapacityRequest.Builder req = GetCapacityRequest.newBuilder().setClientId(id);
      long[] gens = new long[send.size()];
      long[] g = {0};
      for (int i = 0; i < send.size(); i++) {
        req.addResource(send.get(i).request(now, g));
        gens[i] = g[0];
      }
      GetCapacityResponse resp;
      try {
        resp = follow(req.build());
      } catch (SluiceException e) {
        if (isClosed()) {
          return 0;
        }
        next = retry.failed();
        log.fine("sluice: refresh failed (" + e + "); retrying in " + next + " s");
        rotate();
        return boundByExpiry(next);
      }
      now = now();
      for (int i = 0; i < send.size(); i++) {
        send.get(i).sent(now, gens[i]);
      }
      double interval = apply(resp, send, now);
      retry.succeeded(interval);
      plan(states(), now, wait);
      next = wait[0];
    }
    return boundByExpiry(next);
  }

  private double boundByExpiry(double next) {
    double now = now();
    double exp = Double.NaN;
    for (LeaseState s : states()) {
      synchronized (s) {
        if (s.hasLease && s.expiry > now && (Double.isNaN(exp) || s.expiry < exp)) {
          exp = s.expiry;
        }
      }
    }
    if (!Double.isNaN(exp)) {
      next = Math.max(Math.min(next, exp - now), 0);
    }
    return next;
  }

  /** Sends req to the current server, following mastership redirects. */
  private GetCapacityResponse follow(GetCapacityRequest req) throws SluiceException {
    String a = server();
    int redirects = 0;
    while (true) {
      use(a);
      GetCapacityResponse resp;
      try {
        resp = CapacityGrpc.newBlockingStub(channels.get(a))
            .withDeadlineAfter((long) (REQUEST_TIMEOUT * 1e3), TimeUnit.MILLISECONDS)
            .getCapacity(req);
      } catch (StatusRuntimeException e) {
        throw SluiceException.of(e, "GetCapacity to " + a);
      }
      if (!resp.hasMastership()) {
        synchronized (this) {
          requests++;
        }
        return resp;
      }
      String master = resp.getMastership().getMasterAddress();
      if (master.isEmpty() || master.equals(a) || redirects >= MAX_REDIRECTS) {
        throw new UnavailableException("GetCapacity to " + a + ": not the master (master '" + master + "')");
      }
      a = master;
      redirects++;
    }
  }

  private double apply(GetCapacityResponse resp, List<LeaseState> sent, double now) {
    Map<String, LeaseState> byId = new HashMap<>();
    for (LeaseState s : sent) {
      byId.put(s.id, s);
    }
    double next = 0;
    for (ResourceResponse rr : resp.getResponseList()) {
      LeaseState s = byId.get(rr.getResourceId());
      if (s == null) {
        continue;
      }
      Lease g = rr.getGets();
      double ri = g.getRefreshInterval() > 0 ? g.getRefreshInterval() : DEFAULT_REFRESH_INTERVAL;
      Double safe = rr.hasSafeCapacity() ? rr.getSafeCapacity() : null;
      s.grant(g.getCapacity(), g.getExpiryTime(), ri, safe, g.getSequence(), false, now);
      ri = Math.max(ri, MIN_REQUEST_INTERVAL);
      if (next == 0 || ri < next) {
        next = ri;
      }
    }
    return next == 0 ? DEFAULT_REFRESH_INTERVAL : next;
  }

  /** Applies leases the server pushed, each if newer than the one held. */
  void applyPushed(List<PushedLease> leases) {
    double now = now();
    for (PushedLease pl : leases) {
      LeaseState s;
      synchronized (this) {
        s = resources.get(pl.getResourceId());
      }
      if (s == null) {
        continue;
      }
      double ri = pl.getRefreshInterval() > 0 ? pl.getRefreshInterval() : DEFAULT_REFRESH_INTERVAL;
      s.grant(pl.getCapacity(), pl.getExpiryTime(), ri, null, pl.getSequence(), true, now);
    }
  }

  /** After a failure: moves to the master named by Discovery on the configured addresses, or the next address. */
  private void rotate() {
    if (addrs.size() < 2) {
      return;
    }
    String cur = server();
    int start = 0;
    for (int i = 0; i < addrs.size(); i++) {
      if (addrs.get(i).equals(cur)) {
        start = i + 1;
      }
    }
    for (int k = 0; k < addrs.size(); k++) {
      String a = addrs.get((start + k) % addrs.size());
      DiscoveryResponse d;
      try {
        d = CapacityGrpc.newBlockingStub(channels.get(a)).withDeadlineAfter(1, TimeUnit.SECONDS)
            .discovery(DiscoveryRequest.getDefaultInstance());
      } catch (StatusRuntimeException e) {
        continue;
      }
      if (!d.getMastership().getMasterAddress().isEmpty()) {
        use(d.getMastership().getMasterAddress());
        return;
      }
      if (isClosed()) {
        break;
      }
    }
    use(addrs.get(start % addrs.size()));
  }
}
