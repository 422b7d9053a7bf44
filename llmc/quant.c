// 8-bit block quantization (see quant.h): the arithmetic the CUDA kernels repeat bit for bit, one
// IEEE operation at a time (a true division by the scale, rintf, a product for the dequantized value,
// fmaf where a product is added: written out, so no compiler's contraction changes a bit).
#include "quant.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

// Every loop below is branch-free inside a block, so GCC vectorizes it (the divisions, rintf and
// the fused products stay one IEEE operation per element: the same bits as scalar code).

// one block's scale from its absmax (NaN when it holds a non-finite value), and its non-finite count
static float scale_of(float absmax, size_t nonfinite, size_t* bad) {
    *bad += nonfinite;
    if (nonfinite) return NAN;
    float s = absmax / (float)QUANT_MAX;
    return isinf(s * (float)QUANT_MAX) ? nextafterf(s, 0.0f) : s; // (near FLT_MAX a scale rounded up would dequantize to infinity)
}

// q (m) = rint(v / s) clamped to [-127, 127]; v = x (+ r), r then v - q s rounded once
static void quantize_block(const float* x, float* r, size_t m, float s, int8_t* q) {
    if (s == 0.0f || isnan(s)) { // zeros (or values whose scale underflows to 0): all 0; a NaN block is refused, its residual kept
        memset(q, 0, m);
        if (r && s == 0.0f)
            for (size_t i = 0; i < m; i++) r[i] = x[i] + r[i];
        return;
    }
    for (size_t i = 0; i < m; i++) {
        float v = r ? x[i] + r[i] : x[i];
        float y = rintf(v / s);
        y = y > (float)QUANT_MAX ? (float)QUANT_MAX : y; // a subnormal scale, rounded down, can put absmax / s past 127.5
        y = y < -(float)QUANT_MAX ? -(float)QUANT_MAX : y;
        q[i] = (int8_t)y;
        if (r) r[i] = fmaf(-y, s, v); // v - q s, rounded once
    }
}

// max |v| over the finite v = x (+ r) (m), and how many are not finite. On the bits: |v|'s patterns
// order as the values do, Inf and NaN above every finite one, so this is the float maximum exactly,
// as an integer max reduction, which vectorizes (a float one, by NaN's rules, does not)
static inline uint32_t abs_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u & 0x7fffffffu;
}
static float finite_absmax(const float* x, const float* r, size_t m, size_t* nonfinite) {
    uint32_t top = 0, bad = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t u = abs_bits(r ? x[i] + r[i] : x[i]), finite = u < 0x7f800000u, keep = u & (0u - finite); // (a mask: a ?: here stops the vectorizer)
        bad += 1u - finite;
        top = top > keep ? top : keep;
    }
    *nonfinite = bad;
    union { uint32_t u; float f; } absmax = {.u = top}; // (not memcpy: taking top's address stops the vectorizer)
    return absmax.f;
}

// quant_int8 (r NULL) and quant_int8_ef (r the residual)
static size_t quant_blocks_run(const float* x, float* r, size_t n, int block, int8_t* q, float* scale) {
    size_t bad = 0;
    for (size_t b = 0, off = 0; off < n; b++, off += (size_t)block) {
        size_t m = n - off < (size_t)block ? n - off : (size_t)block, nonfinite;
        const float* xb = x + off;
        float* rb = r ? r + off : NULL;
        float absmax = finite_absmax(xb, rb, m, &nonfinite);
        scale[b] = scale_of(absmax, nonfinite, &bad);
        quantize_block(xb, rb, m, scale[b], q + off);
    }
    return bad;
}

size_t quant_int8(const float* x, size_t n, int block, int8_t* q, float* scale) { return quant_blocks_run(x, NULL, n, block, q, scale); }

size_t quant_int8_ef(const float* x, float* residual, size_t n, int block, int8_t* q, float* scale) {
    return quant_blocks_run(x, residual, n, block, q, scale);
}

void dequant_int8(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    for (size_t b = 0, off = 0; off < n; b++, off += (size_t)block) {
        size_t m = n - off < (size_t)block ? n - off : (size_t)block;
        float s = scale[b];
        for (size_t i = 0; i < m; i++) out[off + i] = (float)q[off + i] * s;
    }
}

void dequant_int8_add(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    for (size_t b = 0, off = 0; off < n; b++, off += (size_t)block) {
        size_t m = n - off < (size_t)block ? n - off : (size_t)block;
        float s = scale[b];
        for (size_t i = 0; i < m; i++) out[off + i] = fmaf((float)q[off + i], s, out[off + i]); // fused, as CUDA's __fmaf_rn
    }
}

void quant_histogram_add(const int8_t* q, size_t n, uint64_t hist[256]) {
    for (size_t i = 0; i < n; i++) hist[q[i] + 128]++;
}

double quant_entropy_bits(const uint64_t hist[256]) {
    double total = 0.0, h = 0.0;
    for (int i = 0; i < 256; i++) total += (double)hist[i];
    if (total == 0.0) return 0.0;
    for (int i = 0; i < 256; i++)
        if (hist[i]) {
            double p = (double)hist[i] / total;
            h -= p * log2(p);
        }
    return h;
}
