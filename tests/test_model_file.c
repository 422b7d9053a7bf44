// llm.c model files: fp32 export and import round trip bitwise, bf16 (version 5) import equals the
// rounded-down fp32 values, and the refusals of bad headers, lengths and non-finite weights; -e dN's
// fresh shapes and parameter counts, and the initialisation's statistics.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmc/gpt2.h"
#include "llmc/model_file.h"
#include "tdpipe/run_model.h"
#include "tests/test.h"

// -e dN's fresh shapes against GPT-2's published ones (Radford et al. 2019, Table 2: 12/24/36/48
// layers of width 768/1024/1280/1600, head size 64) and parameter counts (Hugging Face's gpt2,
// gpt2-medium, gpt2-large, gpt2-xl: 124,439,808, 354,823,168, 774,030,080 and 1,557,611,200 at V = 50257; llm.c pads V to
// 50304, 47 more rows of wte: + 47 C, giving llm.c's 124,475,904 for d12). Below 12 layers, C = 64 N.
static void test_fresh_shapes(void) {
    static const struct { const char* e; int L, C, NH; size_t params; } cases[] = {
        {"d12", 12, 768, 12, 124439808 + 47 * 768}, {"d24", 24, 1024, 16, 354823168 + 47 * 1024},
        {"d36", 36, 1280, 20, 774030080 + 47 * 1280}, {"d48", 48, 1600, 25, 1557611200 + 47 * 1600},
        {"d1", 1, 64, 1, 0}, {"d11", 11, 704, 11, 0}, {"d13", 13, 1024, 16, 0}};
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        GPT2Config c;
        memset(&c, 0, sizeof c);
        int rc = run_model_fresh_config(cases[i].e, 50257, &c, err, sizeof err);
        GPT2Range all = {0, c.num_layers, 1, 1};
        size_t sizes[GPT2_NUM_PARAM_TENSORS], n = rc == 1 ? gpt2_param_sizes(&c, &all, sizes) : 0;
        CHECK(rc == 1 && c.num_layers == cases[i].L && c.channels == cases[i].C && c.num_heads == cases[i].NH && c.max_seq_len == 1024 &&
                  c.vocab_size == 50257 && c.padded_vocab_size == 50304 && (cases[i].params == 0 || n == cases[i].params),
              "-e %s: L %d, C %d, NH %d, maxT %d, Vp %d, %zu parameters", cases[i].e, c.num_layers, c.channels, c.num_heads, c.max_seq_len,
              c.padded_vocab_size, n);
    }
    GPT2Config c;
    CHECK(run_model_fresh_config("d2", 256, &c, err, sizeof err) == 1 && c.padded_vocab_size == 256 && c.channels == 128 && c.num_heads == 2,
          "-e d2 on bytes: V 256 is already a multiple of 128, C 128, 2 heads");
    CHECK(run_model_fresh_config("d0", 256, &c, err, sizeof err) == -1 && run_model_fresh_config("d49", 256, &c, err, sizeof err) == -1,
          "-e d0 and d49 refused: %s", err);
}

// the root mean square of n floats (about 0: their mean is 0)
static double rms(const float* x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / n);
}

