#include "textflag.h"

// func axpyBF16AVX2(acc *float32, row *uint16, n int, w float32)
TEXT ·axpyBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS w+24(FP), Y0

loop:
	CMPQ CX, $16
	JL   done
	VPMOVZXWD (SI), Y1
	VPMOVZXWD 16(SI), Y2
	VPSLLD    $16, Y1, Y1
	VPSLLD    $16, Y2, Y2
	VMULPS    Y0, Y1, Y1
	VMULPS    Y0, Y2, Y2
	VADDPS    (DI), Y1, Y1
	VADDPS    32(DI), Y2, Y2
	VMOVUPS   Y1, (DI)
	VMOVUPS   Y2, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// f32ToBF16AVX2's constants, broadcast from memory (see castConst in
// cast_amd64.s for why not through general registers).
DATA bf16Const<>+0(SB)/4, $0x7fff
DATA bf16Const<>+4(SB)/4, $1
DATA bf16Const<>+8(SB)/4, $0x7fffffff
DATA bf16Const<>+12(SB)/4, $0x7f800000
DATA bf16Const<>+16(SB)/4, $0x40
GLOBL bf16Const<>(SB), RODATA|NOPTR, $20

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
// Rounds to nearest even; NaN stays NaN (quiet bit set). n multiple of 8.
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD bf16Const<>+0(SB), Y8  // 0x7fff
	VPBROADCASTD bf16Const<>+4(SB), Y9  // 1
	VPBROADCASTD bf16Const<>+8(SB), Y10 // abs mask
	VPBROADCASTD bf16Const<>+12(SB), Y11 // inf
	VPBROADCASTD bf16Const<>+16(SB), Y12 // quiet bit (after the shift)

cloop:
	CMPQ CX, $8
	JL   cdone
	VMOVDQU (SI), Y1         // u
	VPSRLD  $16, Y1, Y2      // u >> 16
	VPAND   Y9, Y2, Y3       // lsb
	VPADDD  Y8, Y1, Y4
	VPADDD  Y3, Y4, Y4       // u + 0x7fff + lsb
	VPSRLD  $16, Y4, Y4      // rounded
	VPOR    Y12, Y2, Y5      // NaN result
	VPAND   Y10, Y1, Y6      // |u|
	VPCMPGTD Y11, Y6, Y6     // |u| > inf: NaN
	VPBLENDVB Y6, Y5, Y4, Y4
	VPACKUSDW Y4, Y4, Y4     // per lane: 4 words, repeated
	VPERMQ  $0x08, Y4, Y4    // qwords 0 and 2 to the low half
	VMOVDQU X4, (DI)
	ADDQ    $32, SI
	ADDQ    $16, DI
	SUBQ    $8, CX
	JMP     cloop

cdone:
	VZEROUPPER
	RET
