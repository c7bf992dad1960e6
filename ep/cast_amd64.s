#include "textflag.h"

// func maxAbsBF16AVX2(src *uint16, n int) uint16
// The largest src[j]&0x7fff, a NaN (> 0x7f80) counting as 0. n is a
// multiple of 16.
TEXT ·maxAbsBF16AVX2(SB), NOSPLIT, $0-18
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	VPBROADCASTW castConst<>+28(SB), Y8 // 0x7fff: abs mask
	VPBROADCASTW castConst<>+32(SB), Y9 // 0x7f80: inf
	VPXOR Y0, Y0, Y0         // running max, per column

mloop:
	CMPQ CX, $16
	JL   mdone
	VMOVDQU  (SI), Y1
	VPAND    Y8, Y1, Y1      // |x|, a non-negative int16
	VPCMPGTW Y9, Y1, Y2      // |x| > inf: NaN
	VPANDN   Y1, Y2, Y1      // NaN -> 0
	VPMAXUW  Y1, Y0, Y0
	ADDQ $32, SI
	SUBQ $16, CX
	JMP  mloop

mdone: // the largest of the 16 columns: halve the width four times
	VEXTRACTI128 $1, Y0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUW      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUW      X1, X0, X0
	VPSRLD       $16, X0, X1
	VPMAXUW      X1, X0, X0
	VPEXTRW      $0, X0, AX
	MOVW         AX, ret+16(FP)
	VZEROUPPER
	RET

// The kernels' constants, broadcast from memory. Loaded the other way
// (MOVL into a general register, the legacy-SSE MOVQ into an X register,
// then VPBROADCASTD), each constant cost about 100 ns per call on the
// 2-core VM this was measured on: castE4M3AVX2 took 860 ns for 128 values
// that way, 43 ns this way.
DATA castConst<>+0(SB)/4, $0x7fffffff
DATA castConst<>+4(SB)/4, $0x3c000000
DATA castConst<>+8(SB)/4, $0x7ffff
DATA castConst<>+12(SB)/4, $0x7e
DATA castConst<>+16(SB)/4, $0x46800000
DATA castConst<>+20(SB)/4, $0x3c800000
DATA castConst<>+24(SB)/4, $0x7f800000
DATA castConst<>+28(SB)/2, $0x7fff
DATA castConst<>+32(SB)/2, $0x7f80
GLOBL castConst<>(SB), RODATA|NOPTR, $36

// dword order that undoes the two packs' lane interleaving
DATA permE4M3<>+0(SB)/4, $0
DATA permE4M3<>+4(SB)/4, $4
DATA permE4M3<>+8(SB)/4, $1
DATA permE4M3<>+12(SB)/4, $5
DATA permE4M3<>+16(SB)/4, $2
DATA permE4M3<>+20(SB)/4, $6
DATA permE4M3<>+24(SB)/4, $3
DATA permE4M3<>+28(SB)/4, $7
GLOBL permE4M3<>(SB), RODATA|NOPTR, $32

// E4M3X8 converts the 8 bf16 values at off(SI), times the scale in Y15,
// to e4m3 codes, one per dword, in OUT (f32ToE4M3 lane by lane). It
// writes Y0-Y3, Y11 and OUT; the constants are set up by castE4M3AVX2.
//   sign   = (u >> 31) << 7
//   normal: c = a - 120<<23; c = (c + 0x7ffff + (c>>20)&1) >> 20; min(c, 0x7e)
//   a < 2^-6 (subnormal): bits(float(a) + 2^14) - bits(2^14)
//   a > inf (NaN): 0x7f, as the saturated 0x7e plus one
#define E4M3X8(off, OUT) \
	VPMOVZXWD off(SI), Y0; \
	VPSLLD    $16, Y0, Y0; \
	VMULPS    Y15, Y0, Y0; \
	VPSRLD    $31, Y0, Y1; \
	VPSLLD    $7, Y1, Y1; \
	VPAND     Y14, Y0, Y2; \
	VPSUBD    Y13, Y2, Y3; \
	VPSRLD    $20, Y3, Y0; \
	VPSLLD    $31, Y0, Y0; \
	VPSRLD    $31, Y0, Y0; \
	VPADDD    Y12, Y3, Y3; \
	VPADDD    Y0, Y3, Y3; \
	VPSRLD    $20, Y3, Y3; \
	VPMINUD   Y10, Y3, Y3; \
	VADDPS    Y9, Y2, Y0; \
	VPSUBD    Y9, Y0, Y0; \
	VPCMPGTD  Y7, Y2, Y11; \
	VPCMPGTD  Y2, Y8, Y2; \
	VPBLENDVB Y2, Y0, Y3, Y3; \
	VPSUBD    Y11, Y3, Y3; \
	VPOR      Y1, Y3, OUT

// func castE4M3AVX2(dst *byte, src *uint16, n int, scale float32)
// dst[i] = f32ToE4M3(bf16(src[i]) * scale) for i < n, n a multiple of 32.
TEXT ·castE4M3AVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y15
	VPBROADCASTD castConst<>+0(SB), Y14  // abs mask
	VPBROADCASTD castConst<>+4(SB), Y13  // 120 << 23: the exponent rebias
	VPBROADCASTD castConst<>+8(SB), Y12  // half an ulp of the code, less one
	VPBROADCASTD castConst<>+12(SB), Y10 // 0x7e, the largest finite code
	VPBROADCASTD castConst<>+16(SB), Y9  // 2^14
	VPBROADCASTD castConst<>+20(SB), Y8  // 2^-6, the smallest normal
	VPBROADCASTD castConst<>+24(SB), Y7  // inf
	VMOVDQU permE4M3<>(SB), Y4

cloop:
	CMPQ CX, $32
	JL   cdone
	E4M3X8(0, Y5)
	E4M3X8(16, Y6)
	VPACKUSDW Y6, Y5, Y5     // words, per lane: a0-3 b0-3 | a4-7 b4-7
	E4M3X8(32, Y6)
	E4M3X8(48, Y3)
	VPACKUSDW Y3, Y6, Y6     // c0-3 d0-3 | c4-7 d4-7
	VPACKUSWB Y6, Y5, Y5     // dwords: a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
	VPERMD    Y5, Y4, Y5     // a0-7 b0-7 c0-7 d0-7
	VMOVDQU   Y5, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP  cloop

cdone:
	VZEROUPPER
	RET
