// Gradient check of the CPU GPT-2 core: the float analytic gradient of every one of the 16 parameter
// tensors (stage_forward + stage_backward + stage_tie_embedding_local) against central differences
// of an independent double-precision GPT-2 forward written below, on a tiny model.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/gpt2.h"
#include "llmc/rng.h"
#include "tdpipe/stage.h"
#include "tdpipe/stage_cpu.h"
#include "tests/test.h"

enum { NLAYER = 2, CH = 16, NHEAD = 2, HS = CH / NHEAD, VOCAB = 37, VPAD = 128, MAXT = 8, BATCH = 2, SEQ = 5, BT = BATCH * SEQ };
enum { SAMPLES = 20 }; // elements checked per tensor (all of a tensor that has fewer)

// llm.c's parameter layout, written out independently of gpt2_param_sizes: floats per tensor
static const size_t REF_SIZES[GPT2_NUM_PARAM_TENSORS] = {
    VPAD * CH, MAXT * CH, NLAYER * CH, NLAYER * CH, NLAYER * 3 * CH * CH, NLAYER * 3 * CH, NLAYER * CH * CH, NLAYER * CH,
    NLAYER * CH, NLAYER * CH, NLAYER * 4 * CH * CH, NLAYER * 4 * CH, NLAYER * 4 * CH * CH, NLAYER * CH, CH, CH};

// ---------------------------------------------------------------------------------------------
// the double-precision reference forward (loss only): plain loops, none of the float code

// out (CH) = LayerNorm(x (CH)) * w + b, eps 1e-5, biased variance
static void ref_layernorm(double* out, const double* x, const double* w, const double* b) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < CH; c++) m += x[c];
    m /= CH;
    for (int c = 0; c < CH; c++) v += (x[c] - m) * (x[c] - m);
    v /= CH;
    double s = 1.0 / sqrt(v + 1e-5);
    for (int c = 0; c < CH; c++) out[c] = (x[c] - m) * s * w[c] + b[c];
}

// out (n_out) = w (n_out, n_in) · in (n_in) + bias (n_out)
static void ref_linear(double* out, const double* in, const double* w, const double* bias, int n_in, int n_out) {
    for (int o = 0; o < n_out; o++) {
        double acc = bias[o];
        for (int i = 0; i < n_in; i++) acc += w[(size_t)o * n_in + i] * in[i];
        out[o] = acc;
    }
}

static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// mean cross-entropy over the BT positions of a GPT-2 with parameters p (llm.c layout, double)
static double ref_loss(const double* p, const int* inp, const int* tgt) {
    const double* t[GPT2_NUM_PARAM_TENSORS];
    const double* it = p;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        t[i] = it;
        it += REF_SIZES[i];
    }
    const double *wte = t[0], *wpe = t[1];
    double x[BT][CH], h[BT][CH], qkv[BT][3 * CH], y[BT][CH], f[BT][4 * CH], o[CH]; // residual stream and scratch
    for (int n = 0; n < BT; n++)
        for (int c = 0; c < CH; c++) x[n][c] = wte[inp[n] * CH + c] + wpe[(n % SEQ) * CH + c];
    for (int l = 0; l < NLAYER; l++) {
        const double *ln1w = t[2] + l * CH, *ln1b = t[3] + l * CH, *qkvw = t[4] + l * 3 * CH * CH, *qkvb = t[5] + l * 3 * CH;
        const double *projw = t[6] + l * CH * CH, *projb = t[7] + l * CH, *ln2w = t[8] + l * CH, *ln2b = t[9] + l * CH;
        const double *fcw = t[10] + l * 4 * CH * CH, *fcb = t[11] + l * 4 * CH, *fcpw = t[12] + l * 4 * CH * CH, *fcpb = t[13] + l * CH;
        for (int n = 0; n < BT; n++) {
            ref_layernorm(h[n], x[n], ln1w, ln1b);
            ref_linear(qkv[n], h[n], qkvw, qkvb, CH, 3 * CH);
        }
        // causal self-attention: position t of sequence b attends to positions 0..t of b
        for (int b = 0; b < BATCH; b++)
            for (int tq = 0; tq < SEQ; tq++)
                for (int hd = 0; hd < NHEAD; hd++) {
                    const double* q = qkv[b * SEQ + tq] + hd * HS;
                    double score[SEQ], mx = -INFINITY, sum = 0.0;
                    for (int tk = 0; tk <= tq; tk++) {
                        const double* k = qkv[b * SEQ + tk] + CH + hd * HS;
                        double d = 0.0;
                        for (int i = 0; i < HS; i++) d += q[i] * k[i];
                        score[tk] = d / sqrt((double)HS);
                        mx = fmax(mx, score[tk]);
                    }
                    for (int tk = 0; tk <= tq; tk++) sum += score[tk] = exp(score[tk] - mx);
                    double* out = y[b * SEQ + tq] + hd * HS;
                    for (int i = 0; i < HS; i++) out[i] = 0.0;
                    for (int tk = 0; tk <= tq; tk++)
                        for (int i = 0; i < HS; i++) out[i] += score[tk] / sum * qkv[b * SEQ + tk][2 * CH + hd * HS + i];
                }
        for (int n = 0; n < BT; n++) {
            ref_linear(o, y[n], projw, projb, CH, CH);
            for (int c = 0; c < CH; c++) x[n][c] += o[c];
            ref_layernorm(h[n], x[n], ln2w, ln2b);
            ref_linear(f[n], h[n], fcw, fcb, CH, 4 * CH);
            for (int i = 0; i < 4 * CH; i++) f[n][i] = ref_gelu(f[n][i]);
            ref_linear(o, f[n], fcpw, fcpb, 4 * CH, CH);
            for (int c = 0; c < CH; c++) x[n][c] += o[c];
        }
    }
    // final LayerNorm, tied LM head over the real vocabulary only, cross-entropy
    double loss = 0.0;
    for (int n = 0; n < BT; n++) {
        ref_layernorm(h[n], x[n], t[14], t[15]);
        double logit[VOCAB], mx = -INFINITY, sum = 0.0;
        for (int v = 0; v < VOCAB; v++) {
            double d = 0.0;
            for (int c = 0; c < CH; c++) d += h[n][c] * wte[v * CH + c];
            logit[v] = d;
            mx = fmax(mx, d);
        }
        for (int v = 0; v < VOCAB; v++) sum += exp(logit[v] - mx);
        loss += mx + log(sum) - logit[tgt[n]];
    }
    return loss / BT;
}

