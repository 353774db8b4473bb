package io.github.sluicerl.sluice;

import io.grpc.netty.GrpcSslContexts;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * TLS (and mTLS) settings of a {@link SluiceClient}. Each part is PEM, given
 * as a file or its bytes: {@code rootCertificates} verify the servers (none:
 * the JDK's trust store); {@code certificateChain} and {@code privateKey},
 * when given, are presented to a server that asks for a client certificate
 * ({@code sluice server --tls-client-ca}: mTLS). The key may be PKCS#8
 * ({@code PRIVATE KEY}), SEC 1 ({@code EC PRIVATE KEY}) or PKCS#1 ({@code
 * RSA PRIVATE KEY}), unencrypted. {@code serverName} overrides the name the
 * server's certificate must carry.
 *
 * <pre>{@code
 * Tls tls = Tls.builder().rootCertificates(Path.of("ca.pem"))
 *     .keyPair(Path.of("client.pem"), Path.of("client-key.pem")).build();
 * }</pre>
 */
public final class Tls {
  private final byte[] roots;
  private final byte[] chain;
  private final byte[] key;
  private final String serverName;

  private Tls(Builder b) {
    roots = b.roots;
    chain = b.chain;
    key = b.key;
    serverName = b.serverName;
  }

  /** A builder of TLS settings. */
  public static Builder builder() {
    return new Builder();
  }

  /** The name the server's certificate must carry instead of the address's host, or null. */
  public String serverName() {
    return serverName;
  }

  /** Builds {@link Tls} settings. */
  public static final class Builder {
    private byte[] roots, chain, key;
    private String serverName;

    private Builder() {}

    /** The CA certificates (PEM) that verify the servers. */
    public Builder rootCertificates(byte[] pem) {
      roots = pem.clone();
      return this;
    }

    /** The CA certificates (a PEM file) that verify the servers. */
    public Builder rootCertificates(Path pem) throws IOException {
      return rootCertificates(Files.readAllBytes(pem));
    }

    /** The client's certificate chain and private key (PEM), for mTLS. */
    public Builder keyPair(byte[] certificateChain, byte[] privateKey) {
      chain = certificateChain.clone();
      key = privateKey.clone();
      return this;
    }

    /** The client's certificate chain and private key (PEM files), for mTLS. */
    public Builder keyPair(Path certificateChain, Path privateKey) throws IOException {
      return keyPair(Files.readAllBytes(certificateChain), Files.readAllBytes(privateKey));
    }

    /** The name the server's certificate must carry. */
    public Builder serverName(String name) {
      serverName = name;
      return this;
    }

    /** The settings. */
    public Tls build() {
      return new Tls(this);
    }
  }

  /** Netty's client context of these settings. */
  SslContext sslContext() throws InvalidArgumentException {
    try {
      SslContextBuilder b = GrpcSslContexts.forClient();
      if (roots != null) {
        b.trustManager(certificates(roots).toArray(new X509Certificate[0]));
      }
      if (chain != null) {
        b.keyManager(privateKey(key), certificates(chain).toArray(new X509Certificate[0]));
      }
      try {
        return b.build();
      } catch (UnsupportedOperationException e) {
        // A Netty without the JDK's ALPN (Debian's 4.1.48): the JDK's TLS
        // with Netty's Java 9 engine wrapper.
        return io.netty.handler.ssl.SluiceJdkAlpn.client(jdkContext());
      }
    } catch (GeneralSecurityException | IOException | IllegalArgumentException e) {
      throw new InvalidArgumentException("TLS: " + e.getMessage(), e);
    }
  }

