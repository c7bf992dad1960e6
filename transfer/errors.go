package transfer

import (
	"errors"
	"fmt"
)

// Code is an upstream Transfer Engine error number (include/error.h).
type Code int

// Error numbers, as upstream's Transfer Engine defines them.
const (
	CodeInvalidArgument      Code = -1
	CodeTooManyRequests      Code = -2
	CodeAddressNotRegistered Code = -3
	CodeBatchBusy            Code = -4
	CodeDeviceNotFound       Code = -6
	CodeAddressOverlapped    Code = -7
	CodeDNS                  Code = -101
	CodeSocket               Code = -102
	CodeMalformedJSON        Code = -103
	CodeRejectHandshake      Code = -104
	CodeMetadata             Code = -200
	CodeEndpoint             Code = -201
	CodeContext              Code = -202
	CodeNUMA                 Code = -300
	CodeClock                Code = -301
	CodeMemory               Code = -302
	CodeNotImplemented       Code = -303
)

var codeNames = map[Code]string{
	CodeInvalidArgument:      "invalid argument",
	CodeTooManyRequests:      "too many requests",
	CodeAddressNotRegistered: "address not registered",
	CodeBatchBusy:            "batch busy",
	CodeDeviceNotFound:       "device not found",
	CodeAddressOverlapped:    "address overlapped",
	CodeDNS:                  "dns",
	CodeSocket:               "socket",
	CodeMalformedJSON:        "malformed json",
	CodeRejectHandshake:      "handshake rejected",
	CodeMetadata:             "metadata",
	CodeEndpoint:             "endpoint",
	CodeContext:              "context",
	CodeNUMA:                 "numa",
	CodeClock:                "clock",
	CodeMemory:               "memory",
	CodeNotImplemented:       "not implemented",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("error %d", int(c))
}

// Error is an engine error carrying an upstream error number.
type Error struct {
	Code Code
	Msg  string
	Err  error // underlying cause, may be nil
}

func (e *Error) Error() string {
	s := fmt.Sprintf("transfer: %s (%d)", e.Code, int(e.Code))
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Err == nil && t.Code == e.Code
}

// ErrClosed is the cause of every error returned by a call that would
// start work on an engine that is closing or closed; such errors carry
// CodeContext. Test with errors.Is(err, ErrClosed).
var ErrClosed = errors.New("transfer: engine closed")

func errorf(code Code, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// CodeOf returns the error number carried by err: 0 for nil, the Error's code
// for an *Error, and -1 (upstream's generic failure) for anything else.
func CodeOf(err error) Code {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInvalidArgument
}
