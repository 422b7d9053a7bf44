// Data tests: shard write/read round trip and refusals, the loader's window order, seeded shuffle,
// disjoint covering rank slices, bitwise resume from a saved state, and its refusals; run_data's
// vocabulary and samples' first token; the built-in Markov source's branches and entropy rate.
// Tokens are chosen so that each token names its own position, so a window says where it came from.
#include "llmc/builtin_data.h"
#include "llmc/dataloader.h"
#include "llmc/shard.h"
#include "tdpipe/run_data.h"
#include "tests/test.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


// writes a shard of n tokens start, start+1, ... (mod 65536)
static void write_ramp(const char* path, int start, size_t n, int tokenizer) {
    uint16_t* t = malloc(n * sizeof(uint16_t) + 1);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(start + i);
    char err[512];
    if (shard_write(path, t, n, tokenizer, err, sizeof err) != 0) printf("shard_write: %s\n", err);
    free(t);
}

// overwrites the int32 at byte offset off of path
static void patch_int(const char* path, long off, int32_t v) {
    FILE* f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    fwrite(&v, sizeof v, 1, f);
    fclose(f);
}

static void test_shard_round_trip(void) {
    const char* p = test_path("round.bin");
    uint16_t tokens[1000];
    for (int i = 0; i < 1000; i++) tokens[i] = (uint16_t)(i * 7919);
    char err[512];
    int rc = shard_write(p, tokens, 1000, SHARD_TOKENIZER_BYTES, err, sizeof err);
    CHECK(rc == 0 && access(test_path("round.bin.tmp"), F_OK) != 0, "shard_write succeeds and leaves no .tmp");
    FILE* f = fopen(p, "rb");
    int32_t header[256];
    size_t got = fread(header, 4, 256, f);
    fclose(f);
    int rest_zero = 1;
    for (int i = 4; i < 256; i++) rest_zero &= header[i] == 0;
    CHECK(got == 256 && header[0] == 20240520 && header[1] == 1 && header[2] == 1000 && header[3] == 2 && rest_zero,
          "header: magic 20240520, version 1, 1000 tokens, tokenizer 2, rest zero");
    ShardInfo info;
    uint16_t back[1000];
    rc = shard_read(p, &info, back, 1000, err, sizeof err);
    CHECK(rc == 0 && info.num_tokens == 1000 && info.tokenizer == SHARD_TOKENIZER_BYTES &&
              memcmp(back, tokens, sizeof back) == 0,
          "shard_read gives back the same 1000 tokens bitwise");
    rc = shard_read(p, &info, back, 999, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p), "shard_read refuses a buffer too small: %s", err);
    rc = shard_write(test_path("no/such/dir.bin"), tokens, 10, 1, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "no/such/dir.bin"), "shard_write into a missing folder fails with a message: %s", err);
}

static void test_shard_refusals(void) {
    char err[512];
    ShardInfo info;
    const char* p = test_path("bad_magic.bin");
    write_ramp(p, 0, 100, 1);
    patch_int(p, 0, 12345);
    int rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "bad magic"), "refuses bad magic: %s", err);

    p = test_path("bad_version.bin");
    write_ramp(p, 0, 100, 1);
    patch_int(p, 4, 7);
    rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "version 7"), "refuses version 7: %s", err);

    p = test_path("bad_count.bin");
    write_ramp(p, 0, 100, 1);
    patch_int(p, 8, 101);
    rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "101 tokens"), "refuses a count the file length disagrees with: %s",
          err);
    // the other way: the file runs 2 bytes past the header's 99 tokens (1024 + 2 x 99 = 1222 bytes)
    patch_int(p, 8, 99);
    rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "99 tokens (1222 bytes) but the file has 1224 bytes"),
          "refuses a count the file runs past: %s", err);

    p = test_path("bad_tokenizer.bin");
    write_ramp(p, 0, 100, 1);
    patch_int(p, 12, 9);
    rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "tokenizer id 9"), "refuses an unknown tokenizer id: %s", err);

    p = test_path("short.bin");
    FILE* f = fopen(p, "wb");
    fputs("tiny", f);
    fclose(f);
    rc = shard_read_header(p, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "too short"), "refuses a file shorter than a header: %s", err);

    rc = shard_read_header(test_path("missing.bin"), &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "missing.bin") && strstr(err, "cannot open"), "refuses a missing file: %s", err);
}

