package backend

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/mooncake-go/mooncake/internal/half"
)

// The scalar reference: one element at a time, folding sources in rank
// order with the dtype's own arithmetic (16-bit floats in float32).

func refInt[T integer](a, b T, op ReduceOp) T {
	switch op {
	case Sum, Avg:
		return a + b
	case Product:
		return a * b
	case Min:
		if b < a {
			return b
		}
		return a
	default:
		if b > a {
			return b
		}
		return a
	}
}

func refFloat[T float](a, b T, op ReduceOp) T {
	switch op {
	case Sum, Avg:
		return a + b
	case Product:
		return a * b
	case Min:
		if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
			return T(math.NaN())
		}
		return T(math.Min(float64(a), float64(b)))
	default:
		if math.IsNaN(float64(a)) || math.IsNaN(float64(b)) {
			return T(math.NaN())
		}
		return T(math.Max(float64(a), float64(b)))
	}
}

func refReduce(dt DType, op ReduceOp, srcs [][]byte, count int) []byte {
	es := dt.Size()
	out := make([]byte, count*es)
	n := len(srcs)
	le := binary.LittleEndian
	for i := range count {
		at := i * es
		switch dt {
		case Uint8:
			v := srcs[0][at]
			for _, s := range srcs[1:] {
				v = refInt(v, s[at], op)
			}
			if op == Avg {
				v /= uint8(n)
			}
			out[at] = v
		case Int8:
			v := int8(srcs[0][at])
			for _, s := range srcs[1:] {
				v = refInt(v, int8(s[at]), op)
			}
			if op == Avg {
				v /= int8(n)
			}
			out[at] = byte(v)
		case Int16:
			v := int16(le.Uint16(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refInt(v, int16(le.Uint16(s[at:])), op)
			}
			if op == Avg {
				v /= int16(n)
			}
			le.PutUint16(out[at:], uint16(v))
		case Int32:
			v := int32(le.Uint32(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refInt(v, int32(le.Uint32(s[at:])), op)
			}
			if op == Avg {
				v /= int32(n)
			}
			le.PutUint32(out[at:], uint32(v))
		case Int64:
			v := int64(le.Uint64(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refInt(v, int64(le.Uint64(s[at:])), op)
			}
			if op == Avg {
				v /= int64(n)
			}
			le.PutUint64(out[at:], uint64(v))
		case Bool:
			v := srcs[0][at] != 0
			for _, s := range srcs[1:] {
				if op == Product || op == Min {
					v = v && s[at] != 0
				} else {
					v = v || s[at] != 0
				}
			}
			if v {
				out[at] = 1
			}
		case Float32:
			v := math.Float32frombits(le.Uint32(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refFloat(v, math.Float32frombits(le.Uint32(s[at:])), op)
			}
			if op == Avg {
				v /= float32(n)
			}
			le.PutUint32(out[at:], math.Float32bits(v))
		case Float64:
			v := math.Float64frombits(le.Uint64(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refFloat(v, math.Float64frombits(le.Uint64(s[at:])), op)
			}
			if op == Avg {
				v /= float64(n)
			}
			le.PutUint64(out[at:], math.Float64bits(v))
		case Float16, BFloat16:
			widen, narrow := refF16ToF32, refF32ToF16
			if dt == BFloat16 {
				widen, narrow = refBF16ToF32, refF32ToBF16
			}
			v := widen(le.Uint16(srcs[0][at:]))
			for _, s := range srcs[1:] {
				v = refFloat(v, widen(le.Uint16(s[at:])), op)
			}
			if op == Avg {
				v /= float32(n)
			}
			le.PutUint16(out[at:], narrow(v))
		}
	}
	return out
}

// Independent 16-bit conversions: widening by the definition of the
// formats, narrowing by searching the sorted table of finite values.

func refF16ToF32(h uint16) float32 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	switch {
	case e == 0x1f && m == 0:
		return float32(s * math.Inf(1))
	case e == 0x1f:
		return float32(math.NaN())
	case e == 0:
		return float32(s * m * math.Pow(2, -24))
	}
	return float32(s * (1 + m/1024) * math.Pow(2, float64(e-15)))
}

func refBF16ToF32(h uint16) float32 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e, m := int(h>>7)&0xff, float64(h&0x7f)
	switch {
	case e == 0xff && m == 0:
		return float32(s * math.Inf(1))
	case e == 0xff:
		return float32(math.NaN())
	case e == 0:
		return float32(s * m * math.Pow(2, -133))
	}
	return float32(s * (1 + m/128) * math.Pow(2, float64(e-127)))
}

type table struct {
	vals []float64 // ascending, non-negative finite values
	bits []uint16
	inf  uint16
}

func makeTable(widen func(uint16) float32, expShift int) table {
	var t table
	for h := 0; h < 0x8000; h++ {
		v := float64(widen(uint16(h)))
		if math.IsInf(v, 1) {
			t.inf = uint16(h)
			continue
		}
		if math.IsNaN(v) {
			continue
		}
		t.vals = append(t.vals, v)
		t.bits = append(t.bits, uint16(h))
	}
	return t
}

var f16Table = makeTable(refF16ToF32, 10)
var bf16Table = makeTable(refBF16ToF32, 7)

func (t table) narrow(f float32) uint16 {
	if math.IsNaN(float64(f)) {
		return 0x7e00
	}
	var sign uint16
	x := float64(f)
	if x < 0 || (x == 0 && math.Signbit(x)) {
		sign, x = 0x8000, -x
	}
	n := len(t.vals)
	i := sort.SearchFloat64s(t.vals, x)
	if i < n && t.vals[i] == x {
		return sign | t.bits[i]
	}
	if i == n { // beyond max finite: overflow threshold is max + half ulp
		top, ulp := t.vals[n-1], t.vals[n-1]-t.vals[n-2]
		if x >= top+ulp/2 {
			return sign | t.inf
		}
		return sign | t.bits[n-1]
	}
	lo, hi := t.vals[i-1], t.vals[i]
	switch {
	case x-lo < hi-x:
		return sign | t.bits[i-1]
	case x-lo > hi-x:
		return sign | t.bits[i]
	}
	if t.bits[i-1]&1 == 0 {
		return sign | t.bits[i-1]
	}
	return sign | t.bits[i]
}

func refF32ToF16(f float32) uint16  { return f16Table.narrow(f) }
func refF32ToBF16(f float32) uint16 { return bf16Table.narrow(f) }

func isNaN16(dt DType, h uint16) bool {
	if dt == Float16 {
		return h&0x7c00 == 0x7c00 && h&0x3ff != 0
	}
	return h&0x7f80 == 0x7f80 && h&0x7f != 0
}

func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		for _, c := range []struct {
			dt     DType
			got    float32
			want   float32
			narrow func(float32) uint16
		}{
			{Float16, half.F16ToF32(uint16(h)), refF16ToF32(uint16(h)), half.F32ToF16},
			{BFloat16, half.BF16ToF32(uint16(h)), refBF16ToF32(uint16(h)), half.F32ToBF16},
		} {
			if isNaN16(c.dt, uint16(h)) {
				if !math.IsNaN(float64(c.got)) {
					t.Fatalf("%v %#04x: widened NaN to %v", c.dt, h, c.got)
				}
				continue
			}
			if math.Float32bits(c.got) != math.Float32bits(c.want) {
				t.Fatalf("%v %#04x: widened to %v, want %v", c.dt, h, c.got, c.want)
			}
			if back := c.narrow(c.got); back != uint16(h) {
				t.Fatalf("%v %#04x: round trip gave %#04x", c.dt, h, back)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		f := math.Float32frombits(rng.Uint32())
		if rng.IntN(2) == 0 { // values in the 16-bit ranges
			f = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-24)))
		}
		if math.IsNaN(float64(f)) {
			continue
		}
		if got, want := half.F32ToF16(f), refF32ToF16(f); got != want {
			t.Fatalf("half.F32ToF16(%g) = %#04x, want %#04x", f, got, want)
		}
		if got, want := half.F32ToBF16(f), refF32ToBF16(f); got != want {
			t.Fatalf("half.F32ToBF16(%g) = %#04x, want %#04x", f, got, want)
		}
	}
}