// GPT-2's initialisation (Radford et al. 2019, section 2.3; llm.c's train_gpt2.py): weights N(0, 0.02),
// the residual projections attprojw and fcprojw N(0, 0.02 / sqrt(2 L)), LayerNorm weights 1, biases 0,
// and wte's padded rows (V..Vp) 0. Offsets from llm.c's layout written out here (as test_gradcheck's).
static void test_init_statistics(void) {
    enum { MT = 32, V = 100, VP = 128, L = 4, C = 64 };
    GPT2Config c = {MT, V, VP, L, 1, C};
    GPT2Range all = {0, L, 1, 1};
    const size_t ref[GPT2_NUM_PARAM_TENSORS] = {VP * C, MT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
                                                L * C, L * C, L * 4 * C * C, L * 4 * C, L * 4 * C * C, L * C, C, C};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(&c, &all, sizes);
    float* p = (float*)malloc(n * sizeof(float));
    gpt2_init_full(&c, p, 11);
    const float* t = p;
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; t += ref[i], i++) {
        const char* name = gpt2_param_name(i);
        size_t m = i == 0 ? (size_t)V * C : ref[i]; // wte: its real rows
        int ln_weight = i == 2 || i == 8 || i == 14, bias = i >= 3 && i % 2 == 1; // ln1w, ln2w, lnfw; ln1b, qkvb, ..., lnfb
        if (ln_weight || bias) {
            float want = ln_weight ? 1.0f : 0.0f;
            size_t bad = 0;
            for (size_t j = 0; j < m; j++) bad += t[j] != want;
            CHECK(bad == 0, "init: %s all %g (%zu of %zu differ)", name, want, bad, m);
            continue;
        }
        // the sample RMS of m normal draws has a relative standard error 1 / sqrt(2 m) (1.6% at wpe's
        // 2048, the fewest); 6% is 3.8 of those, and the seed is fixed. A wrong std (sqrt 2 off for a
        // residual projection scaled by 1 / sqrt(L) instead of 1 / sqrt(2 L)) is 29% or more off.
        double want = (i == 6 || i == 12) ? 0.02 / sqrt(2.0 * L) : 0.02, got = rms(t, m);
        CHECK(fabs(got / want - 1.0) < 0.06, "init: %s's %zu draws have RMS %.5f, want %.5f", name, m, got, want);
    }
    size_t nonzero = 0;
    for (size_t j = (size_t)V * C; j < (size_t)VP * C; j++) nonzero += p[j] != 0.0f;
    CHECK(nonzero == 0 && n == (size_t)(t - p), "init: wte's %d padded rows are 0 (%zu are not); %zu floats in all", VP - V, nonzero, n);
    free(p);
}

