package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.quotaservice.QuotaServiceGrpc;
import io.github.sluicerl.sluice.proto.v1.AllowRequest;
import io.github.sluicerl.sluice.proto.v1.AllowResponse;
import io.github.sluicerl.sluice.proto.v1.LimitsGrpc;
import io.grpc.StatusRuntimeException;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BiConsumer;
import java.util.function.DoubleSupplier;

/**
 * A client of Sluice servers for its three client-side jobs: leases
 * enforced locally ({@link #resource}), server-side limits ({@link
 * #allow}, {@link #quotaAllow}) and copy-limited sessions ({@link
 * #reserveCopies}, {@link #seize}). One per process; thread-safe;
 * {@link AutoCloseable}: {@link #close()} gives back every lease and
 * closes the session (the server releases every copy it held).
 *
 * <pre>{@code
 * try (SluiceClient client = SluiceClient.builder("127.0.0.1:15000").build()) {
 *   Resource replica = client.resource("db/replica", 20);   // 20 queries per second
 *   RateLimiter limiter = replica.rateLimiter(Duration.ofMillis(100)); // follows the lease
 *   limiter.acquire();                                        // never waits on the network
 * }
 * }</pre>
 *
 * <p>Nothing is sent until used: the refresh thread starts with the first
 * {@link #resource}, the session with the first {@link #reserveCopies}.
 * Each RPC is bounded by the call timeout (1 s by default). Errors are the
 * unchecked {@link SluiceException} hierarchy, carrying the gRPC code;
 * {@link #close()} throws nothing.
 */
public final class SluiceClient implements AutoCloseable {
  private static final AtomicInteger CLIENTS = new AtomicInteger();

  private final String id;
  private final Channels channels;
  private final double callTimeout;
  private final Leases leases;
  private final Sessions sessions;
  private final ScheduledExecutorService scheduler;
  private final AtomicBoolean closed = new AtomicBoolean();

  private SluiceClient(Builder b) {
    if (b.addresses.isEmpty()) {
      throw new InvalidArgumentException("no server address");
    }
    if (b.clientId != null && b.clientId.isEmpty()) {
      throw new InvalidArgumentException("empty client id");
    }
    if (!(b.callTimeout > 0) || !(b.sessionTtl > 0) || !(b.backoffUnit > 0)) {
      throw new InvalidArgumentException("callTimeout, sessionTtl and backoffUnit must be > 0");
    }
    id = b.clientId != null ? b.clientId : newClientId();
    channels = new Channels(b.tls);
    channels.get(b.addresses.get(0)); // loads the TLS settings now, reporting bad ones from build()
    callTimeout = b.callTimeout;
    ScheduledThreadPoolExecutor ex = new ScheduledThreadPoolExecutor(1, r -> {
      Thread t = new Thread(r, "sluice-" + id);
      t.setDaemon(true);
      return t;
    });
    ex.setRemoveOnCancelPolicy(true);
    scheduler = ex;
    leases = new Leases(id, List.copyOf(b.addresses), channels, b.mode, b.push, b.clock, b.manual, scheduler);
    sessions = new Sessions(leases::server, channels, b.callTimeout, b.sessionTtl, b.failOpen, b.backoffUnit,
        b.onSessionLost, scheduler);
  }

  private static String newClientId() {
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (Exception e) {
      host = "localhost";
    }
    return host + ":" + ProcessHandle.current().pid() + ":" + CLIENTS.incrementAndGet();
  }

  /**
   * A builder of a client of {@code addresses}: "host:port" or several
   * ("a:15000,b:15000"): the client talks to the first and moves on (to the
   * master that {@code Discovery} names, or the next address) when one
   * fails or redirects it. Blank entries are skipped; none left fails in
   * {@link Builder#build()}.
   *
   * @throws NullPointerException if {@code addresses} is null
   */
  public static Builder builder(String addresses) {
    return new Builder(addresses);
  }

  /** Options of a {@link SluiceClient}; every one has a default. Not thread-safe. */
  public static final class Builder {
    private final List<String> addresses = new ArrayList<>();
    private String clientId;
    private Tls tls;
    private Mode mode = Mode.SAFE;
    private boolean push = true;
    private double callTimeout = 1.0;
    private double sessionTtl = 10.0;
    private boolean failOpen = true;
    private double backoffUnit = 1.0;
    private BiConsumer<String, SluiceException> onSessionLost;
    private DoubleSupplier clock = () -> {
      Instant i = Instant.now();
      return i.getEpochSecond() + i.getNano() / 1e9;
    };
    private boolean manual;

