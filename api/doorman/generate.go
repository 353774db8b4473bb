// Package doorman holds the Doorman wire protocol (doorman.proto) and its
// generated Go code: protobuf messages, grpc-go stubs (CapacityClient and
// CapacityServer, what an unmodified Doorman peer uses) and a Connect
// service (package doormanconnect, which Sluice serves: gRPC, gRPC-Web and
// JSON over HTTP on one port).
//
// Source: doorman-wire.md (docs/references.md): YouTube Doorman's
// proto/doorman/doorman.proto.
//
// Regenerate with `go generate ./api/...` (needs protoc from Debian's
// protobuf-compiler; the plugins are Go tools pinned in go.mod).
package doorman

//go:generate sh -c "protoc -I . --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-connect-go=$(go tool -n protoc-gen-connect-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative doorman.proto"
