// The shapes the CUDA kernels take, in plain C: the trainer refuses a model or a -t they cannot run
// before any kernel meets it (a sample's B = 1 otherwise failed at step 100), and the test of that
// refusal needs no GPU. Each kernel still checks its own operands.
#pragma once
#include <stdio.h>

#define CUDA_SHAPE_ALIGN 8 // M, N, K of every matmul and their strides: 16-byte chunks of bf16
#define LN_MAX_C 2048      // LayerNorm: one warp per row, the row in registers
#define ATT_MAX_DPL 8      // the simple attention kernels: head dims per lane (head size at most 32 x 8)

// 0 when a GPT-2 of channels C, NH heads and padded vocabulary Vp trains at sequence length T on the
// GPU (micro-batches B x T rows, samples 1 x T); else 1 and why, naming what to change
static inline int cuda_shapes_check(int C, int NH, int Vp, int T, char* why, size_t whylen) {
    int hs = NH > 0 && C % NH == 0 ? C / NH : 0;
    if (T % CUDA_SHAPE_ALIGN)
        snprintf(why, whylen, "-t %d: the GPU's matmuls take rows (B x T, and a sample's 1 x T) in multiples of %d", T, CUDA_SHAPE_ALIGN);
    else if (C % CUDA_SHAPE_ALIGN || C > LN_MAX_C)
        snprintf(why, whylen, "the model's C = %d: the GPU's kernels take a multiple of %d up to %d", C, CUDA_SHAPE_ALIGN, LN_MAX_C);
    else if (hs == 0 || hs % 32 || hs > 32 * ATT_MAX_DPL)
        snprintf(why, whylen, "the model's head size C/NH = %d/%d: the GPU's attention takes a multiple of 32 up to %d", C, NH, 32 * ATT_MAX_DPL);
    else if (Vp % CUDA_SHAPE_ALIGN)
        snprintf(why, whylen, "the model's padded vocabulary Vp = %d: the GPU's matmuls take a multiple of %d", Vp, CUDA_SHAPE_ALIGN);
    else
        return 0;
    return 1;
}
