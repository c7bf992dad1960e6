package backend

import "github.com/mooncake-go/mooncake/internal/envvars"

// Algorithm choice by size and world size: the one place it is made.

// maxStepBytes caps the piece one step of a pushing algorithm moves per
// message (stepBytes). A step reads its input, fills the peers' slots and
// copies or reduces out of its own; kept to 512 KiB per piece, that stays
// within a core's 2 MiB L2 cache where a 4 MiB slot does not. Measured on 2
// ranks (median busbw of 3-4 launches, GB/s, 4 MiB): all_reduce 7.2 -> 13.1,
// all_gather 5.4 -> 9.3, reduce_scatter 6.0 -> 10.0, all_to_all 4.0 -> 6.0.
// all_gather and broadcast by pulling (allgather_pull.go,
// broadcast_pull.go) keep whole slots: each of their steps also waits for
// every reader, and with 4 ranks on 2 cores smaller steps made 16 MiB
// all_gather and broadcast 12-14% slower.
const maxStepBytes = 512 << 10

// stepBytes is the largest piece one message of a chunked collective
// carries: the slot size, capped at maxStepBytes. Every rank derives it
// from the agreed layout, so all cut a tensor alike.
func (g *Group) stepBytes() int { return min(g.SlotBytes(), maxStepBytes) }

type allReduceFn func(g *Group, buf []byte, count int, dt DType, op ReduceOp) error

// directAllReduceMax is the largest all_reduce (bytes) done in one step by
// every rank handing its whole input to every other rank and reducing all
// of them locally: one round trip instead of two, at n-1 times the traffic.
// MC_PG_DIRECT_MAX overrides it.
var directAllReduceMax = envvars.PGDirectMax.Int(64 << 10)

// directPullMin is the smallest one-step all_reduce (bytes) of three or
// more ranks that lends each input from its owner's pull slot
// (allReduceDirectPull: one copy per rank) instead of copying it into every
// peer's slot (allReduceDirect: n-1 copies). Small messages cost per-op
// overhead rather than copies, so they keep the direct algorithm and its
// fewer steps per peer (no view of the peer's slot, no wait for the acks of
// the pull slot's previous readers).
const directPullMin = 8 << 10

// forcedAllReduce (MC_PG_ALLREDUCE_ALGO=direct|directpull|rsag|rspull) overrides the
// choice for sizes the algorithm can take, for benchmarking the algorithms
// against each other.
var forcedAllReduce = envvars.PGAllReduceAlgo.Value()

func chooseAllReduce(g *Group, nbytes int) allReduceFn {
	n := len(g.act) // active ranks
	if n == 1 {
		return allReduceLocal
	}
	switch forcedAllReduce {
	case "direct":
		if nbytes <= g.SlotBytes() {
			return allReduceDirect
		}
	case "directpull":
		if nbytes <= g.SlotBytes() {
			return allReduceDirectPull
		}
	case "rsag":
		return allReduceRSAG
	case "rspull":
		return allReduceRSPull
	}
	if n == 2 && nbytes <= g.stepBytes() {
		return allReduceDirect
	}
	if nbytes <= min(directAllReduceMax, g.SlotBytes()) {
		if nbytes >= directPullMin {
			return allReduceDirectPull
		}
		return allReduceDirect
	}
	if n == 2 {
		// pulling would save each rank a copy of half the data, but it
		// measured no faster between two ranks (interleaved, 16-64 MiB)
		return allReduceRSAG
	}
	return allReduceRSPull
}

type broadcastFn func(g *Group, buf []byte, root int) error

// chooseBroadcast: with two ranks pushing and pulling cost the same (one
// copy on each side); from three on, pulling saves the root n-2 copies of
// a message of pullMinBytes or more. A pulled op ends once every reader
// is done (pull.go): below that size the root's copies cost less than
// that wait, and pushing lets it go on at once.
func chooseBroadcast(g *Group, nbytes int) broadcastFn {
	if len(g.act) <= 2 || nbytes < pullMinBytes {
		return broadcastOneToAll
	}
	return broadcastPull
}

