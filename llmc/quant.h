// 8-bit block quantization of fp32 vectors (the CPU reference; llmc/quant.cuh mirrors it): per
// block an fp32 scale absmax / 127 and int8 values rint(x / scale) in [-127, 127], error feedback,
// the replica-order dequantized sum, and the values' empirical entropy.
#pragma once
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define QUANT_MAX 127

// blocks of `block` elements covering n (the last one may be shorter)
static inline size_t quant_blocks(size_t n, int block) { return (n + (size_t)block - 1) / (size_t)block; }

// x (n) into q (n) and scale (quant_blocks(n, block)), block by block: scale = absmax / 127 (0 for a
// block of zeros; one float lower where 127 scale would overflow), q = rint(x / scale) clamped to [-127, 127] (round half to even, as rintf and CUDA's
// rintf). A block holding a NaN or an infinity is not quantized: its scale is NaN and its q 0, so
// whatever dequantizes it gets NaN (the guard then refuses the step). Returns how many elements of x
// were not finite (0: all quantized).
size_t quant_int8(const float* x, size_t n, int block, int8_t* q, float* scale);
// the same on v = x + residual, with error feedback: residual (n) becomes fmaf(-q, scale, v) (v - dq(q)
// rounded once), what the rounding dropped, to be added the next time (x is not written)
size_t quant_int8_ef(const float* x, float* residual, size_t n, int block, int8_t* q, float* scale);
// out (n) = dq(q) = q * scale, block by block
void dequant_int8(const int8_t* q, const float* scale, size_t n, int block, float* out);
// out (n) = fmaf(q, scale, out), one rounding per element: called for replica 0, 1, ... in turn
// after out = 0, the sum in replica order
void dequant_int8_add(const int8_t* q, const float* scale, size_t n, int block, float* out);

// hist (256) += how often each value occurs in q (n), at index value + 128
void quant_histogram_add(const int8_t* q, size_t n, uint64_t hist[256]);
// the empirical entropy of hist in bits per value (0 when it is empty): what an ideal entropy coder
// (Huffman comes within a bit of it) would spend per int8 value
double quant_entropy_bits(const uint64_t hist[256]);

#ifdef __cplusplus
}
#endif
