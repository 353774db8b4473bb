package io.github.sluicerl.sluice;


/** The session holding a hold's copies ended without the client closing it (its keep-alive stream broke for good, or its ttl passed): the server has released those copies ({@code ABORTED}). */
public class SessionLostException extends AbortedException {
  private static final long serialVersionUID = 1L;

  /** An error with this class's code and {@code message}. */
  public SessionLostException(String message) {
    super(message);
  }

  /** An error with this class's code, {@code message} and its cause. */
  public SessionLostException(String message, Throwable cause) {
    super(message, cause);
  }
}