// Collects one epoch of rank's windows: each window's first input token (its position) in first (cap).
static int collect(DataLoader* dl, int64_t* first, int cap) {
    int bt = dl->B * dl->T, n = 0, ok = 1;
    int* in = malloc(bt * sizeof(int));
    int* tg = malloc(bt * sizeof(int));
    int64_t per_rank = dl->num_windows / dl->world;
    for (int64_t k = 0; k < per_rank && n < cap; k++) {
        ok &= dataloader_next(dl, in, tg) == 0;
        for (int i = 0; i < bt; i++) ok &= in[i] == (uint16_t)(in[0] + i) && tg[i] == (uint16_t)(in[0] + i + 1);
        first[n++] = in[0];
    }
    free(in);
    free(tg);
    return ok ? n : -1;
}

static void test_order(void) {
    // three shards of positions 0.., 1000.., 2000.. (names sort a < b < c); B*T = 8
    write_ramp(test_path("set_c.bin"), 2000, 50, 1); // 6 windows
    write_ramp(test_path("set_a.bin"), 0, 33, 1);    // 4 windows
    write_ramp(test_path("set_b.bin"), 1000, 17, 1); // 2 windows
    const char* pattern = test_path("set_*.bin");
    DataLoader dl;
    char err[512];
    int rc = dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == 0, "init over a glob of 3 shards (%s)", rc ? err : "ok");
    if (rc) return;
    CHECK(dl.num_shards == 3 && dl.num_tokens == 100 && dl.num_windows == 12 && dl.tokenizer == SHARD_TOKENIZER_GPT2,
          "3 shards, 100 tokens, 12 windows of 9 tokens, tokenizer 1");
    int64_t got[24];
    int n = collect(&dl, got, 12);
    n += collect(&dl, got + 12, 12);
    const int64_t want[12] = {0, 8, 16, 24, 1000, 1008, 2000, 2008, 2016, 2024, 2032, 2040};
    CHECK(n == 24 && memcmp(got, want, sizeof want) == 0 && memcmp(got + 12, want, sizeof want) == 0,
          "unshuffled: shards in name order, windows in file order, targets shifted by one; epoch 2 repeats");
    CHECK(dl.epoch == 1, "after 24 windows the loader is in epoch 1 (it wraps on the 13th)");
    dataloader_free(&dl);

    // window j is tokens [j B T, j B T + B T] (dataloader.h): at B*T = 8, 16 tokens hold one window (a
    // second would need token 16), 17 hold two
    uint16_t ramp[17];
    for (int i = 0; i < 17; i++) ramp[i] = (uint16_t)i;
    DataLoader m16, m17;
    int r16 = dataloader_init_memory(&m16, ramp, 16, 2, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    int r17 = dataloader_init_memory(&m17, ramp, 17, 2, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(r16 == 0 && r17 == 0 && m16.num_windows == 1 && m17.num_windows == 2, "16 tokens: 1 window of 9, 17 tokens: 2 (got %lld, %lld)",
          r16 ? -1LL : (long long)m16.num_windows, r17 ? -1LL : (long long)m17.num_windows);
    if (r16 == 0) dataloader_free(&m16);
    if (r17 == 0) dataloader_free(&m17);

    // shuffled, epoch e draws the shard order from seed + e: over seeds 1..10 some epoch 1 visits the
    // 3 shards in another order than its epoch 0 (all ten alike: 1 in 6^10 for independent draws)
    int moved = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        DataLoader e;
        if (dataloader_init(&e, pattern, 2, 4, 0, 1, 1, seed, 65536, err, sizeof err)) break;
        int64_t first[3], buf[13];
        memcpy(first, e.shard_order, sizeof first);
        collect(&e, buf, 12);
        int in[8], tg[8];
        dataloader_next(&e, in, tg); // the 13th window: epoch 1
        moved |= e.epoch == 1 && memcmp(first, e.shard_order, sizeof first) != 0;
        dataloader_free(&e);
    }
    CHECK(moved, "shuffled: the shard order is drawn again each epoch");

    // shuffled: same seed same order, other seed other order, each epoch a permutation of all windows
    int64_t a[24], b[24], c[24];
    DataLoader d1, d2, d3;
    dataloader_init(&d1, pattern, 2, 4, 0, 1, 1, 42, 65536, err, sizeof err);
    dataloader_init(&d2, pattern, 2, 4, 0, 1, 1, 42, 65536, err, sizeof err);
    dataloader_init(&d3, pattern, 2, 4, 0, 1, 1, 43, 65536, err, sizeof err);
    int na = collect(&d1, a, 12) + collect(&d1, a + 12, 12);
    int nb = collect(&d2, b, 12) + collect(&d2, b + 12, 12);
    int nc = collect(&d3, c, 12) + collect(&d3, c + 12, 12);
    CHECK(na == 24 && nb == 24 && memcmp(a, b, sizeof a) == 0, "shuffle with seed 42 twice: the same 24 windows");
    CHECK(nc == 24 && memcmp(a, c, sizeof a) != 0, "shuffle with seed 43: a different order");
    CHECK(memcmp(a, want, sizeof want) != 0 && memcmp(a, a + 12, sizeof want) != 0,
          "shuffled order differs from file order, and epoch 2 differs from epoch 1");
    int perm = 1;
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 12; i++) {
            int hits = 0;
            for (int k = 0; k < 12; k++) hits += a[12 * e + k] == want[i];
            perm &= hits == 1;
        }
    CHECK(perm, "each shuffled epoch is a permutation of the 12 windows");
    dataloader_free(&d1);
    dataloader_free(&d2);
    dataloader_free(&d3);
}

