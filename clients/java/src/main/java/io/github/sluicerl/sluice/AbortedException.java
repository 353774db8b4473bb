package io.github.sluicerl.sluice;

import io.grpc.Status;

/** {@code ABORTED}; {@link SessionLostException} when a hold's session ended. */
public class AbortedException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public AbortedException(String message) {
    super(Status.Code.ABORTED, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public AbortedException(String message, Throwable cause) {
    super(Status.Code.ABORTED, message, cause);
  }
}
