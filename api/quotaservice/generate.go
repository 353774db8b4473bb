// Package quotaservice holds Square's quota service wire protocol
// (quota_service.proto) and its generated Go code: protobuf messages,
// grpc-go stubs (QuotaServiceClient and QuotaServiceServer, what a client
// generated from Square's protos uses) and a Connect service (package
// quotaserviceconnect: gRPC, gRPC-Web and JSON over HTTP on Sluice's one
// port).
//
// Source: quotaservice-wire.md (docs/references.md): square/quotaservice's
// protos/quota_service.proto.
//
// Regenerate with `go generate ./api/...` (needs protoc from Debian's
// protobuf-compiler; the plugins are Go tools pinned in go.mod).
package quotaservice

//go:generate sh -c "protoc -I . --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-connect-go=$(go tool -n protoc-gen-connect-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative quota_service.proto"