type allGatherFn func(g *Group, in, out []byte) error

// forcedAllGather (MC_PG_ALLGATHER_ALGO=direct|pull|cma) overrides the
// choice, for benchmarking the algorithms against each other (cma: every
// size reads with CMA where the group does).
var forcedAllGather = envvars.PGAllGatherAlgo.Value()

// pullMinBytes is the smallest block (bytes per rank) an all_gather, and
// the smallest message a broadcast, of three or more ranks pulls. Pulling
// saves copies but ends the op only once all peers have read the block;
// below this the copies cost less than that wait (all_gather of 4 ranks on
// 2 cores: 16 KiB blocks were faster pushed, 64 KiB ones pulled).
const pullMinBytes = 32 << 10

// cmaAllGatherMin is the smallest block a two-rank all_gather reads from
// its peer with CMA. Reading saves a copy but adds a round trip (the
// reader's acknowledgement) that pushing does not wait for. Measured with
// coll_mpi_bench.py, three launches each way interleaved (2026-12-06,
// benchmarks/RESULTS.md): between two ranks pushing was 1.2-1.5x faster
// for blocks up to 2 MiB, reading 1.06-1.2x faster from 8 MiB; among four
// ranks pulling (allgather_pull.go) beat reading at every size, by 1.5-2x
// from 1 MiB blocks, so groups of three or more do not read all_gather
// blocks with CMA.
const cmaAllGatherMin = 4 << 20

// chooseAllGather: between two ranks, blocks of cmaAllGatherMin or more
// are read from the peer with CMA where the group does (allgather_cma.go).
// Otherwise, with two ranks pushing and pulling copy the same bytes; from
// three on, blocks of nb >= pullMinBytes bytes are pulled.
func chooseAllGather(g *Group, nb int) allGatherFn {
	switch forcedAllGather {
	case "direct":
		return allGatherDirect
	case "pull":
		return allGatherPull
	case "cma":
		return allGatherCMA
	}
	if len(g.act) == 2 && nb >= cmaAllGatherMin {
		return allGatherCMA // or, where the group does not use CMA, copyingAllGather
	}
	return copyingAllGather(g, nb)
}

// copyingAllGather: the all_gather for blocks of nb bytes that copies
// through the group buffers.
func copyingAllGather(g *Group, nb int) allGatherFn {
	if len(g.act) <= 2 || nb < pullMinBytes {
		return allGatherDirect
	}
	return allGatherPull
}

type allToAllFn func(g *Group, in, out []byte, sendBytes, recvBytes []int) error

// forcedAllToAll (MC_PG_ALLTOALL_ALGO=pairwise|cma) overrides the choice,
// for benchmarking the algorithms against each other.
var forcedAllToAll = envvars.PGAllToAllAlgo.Value()

// chooseAllToAll: the pairwise algorithm (two copies per byte, through the
// peers' slots) unless MC_PG_ALLTOALL_ALGO=cma. Reading the blocks with
// CMA (one copy) measured slower on this host: process_vm_readv of 512 KiB
// from another process took 55 µs where a memcpy took 15. In two A/B runs
// of three launches each way, alternating (coll_mpi_bench.py, 2026-12-07,
// benchmarks/RESULTS.md), pairwise was ahead or level in 7 of the 8 cells
// of 2 and 4 ranks, 1-64 MiB, both times (two ranks, 1 MiB: 0.70 and 0.77
// of Open MPI's busbw against CMA's 0.58 and 0.59); CMA was ahead in one,
// four ranks of 1 MiB blocks (0.77 and 0.87 against 0.70 and 0.64), too
// narrow a band to choose by.
func chooseAllToAll() allToAllFn {
	if forcedAllToAll == "cma" {
		return allToAllCMA
	}
	return allToAllPairwise
}