// ---------------------------------------------------------------------------------------------

int main(void) {
    GPT2Config cfg;
    cfg.max_seq_len = MAXT; cfg.vocab_size = VOCAB; cfg.padded_vocab_size = VPAD;
    cfg.num_layers = NLAYER; cfg.num_heads = NHEAD; cfg.channels = CH;
    GPT2Range all = {0, NLAYER, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n_stage = gpt2_param_sizes(&cfg, &all, sizes), n_params = 0;
    int layout_ok = 1;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        layout_ok &= sizes[i] == REF_SIZES[i];
        n_params += REF_SIZES[i];
    }
    CHECK(layout_ok && n_params == n_stage, "parameter layout matches llm.c's (%zu floats)", n_params);

    // GPT-2's init (std 0.02), then moved off its special values so every gradient is exercised:
    // matrices x5 (std 0.1: attention away from uniform, GELU away from linear), LayerNorm weights
    // 1 + 0.1 N(0,1), biases 0.05 N(0,1), and padded wte rows filled too (the loss must ignore them).
    float* full = (float*)calloc_check(n_params, sizeof(float));
    gpt2_init_full(&cfg, full, 1234);
    Rng rng;
    rng_init(&rng, 99);
    float* it = full;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        const char* name = gpt2_param_name(i);
        int ln_weight = i == 2 || i == 8 || i == 14, bias = name[strlen(name) - 1] == 'b' && i != 0;
        for (size_t j = 0; j < REF_SIZES[i]; j++) {
            if (ln_weight) it[j] = 1.0f + 0.1f * rng_normal(&rng);
            else if (bias) it[j] = 0.05f * rng_normal(&rng);
            else if (i == 0 && j >= (size_t)VOCAB * CH) it[j] = 0.1f * rng_normal(&rng);
            else it[j] *= 5.0f;
        }
        it += REF_SIZES[i];
    }
    Stage s;
    stage_create(&s, &STAGE_CPU, &(StageInit){.cfg = &cfg, .range = all, .B = BATCH, .T = SEQ, .full = full});
    stage_reserve(&s, 1, 1, 1, 0); // one micro-batch at a time
    int* inputs = stage_inputs(&s, 0);   // (BT)
    int* targets = stage_targets(&s, 0); // (BT)
    for (int n = 0; n < BT; n++) {
        inputs[n] = (int)rng_below(&rng, VOCAB);
        targets[n] = (int)rng_below(&rng, VOCAB);
    }
    inputs[SEQ + 2] = inputs[1]; // a repeated token: its wte row gathers two encoder gradients
    targets[3] = inputs[1];      // and the same row is a target (head share) too

    // analytic gradient, as the trainer takes it for one micro-batch
    Op f = {.kind = OP_F, .step = 0, .mb = 0, .version = 0}, b = {.kind = OP_B, .step = 0, .mb = 0, .version = 0};
    float loss_f = stage_forward(&s, &f, 0, 1);
    stage_backward(&s, &b, 0, 1.0f / (float)BT);
    stage_tie_local(&s, 0);
    const float* grads = stage_cpu_grads(&s, 0); // (n_params)

    double* pd = (double*)malloc_check(n_params * sizeof(double));
    for (size_t j = 0; j < n_params; j++) pd[j] = full[j];
    double loss_d = ref_loss(pd, inputs, targets);
    // the float forward rounds at ~6e-8 relative per operation over chains of ~50 operations and
    // sums of <= 64 terms, and the classifier's log-sum-exp is taken in double: a few 1e-7 relative
    // at most, so 2e-6 relative has margin ~10 while a wrong op would move the loss by >1e-3
    CHECK(fabs(loss_f - loss_d) <= 2e-6 * loss_d, "loss: float %.9f, double reference %.12f (diff %.2e, bound 2e-6 rel)",
          loss_f, loss_d, fabs(loss_f - loss_d));

    // padded wte rows: bitwise zero gradient (neither the encoder nor the head may touch them)
    int pad_zero = 1;
    for (size_t j = (size_t)VOCAB * CH; j < (size_t)VPAD * CH; j++) pad_zero &= grads[j] == 0.0f;
    CHECK(pad_zero, "padded wte rows (%d..%d) have an exactly zero gradient", VOCAB, VPAD - 1);

    // Bound: |g - g_fd| <= 1e-5 * max|g_tensor| + 1e-9.
    // g_fd: central differences in double with h = 1e-5: truncation h^2/6 |L'''| ~ 1e-11 and
    // rounding ~1e-16 * |L| / h ~ 1e-11, so g_fd is exact to well under the 1e-9.
    // g: float32, u = 6e-8 per operation. Each gradient element is a sum over BT = 10 positions of
    // products that went through a forward and backward chain of ~2 x 25 float operations and
    // reductions of at most 64 (4C) / 37 (V) terms; first-order error analysis gives |err| <~
    // 100 u (6e-6) times the largest contributing terms, which here are within a small factor of
    // the tensor's largest gradient. So 1e-5 * max|g_tensor| is the float32 bound (measured: under
    // 4e-7 of it on every tensor); a missing term, a wrong sign or a wrong factor in the backward
    // gives errors of the order of max|g_tensor| itself (a GELU constant off by 10%: 2e-4 to 3e-3).
    const double h = 1e-5, rtol = 1e-5, atol = 1e-9;
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        size_t n = REF_SIZES[i];
        const float* g = grads + off;
        double gmax = 0.0;
        for (size_t j = 0; j < n; j++) gmax = fmax(gmax, fabs(g[j]));
        size_t idx[SAMPLES];
        int m = 0;
        if (n <= SAMPLES) {
            for (size_t j = 0; j < n; j++) idx[m++] = j;
        } else if (i == 0) { // rows of tokens in the batch, other real rows, padded rows
            for (int k = 0; k < 8; k++) idx[m++] = (size_t)inputs[(k * 3) % BT] * CH + rng_below(&rng, CH);
            for (int k = 0; k < 6; k++) idx[m++] = (size_t)rng_below(&rng, VOCAB) * CH + rng_below(&rng, CH);
            for (int k = 0; k < 6; k++) idx[m++] = (size_t)(VOCAB + rng_below(&rng, VPAD - VOCAB)) * CH + rng_below(&rng, CH);
        } else {
            idx[m++] = 0;
            idx[m++] = n - 1;
            while (m < SAMPLES) idx[m++] = rng_below(&rng, (uint32_t)n);
        }
        double max_abs = 0.0, max_rel = 0.0, worst_excess = -1.0;
        for (int k = 0; k < m; k++) {
            double* e = pd + off + idx[k];
            double save = *e;
            *e = save + h;
            double lp = ref_loss(pd, inputs, targets);
            *e = save - h;
            double lm = ref_loss(pd, inputs, targets);
            *e = save;
            double fd = (lp - lm) / (2.0 * h), err = fabs(g[idx[k]] - fd);
            max_abs = fmax(max_abs, err);
            if (fabs(fd) > 1e-3 * gmax) max_rel = fmax(max_rel, err / fabs(fd));
            worst_excess = fmax(worst_excess, err - (rtol * gmax + atol));
        }
        CHECK(worst_excess <= 0.0 && gmax > 0.0,
              "%-8s %2d elements: max|g| %.3e, max abs err %.3e (%.2e of max|g|), max rel err %.3e (elements > 1e-3 max|g|)",
              gpt2_param_name(i), m, gmax, max_abs, max_abs / gmax, max_rel);
        off += n;
    }

    free(pd);
    free(full);
    stage_destroy(&s);
    return test_summary();
}
