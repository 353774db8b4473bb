package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.KeyFactory;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.security.interfaces.ECPrivateKey;
import java.security.interfaces.RSAPrivateCrtKey;
import java.security.spec.ECGenParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Arrays;
import java.util.Base64;
import org.junit.jupiter.api.Test;

/**
 * TLS settings: the PEM keys PemKeys rewraps as PKCS#8 (keys made here with
 * the JDK, written as SEC 1 and PKCS#1 the way Go and OpenSSL write them),
 * and settings that do not load failing when the client is built. The
 * handshake itself (mTLS against {@code sluice server --tls-client-ca}) is
 * the interop suite's TestMutualTLS.
 */
class TlsTest {
  static String pem(String type, byte[] der) {
    return "-----BEGIN " + type + "-----\n" + Base64.getMimeEncoder(64, new byte[] {'\n'}).encodeToString(der)
        + "\n-----END " + type + "-----\n";
  }

  /** The DER of a PKCS#8 PEM block, parsed back by the JDK as alg. */
  static PrivateKey parse(byte[] pkcs8Pem, String alg) throws Exception {
    String s = new String(pkcs8Pem, StandardCharsets.US_ASCII);
    assertTrue(s.startsWith("-----BEGIN PRIVATE KEY-----\n"), s);
    String body = s.replace("-----BEGIN PRIVATE KEY-----", "").replace("-----END PRIVATE KEY-----", "");
    return KeyFactory.getInstance(alg).generatePrivate(new PKCS8EncodedKeySpec(Base64.getMimeDecoder().decode(body)));
  }

  static byte[] tlv(int tag, byte[]... parts) {
    ByteArrayOutputStream body = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      body.writeBytes(p);
    }
    int n = body.size();
    ByteArrayOutputStream o = new ByteArrayOutputStream();
    o.write(tag);
    if (n < 0x80) {
      o.write(n);
    } else {
      o.write(0x82);
      o.write(n >> 8);
      o.write(n & 0xff);
    }
    o.writeBytes(body.toByteArray());
    return o.toByteArray();
  }

  @Test
  void aSec1EcKeyBecomesTheSameKeyInPkcs8() throws Exception {
    KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
    g.initialize(new ECGenParameterSpec("secp256r1"));
    ECPrivateKey k = (ECPrivateKey) g.generateKeyPair().getPrivate();
    byte[] s = k.getS().toByteArray();
    byte[] s32 = Arrays.copyOfRange(s, s.length - 32, s.length); // unsigned, 32 bytes
    if (s.length < 32) {
      s32 = new byte[32];
      System.arraycopy(s, 0, s32, 32 - s.length, s.length);
    }
    byte[] prime256v1 = {0x06, 0x08, 0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x03, 0x01, 0x07};
    // ECPrivateKey ::= SEQUENCE { 1, privateKey, [0] the curve }, as x509.MarshalECPrivateKey writes it (less [1]).
    byte[] sec1 = tlv(0x30, new byte[] {0x02, 0x01, 0x01}, tlv(0x04, s32), tlv(0xa0, prime256v1));
    String text = pem("EC PARAMETERS", prime256v1) + pem("EC PRIVATE KEY", sec1); // openssl ecparam writes both
    ECPrivateKey got = (ECPrivateKey) parse(PemKeys.pkcs8(text.getBytes(StandardCharsets.US_ASCII)), "EC");
    assertEquals(k.getS(), got.getS());
    assertEquals(k.getParams().getCurve(), got.getParams().getCurve());
  }

  @Test
  void aPkcs1RsaKeyBecomesTheSameKeyInPkcs8() throws Exception {
    KeyPairGenerator g = KeyPairGenerator.getInstance("RSA");
    g.initialize(2048);
    RSAPrivateCrtKey k = (RSAPrivateCrtKey) g.generateKeyPair().getPrivate();
    byte[][] ints = new byte[9][];
    BigInteger[] v = {BigInteger.ZERO, k.getModulus(), k.getPublicExponent(), k.getPrivateExponent(), k.getPrimeP(),
        k.getPrimeQ(), k.getPrimeExponentP(), k.getPrimeExponentQ(), k.getCrtCoefficient()};
    for (int i = 0; i < v.length; i++) {
      ints[i] = tlv(0x02, v[i].toByteArray());
    }
    byte[] pkcs1 = tlv(0x30, ints); // RSAPrivateKey, as OpenSSL's traditional format writes it
    byte[] converted = PemKeys.pkcs8(pem("RSA PRIVATE KEY", pkcs1).getBytes(StandardCharsets.US_ASCII));
    RSAPrivateCrtKey got = (RSAPrivateCrtKey) parse(converted, "RSA");
    assertEquals(k.getModulus(), got.getModulus());
    assertEquals(k.getPrivateExponent(), got.getPrivateExponent());
  }

  @Test
  void aPkcs8KeyPassesThroughUnchanged() throws Exception {
    KeyPairGenerator g = KeyPairGenerator.getInstance("EC");
    g.initialize(new ECGenParameterSpec("secp256r1"));
    PrivateKey k = g.generateKeyPair().getPrivate();
    String block = pem("PRIVATE KEY", k.getEncoded());
    byte[] got = PemKeys.pkcs8(("some text before\n" + block).getBytes(StandardCharsets.US_ASCII));
    assertArrayEquals(block.strip().getBytes(StandardCharsets.US_ASCII), got);
    assertEquals(k, parse(got, "EC"));
  }

  @Test
  void whatIsNotAnUnencryptedKeyIsRefused() {
    byte[] ecWithoutCurve = {0x30, 0x03, 0x02, 0x01, 0x01};
    for (String bad : new String[] {"", "not a key", pem("CERTIFICATE", new byte[] {1, 2, 3}),
        pem("ENCRYPTED PRIVATE KEY", new byte[] {0x30, 0}), pem("EC PRIVATE KEY", ecWithoutCurve)}) {
      assertThrows(IllegalArgumentException.class, () -> PemKeys.pkcs8(bad.getBytes(StandardCharsets.US_ASCII)), bad);
      InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
          () -> Tls.builder().keyPair(new byte[0], bad.getBytes(StandardCharsets.US_ASCII)).build());
      assertEquals("INVALID_ARGUMENT", e.codeName());
    }
  }

  @Test
  void settingsThatDoNotLoadFailWhenTheClientIsBuilt() {
    Tls junkRoots = Tls.builder().rootCertificates("not a certificate".getBytes(StandardCharsets.US_ASCII)).build();
    InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
        () -> SluiceClient.builder("127.0.0.1:1").tls(junkRoots).build());
    assertTrue(e.getMessage().contains("127.0.0.1:1"), e.getMessage());
  }
}
