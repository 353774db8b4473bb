package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.CloseSessionRequest;
import io.github.sluicerl.sluice.proto.v1.KeepAliveRequest;
import io.github.sluicerl.sluice.proto.v1.KeepAliveResponse;
import io.github.sluicerl.sluice.proto.v1.LimitsGrpc;
import io.github.sluicerl.sluice.proto.v1.OpenSessionRequest;
import io.github.sluicerl.sluice.proto.v1.OpenSessionResponse;
import io.github.sluicerl.sluice.proto.v1.ReserveRequest;
import io.github.sluicerl.sluice.proto.v1.ReserveResponse;
import io.github.sluicerl.sluice.proto.v1.SeizeRequest;
import io.github.sluicerl.sluice.proto.v1.SeizeResponse;
import io.grpc.Context;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.DoubleSupplier;
import java.util.function.Supplier;
import java.util.logging.Logger;

/**
 * The copy side of a {@link SluiceClient}: its session, kept alive in the
 * background over the {@code KeepAlive} stream (renewed every third of its
 * ttl), and the calls on copies.
 *
 * <p>This is the Go client's behaviour ({@code client/limits}; docs/charon.md),
 * with Charon's retry policy and fail-open. Source: charon-paper.md,
 * sections 3.1, 3.2 and 4.3.
 */
final class Sessions {
  private static final Logger log = Logger.getLogger("io.github.sluicerl.sluice");

  /** The most copies one request may ask for: 2^53. */
  static final long MAX_COPIES = 1L << 53;

  /** Codes that are the caller's to fix: never failed open. */
  private static final Set<Status.Code> CLIENT_CODES = EnumSet.of(Status.Code.INVALID_ARGUMENT,
      Status.Code.NOT_FOUND, Status.Code.FAILED_PRECONDITION, Status.Code.UNIMPLEMENTED,
      Status.Code.PERMISSION_DENIED, Status.Code.UNAUTHENTICATED, Status.Code.ALREADY_EXISTS,
      Status.Code.OUT_OF_RANGE);

  final Supplier<String> server;
  final Channels channels;
  final double callTimeout;
  final double sessionTtl;
  final boolean failOpen;
  final double backoffUnit;
  final BiConsumer<String, SluiceException> onSessionLost;
  final ScheduledExecutorService scheduler;
  /**
   * Tests (clients/vectors/retry.json): the retry policy's jitter draw in
   * [0, 1), and the clock (seconds) and sleep of the calls' timeouts and
   * retries; set before the first call. The sessions' keep-alives run on
   * the real clock.
   */
  DoubleSupplier jitter = () -> ThreadLocalRandom.current().nextDouble();
  DoubleSupplier clock = Sessions::mono;
  Sleeper sleeper = s -> Thread.sleep((long) (s * 1e3));

  /** A sleep of seconds. */
  interface Sleeper {
    void sleep(double seconds) throws InterruptedException;
  }

  private Session cur; // guarded by this
  private CountDownLatch opening; // guarded by this
  private volatile boolean closed;

  Sessions(Supplier<String> server, Channels channels, double callTimeout, double sessionTtl, boolean failOpen,
      double backoffUnit, BiConsumer<String, SluiceException> onSessionLost, ScheduledExecutorService scheduler) {
    this.server = server;
    this.channels = channels;
    this.callTimeout = callTimeout;
    this.sessionTtl = sessionTtl;
    this.failOpen = failOpen;
    this.backoffUnit = backoffUnit;
    this.onSessionLost = onSessionLost;
    this.scheduler = scheduler;
  }

  LimitsGrpc.LimitsBlockingStub stub(double timeout) {
    return LimitsGrpc.newBlockingStub(channels.get(server.get()))
        .withDeadlineAfter(Math.max(1, (long) Math.ceil(timeout * 1e6)), TimeUnit.MICROSECONDS);
  }

  /**
   * Whether the call's own timeout (deadline, on clock; NaN: none) has
   * passed: a request that failed then is the caller's to hear, never
   * failed open (a request's own call timeout, DEADLINE_EXCEEDED before it,
   * is the service's). The stub's timeout is rounded up so that it never
   * ends before deadline.
   */
  private boolean expired(double deadline) {
    return !Double.isNaN(deadline) && clock.getAsDouble() >= deadline;
  }

  /** The timeout of one request: the call timeout, within deadline (monotonic seconds; NaN: none). */
  double timeout(double deadline) throws DeadlineExceededException {
    if (Double.isNaN(deadline)) {
      return callTimeout;
    }
    double left = deadline - clock.getAsDouble();
    if (left <= 0) {
      throw new DeadlineExceededException("the call's timeout passed");
    }
    return Math.min(callTimeout, left);
  }

