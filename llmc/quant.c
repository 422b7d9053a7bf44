// 8-bit block quantization (see quant.h): the arithmetic the CUDA kernels repeat bit for bit, one
// IEEE operation at a time (a true division by the scale, rintf, a product for the dequantized value,
// fmaf where a product is added: written out, so no compiler's contraction changes a bit).
#include "quant.h"
#include <math.h>
#include <string.h>

// one block of x (+ r when r): its scale (NaN when it holds a non-finite value) and non-finite count
static float block_scale(const float* x, const float* r, size_t n, size_t* bad) {
    float absmax = 0.0f;
    size_t nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        float v = r ? x[i] + r[i] : x[i];
        if (!isfinite(v)) nonfinite++;
        else if (fabsf(v) > absmax) absmax = fabsf(v);
    }
    *bad += nonfinite;
    if (nonfinite) return NAN;
    float s = absmax / (float)QUANT_MAX;
    return isinf(s * (float)QUANT_MAX) ? nextafterf(s, 0.0f) : s; // (near FLT_MAX a scale rounded up would dequantize to infinity)
}

static int8_t quantize(float v, float scale) {
    if (scale == 0.0f) return 0; // a block of zeros (or of values whose scale underflows to 0)
    float y = rintf(v / scale);
    if (y > QUANT_MAX) y = QUANT_MAX; // a subnormal scale, rounded down, can put absmax / scale past 127.5
    if (y < -QUANT_MAX) y = -QUANT_MAX;
    return (int8_t)y;
}

// quant_int8 (r NULL) and quant_int8_ef (r the residual)
static size_t quant_blocks_run(const float* x, float* r, size_t n, int block, int8_t* q, float* scale) {
    size_t bad = 0;
    for (size_t b = 0, off = 0; off < n; b++, off += (size_t)block) {
        size_t m = n - off < (size_t)block ? n - off : (size_t)block;
        const float* xb = x + off;
        float* rb = r ? r + off : NULL;
        float s = block_scale(xb, rb, m, &bad);
        scale[b] = s;
        if (isnan(s)) { // not quantized; the residual is left as it was
            memset(q + off, 0, m);
            continue;
        }
        for (size_t i = 0; i < m; i++) {
            float v = rb ? xb[i] + rb[i] : xb[i];
            q[off + i] = quantize(v, s);
            if (rb) rb[i] = fmaf(-(float)q[off + i], s, v); // v - q s, rounded once
        }
    }
    return bad;
}

size_t quant_int8(const float* x, size_t n, int block, int8_t* q, float* scale) { return quant_blocks_run(x, NULL, n, block, q, scale); }

size_t quant_int8_ef(const float* x, float* residual, size_t n, int block, int8_t* q, float* scale) {
    return quant_blocks_run(x, residual, n, block, q, scale);
}

void dequant_int8(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    for (size_t i = 0; i < n; i++) out[i] = (float)q[i] * scale[i / (size_t)block];
}

void dequant_int8_add(const int8_t* q, const float* scale, size_t n, int block, float* out) {
    for (size_t i = 0; i < n; i++) out[i] = fmaf((float)q[i], scale[i / (size_t)block], out[i]); // fused, as CUDA's __fmaf_rn
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
