// The built-in dataset: a random sparse first-order Markov source with an exact entropy rate (see builtin_data.h).
#include "builtin_data.h"
#include <math.h>
#include <string.h>
#include "rng.h"

#define A MARKOV_ALPHABET
#define K MARKOV_BRANCHING
static const double PROBS[K] = {0.5, 0.25, 0.125, 0.125};
static const char SYMBOLS[A + 1] = "etaoinshrdlucmfwypvbgkjqxz .,;!?";

void markov_init(MarkovSource* m, uint64_t seed) {
    memset(m, 0, sizeof(*m));
    memcpy(m->symbols, SYMBOLS, A);
    Rng rng;
    rng_init(&rng, seed);
    // without replacement, so every symbol's next-symbol distribution is a permutation of PROBS
    for (int a = 0; a < A; a++) {
        int used[A] = {0};
        for (int k = 0; k < K; k++) {
            int s;
            do s = (int)rng_below(&rng, A);
            while (used[s]);
            used[s] = 1;
            m->succ[a][k] = (unsigned char)s;
        }
    }
    m->entropy_rate = 0.0;
    for (int k = 0; k < K; k++) m->entropy_rate -= PROBS[k] * log(PROBS[k]);
}

void markov_generate(const MarkovSource* m, uint16_t* out, size_t n, uint64_t seed) {
    Rng rng;
    rng_init(&rng, seed);
    int a = 0;
    for (size_t i = 0; i < n; i++) {
        float u = rng_f32(&rng);
        int k = u < 0.5f ? 0 : u < 0.75f ? 1 : u < 0.875f ? 2 : 3;
        a = m->succ[a][k];
        out[i] = m->symbols[a];
    }
}

double markov_score(const MarkovSource* m, const uint16_t* tokens, size_t n) {
    int index[65536];
    for (int i = 0; i < 65536; i++) index[i] = -1;
    for (int i = 0; i < A; i++) index[m->symbols[i]] = i;
    double total = 0.0;
    for (size_t i = 1; i < n; i++) {
        int a = index[tokens[i - 1]], c = index[tokens[i]];
        double p = 0.0;
        for (int k = 0; k < K && a >= 0; k++)
            if (m->succ[a][k] == c) p = PROBS[k];
        total -= log(p); // +inf for a token the source cannot emit
    }
    return n > 1 ? total / (double)(n - 1) : 0.0;
}
