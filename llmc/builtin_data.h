// The built-in dataset: a deterministic corpus from a random sparse first-order Markov source over
// 32 printable bytes. Every context has the same next-symbol entropy, so the entropy rate (the
// lowest loss any model can reach) is known exactly: H(1/2, 1/4, 1/8, 1/8) = 1.75 ln 2 nats/token.
#pragma once
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define MARKOV_ALPHABET 32
#define MARKOV_BRANCHING 4 // successors per symbol, with probabilities 1/2, 1/4, 1/8, 1/8

typedef struct {
    unsigned char symbols[MARKOV_ALPHABET];                      // byte value of each symbol
    unsigned char succ[MARKOV_ALPHABET][MARKOV_BRANCHING];       // (A, K) successors of each symbol
    double entropy_rate;                                         // nats per token
} MarkovSource;

// builds the source from a seed: each symbol's K successors drawn without replacement
void markov_init(MarkovSource* m, uint64_t seed);
// n byte tokens (n) from the source
void markov_generate(const MarkovSource* m, uint16_t* out, size_t n, uint64_t seed);
// mean -log p of tokens[1..n) under the true source given the token before: the ideal model's loss
double markov_score(const MarkovSource* m, const uint16_t* tokens, size_t n);

#ifdef __cplusplus
}
#endif
