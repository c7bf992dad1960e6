package backend

// allReduceLocal is all_reduce in a group of one: the result is the input
// (AVG divides by one).
func allReduceLocal(*Group, []byte, int, DType, ReduceOp) error { return nil }