    private Builder(String addrs) {
      for (String a : addrs.split(",")) {
        if (!a.isBlank()) {
          addresses.add(a.strip());
        }
      }
    }

    /** The name of this client to the servers (null, the default: "host:pid:n"; empty fails in {@link #build()}). */
    public Builder clientId(String id) {
      clientId = id;
      return this;
    }

    /** Speak TLS (and mTLS with a key pair); null, the default, speaks plaintext. */
    public Builder tls(Tls t) {
      tls = t;
      return this;
    }

    /**
     * What a resource falls back to while its lease has expired (default {@link Mode#SAFE}).
     *
     * @throws NullPointerException if {@code m} is null
     */
    public Builder mode(Mode m) {
      mode = java.util.Objects.requireNonNull(m, "mode");
      return this;
    }

    /** Whether to keep a {@code sluice.v1.Leases/Watch} stream open for pushed leases (default true; false: poll only). */
    public Builder push(boolean p) {
      push = p;
      return this;
    }

    /**
     * How long each request of limits and copies may take (default 1 s;
     * zero or negative fails in {@link #build()}).
     *
     * @throws NullPointerException if {@code d} is null
     */
    public Builder callTimeout(Duration d) {
      callTimeout = Durations.seconds(d);
      return this;
    }

    /**
     * The ttl asked for the session holding copies (default 10 s; zero or
     * negative fails in {@link #build()}): the server ends it that long
     * after the last keep-alive, which the client sends every third of it.
     *
     * @throws NullPointerException if {@code d} is null
     */
    public Builder sessionTtl(Duration d) {
      sessionTtl = Durations.seconds(d);
      return this;
    }

    /** Whether a reserve the server cannot answer is granted its minimum by the client alone (default true, as Charon's). */
    public Builder failOpen(boolean f) {
      failOpen = f;
      return this;
    }

    /**
     * The unit of the copies' retry policy's sleeps (default 1 s; zero or
     * negative fails in {@link #build()}).
     *
     * @throws NullPointerException if {@code d} is null
     */
    public Builder backoffUnit(Duration d) {
      backoffUnit = Durations.seconds(d);
      return this;
    }

    /**
     * Called with the session id and the error when a session ends without
     * the client closing it (null, the default: nobody is told; the holds'
     * {@link Hold#err()} still say). It runs on the client's scheduler
     * thread and should return promptly.
     */
    public Builder onSessionLost(BiConsumer<String, SluiceException> f) {
      onSessionLost = f;
      return this;
    }

    /** Tests: the wall clock leases' expiry times are read on, moved by hand. */
    Builder clock(Clock c) {
      clock = () -> {
        Instant i = c.instant();
        return i.getEpochSecond() + i.getNano() / 1e9;
      };
      return this;
    }

    /** Tests: a clock in Unix seconds, and no background threads (the test steps the refresh). */
    Builder manual(DoubleSupplier c) {
      clock = c;
      manual = true;
      return this;
    }

    /**
     * The client. It sends nothing yet; it may be built once per builder
     * state, and the builder may be reused.
     *
     * @throws InvalidArgumentException for no address, an empty client id,
     *     non-positive timeouts, or TLS settings that do not load
     * @throws FailedPreconditionException when the gRPC transport cannot
     *     speak TLS with HTTP/2 (no ALPN; see docs/java.md)
     */
    public SluiceClient build() {
      return new SluiceClient(this);
    }
  }

  /** The client id: the builder's, or "host:pid:n". */
  public String id() {
    return id;
  }

  /** The address the client talks to now: the first configured until a failure or a redirect moves it. */
  public String server() {
    return leases.server();
  }

  Leases leases() {
    return leases;
  }

  private void checkOpen() {
    if (closed.get()) {
      throw new ClosedException("client closed");
    }
  }

  /**
   * {@link #resource(String, double, int)} in priority band 0.
   *
   * @throws InvalidArgumentException for an empty id, or wants negative or not finite
   * @throws ClosedException once closed
   */
  public Resource resource(String resourceId, double wants) {
    return resource(resourceId, wants, 0);
  }

