package io.github.sluicerl.sluice;

import io.grpc.Status;

/**
 * An error of Sluice's client: a gRPC status {@link #code() code} and a
 * message (the server's, or the client's own for errors found before
 * anything is sent, carrying the code the server would have answered).
 *
 * <p>Sluice's Java client reports failures as this small hierarchy of
 * unchecked exceptions: catch the subclass of the code you care about ({@link InvalidArgumentException},
 * {@link NotFoundException}, {@link AlreadyExistsException},
 * {@link FailedPreconditionException} and its {@link ClosedException},
 * {@link UnavailableException}, {@link DeadlineExceededException},
 * {@link ResourceExhaustedException} and its {@link OverLimitException},
 * {@link AbortedException} and its {@link SessionLostException}); other
 * codes arrive as a plain {@code SluiceException} whose {@link #code()}
 * names them. A rejection over a limit is not an error on the wire:
 * {@link SluiceClient#allow} returns it as a status.
 *
 * <p>Unchecked, as grpc-java's own {@code StatusRuntimeException}: a caller
 * decides where a failure is handled, and {@code close()} methods throw
 * nothing, so try-with-resources needs no catch. Immutable, hence safe to
 * share between threads.
 */
public class SluiceException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status.Code code;

  /**
   * An error with code {@code code} and {@code message}.
   *
   * @throws NullPointerException if {@code code} is null
   */
  public SluiceException(Status.Code code, String message) {
    super(message);
    this.code = java.util.Objects.requireNonNull(code, "code");
  }

  /**
   * An error with code {@code code}, {@code message} and its cause (null: none).
   *
   * @throws NullPointerException if {@code code} is null
   */
  public SluiceException(Status.Code code, String message, Throwable cause) {
    super(message, cause);
    this.code = java.util.Objects.requireNonNull(code, "code");
  }

  /** The gRPC status code; never null. */
  public Status.Code code() {
    return code;
  }

  /** The code's name, as in {@code INVALID_ARGUMENT}. */
  public String codeName() {
    return code.name();
  }

  @Override
  public String toString() {
    return code.name() + ": " + getMessage();
  }

  /**
   * The exception of a failed call: the subclass of its code, its message
   * prefixed with {@code what} (the call, say "Allow").
   */
  static SluiceException of(Throwable t, String what) {
    if (t instanceof SluiceException) {
      return (SluiceException) t;
    }
    Status s = Status.fromThrowable(t);
    String msg = s.getDescription() != null ? s.getDescription() : s.getCode().name();
    if (what != null && !what.isEmpty()) {
      msg = what + ": " + msg;
    }
    return of(s.getCode(), msg, t);
  }

  /** The subclass instance of code. */
  static SluiceException of(Status.Code code, String msg, Throwable cause) {
    switch (code) {
      case INVALID_ARGUMENT:
        return new InvalidArgumentException(msg, cause);
      case NOT_FOUND:
        return new NotFoundException(msg, cause);
      case ALREADY_EXISTS:
        return new AlreadyExistsException(msg, cause);
      case FAILED_PRECONDITION:
        return new FailedPreconditionException(msg, cause);
      case UNAVAILABLE:
        return new UnavailableException(msg, cause);
      case DEADLINE_EXCEEDED:
        return new DeadlineExceededException(msg, cause);
      case RESOURCE_EXHAUSTED:
        return new ResourceExhaustedException(msg, cause);
      case ABORTED:
        return new AbortedException(msg, cause);
      default:
        return new SluiceException(code, msg, cause);
    }
  }
}