  /** The JDK's TLS context of these settings. */
  private javax.net.ssl.SSLContext jdkContext() throws GeneralSecurityException, IOException {
    javax.net.ssl.TrustManager[] tms = null;
    if (roots != null) {
      java.security.KeyStore ts = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType());
      ts.load(null, null);
      int i = 0;
      for (X509Certificate c : certificates(roots)) {
        ts.setCertificateEntry("ca" + i++, c);
      }
      javax.net.ssl.TrustManagerFactory tmf =
          javax.net.ssl.TrustManagerFactory.getInstance(javax.net.ssl.TrustManagerFactory.getDefaultAlgorithm());
      tmf.init(ts);
      tms = tmf.getTrustManagers();
    }
    javax.net.ssl.KeyManager[] kms = null;
    if (chain != null) {
      java.security.KeyStore ks = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType());
      ks.load(null, null);
      char[] pw = new char[0];
      ks.setKeyEntry("client", privateKey(key), pw, certificates(chain).toArray(new X509Certificate[0]));
      javax.net.ssl.KeyManagerFactory kmf =
          javax.net.ssl.KeyManagerFactory.getInstance(javax.net.ssl.KeyManagerFactory.getDefaultAlgorithm());
      kmf.init(ks, pw);
      kms = kmf.getKeyManagers();
    }
    javax.net.ssl.SSLContext ctx = javax.net.ssl.SSLContext.getInstance("TLS");
    ctx.init(kms, tms, null);
    return ctx;
  }

  private static List<X509Certificate> certificates(byte[] pem) throws GeneralSecurityException {
    CertificateFactory f = CertificateFactory.getInstance("X.509");
    List<X509Certificate> out = new ArrayList<>();
    for (var c : f.generateCertificates(new ByteArrayInputStream(pem))) {
      out.add((X509Certificate) c);
    }
    if (out.isEmpty()) {
      throw new GeneralSecurityException("no certificate in the PEM");
    }
    return out;
  }

  private static final Pattern BLOCK =
      Pattern.compile("-----BEGIN ([A-Z ]+)-----([^-]+)-----END \\1-----");

  /** Reads an unencrypted PKCS#8, SEC 1 (EC) or PKCS#1 (RSA) PEM key. */
  static PrivateKey privateKey(byte[] pem) throws GeneralSecurityException {
    Matcher m = BLOCK.matcher(new String(pem, StandardCharsets.US_ASCII));
    while (m.find()) {
      String type = m.group(1);
      byte[] der = Base64.getMimeDecoder().decode(m.group(2));
      switch (type) {
        case "PRIVATE KEY":
          for (String alg : new String[] {"EC", "RSA", "Ed25519"}) {
            try {
              return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(der));
            } catch (GeneralSecurityException e) {
              // try the next algorithm
            }
          }
          throw new GeneralSecurityException("an unsupported PKCS#8 key");
        case "EC PRIVATE KEY":
          return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(sec1ToPkcs8(der)));
        case "RSA PRIVATE KEY":
          byte[] rsaAlg = {0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00};
          return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(pkcs8(rsaAlg, der)));
        default:
          // skip other blocks (EC PARAMETERS, certificates)
      }
    }
    throw new GeneralSecurityException("no private key in the PEM");
  }

  /** Wraps a SEC 1 ECPrivateKey in PKCS#8, taking the curve from its parameters. */
  private static byte[] sec1ToPkcs8(byte[] der) throws GeneralSecurityException {
    // ECPrivateKey ::= SEQUENCE { version, privateKey OCTET STRING, [0] parameters OID, [1] publicKey }
    int[] p = {0};
    expect(der, p, 0x30);
    readLength(der, p);
    while (p[0] < der.length) {
      int tag = der[p[0]++] & 0xff;
      int len = readLength(der, p);
      if (tag == 0xa0) { // [0] namedCurve
        byte[] oid = java.util.Arrays.copyOfRange(der, p[0], p[0] + len);
        byte[] ecOid = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};
        ByteArrayOutputStream alg = new ByteArrayOutputStream();
        alg.writeBytes(ecOid);
        alg.writeBytes(oid);
        return pkcs8(seq(alg.toByteArray()), der);
      }
      p[0] += len;
    }
    throw new GeneralSecurityException("an EC key without its curve");
  }

  private static void expect(byte[] der, int[] p, int tag) throws GeneralSecurityException {
    if ((der[p[0]++] & 0xff) != tag) {
      throw new GeneralSecurityException("malformed key");
    }
  }

  private static int readLength(byte[] der, int[] p) {
    int b = der[p[0]++] & 0xff;
    if (b < 0x80) {
      return b;
    }
    int n = 0;
    for (int i = 0; i < (b & 0x7f); i++) {
      n = (n << 8) | (der[p[0]++] & 0xff);
    }
    return n;
  }

  private static byte[] tlv(int tag, byte[] body) {
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    o.write(tag);
    int n = body.length;
    if (n < 0x80) {
      o.write(n);
    } else if (n < 0x100) {
      o.write(0x81);
      o.write(n);
    } else {
      o.write(0x82);
      o.write(n >> 8);
      o.write(n & 0xff);
    }
    o.writeBytes(body);
    return o.toByteArray();
  }

  private static byte[] seq(byte[] body) {
    return tlv(0x30, body);
  }

  /** PrivateKeyInfo ::= SEQUENCE { 0, algorithm, OCTET STRING key }. */
  private static byte[] pkcs8(byte[] algorithm, byte[] key) {
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    o.writeBytes(new byte[] {0x02, 0x01, 0x00});
    o.writeBytes(algorithm);
    o.writeBytes(tlv(0x04, key));
    return seq(o.toByteArray());
  }
}
