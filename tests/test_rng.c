// llmc/rng.h: rng_skip moves xorshift64*'s state exactly as that many draws do (the jump a stage
// uses to leave out the other stages' share of the initialisation's stream).
#include <stdint.h>
#include "llmc/rng.h"
#include "tests/test.h"

int main(void) {
    const uint64_t counts[] = {0, 1, 2, 63, 64, 65, 1000, 123457, 2000003};
    const uint64_t seeds[] = {1, 42, 0xFFFFFFFFFFFFFFFFULL};
    for (int s = 0; s < 3; s++) {
        int same = 1;
        for (int c = 0; c < 9; c++) {
            Rng a, b;
            rng_init(&a, seeds[s]);
            rng_init(&b, seeds[s]);
            rng_u64(&a), rng_u64(&b); // from a state past the seed's
            for (uint64_t i = 0; i < counts[c]; i++) rng_u64(&a);
            rng_skip(&b, counts[c]);
            same &= a.state == b.state && rng_u64(&a) == rng_u64(&b);
        }
        CHECK(same, "seed %llu: rng_skip(n) leaves the state n draws would, for n = 0 .. 2000003", (unsigned long long)seeds[s]);
    }
    // a jump far past what a loop could check: two halves make the whole
    Rng a, b;
    rng_init(&a, 7);
    rng_init(&b, 7);
    rng_skip(&a, 1ULL << 40);
    rng_skip(&a, 1ULL << 40);
    rng_skip(&b, 1ULL << 41);
    CHECK(a.state == b.state, "2^40 and 2^40 draws skipped are 2^41 skipped");
    return test_summary();
}