static void test_ranks(void) {
    // in memory: 1000 tokens, B*T = 6 -> 166 windows; 4 ranks take 41 each, 2 windows skipped per epoch
    uint16_t* tokens = malloc(1000 * sizeof(uint16_t));
    for (int i = 0; i < 1000; i++) tokens[i] = (uint16_t)i;
    char err[512];
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        int64_t seen[4][41];
        int counts_ok = 1;
        for (int r = 0; r < 4; r++) {
            DataLoader dl;
            if (dataloader_init_memory(&dl, tokens, 1000, 2, 3, r, 4, shuffle, 7, 1000, err, sizeof err) != 0) {
                CHECK(0, "init_memory rank %d: %s", r, err);
                return;
            }
            counts_ok &= dl.num_windows == 166 && collect(&dl, seen[r], 41) == 41 && dl.epoch == 0;
            int in[6], tg[6];
            dataloader_next(&dl, in, tg);
            counts_ok &= dl.epoch == 1; // every rank wraps on its 42nd call
            dataloader_free(&dl);
        }
        int disjoint = 1, aligned = 1;
        for (int r = 0; r < 4; r++)
            for (int k = 0; k < 41; k++) {
                aligned &= seen[r][k] % 6 == 0;
                for (int r2 = 0; r2 < 4; r2++)
                    for (int k2 = 0; k2 < 41; k2++) disjoint &= (r == r2 && k == k2) || seen[r][k] != seen[r2][k2];
            }
        CHECK(counts_ok && disjoint && aligned,
              "%s: 4 ranks x 41 windows, pairwise disjoint (164 distinct of 166), all wrap together",
              shuffle ? "shuffled" : "in order");
    }
    // rank r of an unshuffled epoch takes global windows r, r+4, ...
    DataLoader dl;
    dataloader_init_memory(&dl, tokens, 1000, 2, 3, 2, 4, 0, 0, 1000, err, sizeof err);
    int in[6], tg[6];
    dataloader_next(&dl, in, tg);
    int w0 = in[0];
    dataloader_next(&dl, in, tg);
    CHECK(w0 == 12 && in[0] == 36, "rank 2 of 4 reads windows 2 and 6 (tokens 12, 36)");
    dataloader_free(&dl);
    free(tokens);
}

// Runs steps calls of next and returns a checksum-free record of everything produced (bitwise compare).
static int run_record(DataLoader* dl, int steps, int* rec) {
    int bt = dl->B * dl->T, ok = 1;
    for (int s = 0; s < steps; s++) ok &= dataloader_next(dl, rec + 2 * s * bt, rec + (2 * s + 1) * bt) == 0;
    return ok;
}

