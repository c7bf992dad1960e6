package backend

import "fmt"

// DType is an element type. The values are c10::ScalarType's, so the torch
// plugin passes tensor.scalar_type() through unchanged.
type DType int32

// Element types that reductions support. Any other type can still be moved
// (broadcast, gathers, all-to-all, point-to-point) as bytes.
const (
	Uint8    DType = 0
	Int8     DType = 1
	Int16    DType = 2
	Int32    DType = 3
	Int64    DType = 4
	Float16  DType = 5
	Float32  DType = 6
	Float64  DType = 7
	Bool     DType = 11
	BFloat16 DType = 15
)

var dtypeNames = map[DType]string{
	Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Float16: "float16", Float32: "float32", Float64: "float64", Bool: "bool", BFloat16: "bfloat16",
}

func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Size is the element size in bytes of a reducible dtype, 0 for others.
func (d DType) Size() int {
	switch d {
	case Uint8, Int8, Bool:
		return 1
	case Int16, Float16, BFloat16:
		return 2
	case Int32, Float32:
		return 4
	case Int64, Float64:
		return 8
	}
	return 0
}

// ReduceOp is a reduction. The values are c10d::ReduceOp::RedOpType's.
type ReduceOp int32

// Reductions. BAND, BOR, BXOR and PREMUL_SUM are not supported.
const (
	Sum     ReduceOp = 0
	Avg     ReduceOp = 1
	Product ReduceOp = 2
	Min     ReduceOp = 3
	Max     ReduceOp = 4
)

var reduceOpNames = map[ReduceOp]string{Sum: "SUM", Avg: "AVG", Product: "PRODUCT", Min: "MIN", Max: "MAX"}

func (o ReduceOp) String() string {
	if s, ok := reduceOpNames[o]; ok {
		return s
	}
	return fmt.Sprintf("ReduceOp(%d)", int32(o))
}

// CheckReduction reports whether op over dt is supported.
func CheckReduction(dt DType, op ReduceOp) error {
	if dt.Size() == 0 {
		return fmt.Errorf("%w: reductions over %v are not supported (supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool)", ErrInvalid, dt)
	}
	if _, ok := reduceOpNames[op]; !ok {
		return fmt.Errorf("%w: reduce op %v is not supported (supported: SUM, AVG, PRODUCT, MIN, MAX)", ErrInvalid, op)
	}
	if dt == Bool && op == Avg {
		return fmt.Errorf("%w: AVG over bool is not supported", ErrInvalid)
	}
	return nil
}
