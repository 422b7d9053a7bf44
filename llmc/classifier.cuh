// The fused classifier on the GPU: softmax + cross-entropy over the first V of Vp logits (padding
// ignored) and the logits' gradient, one block per row, the vocabulary swept in 16-byte chunks with an
// online max/sum (no probabilities stored). The gradient overwrites the logits in place.
#pragma once
#include "cuda_common.cuh"

#define CLS_THREADS 512

// (m, s) <- the log-sum-exp state of both: s·e^m + s2·e^m2 = s'·e^m'
__device__ __forceinline__ void lse_combine(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == -INFINITY) return; // both empty
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

// STATS: lse[row] = log Σ_{i<V} e^logit_i, losses[row] = lse - logit[target] (if targets).
// GRAD:  logits[row] <- (softmax - onehot(target)) · dloss, padded columns 0; lse from STATS or from lse[].
template <bool STATS, bool GRAD>
__global__ void __launch_bounds__(CLS_THREADS) classifier_kernel(floatX* logits, float* losses, float* lse, const int* targets, float dloss, int V, int Vp) {
    __shared__ float sm_m[CLS_THREADS / 32], sm_s[CLS_THREADS / 32];
    int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    floatX* x = logits + (size_t)row * Vp;
    float L;
    if (STATS) {
        float m = -INFINITY, s = 0.0f;
        for (int i = tid * x128::size; i < V; i += CLS_THREADS * x128::size) {
            x128 v = load128(x + i);
            for (int k = 0; k < x128::size && i + k < V; k++) {
                float xv = to_float(v[k]); // one exponential per element
                if (xv > m) {
                    s = s * expf(m - xv) + 1.0f;
                    m = xv;
                } else {
                    s += expf(xv - m);
                }
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
            lse_combine(m, s, m2, s2);
        }
        if (lane == 0) {
            sm_m[w] = m;
            sm_s[w] = s;
        }
        // the target's logit, read before the barrier: after it, GRAD overwrites the row in place
        float target_logit = (tid == 0 && targets) ? to_float(x[targets[row]]) : 0.0f;
        __syncthreads();
        m = sm_m[0];
        s = sm_s[0];
        for (int i = 1; i < CLS_THREADS / 32; i++) lse_combine(m, s, sm_m[i], sm_s[i]); // same order in every thread
        L = m + logf(s);
        if (tid == 0) {
            lse[row] = L;
            if (targets) losses[row] = L - target_logit;
        }
    } else {
        L = lse[row];
    }
    if (GRAD) {
        int target = targets[row];
        for (int i = tid * x128::size; i < Vp; i += CLS_THREADS * x128::size) {
            x128 v = load128(x + i), d;
            for (int k = 0; k < x128::size; k++) {
                int col = i + k;
                float g = col < V ? (expf(to_float(v[k]) - L) - (col == target ? 1.0f : 0.0f)) * dloss : 0.0f;
                d[k] = from_float<floatX>(g);
            }
            store128(x + i, d);
        }
    }
}

static inline void classifier_check(int Vp, const char* what) {
    if (Vp % x128::size) td_fatal("%s: Vp = %d must be a multiple of %d", what, Vp, x128::size);
}

// losses (BT) (if targets, on the device) and lse (BT) from logits (BT, Vp); logits unchanged
static inline void classifier_forward_cuda(float* losses, float* lse, const floatX* logits, const int* targets, int BT, int V, int Vp) {
    classifier_check(Vp, "classifier_forward_cuda");
    classifier_kernel<true, false><<<BT, CLS_THREADS, 0, g_cuda_stream>>>((floatX*)logits, losses, lse, targets, 0.0f, V, Vp);
    cudaCheckLaunch("classifier_kernel<stats>");
}

// logits (BT, Vp) <- dlogits = (softmax - onehot(target)) · dloss, from the forward's lse (BT)
static inline void classifier_backward_cuda(floatX* logits, const float* lse, const int* targets, float dloss, int BT, int V, int Vp) {
    classifier_check(Vp, "classifier_backward_cuda");
    classifier_kernel<false, true><<<BT, CLS_THREADS, 0, g_cuda_stream>>>(logits, NULL, (float*)lse, targets, dloss, V, Vp);
    cudaCheckLaunch("classifier_kernel<grad>");
}

// both in one kernel: losses, lse, and logits <- dlogits
static inline void fused_classifier_cuda(floatX* logits, float* losses, float* lse, const int* targets, float dloss, int BT, int V, int Vp) {
    classifier_check(Vp, "fused_classifier_cuda");
    classifier_kernel<true, true><<<BT, CLS_THREADS, 0, g_cuda_stream>>>(logits, losses, lse, targets, dloss, V, Vp);
    cudaCheckLaunch("classifier_kernel<fused>");
}
