package io.github.sluicerl.sluice;

import io.grpc.Status;

/** The request does not fit the state ({@code FAILED_PRECONDITION}): the wrong kind of resource, releasing more than is held; {@link ClosedException} for a closed client, handle or hold. */
public class FailedPreconditionException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public FailedPreconditionException(String message) {
    super(Status.Code.FAILED_PRECONDITION, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public FailedPreconditionException(String message, Throwable cause) {
    super(Status.Code.FAILED_PRECONDITION, message, cause);
  }
}