  /**
   * A handle on resource {@code resourceId} asking for {@code wants} (the
   * resource's unit: permits per second for a rate, slots for a gauge) in
   * priority band {@code priority} (higher is more important). The first
   * handle of an id registers it and sends it at once; until the first
   * lease arrives its capacity is the fallback of the mode (0 in SAFE mode
   * before the server named a safe capacity). Further handles of the id
   * share its lease and add their wants.
   *
   * @throws InvalidArgumentException for an empty id, wants negative or not
   *     finite, or a priority other than the one the id is held at
   * @throws ClosedException once closed
   */
  public Resource resource(String resourceId, double wants, int priority) {
    checkOpen();
    return leases.resource(resourceId, wants, priority);
  }

  /**
   * Turns the kill switch on or off: while on, every resource's capacity is
   * infinite (limiters and gauges admit everything) whatever the leases
   * say; the leases are still refreshed, so turning it off restores them at
   * once. Thread-safe; the limiters and gauges bound to the resources are
   * told on the calling thread. Source: charon-paper.md, section 4.3.
   */
  public void setKillSwitch(boolean on) {
    leases.setKillSwitch(on);
  }

  /**
   * {@link #allow(String, String, long, long, Duration)} of {@code tokens},
   * all or nothing, with the bucket's own wait.
   *
   * @throws InvalidArgumentException for a malformed request (the server names the field)
   * @throws UnavailableException when the server cannot decide or be reached
   * @throws DeadlineExceededException when no answer came within the call timeout
   * @throws ClosedException once closed
   */
  public Allowance allow(String resource, String domain, long tokens) {
    return allow(resource, domain, tokens, 0, null);
  }

  /**
   * Asks {@code sluice.v1.Limits/Allow} for {@code tokens} of the bucket of
   * ({@code resource}, {@code domain}): the most in [{@code minTokens},
   * {@code tokens}] (0: all or nothing), waiting at most {@code maxWait}
   * for them (null: the bucket's own wait timeout; it may lower it, never
   * raise it; {@link Duration#ZERO}: no wait). An over-limit answer is a
   * status, not an exception; use granted tokens after {@link
   * Allowance#waitTime()}. Thread-safe; one RPC bounded by the call timeout.
   *
   * @throws InvalidArgumentException for a malformed request (the server
   *     names the field), or a negative {@code maxWait}
   * @throws UnavailableException when the server cannot decide or be reached
   * @throws DeadlineExceededException when no answer came within the call timeout
   * @throws ClosedException once closed
   */
  public Allowance allow(String resource, String domain, long tokens, long minTokens, Duration maxWait) {
    checkOpen();
    AllowRequest.Builder req =
        AllowRequest.newBuilder().setResource(resource).setDomain(domain).setTokens(tokens).setMinTokens(minTokens);
    if (maxWait != null) {
      if (maxWait.isNegative()) {
        throw new InvalidArgumentException("maxWait " + maxWait + " is negative");
      }
      req.setMaxWait(Durations.proto(maxWait));
    }
    AllowResponse r;
    try {
      r = LimitsGrpc.newBlockingStub(channels.get(server()))
          .withDeadlineAfter((long) (callTimeout * 1e6), TimeUnit.MICROSECONDS).allow(req.build());
    } catch (StatusRuntimeException e) {
      throw SluiceException.of(e, "Allow " + resource + "/" + domain);
    }
    return new Allowance(r.getStatus().name(), r.getGranted(), Durations.of(r.getWait()),
        r.hasRetryAfter() ? Optional.of(Durations.of(r.getRetryAfter())) : Optional.empty(), r.getRemaining(),
        r.getLimit(), r);
  }

  /**
   * Asks the quota service's {@code quotaservice.QuotaService/Allow} for
   * {@code tokens} of bucket {@code bucket} in {@code namespace} (Square's
   * wire protocol), waiting at most {@code maxWait} (null: the bucket's own
   * maximum wait; sent to the millisecond). Every answer is a status ({@code
   * REJECTED_INVALID_REQUEST} for a malformed request); RPC failures throw.
   * Thread-safe; one RPC bounded by the call timeout.
   *
   * @throws UnavailableException when the server cannot be reached
   * @throws DeadlineExceededException when no answer came within the call timeout
   * @throws ClosedException once closed
   */
  public QuotaAllowance quotaAllow(String namespace, String bucket, long tokens, Duration maxWait) {
    checkOpen();
    var req = io.github.sluicerl.sluice.proto.quotaservice.AllowRequest.newBuilder().setNamespace(namespace)
        .setBucketName(bucket).setTokensRequested(tokens);
    if (maxWait != null) {
      req.setMaxWaitTimeOverride(true).setMaxWaitMillisOverride(maxWait.toMillis());
    }
    io.github.sluicerl.sluice.proto.quotaservice.AllowResponse r;
    try {
      r = QuotaServiceGrpc.newBlockingStub(channels.get(server()))
          .withDeadlineAfter((long) (callTimeout * 1e6), TimeUnit.MICROSECONDS).allow(req.build());
    } catch (StatusRuntimeException e) {
      throw SluiceException.of(e, "QuotaService.Allow " + namespace + "/" + bucket);
    }
    return new QuotaAllowance(r.getStatus().name(), r.getTokensGranted(), Duration.ofMillis(r.getWaitMillis()));
  }

