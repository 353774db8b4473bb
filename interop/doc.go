// Package interop is the cross-language interop suite: its tests start a
// real `sluice server` on loopback and drive the client library of every
// language through that language's interop driver, started with
// scripts/interop-driver LANG --server HOST:PORT --client-id ID (Go's is
// interop/godriver; Python's clients/python/interop/driver.py; Java's
// clients/java/src/interop, built once by clients/java/build.sh; C++'s
// clients/cpp/interop/driver.cc, built once by clients/cpp/build.sh). The
// package has no API: it is its tests.
//
// # The driver protocol
//
// A driver reads one JSON object per line on standard input and writes one
// JSON object per line answering it, in order, on standard output (logs
// go to standard error):
//
//	{"op":"resource","id":R,"wants":W}                            {"ok":true}          lease R wanting W (refreshed in the background)
//	{"op":"set_wants","id":R,"wants":W}                           {"ok":true}          change R's wants
//	{"op":"capacity","id":R}                                      {"capacity":C}       R's current capacity (0 before the first lease; -1: no limit)
//	{"op":"run","id":R,"seconds":S}                               {"acquired":N}       take permits one at a time from R's rate limiter (0.1 s of burst) for S seconds
//	{"op":"release","id":R}                                       {"ok":true}          give R back to the server
//	{"op":"allow","resource":R,"domain":D,"tokens":N}             {"status":S,"granted":G}  sluice.v1.Limits/Allow with no wait
//	{"op":"reserve","resource":R,"domain":D,"copies":N,"min":M}   {"granted":G,"hold":H}    copies in the client's session, no wait; G = 0 (and H null) when fewer than M are free
//	{"op":"free","hold":H}                                        {"ok":true}          release that hold
//	{"op":"close"}                                                {"ok":true}          close the client (releases everything), then exit 0
//
// Any failure answers {"error":{"code":CODE,"message":...}} with CODE the
// gRPC code's name (INVALID_ARGUMENT for wants of -1), and the driver
// keeps serving. An unknown resource id or hold is NOT_FOUND; leasing an
// id twice is ALREADY_EXISTS.
//
// The suite needs Debian's python3-grpcio, python3-protobuf and
// python3-pytest; for Java a JDK with libgrpc-java, libnetty-java, junit5
// and the jars around them; for C++ cmake, libgrpc++-dev,
// protobuf-compiler-grpc, libgtest-dev and nlohmann-json3-dev (scripts/test
// installs them); without them it fails, saying so.
package interop
