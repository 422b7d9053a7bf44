// The built-in dataset: a deterministic corpus from a random sparse Markov source of order 2 over
// 32 printable bytes, whose entropy rate is known exactly, so a loss can be compared to its floor.
#pragma once
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define MARKOV_ORDER 2
#define MARKOV_ALPHABET 32
#define MARKOV_BRANCHING 4 // successors per context, with probabilities 1/2, 1/4, 1/8, 1/8

typedef struct {
    unsigned char symbols[MARKOV_ALPHABET];                          // byte value of each symbol
    unsigned char succ[MARKOV_ALPHABET * MARKOV_ALPHABET][MARKOV_BRANCHING]; // (A², K) successor symbol of context (a, b)
    double entropy_rate;  // nats per token: H(1/2, 1/4, 1/8, 1/8) = 1.75 ln 2, the same in every context
    double h_first;       // H(X1 | X0) under the stationary distribution: the first target of a row sees one token
} MarkovSource;

// builds the source from a seed (redrawn until its chain has a single closed class, so its
// stationary distribution is unique)
void markov_init(MarkovSource* m, uint64_t seed);
// n byte tokens (n) from the source, started from its stationary distribution by a burn-in
void markov_generate(const MarkovSource* m, uint16_t* out, size_t n, uint64_t seed);
// the lowest expected mean loss over a row of T targets: (H(X1|X0) + (T-1) H) / T
double markov_loss_floor(const MarkovSource* m, int T);
// mean -log p of tokens[2..n) under the true source given the two before: the entropy rate, measured
double markov_score(const MarkovSource* m, const uint16_t* tokens, size_t n);

#ifdef __cplusplus
}
#endif
