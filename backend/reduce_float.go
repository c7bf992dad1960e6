package backend

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/floats"
)

type float interface{ ~float32 | ~float64 }

// minF and maxF propagate NaN, as torch does.
func minF[T float](a, b T) T {
	if a != a {
		return a
	}
	if b != b || b < a {
		return b
	}
	return a
}

func maxF[T float](a, b T) T {
	if a != a {
		return a
	}
	if b != b || b > a {
		return b
	}
	return a
}

// foldF applies a non-SUM op of src into d.
func foldF[T float](d, s []T, op ReduceOp) {
	switch op {
	case Product:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i := range d {
			d[i] = minF(d[i], s[i])
		}
	case Max:
		for i := range d {
			d[i] = maxF(d[i], s[i])
		}
	}
}

// reduceF32 and reduceF64 run the fused vector kernel (reduce_vec_*.go)
// where there is one, with a scalar tail of the same order of operations,
// storing into also as well when it is not nil; elsewhere the blocked Go
// code, which lets dst alias srcs[0] only (and copies dst into also).
func reduceF32(dst, also []float32, srcs [][]float32, op ReduceOp) {
	if fusedFloats {
		foldTail(dst, also, srcs, op, vecReduce(dst, also, srcs, op))
		return
	}
	reduceBlocks(dst, srcs, op, addF32)
	copy(also, dst)
}

// addF32 is d += s with gonum's assembly axpy (y += 1*x is exactly y+x).
func addF32(d, s []float32) {
	blas32.Axpy(1, blas32.Vector{N: len(d), Inc: 1, Data: s}, blas32.Vector{N: len(d), Inc: 1, Data: d})
}

func reduceF64(dst, also []float64, srcs [][]float64, op ReduceOp) {
	if fusedFloats {
		foldTail(dst, also, srcs, op, vecReduce(dst, also, srcs, op))
		return
	}
	reduceBlocks(dst, srcs, op, floats.Add)
	copy(also, dst)
}

// foldTail reduces elements from on, one at a time with every source
// read before dst (and also, when not nil) is written, so dst may alias any
// source exactly.
func foldTail[T float](dst, also []T, srcs [][]T, op ReduceOp, from int) {
	for i := from; i < len(dst); i++ {
		v := srcs[0][i]
		for _, s := range srcs[1:] {
			switch op {
			case Sum, Avg:
				v += s[i]
			case Product:
				v *= s[i]
			case Min:
				v = minF(v, s[i])
			case Max:
				v = maxF(v, s[i])
			}
		}
		if op == Avg {
			v /= T(len(srcs))
		}
		dst[i] = v
		if also != nil {
			also[i] = v
		}
	}
}

// reduceBlocks copies srcs[0] into a block of dst and folds the other
// sources into it (add: the SUM kernel), block by block so that the
// partial result stays in cache.
func reduceBlocks[T float](dst []T, srcs [][]T, op ReduceOp, add func(d, s []T)) {
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		d := dst[lo:hi]
		copy(d, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			if op == Sum || op == Avg {
				add(d, s[lo:hi])
			} else {
				foldF(d, s[lo:hi], op)
			}
		}
		if op == Avg {
			n := T(len(srcs))
			for i := range d {
				d[i] /= n
			}
		}
	}
}

// reduceHalf reduces 16-bit floats through a float32 accumulator.
func reduceHalf(dst []uint16, srcs [][]uint16, op ReduceOp, widen func(uint16) float32, narrow func(float32) uint16) {
	var acc, tmp [block]float32
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		t := tmp[:hi-lo]
		for i, v := range srcs[0][lo:hi] {
			a[i] = widen(v)
		}
		for _, s := range srcs[1:] {
			for i, v := range s[lo:hi] {
				t[i] = widen(v)
			}
			if op == Sum || op == Avg {
				for i := range a {
					a[i] += t[i]
				}
			} else {
				foldF(a, t, op)
			}
		}
		if op == Avg {
			n := float32(len(srcs))
			for i := range a {
				a[i] /= n
			}
		}
		d := dst[lo:hi]
		for i := range d {
			d[i] = narrow(a[i])
		}
	}
}
