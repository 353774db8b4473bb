#!/usr/bin/env bash
# Prints the classpath of Debian's jars that the library (and, with "test",
# its tests) needs: grpc-java 1.41 (libgrpc-java) with Netty (libnetty-java),
# protobuf-java 3.21 (libprotobuf-java), Guava, Gson and the rest of
# grpc-core's dependencies; JUnit 5 (junit5) for tests. Exits 3 naming the
# missing packages when a jar is absent (scripts/test installs them).
set -euo pipefail
j=/usr/share/java
jars=(grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf proto-google-common-protos guava gson perfmark-api animal-sniffer-annotations
  error_prone_annotations jsr305
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport netty-transport-native-unix-common)
if [ "${1:-}" = test ]; then
  jars+=(junit-platform-console-standalone)
fi
cp=""
missing=()
for n in "${jars[@]}"; do
  if [ -f "$j/$n.jar" ]; then
    cp="${cp:+$cp:}$j/$n.jar"
  else
    missing+=("$n")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "clients/java: missing Debian jars: ${missing[*]} (scripts/test installs them: apt-get install libgrpc-java libprotobuf-java libnetty-java libgoogle-gson-java libperfmark-java libanimal-sniffer-java libgoogle-common-protos-java junit5)" >&2
  exit 3
fi
echo "$cp"
