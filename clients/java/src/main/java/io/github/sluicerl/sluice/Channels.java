package io.github.sluicerl.sluice;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The client's channels, one per server address, made on first use and
 * closed together, over whichever transport grpc-java finds (grpc-netty or
 * grpc-netty-shaded) with grpc-java's own credentials: TLS ({@link Tls}) or
 * plaintext. Thread-safe.
 */
final class Channels {
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private final ChannelCredentials credentials;
  private final String serverName;

  Channels(Tls tls) {
    credentials = tls == null ? InsecureChannelCredentials.create() : tls.credentials();
    serverName = tls == null ? null : tls.serverName();
  }

  /**
   * The channel to addr (host:port; a scheme such as http:// is dropped).
   * Making one connects nothing yet.
   *
   * @throws InvalidArgumentException when the address or the TLS settings
   *     do not load (a certificate or key grpc-java cannot read)
   * @throws FailedPreconditionException when the transport cannot speak
   *     TLS with HTTP/2 (no ALPN: see docs/java.md)
   */
  synchronized ManagedChannel get(String addr) {
    int i = addr.indexOf("://");
    if (i >= 0) {
      addr = addr.substring(i + 3);
    }
    ManagedChannel ch = channels.get(addr);
    if (ch == null) {
      ManagedChannelBuilder<?> b;
      try {
        b = Grpc.newChannelBuilder(addr, credentials);
      } catch (IllegalArgumentException | io.grpc.ManagedChannelRegistry.ProviderNotFoundException e) {
        throw new InvalidArgumentException("a channel to " + addr + ": " + e.getMessage(), e);
      } catch (UnsupportedOperationException | IllegalStateException e) {
        throw new FailedPreconditionException("TLS: the gRPC transport cannot negotiate HTTP/2 (ALPN): "
            + e.getMessage(), e);
      }
      b.disableRetry();
      if (serverName != null) {
        b.overrideAuthority(serverName);
      }
      ch = b.build();
      channels.put(addr, ch);
    }
    return ch;
  }

  /** Closes every channel, waiting up to 2 s for each. */
  void close() {
    List<ManagedChannel> all;
    synchronized (this) {
      all = new ArrayList<>(channels.values());
      channels.clear();
    }
    for (ManagedChannel ch : all) {
      ch.shutdownNow();
    }
    for (ManagedChannel ch : all) {
      try {
        ch.awaitTermination(2, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }
}
