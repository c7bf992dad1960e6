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

// reduceF32 uses gonum's assembly axpy for SUM (y += 1*x is exactly y+x).
func reduceF32(dst []float32, srcs [][]float32, op ReduceOp) {
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		d := dst[lo:hi]
		copy(d, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			if op == Sum || op == Avg {
				blas32.Axpy(1, blas32.Vector{N: hi - lo, Inc: 1, Data: s[lo:hi]}, blas32.Vector{N: hi - lo, Inc: 1, Data: d})
			} else {
				foldF(d, s[lo:hi], op)
			}
		}
		if op == Avg {
			n := float32(len(srcs))
			for i := range d {
				d[i] /= n
			}
		}
	}
}

func reduceF64(dst []float64, srcs [][]float64, op ReduceOp) {
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		d := dst[lo:hi]
		copy(d, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			if op == Sum || op == Avg {
				floats.Add(d, s[lo:hi])
			} else {
				foldF(d, s[lo:hi], op)
			}
		}
		if op == Avg {
			n := float64(len(srcs))
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
