package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.ReleaseRequest;
import io.github.sluicerl.sluice.proto.v1.TransferRequest;
import io.github.sluicerl.sluice.proto.v1.TransferResponse;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.logging.Logger;

/**
 * Copies of a copy-limited resource held for a domain in the client's
 * session ({@link SluiceClient#reserveCopies}, {@link SluiceClient#seize}),
 * or granted by the client alone while the server could not be reached
 * ({@link #degraded()}: the server holds nothing for it).
 *
 * <p>Release what you no longer use; {@link #close()} releases what is
 * still held, throwing nothing, so try-with-resources gives copies back
 * when the block ends, as Charon's client did with a {@code with} block,
 * and needs no catch; whatever is not
 * released, the server releases when the session ends (the client closes,
 * or the process dies). Thread-safe; release and transfer are serialised.
 *
 * <p>Source: charon-paper.md, sections 3.1 and 3.2 (implicit release).
 */
public final class Hold implements AutoCloseable {
  private static final Logger log = Logger.getLogger("io.github.sluicerl.sluice");

  private final Sessions sessions;
  private final Sessions.Session session;
  private final String resource;
  private final String domain;
  private final List<String> groups;
  private final Reservation reservation;
  private final Duration waited;
  private final int attempts;
  private long copies; // guarded by this

  Hold(Sessions sessions, Sessions.Session session, String resource, String domain, List<String> groups, long copies,
      Reservation reservation, Duration waited, int attempts) {
    this.sessions = sessions;
    this.session = session;
    this.resource = resource;
    this.domain = domain;
    this.groups = List.copyOf(groups);
    this.copies = copies;
    this.reservation = reservation;
    this.waited = waited;
    this.attempts = attempts;
  }

  /** The copy-limited resource. */
  public String resource() {
    return resource;
  }

  /** The domain the copies are held for. */
  public String domain() {
    return domain;
  }

  /** The domain's groups whose pools the copies count against. */
  public List<String> groups() {
    return groups;
  }

  /** The context of the server's answer (limits and holds; none for a seized or degraded hold). */
  public Reservation reservation() {
    return reservation;
  }

  /** How long the reserve took, retries included ({@link Duration#ZERO} for a seized hold). */
  public Duration waited() {
    return waited;
  }

  /** How many reserves were sent (1 for a seized hold). */
  public int attempts() {
    return attempts;
  }

  /** The copies held now: granted or seized, less those released or transferred; 0 once the session ended. */
  public synchronized long copies() {
    return err() != null ? 0 : copies;
  }

  /** True for a hold the client granted by itself (failing open): the server holds nothing for it. */
  public boolean degraded() {
    return session == null;
  }

  /** The id of the session holding the copies ("" when degraded). Whoever knows it may release them: keep it private. */
  public String sessionId() {
    return session == null ? "" : session.id;
  }

  /**
   * Null while the hold's session is live; once it has ended, a {@link
   * SessionLostException} (the copies are gone) or a {@link ClosedException}
   * (the client released them).
   */
  public SluiceException err() {
    return session == null ? null : session.err();
  }

  private void check(String op, long n) {
    if (n < 1) {
      throw new InvalidArgumentException(op + " of " + n + " copies of " + resource + "/" + domain + "; at least 1");
    }
    SluiceException e = err();
    if (e instanceof SessionLostException) {
      throw new SessionLostException(op + " of " + resource + "/" + domain + ": " + e.getMessage());
    }
    if (e != null) {
      throw new ClosedException(op + " of " + resource + "/" + domain + ": " + e.getMessage());
    }
    if (n > copies) {
      throw new FailedPreconditionException(
          op + " of " + n + " copies of " + resource + "/" + domain + "; the hold has " + copies);
    }
  }

  private SluiceException failed(String op, StatusRuntimeException e) {
    if (Sessions.sessionGone(e) && session != null) {
      sessions.lose(session, "the server no longer knows it");
      SluiceException err = err();
      if (err != null) {
        return new SessionLostException(op + " of " + resource + "/" + domain + ": " + err.getMessage());
      }
    }
    return SluiceException.of(e, op + " of " + resource + "/" + domain);
  }

  /**
   * Gives back every copy still held; see {@link #release(long)}, whose
   * exceptions it throws. Nothing held does nothing.
   */
  public synchronized void release() {
    if (copies == 0) {
      return;
    }
    release(copies);
  }

  /**
   * Gives back {@code n} of the copies held (partial releases allowed).
   *
   * @throws InvalidArgumentException for fewer than 1
   * @throws FailedPreconditionException for more than held (nothing sent)
   * @throws SessionLostException or {@link ClosedException} once the session ended
   * @throws SluiceException the server's error; when it did not answer
   *     ({@link UnavailableException}) the copies stay counted here and the
   *     server releases them at the latest when the session ends
   */
  public synchronized void release(long n) {
    check("release", n);
    if (session == null) {
      copies -= n;
      return;
    }
    ReleaseRequest req = ReleaseRequest.newBuilder().setSessionId(session.id).setResource(resource).setDomain(domain)
        .setCopies(n).addAllGroups(groups).build();
    try {
      sessions.stub(sessions.callTimeout).release(req);
    } catch (StatusRuntimeException e) {
      throw failed("release", e);
    }
    copies -= n;
  }

  /**
   * Stages {@code n} of the copies held for another session to seize
   * ({@link SluiceClient#seize}, usually in another process: send it the
   * id) and returns the transfer id. The copies leave this hold; the server
   * releases them if nobody seizes them within {@code ttl} (null: the
   * server's default, 30 s; zero too).
   *
   * @throws InvalidArgumentException for a negative {@code ttl}, or as {@link #release(long)}
   * @throws FailedPreconditionException for a degraded hold; otherwise as {@link #release(long)}
   */
  public synchronized String transfer(long n, Duration ttl) {
    if (ttl != null && ttl.isNegative()) {
      throw new InvalidArgumentException("transfer ttl " + ttl + " is negative");
    }
    if (session == null) {
      throw new FailedPreconditionException(
          "transfer of " + resource + "/" + domain + ": a degraded hold; the server holds nothing");
    }
    check("transfer", n);
    TransferRequest.Builder req = TransferRequest.newBuilder().setSessionId(session.id).setResource(resource)
        .setDomain(domain).setCopies(n).addAllGroups(groups);
    if (ttl != null && !ttl.isZero()) {
      req.setTtl(Durations.proto(ttl));
    }
    TransferResponse r;
    try {
      r = sessions.stub(sessions.callTimeout).transfer(req.build());
    } catch (StatusRuntimeException e) {
      throw failed("transfer", e);
    }
    if (r.getTransferId().isEmpty()) {
      throw new UnavailableException("Transfer: an answer without a transfer_id");
    }
    copies -= n;
    return r.getTransferId();
  }

  /**
   * Releases every copy still held ({@link #release()}), for
   * try-with-resources, throwing nothing: when the session has ended the
   * copies are gone already ({@link #err()} says why), and a release the
   * server did not answer is logged (it releases them at the latest when
   * the session ends).
   */
  @Override
  public void close() {
    if (err() != null) {
      return;
    }
    try {
      release();
    } catch (SluiceException e) {
      log.warning("sluice: releasing " + this + " on close failed (the server releases the copies when the"
          + " session ends): " + e);
    }
  }

  @Override
  public String toString() {
    return "Hold[" + resource + "/" + domain + ", copies " + copies() + (degraded() ? ", degraded" : "") + "]";
  }
}
