package backend

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// fusedFloats reports whether float32 and float64 reductions run the fused
// vector kernels of reduce_vec_amd64.s: one pass that reads every source
// once and writes dst once, so dst may alias any one source exactly.
var fusedFloats = cpu.X86.HasAVX2

// vecUnit is the bytes the vector kernels reduce per step.
const vecUnit = 128

//go:noescape
func sumF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func avgF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int, div float32)

//go:noescape
func prodF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func minF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func maxF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func sumF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func avgF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int, div float64)

//go:noescape
func prodF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func minF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

//go:noescape
func maxF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)

// vecCall is the most output bytes one kernel call reduces: assembly is
// not preemptible, so a long reduction (megabytes from eight sources) is cut
// into calls of tens of microseconds, which a goroutine preemption or a
// garbage collection can wait for.
const vecCall = 64 << 10

// vecReduce reduces the longest prefix of dst that is a whole number of
// vector units with the fused kernel, into also as well when it is not nil,
// and returns its length in elements (0 when the kernels do not run here).
// Every source, and also, hold len(dst) elements.
func vecReduce[T float](dst, also []T, srcs [][]T, op ReduceOp) int {
	es := int(unsafe.Sizeof(dst[0]))
	nb := len(dst) * es &^ (vecUnit - 1)
	if !fusedFloats || nb == 0 {
		return 0
	}
	var buf [8]unsafe.Pointer
	ptrs := buf[:0]
	for _, s := range srcs {
		ptrs = append(ptrs, unsafe.Pointer(unsafe.SliceData(s[:len(dst)])))
	}
	d := unsafe.Pointer(unsafe.SliceData(dst))
	var a unsafe.Pointer
	if also != nil {
		a = unsafe.Pointer(unsafe.SliceData(also[:len(dst)]))
	}
	for off := 0; off < nb; off += vecCall {
		if off > 0 { // advance only here: no pointer past the end
			for i := range ptrs {
				ptrs[i] = unsafe.Add(ptrs[i], vecCall)
			}
			d = unsafe.Add(d, vecCall)
			if a != nil {
				a = unsafe.Add(a, vecCall)
			}
		}
		vecKernel(es, op, d, a, ptrs, min(vecCall, nb-off))
	}
	return nb / es
}

// vecKernel runs the kernel of element size es and op on nb bytes.
func vecKernel(es int, op ReduceOp, d, a unsafe.Pointer, ptrs []unsafe.Pointer, nb int) {
	p, n := &ptrs[0], len(ptrs)
	if es == 4 {
		switch op {
		case Sum:
			sumF32AVX2(d, a, p, n, nb)
		case Avg:
			avgF32AVX2(d, a, p, n, nb, float32(n))
		case Product:
			prodF32AVX2(d, a, p, n, nb)
		case Min:
			minF32AVX2(d, a, p, n, nb)
		case Max:
			maxF32AVX2(d, a, p, n, nb)
		}
		return
	}
	switch op {
	case Sum:
		sumF64AVX2(d, a, p, n, nb)
	case Avg:
		avgF64AVX2(d, a, p, n, nb, float64(n))
	case Product:
		prodF64AVX2(d, a, p, n, nb)
	case Min:
		minF64AVX2(d, a, p, n, nb)
	case Max:
		maxF64AVX2(d, a, p, n, nb)
	}
}
