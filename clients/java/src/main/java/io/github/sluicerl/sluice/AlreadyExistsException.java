package io.github.sluicerl.sluice;

import io.grpc.Status;

/** {@code ALREADY_EXISTS}. */
public class AlreadyExistsException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public AlreadyExistsException(String message) {
    super(Status.Code.ALREADY_EXISTS, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public AlreadyExistsException(String message, Throwable cause) {
    super(Status.Code.ALREADY_EXISTS, message, cause);
  }
}
