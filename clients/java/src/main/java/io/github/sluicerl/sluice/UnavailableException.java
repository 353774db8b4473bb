package io.github.sluicerl.sluice;

import io.grpc.Status;

/** The server could not be reached, or could not decide ({@code UNAVAILABLE}). */
public class UnavailableException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public UnavailableException(String message) {
    super(Status.Code.UNAVAILABLE, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public UnavailableException(String message, Throwable cause) {
    super(Status.Code.UNAVAILABLE, message, cause);
  }
}
