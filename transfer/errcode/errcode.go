// Package errcode holds the Transfer Engine's error numbers (upstream's
// include/error.h) and the error type that carries one. It sits below
// every other transfer package, so that the engine, its transports and its
// metadata backends report failures the same way.
package errcode

import (
	"errors"
	"fmt"
)

// Code is an upstream Transfer Engine error number.
type Code int

// Error numbers, as upstream's Transfer Engine defines them.
const (
	InvalidArgument      Code = -1
	TooManyRequests      Code = -2
	AddressNotRegistered Code = -3
	BatchBusy            Code = -4
	DeviceNotFound       Code = -6
	AddressOverlapped    Code = -7
	DNS                  Code = -101
	Socket               Code = -102
	MalformedJSON        Code = -103
	RejectHandshake      Code = -104
	Metadata             Code = -200
	Endpoint             Code = -201
	Context              Code = -202
	NUMA                 Code = -300
	Clock                Code = -301
	Memory               Code = -302
	NotImplemented       Code = -303
)

var names = map[Code]string{
	InvalidArgument:      "invalid argument",
	TooManyRequests:      "too many requests",
	AddressNotRegistered: "address not registered",
	BatchBusy:            "batch busy",
	DeviceNotFound:       "device not found",
	AddressOverlapped:    "address overlapped",
	DNS:                  "dns",
	Socket:               "socket",
	MalformedJSON:        "malformed json",
	RejectHandshake:      "handshake rejected",
	Metadata:             "metadata",
	Endpoint:             "endpoint",
	Context:              "context",
	NUMA:                 "numa",
	Clock:                "clock",
	Memory:               "memory",
	NotImplemented:       "not implemented",
}

func (c Code) String() string {
	if s, ok := names[c]; ok {
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

// Errorf returns an Error with code, cause (may be nil) and a formatted
// message.
func Errorf(code Code, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// Of returns the error number carried by err: 0 for nil, the Error's code
// for an *Error, and InvalidArgument (-1, upstream's generic failure) for
// anything else.
func Of(err error) Code {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InvalidArgument
}
