// CPU reference operations of GPT-2 other than matmul and attention (matmul.c, attention.c; see
// ops.h). OpenMP over outer loops; every reduction runs in a fixed order, so results do not depend on
// the number of threads.
#include "ops.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"
#include "vec_math.h"
#include "profile.h"
#include "simd.h"

// the calling thread's share [*c0, *c1) of n items, for loops that must own disjoint columns
static void thread_range(int n, int* c0, int* c1) {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    *c0 = (int)((long)n * t / nt);
    *c1 = (int)((long)n * (t + 1) / nt);
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    double t0 = profile_begin();
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)inp[b * T + t] * C;
            const float* wp = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + wp[c];
        }
    PROFILE_END(t0, "encoder", "fwd", B * T, C, 0, 0.0, 4.0 * (2.0 * B * T * C + (double)T * C));
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    double t0 = profile_begin();
    // tokens repeat, so rows of dwte collide: split over channels instead, positions in order
#pragma omp parallel
    {
        int c0, c1;
        thread_range(C, &c0, &c1);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float* d = dout + ((size_t)b * T + t) * C;
                float* dwe = dwte + (size_t)inp[b * T + t] * C;
                float* dwp = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) {
                    dwe[c] += d[c];
                    dwp[c] += d[c];
                }
            }
    }
    PROFILE_END(t0, "encoder", "bwd", B * T, C, 0, 0.0, 4.0 * (3.0 * B * T * C + 2.0 * T * C));
}

// LayerNorm's per-row sums run 8 rows side by side, one row per lane of a vector, so that each row's
// serial chain of adds (in index order, as the one-row loops added) hides the others' latency; the
// rows come in 8 x 8 blocks, transposed. Products are rounded before they are added, as GCC's
// in-order vector reductions of the one-row loops rounded them (bitwise those for C a multiple of 16).
#define LN_ROWS 8

// the 8 x 8 block of rows r0..r0+7 (stride ld) at column c, transposed: col[j] = column c + j of the 8 rows
static inline void ln_columns(v8f col[8], const float* rows, size_t ld, int c) {
    for (int j = 0; j < 8; j++) col[j] = *(const v8f_u*)(rows + (size_t)j * ld + c);
    simd_transpose8(col);
}

// mean and 1 / sqrt(variance + eps) of LN_ROWS rows of x (stride C)
static void ln_stats8(float m_out[LN_ROWS], float s_out[LN_ROWS], const float* x, int C) {
    v8f acc = {0}, col[8];
    int c8 = C / 8 * 8;
    for (int c = 0; c < c8; c += 8) {
        ln_columns(col, x, C, c);
        for (int j = 0; j < 8; j++) acc += col[j];
    }
    for (int c = c8; c < C; c++)
        for (int r = 0; r < LN_ROWS; r++) acc[r] += x[(size_t)r * C + c];
    v8f m = acc / (float)C;
    acc = (v8f){0};
    for (int c = 0; c < c8; c += 8) {
        ln_columns(col, x, C, c);
        for (int j = 0; j < 8; j++) {
            v8f d = col[j] - m, p = d * d;
            SIMD_ROUNDED(p);
            acc += p;
        }
    }
    for (int c = c8; c < C; c++)
        for (int r = 0; r < LN_ROWS; r++) {
            float d = x[(size_t)r * C + c] - m[r], p = d * d;
            SIMD_ROUNDED(p);
            acc[r] += p;
        }
    v8f v = acc / (float)C;
    for (int r = 0; r < LN_ROWS; r++) {
        m_out[r] = m[r];
        s_out[r] = 1.0f / sqrtf(v[r] + 1e-5f);
    }
}

// the same for one row (the rows left over from groups of LN_ROWS), the same arithmetic
static void ln_stats1(float* m_out, float* s_out, const float* x, int C) {
    float m = 0.0f;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) {
        float d = x[c] - m, p = d * d;
        SIMD_ROUNDED(p);
        v += p;
    }
    v /= C;
    *m_out = m;
    *s_out = 1.0f / sqrtf(v + 1e-5f);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N, int C) {
    double t0 = profile_begin();
#pragma omp parallel for schedule(static)
    for (int g = 0; g < (N + LN_ROWS - 1) / LN_ROWS; g++) {
        int n0 = g * LN_ROWS, rows = N - n0 < LN_ROWS ? N - n0 : LN_ROWS;
        if (rows == LN_ROWS) ln_stats8(mean + n0, rstd + n0, inp + (size_t)n0 * C, C);
        else
            for (int r = 0; r < rows; r++) ln_stats1(mean + n0 + r, rstd + n0 + r, inp + (size_t)(n0 + r) * C, C);
        for (int n = n0; n < n0 + rows; n++) {
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float* o = out + (size_t)n * C;
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        }
    }
    PROFILE_END(t0, "layernorm", "fwd", N, C, 0, 8.0 * N * C, 4.0 * (2.0 * N * C + 2.0 * N));
}

