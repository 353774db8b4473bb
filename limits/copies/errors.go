package copies

import (
	"errors"
	"strconv"
)

// The client errors, one sentinel per class of the paper (plus sessions and
// transfers, which the paper's connection-bound sessions did not need).
// Every error the Engine returns for a request is an *Error wrapping one of
// them; test with errors.Is, map with ClassOf. Over-limit is not an
// error: it is a Reservation with Granted 0.
//
// Source: charon-paper.md, section 3.1 (client errors 1 to 4; seizing a
// transfer that does not exist or has expired).
var (
	// ErrInvalidArgument: the request is malformed (the paper's client
	// error 1): an empty or invalid name, a negative or oversize count,
	// min above copies, duplicate groups, a negative ttl. Class
	// InvalidArgument.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownResource: no configuration answers for the resource, and
	// no AllowUnconfigured prefix covers it (client error 2). Class
	// NotFound.
	ErrUnknownResource = errors.New("unknown resource")
	// ErrWrongKind: the resource is configured, but not as a copy-limited
	// resource (client error 3: reserving a rate-limited resource, or
	// the reverse). The Engine knows only copy-limited resources and never
	// returns it: the caller that knows both kinds does, wrapped in an
	// *Error (see WrongKind). Class FailedPrecondition.
	ErrWrongKind = errors.New("wrong kind of resource")
	// ErrNotHeld: Release or Transfer of more copies than the session
	// holds under (resource, domain, groups) (client error 4). Class
	// FailedPrecondition: the request is well-formed, the state does not
	// allow it, and retrying will not help.
	ErrNotHeld = errors.New("not held")
	// ErrUnknownSession: the session does not exist or has ended (closed,
	// or its ttl passed without a keep-alive; its holds are, or are about
	// to be, released). Class NotFound: the client must open a new session.
	ErrUnknownSession = errors.New("unknown session")
	// ErrUnknownTransfer: Seize of a transfer id that does not exist, was
	// seized already, or whose ttl passed (indistinguishable, as in the
	// paper). Class NotFound.
	ErrUnknownTransfer = errors.New("unknown transfer")
)

// Error is a client error: the field of the request it concerns, in the
// wire API's terms (session_id, resource, domain, copies, min_copies,
// groups, ttl, transfer_id), and why. It wraps its class's sentinel (Err).
type Error struct {
	// Field names the request's field, e.g. "copies".
	Field string
	// Reason says what is wrong, e.g. "release of 5 copies; the session
	// holds 3".
	Reason string
	// Err is the sentinel (ErrInvalidArgument, ErrNotHeld, ...).
	Err error
}

// Error returns "field: reason".
func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// WrongKind returns the error a caller that knows every kind of resource
// answers for a reserve, release, transfer or seize of a resource that is
// configured as rate-limited: an *Error on field "resource" wrapping
// ErrWrongKind.
func WrongKind(resource, kind string) error {
	return &Error{Field: "resource", Reason: strconv.Quote(resource) + " is " + kind + ", not copy-limited", Err: ErrWrongKind}
}

func fail(field, reason string, sentinel error) error {
	return &Error{Field: field, Reason: reason, Err: sentinel}
}

// Class is the class of an error, named after the gRPC status code the
// API edge answers with.
type Class uint8

// The classes.
const (
	// ClassOK: no error.
	ClassOK Class = iota
	// ClassInvalidArgument: a malformed request (ErrInvalidArgument).
	ClassInvalidArgument
	// ClassNotFound: an unknown resource, session or transfer.
	ClassNotFound
	// ClassFailedPrecondition: a request the state does not allow
	// (ErrNotHeld, ErrWrongKind).
	ClassFailedPrecondition
	// ClassInternal: anything else, e.g. the random source failed while
	// making an id (a server error, not the client's).
	ClassInternal
	// ClassUnavailable: the shared copy log cannot be reached, or this
	// server is fenced, or the log is learning (ErrUnavailable,
	// ErrFenced, ErrLearning): retry later, or
	// through another server.
	ClassUnavailable
)

var classNames = [...]string{"OK", "InvalidArgument", "NotFound", "FailedPrecondition", "Internal", "Unavailable"}

// String returns the gRPC code name of c, for example "NotFound".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// ClassOf returns the class of err: ClassOK for nil, ClassInternal for an
// error wrapping none of the sentinels.
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassOK
	case errors.Is(err, ErrInvalidArgument):
		return ClassInvalidArgument
	case errors.Is(err, ErrUnknownResource), errors.Is(err, ErrUnknownSession), errors.Is(err, ErrUnknownTransfer):
		return ClassNotFound
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrWrongKind):
		return ClassFailedPrecondition
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrFenced), errors.Is(err, ErrLearning):
		return ClassUnavailable
	}
	return ClassInternal
}