int main(void) {
    char dir[] = "/tmp/tdpipe_mf_XXXXXX", path[256], path16[256], err[512];
    if (!mkdtemp(dir)) return 1;
    GPT2Config cfg = {16, 37, 128, 2, 2, 8};
    GPT2Range all = {0, 2, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(&cfg, &all, sizes);
    float* p = (float*)malloc(n * sizeof(float));
    gpt2_init_full(&cfg, p, 3);

    snprintf(path, sizeof(path), "%s/m.bin", dir);
    CHECK(model_file_save(path, &cfg, p, err, sizeof(err)) == 0, "save fp32 %s", err);
    GPT2Config got;
    float* q = NULL;
    CHECK(model_file_load(path, &got, &q, err, sizeof(err)) == 0, "load fp32 %s", err);
    CHECK(q && memcmp(&got, &cfg, sizeof(cfg)) == 0, "config round trip");
    CHECK(q && memcmp(p, q, n * sizeof(float)) == 0, "parameters round trip bitwise (%zu floats)", n);
    free(q);

    // a bf16 file: the same header with version 5, each parameter's upper 16 bits
    snprintf(path16, sizeof(path16), "%s/m16.bin", dir);
    FILE* f = fopen(path, "rb");
    int h[256];
    CHECK(fread(h, 4, 256, f) == 256, "read header");
    fclose(f);
    h[1] = MODEL_FILE_VERSION_BF16;
    f = fopen(path16, "wb");
    fwrite(h, 4, 256, f);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, p + i, 4);
        uint16_t hi = (uint16_t)(bits >> 16);
        fwrite(&hi, 2, 1, f);
    }
    fclose(f);
    CHECK(model_file_load(path16, &got, &q, err, sizeof(err)) == 0, "load bf16 %s", err);
    size_t bad = 0;
    for (size_t i = 0; q && i < n; i++) {
        uint32_t bits;
        memcpy(&bits, p + i, 4);
        bits &= 0xFFFF0000u;
        float want;
        memcpy(&want, &bits, 4);
        bad += q[i] != want;
    }
    CHECK(q && bad == 0, "bf16 import gives the truncated fp32 values (%zu mismatches)", bad);

    // a stage's part alone, fresh or from either file, is bitwise that slice of the whole model
    GPT2Range ranges[4] = {{0, 1, 1, 0}, {1, 2, 0, 1}, {0, 2, 1, 1}, {1, 1, 0, 1}}; // first, last, whole, the head alone
    float* whole[3] = {p, p, q};
    const char* files[3] = {NULL, path, path16};
    int same[3] = {1, 1, 1};
    for (int r = 0; r < 4; r++) {
        size_t rs[GPT2_NUM_PARAM_TENSORS], rn = gpt2_param_sizes(&cfg, &ranges[r], rs);
        float *want = (float*)malloc(rn * sizeof(float)), *part = (float*)malloc(rn * sizeof(float));
        for (int src = 0; src < 3; src++) {
            gpt2_slice_params(&cfg, &ranges[r], whole[src], want);
            if (src == 0) gpt2_init_range(&cfg, &ranges[r], part, 3);
            else if (model_file_load_range(files[src], &cfg, &ranges[r], part, err, sizeof(err))) same[src] = 0;
            same[src] &= memcmp(want, part, rn * sizeof(float)) == 0;
        }
        free(want);
        free(part);
    }
    CHECK(same[0], "gpt2_init_range: each range's part of gpt2_init_full's model, bitwise (first, last, whole, head-only stage)");
    CHECK(same[1] && same[2], "model_file_load_range: each range's part of the fp32 and the bf16 file, bitwise");
    free(q);

    // refusals: trailing data, truncation inside the parameters, an implausible shape
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "cp %s %s/t.bin && printf x >> %s/t.bin", path, dir, dir);
    CHECK(system(cmd) == 0, "make a file with trailing data");
    snprintf(path16, sizeof(path16), "%s/t.bin", dir);
    CHECK(model_file_load(path16, &got, &q, err, sizeof(err)) == -1 && strstr(err, "trailing data"), "trailing data refused: %s", err);
    snprintf(cmd, sizeof(cmd), "head -c 2000 %s > %s/s.bin", path, dir);
    CHECK(system(cmd) == 0, "make a truncated file");
    snprintf(path16, sizeof(path16), "%s/s.bin", dir);
    CHECK(model_file_load(path16, &got, &q, err, sizeof(err)) == -1 && strstr(err, "truncated"), "truncation refused: %s", err);
    h[1] = 3;
    h[6] = 7; // C = 7 with NH = 2: heads do not divide the channels
    snprintf(path16, sizeof(path16), "%s/h.bin", dir);
    f = fopen(path16, "wb");
    fwrite(h, 4, 256, f);
    fclose(f);
    CHECK(model_file_read_config(path16, &got, err, sizeof(err)) == -1 && strstr(err, "implausible"), "bad shape refused: %s", err);

    // non-finite weights: refused at load, named by tensor (and layer), not trained on
    size_t at_wpe = sizes[0] + sizes[1] - 1, at_fcw = 5 + sizes[10] / 2; // wpe's last element; layer 1's fcw[5]
    for (int k = 0; k < 10; k++) at_fcw += sizes[k];
    float nan_inf[2] = {NAN, -INFINITY};
    size_t at[2] = {at_wpe, at_fcw};
    const char* named[2] = {"(wpe[", "(layer 1's fcw[5])"};
    for (int c = 0; c < 2; c++) {
        float keep = p[at[c]];
        p[at[c]] = nan_inf[c];
        snprintf(path16, sizeof(path16), "%s/nf%d.bin", dir, c);
        CHECK(model_file_save(path16, &cfg, p, err, sizeof(err)) == 0, "save a model with a %g", nan_inf[c]);
        p[at[c]] = keep;
        q = NULL;
        int rc = model_file_load(path16, &got, &q, err, sizeof(err));
        CHECK(rc == -1 && q == NULL && strstr(err, named[c]) && strstr(err, "not finite"), "a %g weight is refused at load: %s", nan_inf[c], err);
        // by the stage that reads it, named alike; a stage that does not hold it reads its part
        GPT2Range holder = {c == 0 ? 0 : 1, c == 0 ? 1 : 2, c == 0, c == 1}, other = {c == 0 ? 1 : 0, c == 0 ? 2 : 1, c == 1, c == 0};
        size_t rs[GPT2_NUM_PARAM_TENSORS];
        float* part = (float*)malloc(gpt2_param_sizes(&cfg, &holder, rs) * sizeof(float) + gpt2_param_sizes(&cfg, &other, rs) * sizeof(float));
        rc = model_file_load_range(path16, &got, &holder, part, err, sizeof(err));
        CHECK(rc == -1 && strstr(err, named[c]) && strstr(err, "not finite"), "  and by the stage that holds it: %s", err);
        CHECK(model_file_load_range(path16, &got, &other, part, err, sizeof(err)) == 0, "  a stage without it loads");
        free(part);
    }

    // the file written as it arrives: the same bytes as the whole; more or fewer parameters than the
    // model has are refused and leave no file
    char piece_path[300], tmp_path[310];
    snprintf(piece_path, sizeof(piece_path), "%s/pieces.bin", dir);
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", piece_path);
    ModelFileWriter w;
    int rc = model_file_writer_open(&w, piece_path, &cfg, err, sizeof(err));
    for (size_t off = 0, k = 1; rc == 0 && off < n; off += k, k = k * 3 + 1) {
        if (k > n - off) k = n - off;
        rc = model_file_writer_put(&w, p + off, k, err, sizeof(err));
    }
    if (rc == 0) rc = model_file_writer_commit(&w, err, sizeof(err));
    snprintf(cmd, sizeof(cmd), "cmp -s %s %s", path, piece_path);
    CHECK(rc == 0 && system(cmd) == 0, "written in pieces: byte for byte the whole's file %s", rc ? err : "");
    for (int c = 0; c < 2; c++) {
        rc = model_file_writer_open(&w, piece_path, &cfg, err, sizeof(err));
        rc = rc ? rc : model_file_writer_put(&w, p, n - 1, err, sizeof(err));
        rc = rc ? rc : c == 0 ? model_file_writer_put(&w, p, 2, err, sizeof(err)) : model_file_writer_commit(&w, err, sizeof(err));
        const char* want = c == 0 ? "2 parameters put after" : "of the model's";
        CHECK(rc == -1 && strstr(err, want) && access(tmp_path, F_OK) != 0, "%s refused, no temporary file: %s", c ? "too few" : "too many", err);
        model_file_writer_abort(&w); // (after a failure: nothing left to do)
    }

    // a bf16 file past the reader's 2^20-value chunk: V 10240 x C 128 of wte alone is 1.31M values
    // (3 MB). Value i is bf16 0x3F80 + i % 128 (1 to 2, finite); each must come back as those bits << 16
    GPT2Config big = {16, 10240, 10240, 1, 2, 128};
    GPT2Range big_all = {0, 1, 1, 1};
    size_t nb = gpt2_param_sizes(&big, &big_all, sizes);
    int hb[256] = {MODEL_FILE_MAGIC, MODEL_FILE_VERSION_BF16, big.max_seq_len, big.vocab_size, big.num_layers, big.num_heads,
                   big.channels, big.padded_vocab_size};
    snprintf(path16, sizeof(path16), "%s/big16.bin", dir);
    uint16_t* vb = (uint16_t*)malloc(nb * sizeof(uint16_t));
    for (size_t i = 0; i < nb; i++) vb[i] = (uint16_t)(0x3F80 + i % 128);
    f = fopen(path16, "wb");
    fwrite(hb, 4, 256, f);
    fwrite(vb, 2, nb, f);
    fclose(f);
    float* qb = NULL;
    int rcb = model_file_load(path16, &got, &qb, err, sizeof(err));
    size_t badb = 0;
    for (size_t i = 0; rcb == 0 && i < nb; i++) {
        uint32_t bits;
        memcpy(&bits, qb + i, 4);
        badb += bits != (uint32_t)vb[i] << 16;
    }
    CHECK(nb > ((size_t)1 << 20) && rcb == 0 && badb == 0, "bf16 file of %zu values (past one 2^20 chunk): every value its bits << 16 (%zu mismatches) %s",
          nb, badb, rcb ? err : "");
    free(qb);
    free(vb);
    // a header past the reader's limits (maxT at most 2^20) is refused before any allocation
    hb[2] = (1 << 20) + 1;
    f = fopen(path16, "wb");
    fwrite(hb, 4, 256, f);
    fclose(f);
    CHECK(model_file_read_config(path16, &got, err, sizeof(err)) == -1 && strstr(err, "implausible"), "maxT 2^20 + 1 refused: %s", err);

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd)) return 1;
    free(p);
    test_fresh_shapes();
    test_init_statistics();
    return test_summary();
}
