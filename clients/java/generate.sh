#!/usr/bin/env bash
# Regenerates the Java stubs of Sluice's APIs (api/doorman, api/quotaservice,
# api/sluice/v1) into src/main/java/io/github/sluicerl/sluice/proto, with
# Debian's protoc (3.21.12) and grpc_java_plugin 1.41 (protobuf-compiler,
# protobuf-compiler-grpc-java-plugin). The stubs are checked in; run this
# after changing a .proto:
#
#   clients/java/generate.sh
#
# The protos name no java_package; this copies them to a scratch directory
# and adds one per proto (io.github.sluicerl.sluice.proto.doorman,
# .quotaservice, .v1; java_multiple_files), which changes nothing on the
# wire (the proto packages, hence the gRPC method names, stay).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
base=io/github/sluicerl/sluice/proto
out="$here/src/main/java"
plugin="$(command -v grpc_java_plugin || true)"
if ! command -v protoc >/dev/null || [ -z "$plugin" ]; then
  echo "generate.sh: needs protoc and protoc-gen-grpc-java (apt-get install protobuf-compiler protobuf-compiler-grpc-java-plugin)" >&2
  exit 1
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
add_package() { # proto file, java package
  mkdir -p "$scratch/$(dirname "$1")"
  sed -E "s/^(package [a-z0-9.]+;)$/\1\noption java_package = \"$2\";\noption java_multiple_files = true;/" "$root/api/$1" > "$scratch/$1"
  grep -q "java_package = \"$2\"" "$scratch/$1" || { echo "generate.sh: no package line in api/$1" >&2; exit 1; }
}
add_package doorman/doorman.proto io.github.sluicerl.sluice.proto.doorman
add_package quotaservice/quota_service.proto io.github.sluicerl.sluice.proto.quotaservice
add_package sluice/v1/leases.proto io.github.sluicerl.sluice.proto.v1
add_package sluice/v1/limits.proto io.github.sluicerl.sluice.proto.v1
rm -rf "${out:?}/$base"
mkdir -p "$out"
protoc -I "$scratch" \
  --java_out="$out" \
  --grpc-java_out="$out" --plugin=protoc-gen-grpc-java="$plugin" \
  doorman/doorman.proto quotaservice/quota_service.proto \
  sluice/v1/leases.proto sluice/v1/limits.proto
# grpc-java 1.41 annotates stubs with javax.annotation.Generated, which JDK 9+
# lacks; the JDK's own javax.annotation.processing.Generated says the same.
find "$out/$base" -name '*Grpc.java' -print0 | xargs -0 sed -i 's/@javax\.annotation\.Generated(/@javax.annotation.processing.Generated(/'
echo "generated $(find "$out/$base" -name '*.java' | wc -l) files in ${out#"$root"/}/$base" >&2
