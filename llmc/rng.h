// A small, platform-independent random number generator (splitmix64-seeded xorshift64*): uniform
// floats and Box-Muller normals, so initialisation, data and sampling are the same everywhere.
#pragma once
#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} Rng;

static inline uint64_t rng_splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void rng_init(Rng* r, uint64_t seed) {
    uint64_t s = seed;
    r->state = rng_splitmix64(&s);
    if (r->state == 0) r->state = 0x2545F4914F6CDD1DULL;
}

static inline uint64_t rng_u64(Rng* r) {
    uint64_t x = r->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

// xorshift64*'s state after n more draws of rng_u64, without making them. Its step is linear over
// GF(2), a 64 x 64 bit matrix M: the state moves on by M^n, applied as the product of the M^(2^i) of
// n's set bits (each a squaring of the last). col[j] is the image of state bit j.
static inline void rng_skip(Rng* r, uint64_t n) {
    if (n == 0) return;
    uint64_t col[64], sq[64];
    for (int j = 0; j < 64; j++) { // M itself: one step of each basis state
        Rng e = {1ULL << j};
        rng_u64(&e);
        col[j] = e.state;
    }
    for (uint64_t x = r->state; n; n >>= 1) {
        if (n & 1) {
            uint64_t y = 0;
            for (int j = 0; j < 64; j++) y ^= (x >> j & 1) ? col[j] : 0;
            r->state = x = y;
        }
        if (n == 1) break; // (no higher bit needs the next square)
        for (int j = 0; j < 64; j++) { // col <- col o col: each image mapped once more
            uint64_t y = 0;
            for (int k = 0; k < 64; k++) y ^= (col[j] >> k & 1) ? col[k] : 0;
            sq[j] = y;
        }
        for (int j = 0; j < 64; j++) col[j] = sq[j];
    }
}

// uniform in [0, 1), 24 random bits
static inline float rng_f32(Rng* r) { return (float)(rng_u64(r) >> 40) / 16777216.0f; }

// uniform integer in [0, n)
static inline uint32_t rng_below(Rng* r, uint32_t n) { return (uint32_t)(((rng_u64(r) >> 32) * (uint64_t)n) >> 32); }

// standard normal (Box-Muller, one value per call from two rng_u64 draws; double precision inside)
static inline float rng_normal(Rng* r) {
    double u1 = ((double)(rng_u64(r) >> 11) + 1.0) / 9007199254740993.0; // (0, 1]
    double u2 = (double)(rng_u64(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
