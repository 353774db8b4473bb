package io.github.sluicerl.sluice;

import io.grpc.Status;

/** An unknown resource, session, transfer or hold ({@code NOT_FOUND}). */
public class NotFoundException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public NotFoundException(String message) {
    super(Status.Code.NOT_FOUND, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public NotFoundException(String message, Throwable cause) {
    super(Status.Code.NOT_FOUND, message, cause);
  }
}