static void test_resume(void) {
    const char* pattern = test_path("set_*.bin"); // from test_order: 12 windows, B*T = 8
    char err[512];
    DataLoader a, b;
    int ra = dataloader_init(&a, pattern, 2, 4, 1, 2, 1, 99, 65536, err, sizeof err);
    int rb = dataloader_init(&b, pattern, 2, 4, 1, 2, 1, 99, 65536, err, sizeof err);
    CHECK(ra == 0 && rb == 0, "two loaders for rank 1 of 2, shuffled");
    if (ra || rb) return;
    int steps = 20, bt = 8; // crosses three epoch boundaries (6 windows per rank per epoch)
    int* ref = malloc(2 * steps * bt * sizeof(int));
    int* got = malloc(2 * steps * bt * sizeof(int));
    run_record(&a, 3, ref);
    DataLoaderState st;
    dataloader_get_state(&a, &st);
    run_record(&a, steps, ref);
    run_record(&b, 11, got); // b is elsewhere (another epoch) when it is told the state
    int rc = dataloader_set_state(&b, &st, err, sizeof err);
    run_record(&b, steps, got);
    CHECK(rc == 0 && memcmp(ref, got, 2 * steps * bt * sizeof(int)) == 0,
          "set_state(get_state) continues bitwise identically for 20 windows across 3 epoch ends");

    // the state is rank-independent: under world 1 the next window is the one rank 0 of 2 would read
    DataLoader c, d;
    dataloader_init(&c, pattern, 2, 4, 0, 1, 1, 99, 65536, err, sizeof err);
    dataloader_init(&d, pattern, 2, 4, 0, 2, 1, 99, 65536, err, sizeof err);
    int rc1 = dataloader_set_state(&c, &st, err, sizeof err), rc2 = dataloader_set_state(&d, &st, err, sizeof err);
    int inc[8], tgc[8], ind[8], tgd[8];
    dataloader_next(&c, inc, tgc);
    dataloader_next(&d, ind, tgd);
    CHECK(rc1 == 0 && rc2 == 0 && memcmp(inc, ind, sizeof inc) == 0 && memcmp(inc, ref, sizeof inc) != 0,
          "a state resumes under another world size (global window %lld)", (long long)st.window);
    dataloader_free(&c);
    dataloader_free(&d);

    DataLoaderState bad = st;
    bad.seed = 100;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1 && strstr(err, "seed"), "refuses another seed: %s", err);
    bad = st;
    bad.shuffle = !st.shuffle;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1 && strstr(err, "shuffle"), "refuses a state of the other shuffle setting: %s", err);
    bad = st;
    bad.window_tokens = 16;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1 && strstr(err, "B*T"), "refuses another B*T: %s", err);
    bad = st;
    bad.num_tokens = 101;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1 && strstr(err, "101 tokens"),
          "refuses a state of other data: %s", err);
    bad = st;
    bad.window = 13;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1 && strstr(err, "outside"),
          "refuses a position past the epoch: %s", err);
    bad = st;
    bad.epoch = -1;
    CHECK(dataloader_set_state(&b, &bad, err, sizeof err) == -1, "refuses a negative epoch");

    dataloader_reset(&a);
    dataloader_free(&b);
    dataloader_init(&b, pattern, 2, 4, 1, 2, 1, 99, 65536, err, sizeof err);
    run_record(&a, steps, ref);
    run_record(&b, steps, got);
    CHECK(memcmp(ref, got, 2 * steps * bt * sizeof(int)) == 0, "reset goes back to the start of epoch 0");
    free(ref);
    free(got);
    dataloader_free(&a);
    dataloader_free(&b);
}

