package io.github.sluicerl.sluice;

import io.grpc.Status;

/** The server refused for lack of room ({@code RESOURCE_EXHAUSTED}): too many sessions; {@link OverLimitException} for too few copies free. */
public class ResourceExhaustedException extends SluiceException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public ResourceExhaustedException(String message) {
    super(Status.Code.RESOURCE_EXHAUSTED, message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public ResourceExhaustedException(String message, Throwable cause) {
    super(Status.Code.RESOURCE_EXHAUSTED, message, cause);
  }
}
