// Sluice's errors; see include/sluice/errors.h.
#include "sluice/errors.h"

namespace sluice {

std::string code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

Error::Error(grpc::StatusCode code, const std::string& message)
    : std::runtime_error(sluice::code_name(code) + ": " + message), code_(code), message_(message) {}

void throw_status(const grpc::Status& status, const std::string& what) {
  std::string msg = status.error_message();
  if (msg.empty()) msg = code_name(status.error_code());
  if (!what.empty()) msg = what + ": " + msg;
  switch (status.error_code()) {
    case grpc::StatusCode::CANCELLED: throw Cancelled(msg);
    case grpc::StatusCode::INVALID_ARGUMENT: throw InvalidArgument(msg);
    case grpc::StatusCode::DEADLINE_EXCEEDED: throw DeadlineExceeded(msg);
    case grpc::StatusCode::NOT_FOUND: throw NotFound(msg);
    case grpc::StatusCode::ALREADY_EXISTS: throw AlreadyExists(msg);
    case grpc::StatusCode::PERMISSION_DENIED: throw PermissionDenied(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: throw ResourceExhausted(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: throw FailedPrecondition(msg);
    case grpc::StatusCode::ABORTED: throw Aborted(msg);
    case grpc::StatusCode::OUT_OF_RANGE: throw OutOfRange(msg);
    case grpc::StatusCode::UNIMPLEMENTED: throw Unimplemented(msg);
    case grpc::StatusCode::INTERNAL: throw Internal(msg);
    case grpc::StatusCode::UNAVAILABLE: throw Unavailable(msg);
    case grpc::StatusCode::UNAUTHENTICATED: throw Unauthenticated(msg);
    default: throw Error(status.error_code(), msg);
  }
}

}  // namespace sluice
