// Package sluicev1 holds Sluice's own APIs (package sluice.v1): Limits, the
// server-side limits on Sluice's one port, and their generated Go code
// (protobuf messages, grpc-go stubs, and a Connect service in package
// sluicev1connect).
//
// Regenerate with `go generate ./api/...` (needs protoc from Debian's
// protobuf-compiler; the plugins are Go tools pinned in go.mod).
package sluicev1

//go:generate sh -c "protoc -I . -I /usr/include --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-connect-go=$(go tool -n protoc-gen-connect-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative limits.proto leases.proto"