// Σ dnorm and Σ dnorm · norm over each row, dnorm = weight · dout, norm = (x - mean) · rstd: 8 rows at once
static void ln_grad_sums8(float sum_dnorm[LN_ROWS], float sum_dnorm_norm[LN_ROWS], const float* d, const float* x, const float* weight,
                          const float* mean, const float* rstd, int C) {
    v8f m, s, acc1 = {0}, acc2 = {0}, xc[8], dc[8];
    for (int r = 0; r < LN_ROWS; r++) {
        m[r] = mean[r];
        s[r] = rstd[r];
    }
    int c8 = C / 8 * 8;
    for (int c = 0; c < c8; c += 8) {
        ln_columns(xc, x, C, c);
        ln_columns(dc, d, C, c);
        for (int j = 0; j < 8; j++) {
            v8f norm = (xc[j] - m) * s, dnorm = weight[c + j] * dc[j], p = dnorm * norm;
            SIMD_ROUNDED(p);
            acc1 += dnorm;
            acc2 += p;
        }
    }
    for (int c = c8; c < C; c++)
        for (int r = 0; r < LN_ROWS; r++) {
            float norm = (x[(size_t)r * C + c] - m[r]) * s[r], dnorm = weight[c] * d[(size_t)r * C + c], p = dnorm * norm;
            SIMD_ROUNDED(p);
            acc1[r] += dnorm;
            acc2[r] += p;
        }
    for (int r = 0; r < LN_ROWS; r++) {
        sum_dnorm[r] = acc1[r];
        sum_dnorm_norm[r] = acc2[r];
    }
}

void layernorm_backward_input(float* dinp, const float* dresidual, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int N, int C) {
    double t0 = profile_begin();
#pragma omp parallel for schedule(static)
    for (int g = 0; g < (N + LN_ROWS - 1) / LN_ROWS; g++) {
        int n0 = g * LN_ROWS, rows = N - n0 < LN_ROWS ? N - n0 : LN_ROWS;
        // dnorm = weight * dout; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
        float dnorm_mean[LN_ROWS], dnorm_norm_mean[LN_ROWS];
        if (rows == LN_ROWS)
            ln_grad_sums8(dnorm_mean, dnorm_norm_mean, dout + (size_t)n0 * C, inp + (size_t)n0 * C, weight, mean + n0, rstd + n0, C);
        for (int r = 0; r < rows; r++) {
            size_t n = n0 + r;
            const float* d = dout + n * C;
            const float* x = inp + n * C;
            float m = mean[n], s = rstd[n];
            if (rows < LN_ROWS) { // one row at a time, the same arithmetic
                dnorm_mean[r] = dnorm_norm_mean[r] = 0.0f;
                for (int c = 0; c < C; c++) {
                    float norm = (x[c] - m) * s, dnorm = weight[c] * d[c], p = dnorm * norm;
                    SIMD_ROUNDED(p);
                    dnorm_mean[r] += dnorm;
                    dnorm_norm_mean[r] += p;
                }
            }
            float dm = dnorm_mean[r] / C, dnm = dnorm_norm_mean[r] / C;
            float* di = dinp + n * C;
            const float* dr = dresidual ? dresidual + n * C : NULL;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * s, dnorm = weight[c] * d[c];
                // the sum onto 0 when there is no residual: bitwise the old accumulation into zeroed memory
                di[c] = (dr ? dr[c] : 0.0f) + (dnorm - dm - norm * dnm) * s;
            }
        }
    }
    PROFILE_END(t0, "layernorm", "bwd_in", N, C, 0, 14.0 * N * C, 4.0 * ((dresidual ? 4.0 : 3.0) * N * C + 2.0 * N));
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean, const float* rstd, int N, int C,
                               int accumulate) {
    double t0 = profile_begin();
#pragma omp parallel
    {
        int c0, c1;
        thread_range(C, &c0, &c1);
        if (!accumulate) // then added onto zeros, bitwise the old sum into zeroed memory
            for (int c = c0; c < c1; c++) dweight[c] = dbias[c] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dweight[c] += (x[c] - m) * s * d[c];
                dbias[c] += d[c];
            }
        }
    }
    PROFILE_END(t0, "layernorm", "bwd_w", N, C, 0, 5.0 * N * C, 4.0 * (2.0 * N * C + 2.0 * N));
}

#define GELU_SCALE 0.7978845608028654f // sqrt(2 / pi)
#define GELU_BLOCK 512                 // elements per tanhf_vec call (a few KiB on the stack)

// th = tanh(sqrt(2/pi) (x + 0.044715 x^3)) for block [b, b + GELU_BLOCK) of x (N); returns its length.
// (fmaf: x + 0.044715 x^3 as one fused multiply-add on 0.044715 x^2, the same on every machine)
static int gelu_tanh_block(float* th, const float* x, long N, long b) {
    int n = N - b < GELU_BLOCK ? (int)(N - b) : GELU_BLOCK;
    for (int i = 0; i < n; i++) th[i] = GELU_SCALE * fmaf(0.044715f * x[b + i] * x[b + i], x[b + i], x[b + i]);
    tanhf_vec(th, th, n);
    return n;
}

