package backend

type integer interface {
	~uint8 | ~int8 | ~int16 | ~int32 | ~int64
}

// reduceInts folds integer sources with wrap-around arithmetic; AVG is the
// wrapped sum divided by the number of sources, truncated toward zero.
func reduceInts[T integer](dstb []byte, srcsb [][]byte, count int, op ReduceOp, _ T) {
	dst := view[T](dstb, count)
	var vb [smallGroup][]T
	srcs := views(vb[:], srcsb, count)
	for lo := 0; lo < count; lo += block {
		hi := min(lo+block, count)
		d := dst[lo:hi]
		copy(d, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			s := s[lo:hi]
			switch op {
			case Sum, Avg:
				for i := range d {
					d[i] += s[i]
				}
			case Product:
				for i := range d {
					d[i] *= s[i]
				}
			case Min:
				for i := range d {
					if s[i] < d[i] {
						d[i] = s[i]
					}
				}
			case Max:
				for i := range d {
					if s[i] > d[i] {
						d[i] = s[i]
					}
				}
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
