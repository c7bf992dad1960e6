package master

import (
	"math"
	"time"
)

// stamp is an instant in an object record: Unix nanoseconds in offset
// binary (the sign bit flipped), so that stamps order as the instants they
// hold and the zero stamp, which would be 1677, means none. It takes 8
// bytes where a time.Time takes 24. Snapshots and the operation log
// already keep these instants as wall-clock Unix nanoseconds; a stamp
// drops the monotonic reading of the leader's clock as well, so a step of
// the wall clock moves the deadlines compared against it by as much.
type stamp uint64

// The instants a stamp holds: Unix nanoseconds that fit an int64 (years
// 1678 to 2262); stampOf saturates outside them.
var (
	stampMin = time.Unix(0, math.MinInt64+1)
	stampMax = time.Unix(0, math.MaxInt64)
)

// stampOf returns t's stamp, 0 for the zero time.
func stampOf(t time.Time) stamp {
	switch {
	case t.IsZero():
		return 0
	case t.Before(stampMin):
		t = stampMin // a deadline that long past is past all the same
	case t.After(stampMax):
		t = stampMax // as far as a TTL of centuries reaches
	}
	return stamp(uint64(t.UnixNano()) ^ 1<<63)
}

// time returns the instant s holds, the zero time for 0.
func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(uint64(s)^1<<63))
}
