package io.github.sluicerl.sluice;

import io.grpc.Status;

/** A malformed request ({@code INVALID_ARGUMENT}): an empty id, wants that are negative or not finite, a bad name. */
public class InvalidArgumentException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public InvalidArgumentException(String message) {
    super(Status.Code.INVALID_ARGUMENT, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public InvalidArgumentException(String message, Throwable cause) {
    super(Status.Code.INVALID_ARGUMENT, message, cause);
  }
}
