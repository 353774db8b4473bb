package io.github.sluicerl.sluice;

import io.grpc.ManagedChannel;
import io.grpc.netty.NegotiationType;
import io.grpc.netty.NettyChannelBuilder;
import io.netty.handler.ssl.SslContext;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** The client's channels, one per server address, made on first use and closed together. Thread-safe. */
final class Channels {
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private final SslContext ssl;
  private final String serverName;

  Channels(Tls tls) throws InvalidArgumentException {
    ssl = tls == null ? null : tls.sslContext();
    serverName = tls == null ? null : tls.serverName();
  }

  /** The channel to addr (host:port; a scheme such as http:// is dropped). */
  synchronized ManagedChannel get(String addr) {
    int i = addr.indexOf("://");
    if (i >= 0) {
      addr = addr.substring(i + 3);
    }
    ManagedChannel ch = channels.get(addr);
    if (ch == null) {
      NettyChannelBuilder b = NettyChannelBuilder.forTarget(addr).disableRetry();
      if (ssl != null) {
        b.sslContext(ssl).negotiationType(NegotiationType.TLS);
        if (serverName != null) {
          b.overrideAuthority(serverName);
        }
      } else {
        b.usePlaintext();
      }
      ch = b.build();
      channels.put(addr, ch);
    }
    return ch;
  }

  /** Closes every channel. */
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
