package io.github.sluicerl.sluice;


/** The client, the resource handle or the hold was closed ({@code FAILED_PRECONDITION}). */
public class ClosedException extends FailedPreconditionException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public ClosedException(String message) {
    super(message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public ClosedException(String message, Throwable cause) {
    super(message, cause);
  }
}
