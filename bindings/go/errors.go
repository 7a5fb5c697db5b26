package llmkv

import (
	"fmt"

	"llmkv.dev/llmkv/raw"
)

// Status is an llmkv_status: 0 or a negative error code (values fixed forever).
type Status int32

// The statuses of include/llmkv.h.
const (
	StatusOK              Status = raw.LLMKV_OK
	StatusInvalidArgument Status = raw.LLMKV_ERR_INVALID_ARGUMENT
	StatusOutOfMemory     Status = raw.LLMKV_ERR_OUT_OF_MEMORY
	StatusKVCapacity      Status = raw.LLMKV_ERR_KV_CAPACITY
	StatusIO              Status = raw.LLMKV_ERR_IO
	StatusModelFormat     Status = raw.LLMKV_ERR_MODEL_FORMAT
	StatusUnsupported     Status = raw.LLMKV_ERR_UNSUPPORTED
	StatusBackend         Status = raw.LLMKV_ERR_BACKEND
	StatusState           Status = raw.LLMKV_ERR_STATE
	StatusSnapshotFormat  Status = raw.LLMKV_ERR_SNAPSHOT_FORMAT
	StatusCancelled       Status = raw.LLMKV_ERR_CANCELLED
	StatusInternal        Status = raw.LLMKV_ERR_INTERNAL
)

// String is the library's name of the status ("LLMKV_ERR_STATE"; "LLMKV_ERR_UNKNOWN" for
// values it does not know).
func (s Status) String() string { return raw.StatusString(int32(s)) }

// Error is every error the binding returns: the status, the operation, and the library's
// detail message (read in the same C call that failed). Compare with errors.Is against the
// sentinels (errors.Is(err, llmkv.ErrKVCapacity)) or read Status with errors.As.
type Error struct {
	Status  Status // the llmkv_status
	Op      string // the binding call that failed, "Session.Append"
	Message string // llmkv_last_error() of the failing call, or the binding's own reason

	sentinel bool
	closed   bool // the handle (or its engine) was closed: the binding refused the call
}

func (e *Error) Error() string {
	if e.sentinel {
		if e.closed {
			return "llmkv: handle closed"
		}
		return "llmkv: " + e.Status.String()
	}
	if e.Message == "" {
		return fmt.Sprintf("llmkv: %s: %s", e.Op, e.Status)
	}
	return fmt.Sprintf("llmkv: %s: %s: %s", e.Op, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrX) true when err carries the sentinel's status (and, for
// ErrClosed, when the binding refused a call on a closed handle).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || !t.sentinel {
		return false
	}
	if t.closed {
		return e.closed
	}
	return e.Status == t.Status
}

func sentinel(s Status) *Error { return &Error{Status: s, sentinel: true} }

// Sentinels for errors.Is.
var (
	ErrInvalidArgument = sentinel(StatusInvalidArgument)
	ErrOutOfMemory     = sentinel(StatusOutOfMemory)
	ErrKVCapacity      = sentinel(StatusKVCapacity)
	ErrIO              = sentinel(StatusIO)
	ErrModelFormat     = sentinel(StatusModelFormat)
	ErrUnsupported     = sentinel(StatusUnsupported)
	ErrBackend         = sentinel(StatusBackend)
	ErrState           = sentinel(StatusState)
	ErrSnapshotFormat  = sentinel(StatusSnapshotFormat)
	ErrCancelled       = sentinel(StatusCancelled)
	ErrInternal        = sentinel(StatusInternal)
	// ErrClosed: the Engine, Session or Prefix (or the session's engine) was closed. Such an
	// error also matches ErrInvalidArgument, the status the library gives a dead handle.
	ErrClosed = &Error{Status: StatusInvalidArgument, sentinel: true, closed: true}
)

// check turns a raw (status, message) pair into nil or an *Error.
func check(op string, st int32, msg string) error {
	if st == raw.LLMKV_OK {
		return nil
	}
	return &Error{Status: Status(st), Op: op, Message: msg}
}

func closedErr(op, what string) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Message: what + " is closed", closed: true}
}

func argErr(op, msg string) error {
	return &Error{Status: StatusInvalidArgument, Op: op, Message: msg}
}

// chk(op)(raw.F(...)) is check for a raw call's two results.
func chk(op string) func(int32, string) error {
	return func(st int32, msg string) error { return check(op, st, msg) }
}