static void test_loader_refusals(void) {
    char err[512];
    DataLoader dl;
    const char* pattern = test_path("nothing_*.bin");
    int rc = dataloader_init(&dl, pattern, 2, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == -1 && strstr(err, pattern) && strstr(err, "no file matches"), "refuses a glob with no match: %s", err);

    const char* p = test_path("big_token.bin");
    uint16_t t[40];
    for (int i = 0; i < 40; i++) t[i] = (uint16_t)(i % 5);
    t[17] = 50257;
    shard_write(p, t, 40, 1, err, sizeof err);
    rc = dataloader_init(&dl, p, 2, 4, 0, 1, 0, 0, 50257, err, sizeof err);
    CHECK(rc == -1 && strstr(err, p) && strstr(err, "50257") && strstr(err, "token offset 17"),
          "refuses a token >= V, naming the file and offset: %s", err);

    rc = dataloader_init(&dl, test_path("set_b.bin"), 4, 8, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "set_b.bin") && strstr(err, "too few for one window"),
          "refuses a shard smaller than one window: %s", err);

    rc = dataloader_init(&dl, test_path("set_*.bin"), 2, 4, 0, 13, 0, 0, 65536, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "13 ranks"), "refuses more ranks than windows: %s", err);

    rc = dataloader_init(&dl, test_path("bad_magic.bin"), 1, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad magic"), "init passes on a shard's header error: %s", err);

    write_ramp(test_path("mixed_a.bin"), 0, 40, SHARD_TOKENIZER_GPT2);
    write_ramp(test_path("mixed_b.bin"), 0, 40, SHARD_TOKENIZER_BYTES);
    rc = dataloader_init(&dl, test_path("mixed_*.bin"), 1, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "mixed_b.bin") && strstr(err, "tokenizer"), "refuses shards of two tokenizers: %s",
          err);
    write_ramp(test_path("llmc_a.bin"), 0, 40, SHARD_TOKENIZER_UNSPECIFIED); // llm.c's own shards leave the id 0
    write_ramp(test_path("llmc_b.bin"), 0, 40, SHARD_TOKENIZER_GPT2);
    rc = dataloader_init(&dl, test_path("llmc_*.bin"), 1, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    CHECK(rc == 0 && shard_tokenizer_kind(dl.tokenizer) == SHARD_TOKENIZER_GPT2, "llm.c's tokenizer id 0 and GPT-2's 1 make one set: %s",
          rc ? err : "ok");
    if (rc == 0) dataloader_free(&dl);

    uint16_t mem[10] = {0};
    rc = dataloader_init_memory(&dl, mem, 10, 2, 8, 0, 1, 0, 0, 256, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "too few for one window"), "in memory: refuses a window too large: %s", err);
    rc = dataloader_init_memory(&dl, mem, 10, 1, 4, 1, 1, 0, 0, 256, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "bad arguments"), "refuses rank >= world: %s", err);

    // a shard replaced after init: next() reports it instead of reading garbage
    write_ramp(test_path("swap_a.bin"), 0, 40, 1);
    write_ramp(test_path("swap_b.bin"), 0, 40, 1);
    rc = dataloader_init(&dl, test_path("swap_*.bin"), 1, 4, 0, 1, 0, 0, 65536, err, sizeof err);
    write_ramp(test_path("swap_a.bin"), 0, 30, 1);
    int in[4], tg[4];
    int nrc = rc == 0 ? dataloader_next(&dl, in, tg) : 0;
    CHECK(rc == 0 && nrc == -1 && strstr(dl.err, "swap_a.bin") && strstr(dl.err, "changed"),
          "a shard changed after init is refused by next: %s", dl.err);
    if (rc == 0) dataloader_free(&dl);
}

// the first window's first input of a loader (-1 when there is none)
static int first_input(DataLoader* dl) {
    int in[16], tg[16];
    return dataloader_next(dl, in, tg) == 0 ? in[0] : -1;
}

// run_data: the vocabulary a fresh model gets, where samples start (the first validation token, else
// the first training token) and loaders left at their start. Ramps make a token name its position.
static void test_run_data(void) {
    TrainArgs a;
    args_defaults(&a);
    a.B = 2;
    a.T = 4;
    a.shuffle = 0;
    RunData d;
    char why[1024];
    CHECK(run_data_vocab(&a) == 256, "built-in data: a fresh model gets V = 256 (bytes)");
    int rc = run_data_init(&d, &a, 256, 1, 0, 1, why, sizeof why);
    int first = rc == 0 ? d.first_token : -1;
    CHECK(rc == 0 && d.builtin && first == first_input(&d.val) && first >= 0,
          "built-in data: samples start from the validation split's first token (%d) %s", first, rc ? why : "");
    if (rc == 0) run_data_free(&d);

    write_ramp(test_path("rd_train.bin"), 100, 1000, SHARD_TOKENIZER_GPT2);
    write_ramp(test_path("rd_val.bin"), 5000, 500, SHARD_TOKENIZER_GPT2);
    write_ramp(test_path("rd_bytes.bin"), 10, 200, SHARD_TOKENIZER_BYTES);
    snprintf(a.train_pattern, sizeof a.train_pattern, "%s", test_path("rd_bytes.bin"));
    CHECK(run_data_vocab(&a) == 256, "byte shards: V = 256");
    snprintf(a.train_pattern, sizeof a.train_pattern, "%s", test_path("rd_train.bin"));
    CHECK(run_data_vocab(&a) == 50257, "GPT-2 shards: V = 50257");
    snprintf(a.val_pattern, sizeof a.val_pattern, "%s", test_path("rd_val.bin"));
    rc = run_data_init(&d, &a, 50257, 1, 0, 1, why, sizeof why);
    CHECK(rc == 0 && d.first_token == 5000 && first_input(&d.val) == 5000 && first_input(&d.train) == 100,
          "-i and -j: samples start from the first validation token (%d, want 5000), both loaders at their start %s", rc ? -1 : d.first_token,
          rc ? why : "");
    if (rc == 0) run_data_free(&d);
    a.val_pattern[0] = 0;
    rc = run_data_init(&d, &a, 50257, 1, 0, 1, why, sizeof why);
    CHECK(rc == 0 && d.first_token == 100 && first_input(&d.train) == 100,
          "-i alone: samples start from the first training token (%d, want 100), the loader still at its start %s", rc ? -1 : d.first_token,
          rc ? why : "");
    if (rc == 0) run_data_free(&d);
}

