#!/usr/bin/env bash
# Prints the classpath of Debian's jars that the library (and, with "test",
# its tests) needs: grpc-java 1.41 (libgrpc-java) with Netty (libnetty-java)
# and netty-tcnative (libnetty-tcnative-java: OpenSSL, for TLS's ALPN, which
# Debian's Netty cannot do on the JDK's own TLS), protobuf-java 3.21
# (libprotobuf-java), Guava, Gson and the rest of grpc-core's dependencies;
# JUnit 5 (junit5) for tests. Exits 3 naming the missing packages when a
# jar, tcnative's JNI library (libnetty-tcnative-jni), protoc
# (protobuf-compiler) or grpc-java's protoc plugin
# (protobuf-compiler-grpc-java-plugin) is absent; scripts/test installs
# them. build.sh adds the JNI library to the classpath it writes.
set -euo pipefail
j=/usr/share/java
jars=(grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava gson perfmark-api animal-sniffer-annotations
  error_prone_annotations jsr305
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport netty-transport-native-unix-common
  netty-tcnative)
if [ "${1:-}" = test ]; then
  jars+=(junit-platform-console-standalone)
fi
cp=""
missing=()
for n in "${jars[@]}"; do
  if [ -f "$j/$n.jar" ]; then
    cp="${cp:+$cp:}$j/$n.jar"
  else
    missing+=("$n.jar")
  fi
done
compgen -G '/usr/lib/*/jni/libnetty-tcnative.so' >/dev/null || missing+=(libnetty-tcnative.so)
command -v protoc >/dev/null || missing+=(protoc)
command -v grpc_java_plugin >/dev/null || missing+=(grpc_java_plugin)
if [ ${#missing[@]} -gt 0 ]; then
  echo "clients/java: missing ${missing[*]} (scripts/test installs them: apt-get install libgrpc-java libprotobuf-java" \
    "libnetty-java libnetty-tcnative-java libnetty-tcnative-jni libgoogle-gson-java libperfmark-java" \
    "libanimal-sniffer-java libgoogle-common-protos-java junit5 protobuf-compiler protobuf-compiler-grpc-java-plugin)" >&2
  exit 3
fi
echo "$cp"
