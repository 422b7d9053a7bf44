// CPU reference operations of GPT-2 other than matmul and attention (matmul.h, attention.h): encoder,
// layernorm, GELU, residual, fused softmax + cross-entropy. Forward and backward; weight gradients
// accumulate (+=), input gradients are written (as the CUDA kernels in llmc/*.cuh do).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// out (B,T,C) = wte[inp] (Vp,C) + wpe[t] (maxT,C)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C);
// dwte (Vp,C) += scatter of dout (B,T,C) by inp (B,T);  dwpe (maxT,C) += Σ_b dout
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C);

// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C); eps = 1e-5
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias, int N, int C);
// dinp (N,C) = dresidual (N,C; NULL: 0; may be dinp) + the LayerNorm's input gradient for dout (N,C)
void layernorm_backward_input(float* dinp, const float* dresidual, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int N, int C);
// dweight (C), dbias (C) += ...; accumulate 0: written, bitwise as if added to zeros
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean, const float* rstd, int N, int C,
                               int accumulate);

// out (N) = GELU_tanh(inp (N))
void gelu_forward(float* out, const float* inp, long N);
// dinp (N) = GELU'(inp) * dout (overwritten; dinp may be dout)
void gelu_backward(float* dinp, const float* inp, const float* dout, long N);

// out (N) = inp1 + inp2
void residual_forward(float* out, const float* inp1, const float* inp2, long N);

// fused softmax + cross-entropy over the first V of Vp logits (padding ignored).
// losses (B*T) = -log softmax(logits (B*T,Vp))[target]; probs (B*T,Vp) saved for backward.
void classifier_forward(float* losses, float* probs, const float* logits, const int* targets, int BT, int V, int Vp);
// dlogits (B*T,Vp) = (probs - onehot(target)) * dloss, padded columns set to 0 (overwrites)
void classifier_backward(float* dlogits, const float* probs, const int* targets, float dloss, int BT, int V, int Vp);

#ifdef __cplusplus
}
#endif
