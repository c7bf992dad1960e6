#include "textflag.h"

// Fused float reductions: dst[i] = s0[i] op s1[i] op ... op s(n-1)[i],
// folding the sources in order, 128 bytes (four YMM vectors) at a time.
// Every source is read once and dst written once; since each 128-byte unit
// is read from every source before it is stored, dst may alias any source
// exactly. Arguments: dst, also (nil, or a second output that gets the
// same result: a shared slot that peers read while dst is the caller's
// buffer), srcs (array of nsrc source pointers), nsrc >= 1, nbytes (a
// multiple of 128) and, for AVG, the divisor.

// FOLD_* fold the vector at m (a source) into acc. MIN and MAX propagate
// NaN and otherwise match "s < acc ? s : acc" (resp. >) bit for bit:
// VMINPS's result is its second source when either input is NaN, so it
// keeps a NaN acc; the blend then takes a NaN s.
#define FOLD_ADDPS(m, acc) VADDPS m, acc, acc
#define FOLD_MULPS(m, acc) VMULPS m, acc, acc
#define FOLD_MINPS(m, acc) VMOVUPS m, Y8; VCMPPS $3, Y8, Y8, Y9; VMINPS acc, Y8, Y10; VBLENDVPS Y9, Y8, Y10, acc
#define FOLD_MAXPS(m, acc) VMOVUPS m, Y8; VCMPPS $3, Y8, Y8, Y9; VMAXPS acc, Y8, Y10; VBLENDVPS Y9, Y8, Y10, acc
#define FOLD_ADDPD(m, acc) VADDPD m, acc, acc
#define FOLD_MULPD(m, acc) VMULPD m, acc, acc
#define FOLD_MINPD(m, acc) VMOVUPD m, Y8; VCMPPD $3, Y8, Y8, Y9; VMINPD acc, Y8, Y10; VBLENDVPD Y9, Y8, Y10, acc
#define FOLD_MAXPD(m, acc) VMOVUPD m, Y8; VCMPPD $3, Y8, Y8, Y9; VMAXPD acc, Y8, Y10; VBLENDVPD Y9, Y8, Y10, acc

#define NOFINISH
#define DIVPS VDIVPS Y15, Y0, Y0; VDIVPS Y15, Y1, Y1; VDIVPS Y15, Y2, Y2; VDIVPS Y15, Y3, Y3
#define DIVPD VDIVPD Y15, Y0, Y0; VDIVPD Y15, Y1, Y1; VDIVPD Y15, Y2, Y2; VDIVPD Y15, Y3, Y3

// REDUCE is the loop: DI dst, BX also, SI srcs, R8 nsrc, CX nbytes, AX
// offset.
#define REDUCE(FOLD, FINISH) \
	MOVQ dst+0(FP), DI; \
	MOVQ also+8(FP), BX; \
	MOVQ srcs+16(FP), SI; \
	MOVQ nsrc+24(FP), R8; \
	MOVQ nbytes+32(FP), CX; \
	XORQ AX, AX; \
unit: \
	CMPQ AX, CX; \
	JAE  done; \
	MOVQ (SI), R9; \
	VMOVUPS (R9)(AX*1), Y0; \
	VMOVUPS 32(R9)(AX*1), Y1; \
	VMOVUPS 64(R9)(AX*1), Y2; \
	VMOVUPS 96(R9)(AX*1), Y3; \
	MOVQ $1, R10; \
next: \
	CMPQ R10, R8; \
	JAE  store; \
	MOVQ (SI)(R10*8), R9; \
	FOLD((R9)(AX*1), Y0); \
	FOLD(32(R9)(AX*1), Y1); \
	FOLD(64(R9)(AX*1), Y2); \
	FOLD(96(R9)(AX*1), Y3); \
	INCQ R10; \
	JMP  next; \
store: \
	FINISH; \
	VMOVUPS Y0, (DI)(AX*1); \
	VMOVUPS Y1, 32(DI)(AX*1); \
	VMOVUPS Y2, 64(DI)(AX*1); \
	VMOVUPS Y3, 96(DI)(AX*1); \
	TESTQ BX, BX; \
	JZ   advance; \
	VMOVUPS Y0, (BX)(AX*1); \
	VMOVUPS Y1, 32(BX)(AX*1); \
	VMOVUPS Y2, 64(BX)(AX*1); \
	VMOVUPS Y3, 96(BX)(AX*1); \
advance: \
	ADDQ $128, AX; \
	JMP  unit; \
done: \
	VZEROUPPER; \
	RET

// func sumF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·sumF32AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_ADDPS, NOFINISH)

// func avgF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int, div float32)
TEXT ·avgF32AVX2(SB), NOSPLIT, $0-44
	VBROADCASTSS div+40(FP), Y15
	REDUCE(FOLD_ADDPS, DIVPS)

// func prodF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·prodF32AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MULPS, NOFINISH)

// func minF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·minF32AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MINPS, NOFINISH)

// func maxF32AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·maxF32AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MAXPS, NOFINISH)

// func sumF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·sumF64AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_ADDPD, NOFINISH)

// func avgF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int, div float64)
TEXT ·avgF64AVX2(SB), NOSPLIT, $0-48
	VBROADCASTSD div+40(FP), Y15
	REDUCE(FOLD_ADDPD, DIVPD)

// func prodF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·prodF64AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MULPD, NOFINISH)

// func minF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·minF64AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MINPD, NOFINISH)

// func maxF64AVX2(dst, also unsafe.Pointer, srcs *unsafe.Pointer, nsrc, nbytes int)
TEXT ·maxF64AVX2(SB), NOSPLIT, $0-40
	REDUCE(FOLD_MAXPD, NOFINISH)
