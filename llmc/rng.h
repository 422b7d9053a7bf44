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

// uniform in [0, 1), 24 random bits
static inline float rng_f32(Rng* r) { return (float)(rng_u64(r) >> 40) / 16777216.0f; }

// uniform integer in [0, n)
static inline uint32_t rng_below(Rng* r, uint32_t n) { return (uint32_t)(((rng_u64(r) >> 32) * (uint64_t)n) >> 32); }

// standard normal (Box-Muller, one value per call; double precision inside)
static inline float rng_normal(Rng* r) {
    double u1 = ((double)(rng_u64(r) >> 11) + 1.0) / 9007199254740993.0; // (0, 1]
    double u2 = (double)(rng_u64(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
