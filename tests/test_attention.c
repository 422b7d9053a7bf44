// Causal self-attention on the CPU (llmc/attention.c) against a double-precision reference written
// below: forward (att, out) and backward (dq, dk, dv) at sequence lengths that leave every vector tail
// of the kernels' key loops (1 to 4 vectors of VL, past one group of four) and every partial tile of
// rows, at head sizes that leave every column remainder; 1 and 2 threads bitwise equal.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/attention.h"
#include "llmc/rng.h"
#include "tests/test.h"

enum { B = 2, NH = 3 };
static int HS, C; // the head size of the case being checked; C = NH HS

// the reference of one (b, h): att (T, T), out rows, and dq, dk, dv rows (stride 3C, as dqkv's) from
// dout, all in double with plain loops
static void ref_head(double* att, double* out, double* dqkv, const float* qkv, const float* dout, int b, int h, int T) {
    const float* base = qkv + (size_t)b * T * 3 * C + h * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double* dpre = (double*)calloc((size_t)T * T, sizeof(double));
    for (int t = 0; t < T; t++) {
        double* a = att + (size_t)t * T, maxv = -INFINITY, sum = 0.0;
        for (int t2 = 0; t2 <= t; t2++) {
            double dot = 0.0;
            for (int i = 0; i < HS; i++) dot += (double)base[(size_t)t * 3 * C + i] * base[(size_t)t2 * 3 * C + C + i];
            a[t2] = dot * scale;
            if (a[t2] > maxv) maxv = a[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) sum += a[t2] = exp(a[t2] - maxv);
        for (int t2 = 0; t2 < T; t2++) a[t2] = t2 <= t ? a[t2] / sum : 0.0;
        for (int i = 0; i < HS; i++) {
            double o = 0.0;
            for (int t2 = 0; t2 <= t; t2++) o += a[t2] * base[(size_t)t2 * 3 * C + 2 * C + i];
            out[(size_t)t * C + i] = o;
        }
        // back through out = att v and the softmax
        const float* d = dout + ((size_t)b * T + t) * C + h * HS;
        double datt_dot = 0.0, datt[T];
        for (int t2 = 0; t2 <= t; t2++) {
            datt[t2] = 0.0;
            for (int i = 0; i < HS; i++) datt[t2] += (double)d[i] * base[(size_t)t2 * 3 * C + 2 * C + i];
            datt_dot += a[t2] * datt[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) dpre[(size_t)t * T + t2] = a[t2] * (datt[t2] - datt_dot) * scale;
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HS; i++) {
            double dq = 0.0, dk = 0.0, dv = 0.0;
            for (int t2 = 0; t2 <= t; t2++) dq += dpre[(size_t)t * T + t2] * base[(size_t)t2 * 3 * C + C + i];
            for (int tq = t; tq < T; tq++) { // t as a key: the queries at or after it
                dk += dpre[(size_t)tq * T + t] * base[(size_t)tq * 3 * C + i];
                dv += att[(size_t)tq * T + t] * dout[((size_t)b * T + tq) * C + h * HS + i];
            }
            dqkv[(size_t)t * 3 * C + i] = dq;
            dqkv[(size_t)t * 3 * C + C + i] = dk;
            dqkv[(size_t)t * 3 * C + 2 * C + i] = dv;
        }
    free(dpre);
}

// the largest |got - want| over rows x cols values (row strides gld and wld); *maxabs: raised to the largest |want| seen
static double worst_rel(const float* got, size_t gld, const double* want, size_t wld, int rows, int cols, double* maxabs) {
    double worst = 0.0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double w = want[(size_t)r * wld + c], e = fabs(got[(size_t)r * gld + c] - w);
            if (fabs(w) > *maxabs) *maxabs = fabs(w);
            if (!(e <= worst)) worst = e != e ? INFINITY : e; // a NaN (an element never written) fails any bound
        }
    return worst;
}

// an error relative to the largest value, or the error itself for a tensor that is all zero (dq and dk at T = 1)
static double rel(double e, double m) { return m > 0 ? e / m : e; }

static void check_attention(int T, int hs) {
    HS = hs, C = NH * hs;
    size_t nq = (size_t)B * T * 3 * C, na = (size_t)B * NH * T * T, no = (size_t)B * T * C;
    float* qkv = (float*)malloc(nq * sizeof(float));
    float* dout = (float*)malloc(no * sizeof(float));
    Rng r;
    rng_init(&r, 5 + T);
    for (size_t i = 0; i < nq; i++) qkv[i] = 0.5f * rng_normal(&r); // std 0.5: softmax rows far from uniform and from one-hot
    for (size_t i = 0; i < no; i++) dout[i] = rng_normal(&r);
    float *att[2], *out[2], *dqkv[2], *datt[2];
    for (int th = 0; th < 2; th++) {
        omp_set_num_threads(th + 1);
        att[th] = (float*)malloc(na * sizeof(float));
        out[th] = (float*)malloc(no * sizeof(float));
        dqkv[th] = (float*)malloc(nq * sizeof(float));
        datt[th] = (float*)malloc(na * sizeof(float));
        for (size_t i = 0; i < nq; i++) dqkv[th][i] = NAN; // every element is written, none added into
        attention_forward(out[th], att[th], qkv, B, T, C, NH);
        attention_backward(dqkv[th], datt[th], dout, qkv, att[th], B, T, C, NH);
    }
    double* ratt = (double*)malloc((size_t)T * T * sizeof(double));
    double* rout = (double*)malloc((size_t)T * C * sizeof(double));
    double* rd = (double*)malloc((size_t)T * 3 * C * sizeof(double));
    double e_att = 0, e_out = 0, e_dq = 0, e_dk = 0, e_dv = 0, m_att = 0, m_out = 0, m_dq = 0, m_dk = 0, m_dv = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            ref_head(ratt, rout, rd, qkv, dout, b, h, T);
            e_att = fmax(e_att, worst_rel(att[0] + ((size_t)b * NH + h) * T * T, T, ratt, T, T, T, &m_att));
            e_out = fmax(e_out, worst_rel(out[0] + (size_t)b * T * C + h * HS, C, rout, C, T, HS, &m_out));
            float* g = dqkv[0] + (size_t)b * T * 3 * C + h * HS;
            e_dq = fmax(e_dq, worst_rel(g, 3 * C, rd, 3 * C, T, HS, &m_dq));
            e_dk = fmax(e_dk, worst_rel(g + C, 3 * C, rd + C, 3 * C, T, HS, &m_dk));
            e_dv = fmax(e_dv, worst_rel(g + 2 * C, 3 * C, rd + 2 * C, 3 * C, T, HS, &m_dv));
        }
    // float32 (u = 6e-8): each value is a sum of at most HS + T rounded terms of the tensor's own size
    // or smaller, so its error is below (HS + T) u of the largest |value| (1e-5 at HS 64, T 100); what
    // the kernels give is about 1e-7 to 5e-7, well inside
    const double tol = (HS + T) * 6e-8;
    CHECK(e_att <= tol * m_att && e_out <= tol * m_out, "attention forward T %d hs %d: att and out within %.1g of double, relative to the largest value (%.2g, %.2g)", T, hs, tol,
          rel(e_att, m_att), rel(e_out, m_out));
    CHECK(e_dq <= tol * m_dq && e_dk <= tol * m_dk && e_dv <= tol * m_dv,
          "attention backward T %d hs %d: dq, dk, dv within %.1g of double, relative to the largest value (%.2g, %.2g, %.2g)", T, hs, tol, rel(e_dq, m_dq), rel(e_dk, m_dk),
          rel(e_dv, m_dv));
    CHECK(!memcmp(att[0], att[1], na * 4) && !memcmp(out[0], out[1], no * 4) && !memcmp(dqkv[0], dqkv[1], nq * 4),
          "attention T %d hs %d: 1 and 2 threads bitwise equal (att, out, dqkv)", T, hs);
    for (int th = 0; th < 2; th++) {
        free(att[th]);
        free(out[th]);
        free(dqkv[th]);
        free(datt[th]);
    }
    free(ratt);
    free(rout);
    free(rd);
    free(qkv);
    free(dout);
}

int main(void) {
    // rows of 1..T keys: T = 64 and 100 pass through every count of 1 to 4 tail vectors (and 100 past
    // a group of four); 5, 17 and 50 end inside a vector and inside a tile of rows
    int Ts[] = {1, 5, 17, 50, 64, 100};
    for (int i = 0; i < (int)(sizeof Ts / sizeof Ts[0]); i++) check_attention(Ts[i], 64); // GPT-2's head size
    // head sizes past whole register blocks of columns: 80 (AVX-512: a block of 4 vectors and 1 more),
    // 24 (a vector and 8 columns one by one), 8 (below one vector), 200 (AVX: blocks of 2 and a tail)
    int hss[] = {80, 24, 8, 200};
    for (int i = 0; i < (int)(sizeof hss / sizeof hss[0]); i++) {
        check_attention(17, hss[i]);
        check_attention(64, hss[i]);
    }
    omp_set_num_threads(2);
    return test_summary();
}
