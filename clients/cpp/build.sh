#!/usr/bin/env bash
# Builds the C++ client (library, GoogleTest suite, examples, interop
# driver, and the embedding application tests/embedding) once per version
# of its sources and prints the build directory, where the executables are.
#
#   clients/cpp/build.sh            # -> $SLUICE_CPP_CACHE/<hash>, e.g. /tmp/sluice-cpp-0/3f2a…
#
# It builds through tests/embedding — an application taking the client in
# with add_subdirectory and linking its own doorman.proto beside Sluice's
# — with the client's tests, examples and driver switched on, so that one
# build of the library serves them all (gRPC C++ compiles are slow);
# TestCppEmbedding (interop/cpp_test.go) runs the application and checks
# the top-level and embedded configurations.
#
# The directory is keyed by a hash of clients/cpp and api/**/*.proto, so
# every caller after the first (each interop driver, the test command) finds
# the build done; concurrent callers wait for one build (flock). The build's
# log goes to a file beside it, and to stderr when the build fails. -O1
# without LTO, at most two jobs: the test machine has two cores. Needs
# Debian's cmake, g++, libgrpc++-dev, protobuf-compiler-grpc, libgtest-dev
# and nlohmann-json3-dev (scripts/test installs them).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${SLUICE_CPP_CACHE:-${TMPDIR:-/tmp}/sluice-cpp-$(id -u)}"
for tool in cmake g++ protoc grpc_cpp_plugin; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "clients/cpp/build.sh: $tool is missing; run scripts/test (it installs Debian's C++ toolchain and libgrpc++-dev)" >&2
    exit 3
  fi
done
hash="$(cd "$root" && { find clients/cpp -type f ! -path '*/build*/*' ! -name '*.swp' -print0; find api -name '*.proto' -print0; } |
  LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
dir="$cache/$hash"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -f "$dir/.done" ]; then
  rm -rf "$dir"
  start=$(date +%s)
  log="$cache/$hash.log"
  echo "clients/cpp/build.sh: building the C++ client in $dir (log: $log)" >&2
  if ! { cmake -S "$here/tests/embedding" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DSLUICE_SOURCE_DIR="$here" -DSLUICE_EMBEDDING_LIBRARY_ONLY=OFF -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$dir" \
    -DSLUICE_TESTS=ON -DSLUICE_EXAMPLES=ON -DSLUICE_INTEROP_DRIVER=ON \
    -DSLUICE_BENCHMARKS="${SLUICE_CPP_BENCHMARKS:-OFF}" &&
    cmake --build "$dir" -j "${SLUICE_CPP_JOBS:-2}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "clients/cpp/build.sh: the build failed" >&2
    exit 1
  fi
  touch "$dir/.done"
  # Builds of other versions unused for a week go.
  find "$cache" -mindepth 1 -maxdepth 1 -mtime +7 ! -name "$hash*" ! -name .lock -exec rm -rf {} + 2>/dev/null || true
  echo "clients/cpp/build.sh: built in $(($(date +%s) - start)) s" >&2
fi
echo "$dir"
