#!/usr/bin/env bash
# Builds the Java client offline with Debian's tools — protoc 3.21 and
# grpc-java's protoc plugin 1.41 for the stubs, javac against Debian's jars
# (classpath.sh); Maven Central is out of reach here, and pom.xml is what
# Maven users build — and prints the directory holding the result:
#
#   dir="$(clients/java/build.sh)"
#   $dir/sluice.jar     the library, with the stubs generated from api/*.proto
#   $dir/gen/           those stubs' sources (for an IDE; never committed)
#   $dir/interop.jar    the interop driver (src/interop)
#   $dir/examples.jar   the guide's examples (src/examples)
#   $dir/tests.jar      the JUnit 5 tests and the benchmark (src/test)
#   $dir/classpath      the classpath of Debian's jars (with JUnit's console)
#                       and tcnative.jar (below)
#
# The stubs: the protos name no java_package, so each is copied with one
# added (io.github.sluicerl.sluice.proto.doorman, .quotaservice, .v1) and
# java_multiple_files, as pom.xml does; that changes nothing on the wire (the
# proto packages, hence the gRPC method names, stay).
#
# TLS: Debian's Netty 4.1.48 lacks the class that negotiates HTTP/2 by ALPN
# on the JDK's own TLS, so grpc-java's TLS runs on OpenSSL through
# netty-tcnative. Netty loads tcnative's JNI library from
# META-INF/native/libnetty_tcnative.so on the classpath; Debian installs it
# as libnetty-tcnative.so (a name Netty does not look for, and a symbolic
# link does not help: the library checks its own file name), so
# tcnative.jar carries a copy under Netty's name. With Maven's upstream
# Netty none of this is needed: it negotiates ALPN on the JDK's TLS.
#
# The build is cached in ${TMPDIR:-/tmp}/sluice-java-UID/HASH, keyed by a
# hash of the sources, the protos, these scripts and the tools, so the
# interop suite's many drivers build it once; concurrent callers wait for
# the first (flock).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
api="$(cd "$here/../../api" && pwd)"
cp="$("$here/classpath.sh" test)"
plugin="$(command -v grpc_java_plugin)"
tcnative="$(compgen -G '/usr/lib/*/jni/libnetty-tcnative.so' | head -n 1)"
# proto file (under api/) and the Java package of its stubs
protos=(doorman/doorman.proto io.github.sluicerl.sluice.proto.doorman
  quotaservice/quota_service.proto io.github.sluicerl.sluice.proto.quotaservice
  sluice/v1/leases.proto io.github.sluicerl.sluice.proto.v1
  sluice/v1/limits.proto io.github.sluicerl.sluice.proto.v1)
hash="$( {
  (cd "$here" && find src -type f -name '*.java' | LC_ALL=C sort | xargs sha256sum && sha256sum build.sh classpath.sh)
  for ((i = 0; i < ${#protos[@]}; i += 2)); do (cd "$api" && sha256sum "${protos[i]}"); done
  protoc --version
  sha256sum "$plugin" "$tcnative"
  echo "$cp"
} | sha256sum | cut -c1-16)"
base="${TMPDIR:-/tmp}/sluice-java-$(id -u)"
dir="$base/$hash"
mkdir -p "$base"
exec 9>"$base/lock"
flock 9
if [ ! -f "$dir/ok" ]; then
  rm -rf "$dir"
  mkdir -p "$dir/proto" "$dir/gen"
  start=$(date +%s%N)
  fail() {
    echo "clients/java: $*" >&2
    exit 1
  }
  # The stubs.
  files=()
  for ((i = 0; i < ${#protos[@]}; i += 2)); do
    f="${protos[i]}" pkg="${protos[i + 1]}"
    mkdir -p "$dir/proto/$(dirname "$f")"
    sed -E "s/^(package [a-z0-9.]+;)$/\1\noption java_package = \"$pkg\";\noption java_multiple_files = true;/" \
      "$api/$f" >"$dir/proto/$f"
    grep -q "java_package = \"$pkg\"" "$dir/proto/$f" || fail "no package line in api/$f"
    files+=("$f")
  done
  protoc -I "$dir/proto" --java_out="$dir/gen" \
    --grpc-java_out="$dir/gen" --plugin=protoc-gen-grpc-java="$plugin" "${files[@]}" 2>"$dir/protoc.log" ||
    { cat "$dir/protoc.log" >&2; fail "protoc failed"; }
  # grpc-java 1.41's plugin annotates stubs with javax.annotation.Generated,
  # which JDK 9+ lacks (its @generated=omit came later); the JDK's
  # javax.annotation.processing.Generated says the same.
  find "$dir/gen" -name '*Grpc.java' -print0 |
    xargs -0 sed -i 's/@javax\.annotation\.Generated(/@javax.annotation.processing.Generated(/'
  # javac on the client compiler alone (C1) and the serial collector: about
  # three times faster than the defaults on this short, one-off run.
  compile() { # name, classpath, source dirs...
    local name="$1" extra="$2"
    shift 2
    mkdir -p "$dir/$name"
    javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -proc:none -nowarn -Xlint:none -encoding UTF-8 \
      -d "$dir/$name" -cp "$extra" $(find "$@" -name '*.java') 2>"$dir/$name.log" ||
      { cat "$dir/$name.log" >&2; fail "building $name failed"; }
  }
  compile sluice "$cp" "$here/src/main/java" "$dir/gen"
  (cd "$dir/sluice" && jar cf "$dir/sluice.jar" .)
  # The driver, the examples and the tests in one javac run (one JVM start
  # instead of three), then a jar each by package: the driver and the
  # examples are subpackages of the library's, the tests are in it. (Whole
  # directories, so that the jars have the directory entries JUnit's
  # package scan needs.)
  compile tests "$cp:$dir/sluice.jar" "$here/src/interop/java" "$here/src/examples/java" "$here/src/test/java"
  pkg=io/github/sluicerl/sluice
  for sub in interop examples; do
    mkdir -p "$dir/$sub/$pkg"
    mv "$dir/tests/$pkg/$sub" "$dir/$sub/$pkg/"
  done
  for name in interop examples tests; do
    (cd "$dir/$name" && jar cf "$dir/$name.jar" .)
  done
  mkdir -p "$dir/native/META-INF/native"
  cp "$tcnative" "$dir/native/META-INF/native/libnetty_tcnative.so"
  (cd "$dir/native" && jar cf "$dir/tcnative.jar" META-INF)
  echo "$cp:$dir/tcnative.jar" >"$dir/classpath"
  touch "$dir/ok"
  echo "clients/java: built in $((($(date +%s%N) - start) / 1000000)) ms into $dir" >&2
fi
echo "$dir"
