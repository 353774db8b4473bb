// Sluice's errors: one small exception hierarchy carrying gRPC status codes.
//
// Every error the library throws is a sluice::Error (a std::runtime_error)
// whose code() is the grpc::StatusCode the server answered, or the one it
// would have answered for a fault the client found itself (INVALID_ARGUMENT
// for wants of -1). Catch the subclass of the code you care about, or
// sluice::Error and switch on code(). A rejection by a limit is not an
// error: Allow answers a status, a reserve that finds too few copies free
// throws OverLimit (RESOURCE_EXHAUSTED) only after its wait.
//
// Thread-safety: errors are immutable values.
#pragma once

#include <stdexcept>
#include <string>

#include <grpcpp/support/status.h>
#include <grpcpp/support/status_code_enum.h>

namespace sluice {

// code_name returns the name of a gRPC code as in the protocol and the
// interop drivers ("INVALID_ARGUMENT").
std::string code_name(grpc::StatusCode code);

// Error is the base of every exception the library throws: a gRPC code
// and a message (prefixed with the call that failed, "Allow api/x: …").
class Error : public std::runtime_error {
 public:
  Error(grpc::StatusCode code, const std::string& message);
  // code is the gRPC status code.
  grpc::StatusCode code() const noexcept { return code_; }
  // code_name is code's name ("INVALID_ARGUMENT").
  std::string code_name() const { return sluice::code_name(code_); }
  // message is the message without the code.
  const std::string& message() const noexcept { return message_; }
  // status is the error as a grpc::Status.
  grpc::Status status() const { return grpc::Status(code_, message_); }

 private:
  grpc::StatusCode code_;
  std::string message_;
};

#define SLUICE_ERROR_CLASS(Name, Base, Code)                                   \
  class Name : public Base {                                                   \
   public:                                                                     \
    explicit Name(const std::string& message, grpc::StatusCode code = Code)    \
        : Base(message, code) {}                                               \
  };

// The classes of the codes (Error(code, message) argument order flips for
// the subclasses: message first).
class Coded : public Error {
 public:
  Coded(const std::string& message, grpc::StatusCode code) : Error(code, message) {}
};
SLUICE_ERROR_CLASS(Cancelled, Coded, grpc::StatusCode::CANCELLED)
SLUICE_ERROR_CLASS(InvalidArgument, Coded, grpc::StatusCode::INVALID_ARGUMENT)
SLUICE_ERROR_CLASS(DeadlineExceeded, Coded, grpc::StatusCode::DEADLINE_EXCEEDED)
SLUICE_ERROR_CLASS(NotFound, Coded, grpc::StatusCode::NOT_FOUND)
SLUICE_ERROR_CLASS(AlreadyExists, Coded, grpc::StatusCode::ALREADY_EXISTS)
SLUICE_ERROR_CLASS(PermissionDenied, Coded, grpc::StatusCode::PERMISSION_DENIED)
SLUICE_ERROR_CLASS(ResourceExhausted, Coded, grpc::StatusCode::RESOURCE_EXHAUSTED)
SLUICE_ERROR_CLASS(FailedPrecondition, Coded, grpc::StatusCode::FAILED_PRECONDITION)
SLUICE_ERROR_CLASS(Aborted, Coded, grpc::StatusCode::ABORTED)
SLUICE_ERROR_CLASS(OutOfRange, Coded, grpc::StatusCode::OUT_OF_RANGE)
SLUICE_ERROR_CLASS(Unimplemented, Coded, grpc::StatusCode::UNIMPLEMENTED)
SLUICE_ERROR_CLASS(Internal, Coded, grpc::StatusCode::INTERNAL)
SLUICE_ERROR_CLASS(Unavailable, Coded, grpc::StatusCode::UNAVAILABLE)
SLUICE_ERROR_CLASS(Unauthenticated, Coded, grpc::StatusCode::UNAUTHENTICATED)
// Closed: the client was closed or the handle released (FAILED_PRECONDITION).
SLUICE_ERROR_CLASS(Closed, FailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION)
// SessionLost: the session holding a hold's copies ended without the
// client closing it; the copies are gone (ABORTED).
SLUICE_ERROR_CLASS(SessionLost, Aborted, grpc::StatusCode::ABORTED)
// OverLimit: too few copies were free within the reserve's wait
// (RESOURCE_EXHAUSTED); nothing is held.
SLUICE_ERROR_CLASS(OverLimit, ResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED)
#undef SLUICE_ERROR_CLASS

// throw_status throws the Error subclass of status's code, its message
// prefixed with what ("Allow api/x"). status must not be OK.
[[noreturn]] void throw_status(const grpc::Status& status, const std::string& what = "");

}  // namespace sluice
