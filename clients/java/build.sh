#!/usr/bin/env bash
# Builds the Java client with javac against Debian's jars (classpath.sh) —
# Maven Central is out of reach here; pom.xml is what Maven users build —
# and prints the directory holding the result:
#
#   dir="$(clients/java/build.sh)"
#   $dir/sluice.jar     the library (with its generated stubs)
#   $dir/interop.jar    the interop driver (src/interop)
#   $dir/examples.jar   the guide's examples (src/examples)
#   $dir/tests.jar      the JUnit 5 tests and the benchmark (src/test)
#   $dir/classpath      the classpath of Debian's jars (with JUnit's console)
#
# The build is cached in ${TMPDIR:-/tmp}/sluice-java-UID/HASH, keyed by a
# hash of the sources and these scripts, so the interop suite's many
# drivers build it once; concurrent callers wait for the first (flock).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cp="$("$here/classpath.sh" test)"
hash="$(cd "$here" && { find src -type f -name '*.java' | LC_ALL=C sort | xargs sha256sum; sha256sum build.sh classpath.sh; echo "$cp"; } | sha256sum | cut -c1-16)"
base="${TMPDIR:-/tmp}/sluice-java-$(id -u)"
dir="$base/$hash"
mkdir -p "$base"
exec 9>"$base/lock"
flock 9
if [ ! -f "$dir/ok" ]; then
  rm -rf "$dir"
  mkdir -p "$dir"
  start=$(date +%s%N)
  build() { # name, classpath, source dirs...
    local name="$1" extra="$2"
    shift 2
    mkdir -p "$dir/$name"
    if ! javac -nowarn -Xlint:none -encoding UTF-8 -d "$dir/$name" -cp "$extra" $(find "$@" -name '*.java') 2>"$dir/$name.log"; then
      cat "$dir/$name.log" >&2
      echo "clients/java: building $name failed" >&2
      exit 1
    fi
    (cd "$dir/$name" && jar cf "$dir/$name.jar" .)
  }
  build sluice "$cp" "$here/src/main/java"
  build interop "$cp:$dir/sluice.jar" "$here/src/interop/java"
  build examples "$cp:$dir/sluice.jar" "$here/src/examples/java"
  build tests "$cp:$dir/sluice.jar" "$here/src/test/java"
  echo "$cp" > "$dir/classpath"
  touch "$dir/ok"
  echo "clients/java: built in $(( ($(date +%s%N) - start) / 1000000 )) ms into $dir" >&2
fi
echo "$dir"