void gelu_forward(float* out, const float* inp, long N) {
    double t0 = profile_begin();
#pragma omp parallel for schedule(static)
    for (long b = 0; b < N; b += GELU_BLOCK) {
        float th[GELU_BLOCK];
        int n = gelu_tanh_block(th, inp, N, b);
        for (int i = 0; i < n; i++) out[b + i] = 0.5f * inp[b + i] * (1.0f + th[i]);
    }
    PROFILE_END(t0, "gelu", "fwd", (int)N, 0, 0, 0.0, 8.0 * N);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
    double t0 = profile_begin();
    const float k3 = 3.0f * 0.044715f; // folded in float, as the compiler folded it
#pragma omp parallel for schedule(static)
    for (long b = 0; b < N; b += GELU_BLOCK) {
        float th[GELU_BLOCK];
        int n = gelu_tanh_block(th, inp, N, b);
        const float* x = inp + b;
        for (int i = 0; i < n; i++) {
            float sech2 = fmaf(-th[i], th[i], 1.0f);
            float slope = 0.5f * x[i] * sech2 * GELU_SCALE * fmaf(k3 * x[i], x[i], 1.0f);
            float grad = fmaf(1.0f + th[i], 0.5f, slope);
            dinp[b + i] = fmaf(grad, dout[b + i], 0.0f); // onto 0: bitwise the old accumulation into zeroed memory
        }
    }
    PROFILE_END(t0, "gelu", "bwd", (int)N, 0, 0, 0.0, 12.0 * N);
}

void residual_forward(float* out, const float* inp1, const float* inp2, long N) {
    double t0 = profile_begin();
#pragma omp parallel for
    for (long i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
    PROFILE_END(t0, "residual", "fwd", (int)N, 0, 0, 0.0, 12.0 * N);
}

// Rows in groups of 8: each row's exponentials through expf_vec (within 1 ulp of exp), then the 8
// rows' sums in double side by side (simd_sum8_rows), each still in index order
void classifier_forward(float* losses, float* probs, const float* logits, const int* targets, int BT, int V, int Vp) {
    double t0 = profile_begin();
#pragma omp parallel for schedule(static)
    for (int g = 0; g < (BT + 7) / 8; g++) {
        int n0 = g * 8, rows = BT - n0 < 8 ? BT - n0 : 8;
        float maxv[8], target_logit[8];
        double sum[8];
        for (int r = 0; r < rows; r++) {
            const float* l = logits + (size_t)(n0 + r) * Vp;
            float* p = probs + (size_t)(n0 + r) * Vp;
            maxv[r] = simd_row_max(l, V);
            target_logit[r] = targets ? l[targets[n0 + r]] : 0.0f; // read before probs (may alias logits) overwrite it
            for (int i = 0; i < V; i++) p[i] = l[i] - maxv[r];
            expf_vec(p, p, V);
        }
        if (rows == 8) {
            v8d s8 = simd_sum8_rows(probs + (size_t)n0 * Vp, Vp, V, 0);
            for (int r = 0; r < 8; r++) sum[r] = s8[r];
        } else {
            for (int r = 0; r < rows; r++) {
                const float* p = probs + (size_t)(n0 + r) * Vp;
                sum[r] = 0.0;
                for (int i = 0; i < V; i++) sum[r] += p[i];
            }
        }
        for (int r = 0; r < rows; r++) {
            float* p = probs + (size_t)(n0 + r) * Vp;
            float inv = (float)(1.0 / sum[r]);
            for (int i = 0; i < V; i++) p[i] *= inv;
            for (int i = V; i < Vp; i++) p[i] = 0.0f;
            // -log softmax from the log-sum-exp, exact even where the probability underflows
            if (targets) losses[n0 + r] = (float)(log(sum[r]) - (double)(target_logit[r] - maxv[r]));
        }
    }
    PROFILE_END(t0, "softmax+CE", "fwd", BT, Vp, 0, 0.0, 8.0 * BT * Vp);
}

void classifier_backward(float* dlogits, const float* probs, const int* targets, float dloss, int BT, int V, int Vp) {
    double t0 = profile_begin();
#pragma omp parallel for
    for (int n = 0; n < BT; n++) {
        const float* p = probs + (size_t)n * Vp;
        float* d = dlogits + (size_t)n * Vp;
        for (int i = 0; i < V; i++) d[i] = p[i] * dloss;
        d[targets[n]] -= dloss;
        for (int i = V; i < Vp; i++) d[i] = 0.0f;
    }
    PROFILE_END(t0, "softmax+CE", "bwd", BT, Vp, 0, 0.0, 8.0 * BT * Vp);
}
