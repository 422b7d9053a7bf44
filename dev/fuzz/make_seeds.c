// Writes the fuzzers' seed inputs into DIR/<target>/, each made by tdpipe's own writers (or, for
// text, by hand): tiny valid files, so the fuzzers start past the first checks of every reader.
// Usage: make_seeds DIR
#include "llmc/checkpoint.h"
#include "llmc/common.h"
#include "llmc/model_file.h"
#include "llmc/shard.h"
#include "tests/tiny_vocab.h"
#include <string.h>
#include <sys/stat.h>

static char g_root[1024];

static const char* seed_path(const char* target, const char* name) {
    static char p[2200];
    snprintf(p, sizeof p, "%s/%s", g_root, target);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", g_root, target, name);
    return p;
}

static void write_text(const char* target, const char* name, const char* text) {
    FILE* f = fopen_check(seed_path(target, name), "wb");
    fputs(text, f);
    fclose_check(f, name);
}

static void or_die(int rc, const char* err) {
    if (rc != 0) td_fatal("make_seeds: %s", err);
}

static void model_seeds(void) {
    GPT2Config cfg = {.max_seq_len = 4, .vocab_size = 8, .num_layers = 1, .num_heads = 1, .channels = 4, .padded_vocab_size = 8};
    GPT2Range all = {0, 1, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(&cfg, &all, sizes);
    float* p = (float*)malloc_check(n * sizeof(float)); // (n,)
    for (size_t i = 0; i < n; i++) p[i] = (float)i / (float)n - 0.5f;
    char err[1024];
    or_die(model_file_save(seed_path("model_file", "tiny_fp32.bin"), &cfg, p, err, sizeof err), err);
    free(p);
}

static void shard_seeds(void) {
    uint16_t t[64]; // (64,)
    for (int i = 0; i < 64; i++) t[i] = (uint16_t)(i * 37 % 256);
    char err[1024];
    or_die(shard_write(seed_path("shard", "bytes.bin"), t, 64, SHARD_TOKENIZER_BYTES, err, sizeof err), err);
    or_die(shard_write(seed_path("shard", "gpt2.bin"), t, 9, SHARD_TOKENIZER_GPT2, err, sizeof err), err);
    or_die(shard_write(seed_path("shard", "empty.bin"), t, 0, SHARD_TOKENIZER_UNSPECIFIED, err, sizeof err), err);
}

static void checkpoint_seeds(void) {
    char dir[1200], err[1024], path[2400];
    snprintf(dir, sizeof dir, "%s/checkpoint", g_root);
    mkdir(dir, 0755);
    float w[40];  // (40,)
    double d[3];  // (3,)
    uint16_t h[5]; // (5,)
    for (int i = 0; i < 40; i++) w[i] = 0.01f * (float)(i % 7);
    for (int i = 0; i < 3; i++) d[i] = i * 1.5;
    for (int i = 0; i < 5; i++) h[i] = (uint16_t)(1000 + i);
    for (int level = 0; level <= CKPT_LEVEL_HUFFMAN; level += CKPT_LEVEL_HUFFMAN / 2) {
        CkptWriter* wr = ckpt_writer_open(dir, 7 + level, level, level != 0, err, sizeof err);
        if (!wr) td_fatal("make_seeds: %s", err);
        or_die(ckpt_writer_add(wr, "params", w, sizeof w, 4, err, sizeof err), err);
        or_die(ckpt_writer_add(wr, "step", d, sizeof d, 8, err, sizeof err), err);
        or_die(ckpt_writer_add(wr, "tail", h, sizeof h - 1, 2, err, sizeof err), err);
        or_die(ckpt_writer_add(wr, "empty", NULL, 0, 1, err, sizeof err), err);
        or_die(ckpt_writer_commit(wr, path, sizeof path, err, sizeof err), err);
    }
}

static void config_seeds(void) {
    write_text("config", "readme.yaml",
               "pipeline: {stages: 4, micro_batch: 8, aew_window: 2, grad_cache: 0, schedule: tdpipe}\n"
               "model: {init: d4, batch: 8, seq_len: 64}\n"
               "optimizer: {lr: 0.003, warmup: 20, steps: 300, clip: 1.0}\n"
               "data: {train: \"data/tinyshakespeare/ts_train.bin\", val: \"data/tinyshakespeare/ts_val.bin\"}\n"
               "checkpoint: {out_dir: out, every: 100, keep: 3}\n"
               "logging: {val_every: 50, sample_every: 100}\n");
    write_text("config", "block.yaml",
               "---\n# block style, an anchor and an alias\npipeline:\n  stages: &p 2\n  aew_window: *p\n"
               "  partition: '4,4,3,1'\nmodel:\n  device: cpu\n...\n");
}

static void tokenizer_seeds(void) {
    FILE* f = fopen_check(seed_path("tokenizer", "tiny"), "wb");
    FILE* bpe = tmpfile();
    if (!bpe) td_fatal("make_seeds: tmpfile failed");
    tiny_vocab_write(f, bpe);
    fputc(0, f); // fuzz_tokenizer.c's separator
    rewind(bpe);
    int c;
    while ((c = fgetc(bpe)) != EOF) fputc(c, f);
    fclose(bpe);
    fclose_check(f, "tiny");
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds DIR\n");
        return 1;
    }
    snprintf(g_root, sizeof g_root, "%s", argv[1]);
    mkdir(g_root, 0755);
    model_seeds();
    shard_seeds();
    checkpoint_seeds();
    config_seeds();
    tokenizer_seeds();
    return 0;
}
