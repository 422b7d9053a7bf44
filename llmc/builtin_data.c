// The built-in dataset: a random sparse order-2 Markov source with an exact entropy rate (see builtin_data.h).
#include "builtin_data.h"
#include <math.h>
#include <string.h>
#include "common.h"
#include "rng.h"

#define A MARKOV_ALPHABET
#define K MARKOV_BRANCHING
static const double PROBS[K] = {0.5, 0.25, 0.125, 0.125};
static const char SYMBOLS[A + 1] = "etaoinshrdlucmfwypvbgkjqxz .,;!?";

// successors are drawn without replacement, so every context has entropy H(PROBS) exactly
static void draw_successors(MarkovSource* m, Rng* rng) {
    for (int ctx = 0; ctx < A * A; ctx++) {
        int used[A] = {0};
        for (int k = 0; k < K; k++) {
            int s;
            do s = (int)rng_below(rng, A);
            while (used[s]);
            used[s] = 1;
            m->succ[ctx][k] = (unsigned char)s;
        }
    }
}

// the context a long walk from (0, 0) ends in: a member of a closed class of the context graph
static int walk_end(const MarkovSource* m) {
    int ctx = 0;
    for (int i = 0; i < 100000; i++) ctx = (ctx % A) * A + m->succ[ctx][i % K];
    return ctx;
}

// can context z be reached from every context? Then the chain has one closed class (holding z),
// every trajectory ends in it, and the stationary distribution is unique.
static int reachable_from_all(const MarkovSource* m, int z) {
    static int reach[A * A];
    int stack[A * A], top = 0;
    memset(reach, 0, sizeof(reach));
    reach[z] = 1;
    stack[top++] = z;
    while (top) {
        int to = stack[--top];
        // predecessors of (b, s) are the (a, b) with s among their successors
        for (int a = 0; a < A; a++) {
            int from = a * A + to / A;
            if (reach[from]) continue;
            for (int k = 0; k < K; k++)
                if (m->succ[from][k] == to % A) {
                    reach[from] = 1;
                    stack[top++] = from;
                    break;
                }
        }
    }
    for (int i = 0; i < A * A; i++)
        if (!reach[i]) return 0;
    return 1;
}

void markov_init(MarkovSource* m, uint64_t seed) {
    memset(m, 0, sizeof(*m));
    memcpy(m->symbols, SYMBOLS, A);
    Rng rng;
    rng_init(&rng, seed);
    do draw_successors(m, &rng);
    while (!reachable_from_all(m, walk_end(m)));
    m->entropy_rate = 0.0;
    for (int k = 0; k < K; k++) m->entropy_rate -= PROBS[k] * log(PROBS[k]);
    // stationary distribution over contexts by lazy power iteration (lazy: converges even if periodic)
    static double pi[A * A], next[A * A];
    for (int i = 0; i < A * A; i++) pi[i] = 1.0 / (A * A);
    for (int it = 0; it < 200000; it++) {
        memset(next, 0, sizeof(next));
        for (int ctx = 0; ctx < A * A; ctx++)
            for (int k = 0; k < K; k++) next[(ctx % A) * A + m->succ[ctx][k]] += pi[ctx] * PROBS[k];
        double diff = 0.0;
        for (int i = 0; i < A * A; i++) {
            double v = 0.5 * pi[i] + 0.5 * next[i];
            diff += fabs(v - pi[i]);
            pi[i] = v;
        }
        if (diff < 1e-15) break;
    }
    // H(X1 | X0) = H(X0, X1) - H(X0), with (X0, X1) a stationary context
    double h_pair = 0.0, h_single = 0.0;
    for (int a = 0; a < A; a++) {
        double pa = 0.0;
        for (int b = 0; b < A; b++) {
            double p = pi[a * A + b];
            pa += p;
            if (p > 0) h_pair -= p * log(p);
        }
        if (pa > 0) h_single -= pa * log(pa);
    }
    m->h_first = h_pair - h_single;
}

void markov_generate(const MarkovSource* m, uint16_t* out, size_t n, uint64_t seed) {
    Rng rng;
    rng_init(&rng, seed);
    int a = 0, b = 0;
    for (size_t i = 0; i < 10000 + n; i++) { // the first 10000 symbols are a burn-in towards stationarity
        float u = rng_f32(&rng);
        int k = u < 0.5f ? 0 : u < 0.75f ? 1 : u < 0.875f ? 2 : 3;
        int s = m->succ[a * A + b][k];
        a = b;
        b = s;
        if (i >= 10000) out[i - 10000] = m->symbols[s];
    }
}

double markov_loss_floor(const MarkovSource* m, int T) { return (m->h_first + (T - 1) * m->entropy_rate) / T; }

double markov_score(const MarkovSource* m, const uint16_t* tokens, size_t n) {
    int index[256];
    for (int i = 0; i < 256; i++) index[i] = -1;
    for (int i = 0; i < A; i++) index[m->symbols[i]] = i;
    // p(x1 | x0) from the source: the stationary mixture over the unseen earlier symbol
    double total = 0.0;
    for (size_t i = 2; i < n; i++) {
        int a = index[tokens[i - 2]], b = index[tokens[i - 1]], c = index[tokens[i]];
        double p = 0.0;
        for (int k = 0; k < K; k++)
            if (m->succ[a * A + b][k] == c) p = PROBS[k];
        total -= log(p);
    }
    return n > 2 ? total / (double)(n - 2) : 0.0;
}