// the built-in Markov source: each symbol's 4 successors distinct, taken with probabilities 1/2, 1/4,
// 1/8, 1/8, so its entropy rate is H(1/2, 1/4, 1/8, 1/8) = 1.75 ln 2 nats/token (builtin_data.h)
static void test_markov(void) {
    enum { N = 1 << 20 };
    MarkovSource m;
    markov_init(&m, 20241130);
    int distinct = 1, index[256];
    for (int i = 0; i < 256; i++) index[i] = -1;
    for (int i = 0; i < MARKOV_ALPHABET; i++) index[m.symbols[i]] = i;
    for (int s = 0; s < MARKOV_ALPHABET; s++)
        for (int j = 0; j < MARKOV_BRANCHING; j++)
            for (int k = 0; k < j; k++) distinct &= m.succ[s][j] != m.succ[s][k];
    CHECK(distinct, "every symbol's 4 successors are distinct");
    CHECK(fabs(m.entropy_rate - 1.75 * log(2.0)) < 1e-15, "entropy rate %.15f = 1.75 ln 2", m.entropy_rate);
    uint16_t* t = malloc(N * sizeof(uint16_t));
    markov_generate(&m, t, N, 7);
    // which successor each step took; the share of branch k has standard error sqrt(p (1 - p) / N) <=
    // 5e-4 over 2^20 steps, so 0.005 is 10 of them (a branch at 0.6 instead of 0.5 is 0.1 off)
    long count[MARKOV_BRANCHING + 1] = {0}; // + 1: a step to no successor
    for (size_t i = 1; i < N; i++) {
        int a = index[t[i - 1]], c = index[t[i]], k = 0;
        while (k < MARKOV_BRANCHING && (a < 0 || m.succ[a][k] != c)) k++;
        count[k]++;
    }
    const double want[MARKOV_BRANCHING] = {0.5, 0.25, 0.125, 0.125};
    int shares_ok = count[MARKOV_BRANCHING] == 0;
    for (int k = 0; k < MARKOV_BRANCHING; k++) shares_ok &= fabs((double)count[k] / (N - 1) - want[k]) < 0.005;
    CHECK(shares_ok, "2^20 tokens: branches taken %.4f %.4f %.4f %.4f of the time (1/2 1/4 1/8 1/8), %ld steps to no successor",
          (double)count[0] / (N - 1), (double)count[1] / (N - 1), (double)count[2] / (N - 1), (double)count[3] / (N - 1), count[MARKOV_BRANCHING]);
    // the ideal model's loss: the mean of -ln p, whose standard deviation is below 0.7 nats: 0.01 is
    // over 10 standard errors at 2^20 tokens
    double score = markov_score(&m, t, N);
    CHECK(fabs(score - 1.75 * log(2.0)) < 0.01, "markov_score of the source's own tokens %.5f, near 1.75 ln 2 = %.5f", score, 1.75 * log(2.0));
    free(t);
}

int main(void) {
    test_dir_make("test_dataloader");
    test_run_data();
    test_markov();
    test_shard_round_trip();
    test_shard_refusals();
    test_order();
    test_ranks();
    test_resume();
    test_loader_refusals();
    return test_summary();
}