  static double mono() {
    return System.nanoTime() / 1e9;
  }

  static boolean sessionGone(StatusRuntimeException e) {
    if (e.getStatus().getCode() != Status.Code.NOT_FOUND) {
      return false;
    }
    String m = e.getStatus().getDescription() == null ? "" : e.getStatus().getDescription();
    return m.startsWith("session_id:") || m.contains("unknown session");
  }

  /** A session the client opened. */
  final class Session {
    final String id;
    volatile double ttl;
    volatile double acked;
    private SluiceException error; // guarded by this; non-null once ended
    private Context.CancellableContext stream; // guarded by this
    private StreamObserver<KeepAliveRequest> requests; // guarded by this
    private int attempt;
    private final CountDownLatch ended = new CountDownLatch(1);

    Session(String id, double ttl) {
      this.id = id;
      this.ttl = ttl;
      this.acked = mono();
    }

    synchronized SluiceException err() {
      return error;
    }

    /** Ends the session with cause (false if ended already) and cancels its stream. */
    boolean finish(SluiceException cause) {
      Context.CancellableContext c;
      synchronized (this) {
        if (error != null) {
          return false;
        }
        error = cause;
        c = stream;
      }
      ended.countDown();
      if (c != null) {
        c.cancel(null);
      }
      return true;
    }

    double interval() {
      return Math.max(ttl / 3, 0.001);
    }

    /** Opens a keep-alive stream and schedules its renewals. */
    void keepAlive() {
      if (err() != null || closed) {
        return;
      }
      Context.CancellableContext ctx = Context.current().withCancellation();
      boolean[] confirmed = {false};
      StreamObserver<KeepAliveResponse> answers = new StreamObserver<>() {
        @Override
        public void onNext(KeepAliveResponse r) {
          if (r.hasTtl() && Durations.seconds(r.getTtl()) > 0) {
            ttl = Durations.seconds(r.getTtl());
          }
          acked = mono();
          confirmed[0] = true;
        }

        @Override
        public void onError(Throwable t) {
          broken(Status.fromThrowable(t).getCode(), confirmed[0], ctx);
        }

        @Override
        public void onCompleted() {
          broken(Status.Code.OK, confirmed[0], ctx);
        }
      };
      Context prev = ctx.attach();
      StreamObserver<KeepAliveRequest> reqs;
      try {
        reqs = LimitsGrpc.newStub(channels.get(server.get())).keepAlive(answers);
      } finally {
        ctx.detach(prev);
      }
      synchronized (this) {
        if (error != null) {
          ctx.cancel(null);
          return;
        }
        stream = ctx;
        requests = reqs;
      }
      send(reqs);
      schedule(() -> renew(reqs, ctx), interval());
    }

    private void send(StreamObserver<KeepAliveRequest> reqs) {
      try {
        synchronized (this) {
          reqs.onNext(KeepAliveRequest.newBuilder().setSessionId(id).build());
        }
      } catch (RuntimeException e) {
        // the stream broke: onError follows
      }
    }

    private void renew(StreamObserver<KeepAliveRequest> reqs, Context.CancellableContext ctx) {
      if (err() != null || closed || ctx.isCancelled()) {
        return;
      }
      if (mono() - acked >= ttl) {
        ctx.cancel(null);
        lose(this, "not renewed within its ttl (" + ttl + " s)");
        return;
      }
      send(reqs);
      schedule(() -> renew(reqs, ctx), interval());
    }

    private void broken(Status.Code code, boolean confirmed, Context.CancellableContext ctx) {
      ctx.cancel(null);
      if (err() != null || closed) {
        return;
      }
      if (code == Status.Code.NOT_FOUND) {
        lose(this, "the server no longer knows it");
        return;
      }
      if (confirmed) {
        attempt = 0;
      }
      double left = acked + ttl - mono();
      if (left <= 0) {
        lose(this, "not renewed within its ttl (" + ttl + " s)");
        return;
      }
      double wait = attempt > 0 ? Math.min(retryDelay(attempt), left) : 0;
      attempt++;
      schedule(this::keepAlive, wait);
    }
  }

  private void schedule(Runnable r, double seconds) {
    try {
      scheduler.schedule(r, Math.max(0, (long) (seconds * 1e6)), TimeUnit.MICROSECONDS);
    } catch (RejectedExecutionException e) {
      // closing
    }
  }

  /** The paper's jitter(2^i) in backoff units: uniform in [v - v/4, v + v/4) for v = 2^i units. */
  double retryDelay(int i) {
    return retryDelay(backoffUnit, i, jitter.getAsDouble());
  }

