package transfer

import (
	"github.com/mooncake-go/mooncake/transfer/handshake"
	"github.com/mooncake-go/mooncake/transfer/metadata"
	"github.com/mooncake-go/mooncake/transfer/transport"
)

// The engine's vocabulary is defined by the lower packages that its
// transports share; these names are the engine's API for them.

// Opcode is a transfer direction, numbered as upstream (Read=0, Write=1).
type Opcode = transport.Opcode

// Transfer directions.
const (
	OpRead  = transport.OpRead
	OpWrite = transport.OpWrite
)

// Status is the state of a transfer task or batch (upstream
// TransferStatusEnum).
type Status = transport.Status

// Transfer states.
const (
	StatusWaiting   = transport.StatusWaiting
	StatusPending   = transport.StatusPending
	StatusInvalid   = transport.StatusInvalid
	StatusCanceled  = transport.StatusCanceled
	StatusCompleted = transport.StatusCompleted
	StatusTimeout   = transport.StatusTimeout
	StatusFailed    = transport.StatusFailed
)

// SegmentDesc is the JSON document a segment publishes (its registered
// buffers and how to reach it).
type SegmentDesc = transport.SegmentDesc

// BufferDesc describes one registered buffer of a segment.
type BufferDesc = transport.BufferDesc

// Notify is a short message delivered to a named segment.
type Notify = handshake.Notify

// P2PHandshake is the metadata "server" string that selects peer-to-peer
// handshake mode (no metadata server).
const P2PHandshake = metadata.P2PHandshake
