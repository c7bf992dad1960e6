package kvevents

import (
	"encoding/binary"
	"errors"
	"math"
)

// The replay protocol, served on a ZMQ ROUTER (vLLM's replay_endpoint,
// extended with an end and a status):
//
//	request:  [""] START            START: u64 big-endian, first sequence wanted
//	          [""] START END        END: u64 big-endian, last one wanted (inclusive)
//	replies:  [""] TOPIC SEQ PAYLOAD     one per batch, in order, as published
//	end:      [""] "" 0xFFFFFFFFFFFFFFFF STATUS
//
// The empty delimiter frame is echoed when the request had one (REQ
// sockets add it; vLLM's subscriber sends it). STATUS is empty when every
// batch asked for (up to the newest) was sent. Otherwise no batch is sent
// and STATUS is a msgpack map {"error": "too_old" | "lost" | "bad_request",
// "oldest_seq": u64 or nil, "newest_seq": u64 or nil}: too_old means START
// is older than the oldest batch kept, lost that a batch in the range was
// dropped before publication; either way the subscriber must resync.

// endSeq is the sequence frame of the end marker (-1 as vLLM writes it).
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// replayRequest is a parsed request.
type replayRequest struct {
	delimited bool
	from, to  uint64
}

var errBadReplayRequest = errors.New("kvevents: replay request is not [\"\"] START [END] with 8-byte big-endian sequence numbers")

// parseReplayRequest parses a request's frames (after the ROUTER's
// identity).
func parseReplayRequest(frames [][]byte) (replayRequest, error) {
	var r replayRequest
	if len(frames) > 0 && len(frames[0]) == 0 {
		r.delimited = true
		frames = frames[1:]
	}
	switch len(frames) {
	case 1:
		switch len(frames[0]) {
		case 8:
			r.from, r.to = binary.BigEndian.Uint64(frames[0]), math.MaxUint64
			return r, nil
		case 16:
			r.from, r.to = binary.BigEndian.Uint64(frames[0]), binary.BigEndian.Uint64(frames[0][8:])
		default:
			return r, errBadReplayRequest
		}
	case 2:
		if len(frames[0]) != 8 || len(frames[1]) != 8 {
			return r, errBadReplayRequest
		}
		r.from, r.to = binary.BigEndian.Uint64(frames[0]), binary.BigEndian.Uint64(frames[1])
	default:
		return r, errBadReplayRequest
	}
	if r.to < r.from {
		return r, errBadReplayRequest
	}
	return r, nil
}

// replayStatus encodes the end marker's status for a failed replay.
func replayStatus(reason string, r *ring) []byte {
	oldest, newest, ok := r.bounds()
	b := appendMapHeader(nil, 3)
	b = appendString(b, "error")
	b = appendString(b, reason)
	b = appendString(b, "oldest_seq")
	if ok {
		b = appendUint(b, oldest)
	} else {
		b = appendNil(b)
	}
	b = appendString(b, "newest_seq")
	if ok {
		b = appendUint(b, newest)
	} else {
		b = appendNil(b)
	}
	return b
}

// Why a replay was refused ("" when it was served).
const (
	refusedTooOld     = "too_old"
	refusedLost       = "lost"
	refusedBadRequest = "bad_request"
)

// replayReplies returns the messages answering frames: the batches and
// the end marker, how many batches they hold, and why the replay was
// refused ("" when it was not).
func replayReplies(frames [][]byte, r *ring) (msgs [][][]byte, batches int, refusal string) {
	req, err := parseReplayRequest(frames)
	prefix := func(fs ...[]byte) [][]byte {
		if req.delimited {
			return append([][]byte{{}}, fs...)
		}
		return fs
	}
	if err != nil {
		refusal = refusedBadRequest
	} else {
		entries, res := r.collect(req.from, req.to)
		switch res {
		case rangeTooOld:
			refusal = refusedTooOld
		case rangeLost:
			refusal = refusedLost
		}
		for _, e := range entries {
			msgs = append(msgs, prefix([]byte{}, binary.BigEndian.AppendUint64(nil, e.seq), e.payload))
		}
	}
	var status []byte
	if refusal != "" {
		status = replayStatus(refusal, r)
	}
	return append(msgs, prefix([]byte{}, endSeq, status)), len(msgs), refusal
}