var allDTypes = []DType{Uint8, Int8, Int16, Int32, Int64, Float16, Float32, Float64, Bool, BFloat16}
var allOps = []ReduceOp{Sum, Avg, Product, Min, Max}

// randomElems fills count elements of dt with values that exercise the
// op (small magnitudes so products stay finite, some NaN for floats).
func randomElems(rng *rand.Rand, dt DType, count int, nan bool) []byte {
	es := dt.Size()
	b := make([]byte, count*es)
	le := binary.LittleEndian
	for i := range count {
		at := i * es
		x := rng.NormFloat64() * 3
		if nan && rng.IntN(50) == 0 {
			x = math.NaN()
		}
		switch dt {
		case Bool:
			b[at] = byte(rng.IntN(2))
		case Uint8, Int8:
			b[at] = byte(rng.Uint32())
		case Int16:
			le.PutUint16(b[at:], uint16(rng.Uint32()))
		case Int32:
			le.PutUint32(b[at:], rng.Uint32())
		case Int64:
			le.PutUint64(b[at:], rng.Uint64())
		case Float32:
			le.PutUint32(b[at:], math.Float32bits(float32(x)))
		case Float64:
			le.PutUint64(b[at:], math.Float64bits(x))
		case Float16:
			le.PutUint16(b[at:], refF32ToF16(float32(x)))
		case BFloat16:
			le.PutUint16(b[at:], refF32ToBF16(float32(x)))
		}
	}
	return b
}

