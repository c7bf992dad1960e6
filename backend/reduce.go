package backend

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/half"
)

// Reduce computes dst = srcs[0] op srcs[1] op ... op srcs[n-1] element-wise,
// in that order, for count elements of dt. AVG is SUM followed by a division
// by len(srcs). float16 and bfloat16 accumulate in float32 and round once.
// dst may alias (exactly) any one of srcs; every slice must hold count
// elements. This one function defines every reduced value the backend
// produces, whatever the algorithm, so results are bitwise reproducible.
func Reduce(dst []byte, srcs [][]byte, dt DType, op ReduceOp, count int) error {
	if err := checkReduce(dst, srcs, dt, op, count); err != nil || count == 0 {
		return err
	}
	nb := count * dt.Size()
	for _, src := range srcs[1:] {
		if overlaps(dst[:nb], src[:nb]) && !(fusedKernel(dt) && sameStart(dst, src)) {
			return reduceAliased(dst[:nb], srcs, dt, op, count)
		}
	}
	reduceInto(dst, nil, srcs, dt, op, count)
	return nil
}

// reduceAlso is Reduce that writes the result into also too: a second
// output overlapping neither dst nor any source (a shared slot that peers
// read, while dst is the caller's buffer). Where the kernel is fused it
// stores both in the same pass; elsewhere it reduces into also and copies
// that into dst.
func reduceAlso(dst, also []byte, srcs [][]byte, dt DType, op ReduceOp, count int) error {
	nb := count * dt.Size()
	if !fusedKernel(dt) { // into also, which overlaps nothing, then a copy
		if err := Reduce(also, srcs, dt, op, count); err != nil {
			return err
		}
		copy(dst, also[:nb])
		return nil
	}
	if err := checkReduce(dst, srcs, dt, op, count); err != nil || count == 0 {
		return err
	}
	if len(also) < nb {
		return fmt.Errorf("%w: reduce second output holds %d bytes, need %d", ErrInvalid, len(also), nb)
	}
	for _, b := range append([][]byte{dst}, srcs...) {
		if overlaps(also[:nb], b[:nb]) {
			return fmt.Errorf("%w: reduce second output overlaps an input or the output", ErrInvalid)
		}
	}
	for _, src := range srcs {
		if overlaps(dst[:nb], src[:nb]) && !sameStart(dst, src) {
			return fmt.Errorf("%w: reduce output overlaps an input partially", ErrInvalid)
		}
	}
	reduceInto(dst, also, srcs, dt, op, count)
	return nil
}

func checkReduce(dst []byte, srcs [][]byte, dt DType, op ReduceOp, count int) error {
	if err := CheckReduction(dt, op); err != nil {
		return err
	}
	if len(srcs) == 0 {
		return fmt.Errorf("%w: reduce of no inputs", ErrInvalid)
	}
	nb := count * dt.Size()
	if len(dst) < nb {
		return fmt.Errorf("%w: reduce output holds %d bytes, need %d", ErrInvalid, len(dst), nb)
	}
	for i, s := range srcs {
		if len(s) < nb {
			return fmt.Errorf("%w: reduce input %d holds %d bytes, need %d", ErrInvalid, i, len(s), nb)
		}
	}
	return nil
}

// fusedKernel reports whether dt's kernel is one pass that reads every
// source before it writes dst, so that dst may be any one of the sources,
// not only the first, and a second output costs no extra pass.
func fusedKernel(dt DType) bool { return fusedFloats && (dt == Float32 || dt == Float64) }

func sameStart(a, b []byte) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

// aliasPiece is how much reduceAliased reduces at a time (bytes; a
// multiple of every element size): small enough to stay in L2.
const aliasPiece = 64 << 10

// aliasScratch holds reduceAliased's scratch pieces between calls: an
// in-place all_reduce on every rank but the first hits that path on every
// op, and allocating (and zeroing) a piece each time cost more than the
// reduction of a small message.
var aliasScratch = sync.Pool{New: func() any { b := make([]byte, aliasPiece); return &b }}

// reduceAliased handles a dst that overlaps a source other than the first
// in a way the kernel cannot take (fusedKernel): it reduces piece by piece into a
// scratch buffer. Elements are independent, so the result is the same.
func reduceAliased(dst []byte, srcs [][]byte, dt DType, op ReduceOp, count int) error {
	const piece = aliasPiece
	sp := aliasScratch.Get().(*[]byte)
	defer aliasScratch.Put(sp)
	scratch := (*sp)[:min(len(dst), piece)]
	var sb [smallGroup][]byte
	sub := room(sb[:], len(srcs))
	es := dt.Size()
	for off := 0; off < len(dst); off += piece {
		end := min(off+piece, len(dst))
		for i, s := range srcs {
			sub[i] = s[off:end]
		}
		reduceInto(scratch, nil, sub, dt, op, (end-off)/es)
		copy(dst[off:end], scratch[:end-off])
	}
	return nil
}

func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// reduceInto dispatches to the dtype's kernel; dst may alias srcs[0] only
// (any source exactly where fusedKernel). also, when not nil (float32 and
// float64 only), gets the result too.
func reduceInto(dst, also []byte, srcs [][]byte, dt DType, op ReduceOp, count int) {
	nb := count * dt.Size()
	switch dt {
	case Uint8:
		reduceInts(dst, srcs, count, op, uint8(0))
	case Int8:
		reduceInts(dst, srcs, count, op, int8(0))
	case Int16:
		reduceInts(dst, srcs, count, op, int16(0))
	case Int32:
		reduceInts(dst, srcs, count, op, int32(0))
	case Int64:
		reduceInts(dst, srcs, count, op, int64(0))
	case Bool:
		reduceBool(dst[:nb], srcs, op)
	case Float32:
		var vb [smallGroup][]float32
		reduceF32(view[float32](dst, count), view[float32](also, count), views(vb[:], srcs, count), op)
	case Float64:
		var vb [smallGroup][]float64
		reduceF64(view[float64](dst, count), view[float64](also, count), views(vb[:], srcs, count), op)
	case Float16:
		var vb [smallGroup][]uint16
		reduceHalf(view[uint16](dst, count), views(vb[:], srcs, count), op, half.F16ToF32, half.F32ToF16)
	case BFloat16:
		var vb [smallGroup][]uint16
		reduceHalf(view[uint16](dst, count), views(vb[:], srcs, count), op, half.BF16ToF32, half.F32ToBF16)
	}
}

// view reinterprets the first count elements of b as []T (nil for nil). Tensor storage
// and the registered buffers are aligned to the element size.
func view[T any](b []byte, count int) []T {
	if count == 0 || b == nil {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), count)
}

// views is view of each of bs, in buf (the caller's array) when they fit.
func views[T any](buf [][]T, bs [][]byte, count int) [][]T {
	out := room(buf, len(bs))
	for i, b := range bs {
		out[i] = view[T](b, count)
	}
	return out
}

// block is the number of elements reduced at a time, so the partial result
// stays in cache while every source is folded into it.
const block = 4096

func reduceBool(dst []byte, srcs [][]byte, op ReduceOp) {
	and := op == Product || op == Min
	for i := range dst {
		v := srcs[0][i] != 0
		for _, s := range srcs[1:] {
			if and {
				v = v && s[i] != 0
			} else {
				v = v || s[i] != 0
			}
		}
		if v {
			dst[i] = 1
		} else {
			dst[i] = 0
		}
	}
}
