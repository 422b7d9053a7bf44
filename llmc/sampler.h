// Choosing the next token from the model's probabilities: by temperature sampling or greedily.
#pragma once
#include "rng.h"

// index drawn from probs (n) raised to 1/temperature (renormalised); temperature 0 = argmax
static inline int sample_token(const float* probs, int n, float temperature, Rng* rng) {
    if (temperature <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (probs[i] > probs[best]) best = i;
        return best;
    }
    double total = 0.0;
    for (int i = 0; i < n; i++) total += pow(probs[i], 1.0 / temperature);
    double u = rng_f32(rng) * total, cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += pow(probs[i], 1.0 / temperature);
        if (u < cdf) return i;
    }
    return n - 1;
}
