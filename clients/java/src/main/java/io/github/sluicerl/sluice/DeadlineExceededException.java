package io.github.sluicerl.sluice;

import io.grpc.Status;

/** No answer, permit or slot within the timeout ({@code DEADLINE_EXCEEDED}). */
public class DeadlineExceededException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public DeadlineExceededException(String message) {
    super(Status.Code.DEADLINE_EXCEEDED, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public DeadlineExceededException(String message, Throwable cause) {
    super(Status.Code.DEADLINE_EXCEEDED, message, cause);
  }
}
