// CPU causal self-attention (llmc/attention.c): forward, and backward to the three projections'
// gradients, with the softmax probabilities kept between them as llm.c keeps them.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// out (B,T,C), att (B,NH,T,T) softmax probabilities (causal; entries t2 > t are 0), from qkv (B,T,3C)
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) = ... (overwritten), from dout (B,T,C); datt (B,NH,T,T) is scratch, overwritten
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T, int C, int NH);

#ifdef __cplusplus
}
#endif