func TestReduceMatchesScalarReference(t *testing.T) {
	defer func(f bool) { fusedFloats = f }(fusedFloats)
	for _, fused := range []bool{fusedFloats, false} { // false: the portable kernels
		fusedFloats = fused
		t.Run(fmt.Sprintf("fused=%v", fused), testReduceMatchesScalarReference)
	}
}

func testReduceMatchesScalarReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range allDTypes {
		for _, op := range allOps {
			if CheckReduction(dt, op) != nil {
				continue
			}
			for _, nsrc := range []int{1, 2, 3, 5} {
				for _, count := range []int{0, 1, 7, 1023, block + 13, 3*block + 1} {
					srcs := make([][]byte, nsrc)
					for i := range srcs {
						srcs[i] = randomElems(rng, dt, count, true)
					}
					want := refReduce(dt, op, srcs, count)
					got := make([]byte, len(want))
					if err := Reduce(got, srcs, dt, op, count); err != nil {
						t.Fatalf("%v %v: %v", dt, op, err)
					}
					if !bytes.Equal(got, want) && !equalNaN(dt, got, want) {
						t.Fatalf("%v %v n=%d count=%d: kernel and reference differ", dt, op, nsrc, count)
					}
					// in place into each source in turn
					for k := range srcs {
						in := append([][]byte(nil), srcs...)
						cp := append([]byte(nil), srcs[k]...)
						in[k] = cp
						if err := Reduce(cp, in, dt, op, count); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(cp, got) {
							t.Fatalf("%v %v: result in place of source %d differs", dt, op, k)
						}
						// with a second output, as allReduceRSPull uses it
						in[k] = append([]byte(nil), srcs[k]...)
						also := make([]byte, len(want))
						if err := reduceAlso(in[k], also, in, dt, op, count); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(in[k], got) || !bytes.Equal(also, got) {
							t.Fatalf("%v %v: reduceAlso in place of source %d differs", dt, op, k)
						}
					}
				}
			}
		}
	}
}

// equalNaN compares floats treating any two NaNs as equal.
func equalNaN(dt DType, a, b []byte) bool {
	es := dt.Size()
	le := binary.LittleEndian
	for i := 0; i < len(a); i += es {
		var x, y float64
		switch dt {
		case Float32:
			x, y = float64(math.Float32frombits(le.Uint32(a[i:]))), float64(math.Float32frombits(le.Uint32(b[i:])))
		case Float64:
			x, y = math.Float64frombits(le.Uint64(a[i:])), math.Float64frombits(le.Uint64(b[i:]))
		case Float16, BFloat16:
			if isNaN16(dt, le.Uint16(a[i:])) && isNaN16(dt, le.Uint16(b[i:])) {
				continue
			}
			if le.Uint16(a[i:]) != le.Uint16(b[i:]) {
				return false
			}
			continue
		default:
			return false
		}
		if math.IsNaN(x) && math.IsNaN(y) {
			continue
		}
		if math.Float64bits(x) != math.Float64bits(y) {
			return false
		}
	}
	return true
}

func TestCheckReduction(t *testing.T) {
	if err := CheckReduction(DType(27), Sum); err == nil { // uint16
		t.Fatal("uint16 reduction accepted")
	}
	if err := CheckReduction(Float32, ReduceOp(5)); err == nil { // BAND
		t.Fatal("BAND accepted")
	}
	if err := CheckReduction(Bool, Avg); err == nil {
		t.Fatal("bool AVG accepted")
	}
}
