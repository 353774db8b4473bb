package io.netty.handler.ssl;

import io.netty.handler.codec.http2.Http2SecurityUtil;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;

/**
 * HTTP/2's ALPN on the JDK's own TLS (Java 9+) for Netty builds that lack
 * {@code JdkAlpnApplicationProtocolNegotiator}'s JDK support, as Debian's
 * libnetty-java 4.1.48 does ("JDK provider does not support ALPN
 * protocol"): it wraps each engine in Netty's own {@code Java9SslEngine},
 * as upstream Netty does. It lives in Netty's package because those
 * classes are package-private. Used by Sluice's {@code Tls} only when
 * Netty's public builder refuses; not an API.
 */
public final class SluiceJdkAlpn {
  private SluiceJdkAlpn() {}

  /** A client context over {@code ctx} that negotiates "h2" by ALPN. */
  public static SslContext client(SSLContext ctx) {
    JdkApplicationProtocolNegotiator.SslEngineWrapperFactory wrap =
        (SSLEngine engine, JdkApplicationProtocolNegotiator apn, boolean isServer) ->
            new Java9SslEngine(engine, apn, isServer);
    JdkApplicationProtocolNegotiator apn = new JdkBaseApplicationProtocolNegotiator(wrap,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY, "h2");
    return new JdkSslContext(ctx, true, Http2SecurityUtil.CIPHERS, SupportedCipherSuiteFilter.INSTANCE, apn,
        ClientAuth.NONE, null, false);
  }
}
