package limits

import "time"

// EventType is the kind of an Event.
type EventType uint8

// The events, those of quotaservice-design.md's listeners plus
// EventInvalidRequest, EventServerError and EventDegraded.
//
// Source: quotaservice-design.md, "Listeners".
const (
	// EventTokensServed: a request was granted (Event.Tokens granted,
	// Event.Wait imposed).
	EventTokensServed EventType = iota + 1
	// EventTimeout: not enough tokens within the request's maximum wait
	// (StatusTimeout).
	EventTimeout
	// EventTooManyTokensRequested: the request asked for more than the
	// bucket's max tokens per request.
	EventTooManyTokensRequested
	// EventBucketMiss: no bucket answered (StatusNoBucket), or a dynamic
	// bucket could not be created (StatusTooManyBuckets); Event.Status
	// says which.
	EventBucketMiss
	// EventBucketCreated: a bucket was created (dynamic or not: the
	// memory store creates every bucket on first use).
	EventBucketCreated
	// EventBucketRemoved: a bucket was removed (Event.Removed says why).
	EventBucketRemoved
	// EventInvalidRequest: the request was invalid (Resource and Domain
	// are as given: bound their use, e.g. as metric labels).
	EventInvalidRequest
	// EventServerError: the store failed (and the resource fails closed).
	EventServerError
	// EventDegraded: the store failed and the resource fails open: the
	// request was granted without a decision (Event.Tokens granted;
	// Status StatusOK). Source: docs/redis.md, "When Redis fails".
	EventDegraded
)

var eventNames = [...]string{
	EventTokensServed:           "tokens_served",
	EventTimeout:                "timeout",
	EventTooManyTokensRequested: "too_many_tokens_requested",
	EventBucketMiss:             "bucket_miss",
	EventBucketCreated:          "bucket_created",
	EventBucketRemoved:          "bucket_removed",
	EventInvalidRequest:         "invalid_request",
	EventServerError:            "server_error",
	EventDegraded:               "degraded",
}

// String returns the event's name in snake case (for example
// "tokens_served"), suitable as a metric label value.
func (t EventType) String() string {
	if int(t) < len(eventNames) && eventNames[t] != "" {
		return eventNames[t]
	}
	return "unknown"
}

// Event is one thing that happened in the engine. It is passed by value
// and holds no reference the listener must release.
type Event struct {
	Type EventType
	// Resource and Domain are the request's (or, for created and removed
	// buckets, the bucket's key: Domain "" is a resource's default bucket,
	// both "" the global default).
	Resource, Domain string
	// Bucket is the configuration that answered.
	Bucket BucketRef
	// Dynamic reports a bucket created on demand (template or prefix).
	Dynamic bool
	// Tokens is, for EventTokensServed, the tokens granted; for
	// rejections, the tokens asked.
	Tokens int64
	// Wait is, for EventTokensServed, the wait imposed.
	Wait time.Duration
	// Status is the decision's status (zero for created and removed
	// buckets).
	Status Status
	// Removed is, for EventBucketRemoved, why.
	Removed RemoveReason
}

// Listener receives the engine's events. The engine calls OnEvent
// synchronously, on the goroutine of the call that caused the event
// (Allow, Reap, SetConfig), after the store's locks are released and
// before that call returns: a slow listener slows every decision. It may
// be called concurrently from several goroutines. It must not call the
// engine's SetConfig (which waits for itself).
type Listener interface {
	OnEvent(Event)
}

// ListenerFunc adapts a function to Listener.
type ListenerFunc func(Event)

// OnEvent calls f(e).
func (f ListenerFunc) OnEvent(e Event) { f(e) }