  /**
   * Holds copies of the copy-limited {@code resource} for {@code domain} in
   * the client's session (opened on first use, kept alive in the
   * background): the most in [{@code minCopies}, {@code copies}] (0: all of
   * them) that the domain's limit, its groups' limits and the global limit
   * allow. On a rejection it asks again with Charon's retry policy — after
   * the i-th, sleep min(maxWait − elapsed, jitter(2^i)) backoff units —
   * until {@code maxWait} has passed (zero or null: ask once), then throws
   * {@link OverLimitException}. {@code timeout} (null: none) bounds the
   * whole call. With fail-open, a server that cannot be reached yields a
   * {@link Hold#degraded() degraded} hold of {@code minCopies}. Use the
   * hold in try-with-resources: leaving the block releases what is still
   * held. Thread-safe; it blocks for the requests and the retry sleeps.
   *
   * @throws InvalidArgumentException for {@code copies} outside [1, 2^53],
   *     {@code minCopies} outside [0, copies], or a null resource or domain
   * @throws NotFoundException for an unknown resource
   * @throws FailedPreconditionException for a rate-limited one
   * @throws OverLimitException when not even {@code minCopies} fit by the end of {@code maxWait}
   * @throws UnavailableException when the server cannot be reached and fail-open is off
   * @throws DeadlineExceededException when {@code timeout} passed
   * @throws ClosedException once closed
   */
  public Hold reserveCopies(String resource, String domain, long copies, long minCopies, Duration maxWait,
      Duration timeout) {
    checkOpen();
    double mw = maxWait == null ? 0 : Durations.seconds(maxWait);
    double to = timeout == null ? Double.NaN : Durations.seconds(timeout);
    return sessions.reserve(resource, domain, copies, minCopies, mw, to);
  }

  /**
   * {@link #reserveCopies(String, String, long, long, Duration, Duration)}
   * with no timeout; it throws as that does.
   */
  public Hold reserveCopies(String resource, String domain, long copies, long minCopies, Duration maxWait) {
    return reserveCopies(resource, domain, copies, minCopies, maxWait, null);
  }

  /**
   * {@link #reserveCopies(String, String, long, long, Duration, Duration)}
   * of {@code copies}, all of them, asked once; it throws as that does.
   */
  public Hold reserveCopies(String resource, String domain, long copies) {
    return reserveCopies(resource, domain, copies, 0, null, null);
  }

  /**
   * Takes the copies of a transfer staged by {@link Hold#transfer} (usually
   * in another process) into the client's session, once, within {@code
   * timeout} (null: the call timeout for each request). Thread-safe.
   *
   * @throws InvalidArgumentException for an empty transfer id
   * @throws NotFoundException for a transfer that does not exist, was seized already or expired
   * @throws UnavailableException when the server cannot be reached
   * @throws DeadlineExceededException when {@code timeout} passed
   * @throws ClosedException once closed
   */
  public Hold seize(String transferId, Duration timeout) {
    checkOpen();
    return sessions.seize(transferId, timeout == null ? Double.NaN : Durations.seconds(timeout));
  }

  /**
   * Closes the client: gives back every lease (one {@code ReleaseCapacity},
   * best effort, within 2 s; every resource's capacity becomes 0), closes
   * the session (the server releases every copy it held), stops the
   * background threads and closes the channels. It throws nothing: a
   * failure to tell the server is logged, and the server lets the leases
   * expire and ends the session after its ttl. Closing twice does nothing.
   * Thread-safe; it blocks up to a few seconds for the server.
   */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) {
      return;
    }
    try {
      leases.close(2.0);
      sessions.close();
    } finally {
      scheduler.shutdownNow();
      channels.close();
    }
  }

  @Override
  public String toString() {
    return "SluiceClient[id=" + id + ", server=" + server() + "]";
  }
}
