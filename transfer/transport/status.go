package transport

import "fmt"

// Opcode is a transfer direction, numbered as upstream (Read=0, Write=1).
type Opcode uint8

// Transfer directions.
const (
	OpRead  Opcode = 0
	OpWrite Opcode = 1
)

func (o Opcode) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// Status is the state of a transfer task, slice or batch (upstream
// TransferStatusEnum).
type Status int32

// Transfer states.
const (
	StatusWaiting Status = iota
	StatusPending
	StatusInvalid
	StatusCanceled
	StatusCompleted
	StatusTimeout
	StatusFailed
)

var statusNames = [...]string{"WAITING", "PENDING", "INVALID", "CANCELED", "COMPLETED", "TIMEOUT", "FAILED"}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "UNKNOWN"
}

// Final reports whether s is a final state.
func (s Status) Final() bool { return s >= StatusCanceled }

// StatusOf is the final status of a copy that returned err.
func StatusOf(err error) Status {
	if err != nil {
		return StatusFailed
	}
	return StatusCompleted
}
