package transfer

import (
	"errors"

	"github.com/mooncake-go/mooncake/transfer/errcode"
)

// Code is an upstream Transfer Engine error number (include/error.h),
// defined in package errcode, which every transfer package shares.
type Code = errcode.Code

// Error is an engine error carrying an upstream error number.
type Error = errcode.Error

// Error numbers, as upstream's Transfer Engine defines them.
const (
	CodeInvalidArgument      = errcode.InvalidArgument
	CodeTooManyRequests      = errcode.TooManyRequests
	CodeAddressNotRegistered = errcode.AddressNotRegistered
	CodeBatchBusy            = errcode.BatchBusy
	CodeDeviceNotFound       = errcode.DeviceNotFound
	CodeAddressOverlapped    = errcode.AddressOverlapped
	CodeDNS                  = errcode.DNS
	CodeSocket               = errcode.Socket
	CodeMalformedJSON        = errcode.MalformedJSON
	CodeRejectHandshake      = errcode.RejectHandshake
	CodeMetadata             = errcode.Metadata
	CodeEndpoint             = errcode.Endpoint
	CodeContext              = errcode.Context
	CodeNUMA                 = errcode.NUMA
	CodeClock                = errcode.Clock
	CodeMemory               = errcode.Memory
	CodeNotImplemented       = errcode.NotImplemented
)

// ErrClosed is the cause of every error returned by a call that would
// start work on an engine that is closing or closed; such errors carry
// CodeContext. Test with errors.Is(err, ErrClosed).
var ErrClosed = errors.New("transfer: engine closed")

func errorf(code Code, cause error, format string, args ...any) *Error {
	return errcode.Errorf(code, cause, format, args...)
}

// CodeOf returns the error number carried by err: 0 for nil, the Error's code
// for an *Error, and -1 (upstream's generic failure) for anything else.
func CodeOf(err error) Code { return errcode.Of(err) }
