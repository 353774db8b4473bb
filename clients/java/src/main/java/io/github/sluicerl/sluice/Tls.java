package io.github.sluicerl.sluice;

import io.grpc.ChannelCredentials;
import io.grpc.TlsChannelCredentials;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Objects;

/**
 * TLS (and mTLS) settings of a {@link SluiceClient}, carried out by
 * grpc-java's own {@link TlsChannelCredentials}. Each part is PEM, given as
 * a file or its bytes: {@code rootCertificates} verify the servers (none:
 * the JVM's default trust store); {@code certificateChain} and {@code
 * privateKey}, when given, are presented to a server that asks for a client
 * certificate ({@code sluice server --tls-client-ca}: mTLS). The key may be
 * PKCS#8 ({@code PRIVATE KEY}), SEC 1 ({@code EC PRIVATE KEY}, as {@code
 * sluice}'s own tooling writes) or PKCS#1 ({@code RSA PRIVATE KEY}),
 * unencrypted. {@code serverName} overrides the name the server's
 * certificate must carry.
 *
 * <pre>{@code
 * Tls tls = Tls.builder().rootCertificates(Path.of("ca.pem"))
 *     .keyPair(Path.of("client.pem"), Path.of("client-key.pem")).build();
 * }</pre>
 *
 * <p>Immutable and thread-safe; the builder is not thread-safe. The
 * certificates are parsed when the client is built ({@link
 * SluiceClient.Builder#build()}), which reports bad ones.
 */
public final class Tls {
  private final byte[] roots;
  private final byte[] chain;
  private final byte[] key; // PKCS#8 PEM
  private final String serverName;

  private Tls(Builder b) {
    roots = b.roots;
    chain = b.chain;
    key = b.key == null ? null : PemKeys.pkcs8(b.key);
    serverName = b.serverName;
  }

  /** A builder of TLS settings with nothing set: the JVM's trust store, no client certificate. */
  public static Builder builder() {
    return new Builder();
  }

  /** The name the server's certificate must carry instead of the address's host, or null (the host). */
  public String serverName() {
    return serverName;
  }

  /** Builds {@link Tls} settings. Not thread-safe. */
  public static final class Builder {
    private byte[] roots, chain, key;
    private String serverName;

    private Builder() {}

    /**
     * The CA certificates (PEM, one or more) that verify the servers,
     * instead of the JVM's trust store.
     *
     * @throws NullPointerException if {@code pem} is null
     */
    public Builder rootCertificates(byte[] pem) {
      roots = pem.clone();
      return this;
    }

    /**
     * The CA certificates (a PEM file) that verify the servers, read now.
     *
     * @throws IOException if the file cannot be read
     */
    public Builder rootCertificates(Path pem) throws IOException {
      return rootCertificates(Files.readAllBytes(pem));
    }

    /**
     * The client's certificate chain (PEM, its own certificate first) and
     * private key (PEM: PKCS#8, SEC 1 or PKCS#1, unencrypted), for mTLS.
     *
     * @throws NullPointerException if either is null
     */
    public Builder keyPair(byte[] certificateChain, byte[] privateKey) {
      chain = certificateChain.clone();
      key = privateKey.clone();
      return this;
    }

    /**
     * The client's certificate chain and private key (PEM files), for
     * mTLS, read now.
     *
     * @throws IOException if a file cannot be read
     */
    public Builder keyPair(Path certificateChain, Path privateKey) throws IOException {
      return keyPair(Files.readAllBytes(certificateChain), Files.readAllBytes(privateKey));
    }

    /** The name the server's certificate must carry (null: the host of the address dialled). */
    public Builder serverName(String name) {
      serverName = name;
      return this;
    }

    /**
     * The settings.
     *
     * @throws InvalidArgumentException when the private key is not an
     *     unencrypted PEM key of a form named above
     */
    public Tls build() {
      try {
        return new Tls(this);
      } catch (IllegalArgumentException e) {
        throw new InvalidArgumentException("TLS private key: " + e.getMessage(), e);
      }
    }
  }

  /** grpc-java's credentials of these settings. */
  ChannelCredentials credentials() {
    TlsChannelCredentials.Builder b = TlsChannelCredentials.newBuilder();
    try {
      if (roots != null) {
        b.trustManager(new ByteArrayInputStream(roots));
      }
      if (chain != null) {
        b.keyManager(new ByteArrayInputStream(chain), new ByteArrayInputStream(Objects.requireNonNull(key)));
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e); // reading a byte array does not fail
    }
    return b.build();
  }
}
