package io.github.sluicerl.sluice;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A PEM private key as PKCS#8, the one form grpc-java's TLS credentials
 * can read: grpc-java hands the key to Netty's PEM reader, which decodes
 * every {@code ... PRIVATE KEY} block as PKCS#8 (Netty 4.1.48, which
 * Debian's grpc-java 1.41 runs on; upstream Netty reads other forms only
 * with Bouncy Castle on the classpath). {@code sluice}'s own tooling (Go's
 * {@code x509.MarshalECPrivateKey}) and OpenSSL's traditional format write
 * SEC 1 ({@code EC PRIVATE KEY}) and PKCS#1 ({@code RSA PRIVATE KEY}), so
 * this rewraps those two in PKCS#8 (RFC 5208's PrivateKeyInfo: an algorithm
 * identifier around the same key bytes). It is the one place where Sluice
 * reads key structure itself; a PKCS#8 key passes through unchanged.
 * Stateless.
 */
final class PemKeys {
  private PemKeys() {}

  private static final Pattern BLOCK =
      Pattern.compile("-----BEGIN ([A-Z0-9 ]+)-----([^-]*)-----END \\1-----");
  /** rsaEncryption (1.2.840.113549.1.1.1) with NULL parameters. */
  private static final byte[] RSA_ALGORITHM = {0x30, 0x0d, 0x06, 0x09, 0x2a, (byte) 0x86, 0x48, (byte) 0x86,
      (byte) 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00};
  /** id-ecPublicKey (1.2.840.10045.2.1); the curve follows. */
  private static final byte[] EC_OID = {0x06, 0x07, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01};

  /**
   * The first private key of {@code pem} as a PKCS#8 PEM block ({@code
   * -----BEGIN PRIVATE KEY-----}); other blocks (certificates, {@code EC
   * PARAMETERS}) are skipped.
   *
   * @throws IllegalArgumentException when {@code pem} holds no unencrypted
   *     PKCS#8, SEC 1 or PKCS#1 private key, or a malformed one
   */
  static byte[] pkcs8(byte[] pem) {
    Matcher m = BLOCK.matcher(new String(pem, StandardCharsets.US_ASCII));
    while (m.find()) {
      String type = m.group(1);
      byte[] der;
      switch (type) {
        case "PRIVATE KEY":
          return m.group().getBytes(StandardCharsets.US_ASCII);
        case "EC PRIVATE KEY":
          der = decode(m.group(2));
          return pem(wrap(ecAlgorithm(der), der));
        case "RSA PRIVATE KEY":
          der = decode(m.group(2));
          return pem(wrap(RSA_ALGORITHM, der));
        case "ENCRYPTED PRIVATE KEY":
          throw new IllegalArgumentException("an encrypted private key; Sluice reads unencrypted keys only");
        default:
          // not a key: skip
      }
    }
    throw new IllegalArgumentException("no PEM private key (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY)");
  }

  private static byte[] decode(String base64) {
    return Base64.getMimeDecoder().decode(base64);
  }

  private static byte[] pem(byte[] der) {
    String b64 = Base64.getMimeEncoder(64, new byte[] {'\n'}).encodeToString(der);
    String pem = "-----BEGIN PRIVATE KEY-----\n" + b64 + "\n-----END PRIVATE KEY-----\n";
    return pem.getBytes(StandardCharsets.US_ASCII);
  }

  /**
   * The PKCS#8 algorithm identifier of a SEC 1 ECPrivateKey ::= SEQUENCE {
   * version, privateKey OCTET STRING, [0] parameters (the curve's OID),
   * [1] publicKey }: id-ecPublicKey and the curve.
   */
  private static byte[] ecAlgorithm(byte[] der) {
    int[] p = {0};
    if (der.length < 2 || (der[p[0]++] & 0xff) != 0x30) {
      throw new IllegalArgumentException("a malformed EC private key");
    }
    int end = length(der, p) + p[0];
    while (p[0] < Math.min(end, der.length)) {
      int tag = der[p[0]++] & 0xff;
      int len = length(der, p);
      if (len < 0 || p[0] + len > der.length) {
        break;
      }
      if (tag == 0xa0) {
        ByteArrayOutputStream alg = new ByteArrayOutputStream();
        alg.writeBytes(EC_OID);
        alg.writeBytes(Arrays.copyOfRange(der, p[0], p[0] + len));
        return tlv(0x30, alg.toByteArray());
      }
      p[0] += len;
    }
    throw new IllegalArgumentException("an EC private key without its curve, or a malformed one");
  }

  /** A DER length at p (moved past it); -1 for a malformed one. */
  private static int length(byte[] der, int[] p) {
    if (p[0] >= der.length) {
      return -1;
    }
    int b = der[p[0]++] & 0xff;
    if (b < 0x80) {
      return b;
    }
    int n = b & 0x7f;
    if (n == 0 || n > 3 || p[0] + n > der.length) {
      return -1;
    }
    int len = 0;
    for (int i = 0; i < n; i++) {
      len = (len << 8) | (der[p[0]++] & 0xff);
    }
    return len;
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
    } else if (n < 0x10000) {
      o.write(0x82);
      o.write(n >> 8);
      o.write(n & 0xff);
    } else {
      o.write(0x83);
      o.write(n >> 16);
      o.write((n >> 8) & 0xff);
      o.write(n & 0xff);
    }
    o.writeBytes(body);
    return o.toByteArray();
  }

  /** PrivateKeyInfo ::= SEQUENCE { version 0, algorithm, privateKey OCTET STRING }. */
  private static byte[] wrap(byte[] algorithm, byte[] key) {
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    o.writeBytes(new byte[] {0x02, 0x01, 0x00});
    o.writeBytes(algorithm);
    o.writeBytes(tlv(0x04, key));
    return tlv(0x30, o.toByteArray());
  }
}