  /** The sleep after the i-th rejection for the draw u in [0, 1): v × (0.75 + 0.5 × u), v = unit × 2^min(i, 100). */
  static double retryDelay(double unit, int i, double u) {
    double v = unit * Math.pow(2, Math.min(Math.max(i, 0), 100));
    return v * 0.75 + u * v * 0.5;
  }

  /** The live session, opening one if there is none (one OpenSession at a time). */
  Session session(double deadline) throws SluiceException {
    while (true) {
      CountDownLatch w;
      boolean mine;
      synchronized (this) {
        if (closed) {
          throw new ClosedException("client closed");
        }
        if (cur != null && cur.err() == null) {
          return cur;
        }
        w = opening;
        mine = w == null;
        if (mine) {
          w = new CountDownLatch(1);
          opening = w;
        }
      }
      if (!mine) {
        try {
          if (Double.isNaN(deadline)) {
            w.await();
          } else if (!w.await(Math.max(0, (long) ((deadline - clock.getAsDouble()) * 1e9)), TimeUnit.NANOSECONDS)) {
            throw new DeadlineExceededException("the call's timeout passed");
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new SluiceException(Status.Code.CANCELLED, "interrupted");
        }
        continue;
      }
      Session s;
      try {
        s = open(deadline);
      } finally {
        synchronized (this) {
          opening = null;
        }
        w.countDown();
      }
      boolean wasClosed;
      synchronized (this) {
        wasClosed = closed;
        if (!wasClosed) {
          cur = s;
        }
      }
      if (wasClosed) {
        end(s);
        throw new ClosedException("client closed");
      }
      s.keepAlive();
      return s;
    }
  }

  private Session open(double deadline) throws SluiceException {
    OpenSessionResponse r;
    try {
      r = stub(timeout(deadline))
          .openSession(OpenSessionRequest.newBuilder().setTtl(Durations.proto(sessionTtl)).build());
    } catch (StatusRuntimeException e) {
      throw SluiceException.of(e, "OpenSession");
    }
    if (r.getSessionId().isEmpty()) {
      throw new UnavailableException("OpenSession: an answer without a session_id");
    }
    double ttl = r.hasTtl() ? Durations.seconds(r.getTtl()) : 0;
    return new Session(r.getSessionId(), ttl > 0 ? ttl : sessionTtl);
  }

  void lose(Session s, String cause) {
    SessionLostException err = new SessionLostException("session " + s.id.substring(0, Math.min(8, s.id.length()))
        + "... lost: " + cause);
    if (!s.finish(err)) {
      return;
    }
    synchronized (this) {
      if (cur == s) {
        cur = null;
      }
    }
    log.warning("sluice: session lost, its holds are gone: " + cause);
    if (onSessionLost != null) {
      try {
        onSessionLost.accept(s.id, err);
      } catch (RuntimeException e) {
        log.warning("sluice: onSessionLost failed: " + e);
      }
    }
  }

  /** Ends s (closed) and asks the server to release its holds (best effort, within 2 s). */
  private void end(Session s) {
    if (!s.finish(new ClosedException("client closed: the session's copies were released"))) {
      return;
    }
    try {
      stub(2.0).closeSession(CloseSessionRequest.newBuilder().setSessionId(s.id).build());
    } catch (StatusRuntimeException e) {
      log.fine("sluice: closing the session: " + e);
    }
  }

  void close() {
    Session s;
    synchronized (this) {
      closed = true;
      s = cur;
      cur = null;
    }
    if (s != null) {
      end(s);
    }
  }

  boolean isClosed() {
    return closed;
  }

  static long checkRange(String what, long n, long least) throws InvalidArgumentException {
    if (n < 1 || n > MAX_COPIES) {
      throw new InvalidArgumentException(what + " " + n + " outside [1, 2^53]");
    }
    if (least < 0 || least > n) {
      throw new InvalidArgumentException("min " + what + " " + least + " outside [0, " + n + "]");
    }
    return least == 0 ? n : least;
  }

  Hold reserve(String resource, String domain, long copies, long minCopies, double maxWait, double timeout)
      throws SluiceException {
    long least = checkRange("copies", copies, minCopies);
    if (resource == null || domain == null) {
      throw new InvalidArgumentException("resource and domain must not be null");
    }
    double start = clock.getAsDouble();
    double deadline = Double.isNaN(timeout) ? Double.NaN : start + timeout;
    boolean reopened = false;
    int i = 1;
    while (true) {
      if (closed) {
        throw new ClosedException("client closed");
      }
      Session s;
      try {
        s = session(deadline);
      } catch (ClosedException e) {
        throw e;
      } catch (SluiceException e) {
        if (CLIENT_CODES.contains(e.code()) || expired(deadline)) {
          throw e;
        }
        return failOpen(resource, domain, least, start, i, e); // DEADLINE_EXCEEDED too: the call timeout's
      }
      ReserveRequest req = ReserveRequest.newBuilder().setSessionId(s.id).setResource(resource).setDomain(domain)
          .setCopies(copies).setMinCopies(least).setMaxWait(Durations.proto(0)).build();
      ReserveResponse m;
      try {
        m = stub(timeout(deadline)).reserve(req);
      } catch (StatusRuntimeException e) {
        if (expired(deadline)) {
          throw SluiceException.of(e, "Reserve " + resource + "/" + domain);
        }
        if (CLIENT_CODES.contains(e.getStatus().getCode())) {
          if (sessionGone(e) && !reopened) {
            lose(s, "the server no longer knows it");
            reopened = true;
            continue;
          }
          throw SluiceException.of(e, "Reserve " + resource + "/" + domain);
        }
        return failOpen(resource, domain, least, start, i, SluiceException.of(e, "Reserve"));
      }
      boolean ok = m.getStatus() == ReserveResponse.Status.OK;
      if ((ok && !(least <= m.getGranted() && m.getGranted() <= copies))
          || m.getStatus() == ReserveResponse.Status.STATUS_UNSPECIFIED
          || m.getStatus() == ReserveResponse.Status.UNRECOGNIZED) {
        return failOpen(resource, domain, least, start, i, new UnavailableException(
            "Reserve: an answer with status " + m.getStatus() + " granting " + m.getGranted()));
      }
      double waited = clock.getAsDouble() - start;
      Reservation res = Reservation.of(m);
      if (ok) {
        return new Hold(this, s, resource, domain,
            res.groups().stream().map(Reservation.GroupHolds::name).toList(), m.getGranted(), res,
            Durations.of(waited), i);
      }
      StringBuilder msg = new StringBuilder(resource + "/" + domain + " over limit: not even " + least
          + " copies fit (domain holds " + res.domainHolds() + " of " + res.domainLimit());
      if (res.globalLimit() >= 0) {
        msg.append(", all domains ").append(res.globalHolds()).append(" of ").append(res.globalLimit());
      }
      for (Reservation.GroupHolds g : res.groups()) {
        msg.append(", group ").append(g.name()).append(' ').append(g.holds()).append(" of ").append(g.limit());
      }
      msg.append("); ").append(i).append(" attempts in ").append(String.format("%.3f", waited)).append(" s");
      OverLimitException rej = new OverLimitException(msg.toString(), res, i, Durations.of(waited));
      double d = Math.min(maxWait - waited, retryDelay(i));
      if (d <= 0 || (!Double.isNaN(deadline) && clock.getAsDouble() + d > deadline)) {
        throw rej;
      }
      try {
        sleeper.sleep(d);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new SluiceException(Status.Code.CANCELLED, "interrupted");
      }
      i++;
    }
  }

  private Hold failOpen(String resource, String domain, long least, double start, int i, SluiceException cause)
      throws SluiceException {
    if (!failOpen) {
      throw cause;
    }
    log.warning("sluice: limits service unreachable or failing (" + cause + "); granting " + least + " copies of "
        + resource + "/" + domain + " by itself");
    return new Hold(this, null, resource, domain, java.util.List.of(), least, Reservation.NONE,
        Durations.of(clock.getAsDouble() - start), i);
  }

  Hold seize(String transferId, double timeout) throws SluiceException {
    if (transferId == null || transferId.isEmpty()) {
      throw new InvalidArgumentException("empty transfer id");
    }
    double deadline = Double.isNaN(timeout) ? Double.NaN : clock.getAsDouble() + timeout;
    boolean reopened = false;
    while (true) {
      Session s = session(deadline);
      SeizeResponse m;
      try {
        m = stub(timeout(deadline)).seize(SeizeRequest.newBuilder().setSessionId(s.id).setTransferId(transferId).build());
      } catch (StatusRuntimeException e) {
        if (sessionGone(e) && !reopened) {
          lose(s, "the server no longer knows it");
          reopened = true;
          continue;
        }
        throw SluiceException.of(e, "Seize");
      }
      if (m.getCopies() < 1) {
        throw new UnavailableException("Seize: an answer seizing " + m.getCopies() + " copies");
      }
      return new Hold(this, s, m.getResource(), m.getDomain(), m.getGroupsList(), m.getCopies(), Reservation.NONE,
          java.time.Duration.ZERO, 1);
    }
  }
}
