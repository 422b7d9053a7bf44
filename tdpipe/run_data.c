// A run's data (see run_data.h): the built-in Markov corpus or llm.c shards, and samples' decoding.
#include "tdpipe/run_data.h"
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "llmc/shard.h"

#define BUILTIN_TRAIN_TOKENS 2000000
#define BUILTIN_VAL_TOKENS 131072
#define BUILTIN_SOURCE_SEED 20241130ULL

int run_data_vocab(const TrainArgs* a) {
    if (!a->train_pattern[0]) return 256;
    glob_t g;
    int V = 50257;
    if (glob(a->train_pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
        ShardInfo info;
        char err[512];
        if (shard_read_header(g.gl_pathv[0], &info, err, sizeof(err)) == 0 && info.tokenizer == SHARD_TOKENIZER_BYTES) V = 256;
        globfree(&g);
    }
    return V; // (an unreadable pattern is refused by run_data_init with its own message)
}

// "FLAG PATTERN: err", or "FLAG err" where err names the pattern itself already (one file, not a glob)
static int data_error(char* why, size_t whylen, const char* flag, const char* pattern, const char* err) {
    size_t n = strlen(pattern);
    if (!strncmp(err, pattern, n) && err[n] == ':') return td_error(why, whylen, "%s %s", flag, err);
    return td_error(why, whylen, "%s %s: %s", flag, pattern, err);
}

int run_data_init(RunData* d, const TrainArgs* a, int V_limit, int needs_data, int replica, int D, char* why, size_t whylen) {
    char err[1024];
    memset(d, 0, sizeof(*d));
    uint64_t seed = (uint64_t)a->seed;
    if (!a->train_pattern[0]) {
        if (a->val_pattern[0]) // (it would be ignored: the built-in data validates on its own split)
            return td_error(why, whylen, "-j %s: validation shards need training shards (-i) of the same tokenizer; the built-in dataset has its own validation split",
                            a->val_pattern);
        d->builtin = 1;
        d->tokenizer = SHARD_TOKENIZER_BYTES;
        markov_init(&d->source, BUILTIN_SOURCE_SEED);
        uint16_t* tokens = (uint16_t*)malloc_check(sizeof(uint16_t) * (BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS));
        markov_generate(&d->source, tokens, BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS, BUILTIN_SOURCE_SEED + 1);
        d->first_token = tokens[BUILTIN_TRAIN_TOKENS];
        d->has_val = 1;
        int top = 0; // the largest token (its symbols are bytes): a model with a smaller vocabulary cannot read it
        for (int i = 0; i < BUILTIN_TRAIN_TOKENS + BUILTIN_VAL_TOKENS; i++) top = tokens[i] > top ? tokens[i] : top;
        if (top >= V_limit) {
            free(tokens);
            return td_error(why, whylen, "the built-in dataset's tokens are bytes up to %d, but the model's vocabulary is V = %d: give a model of V > %d, or data (-i) it can read",
                            top, V_limit, top);
        }
        if (needs_data) {
            if (dataloader_init_memory(&d->train, tokens, BUILTIN_TRAIN_TOKENS, a->B, a->T, replica, D, a->shuffle, seed, V_limit, err, sizeof(err)) ||
                dataloader_init_memory(&d->val, tokens + BUILTIN_TRAIN_TOKENS, BUILTIN_VAL_TOKENS, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
                return td_error(why, whylen, "built-in dataset: %s", err);
            d->has_train = 1;
        }
        free(tokens);
        return 0;
    }
    // every rank validates the shards (the same verdict everywhere); middle stages then drop them
    if (dataloader_init(&d->train, a->train_pattern, a->B, a->T, replica, D, a->shuffle, seed, V_limit, err, sizeof(err)))
        return data_error(why, whylen, "-i", a->train_pattern, err);
    d->tokenizer = d->train.tokenizer == SHARD_TOKENIZER_BYTES ? SHARD_TOKENIZER_BYTES : SHARD_TOKENIZER_GPT2;
    d->has_train = 1;
    if (a->val_pattern[0]) {
        if (dataloader_init(&d->val, a->val_pattern, a->B, a->T, 0, 1, 0, seed, V_limit, err, sizeof(err)))
            return data_error(why, whylen, "-j", a->val_pattern, err);
        d->has_val = 1;
        if (d->val.tokenizer != d->train.tokenizer) // (tokens < V would pass, meaning other text)
            return td_error(why, whylen, "-j %s: its tokenizer (id %d) differs from the training shards' (-i %s: id %d); both must share one",
                            a->val_pattern, d->val.tokenizer, a->train_pattern, d->train.tokenizer);
    }
    // samples start from the first validation (or training) token
    DataLoader* src = d->has_val ? &d->val : &d->train;
    int* in = (int*)malloc_check(sizeof(int) * a->B * a->T * 2);
    if (dataloader_next(src, in, in + a->B * a->T) == 0) d->first_token = in[0];
    dataloader_reset(src);
    free(in);
    return 0;
}

void run_data_free(RunData* d) {
    if (d->has_train) dataloader_free(&d->train);
    if (d->has_val) dataloader_free(&d->val);
}

void run_decoder_init(RunDecoder* dec, const RunData* d, const TrainArgs* a, int V) {
    memset(dec, 0, sizeof(*dec));
    char enc[1100], bpe[1100], err[1024];
    snprintf(enc, sizeof(enc), "%s/encoder.json", a->tokenizer_dir);
    snprintf(bpe, sizeof(bpe), "%s/vocab.bpe", a->tokenizer_dir);
    const char* which = d->tokenizer == SHARD_TOKENIZER_BYTES ? "the byte tokenizer" : enc;
    if (d->tokenizer == SHARD_TOKENIZER_BYTES) dec->ready = tokenizer_init_bytes(&dec->tok) == 0;
    else if (tokenizer_init_gpt2(&dec->tok, enc, bpe, err, sizeof(err)) == 0) dec->ready = 1;
    else fprintf(stderr, "note: samples print token ids: %s (see --tokenizer-dir)\n", err);
    // a sampled id it has no bytes for decoded to nothing: that token dropped from the sample unseen
    if (dec->ready && tokenizer_vocab_size(&dec->tok) < V) {
        fprintf(stderr, "note: samples print token ids: %s has %d tokens, fewer than the model's vocabulary V = %d\n", which,
                tokenizer_vocab_size(&dec->tok), V);
        tokenizer_free(&dec->tok);
        dec->ready = 0;
    }
}

// the length of the valid UTF-8 sequence at s (n bytes left), or 0 where there is none: no overlong
// forms, no surrogates, nothing above U+10FFFF (RFC 3629)
static size_t utf8_len(const uint8_t* s, size_t n) {
    uint8_t c = s[0];
    size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n) return 0;
    uint8_t lo = 0x80, hi = 0xBF; // the second byte's range
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    for (size_t i = 1; i < len; i++) {
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return 0;
    }
    return len;
}

void run_text_print(FILE* f, const uint8_t* s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t len = utf8_len(s + i, n - i);
        if (len == 1 && s[i] == '\n') fputc(' ', f); // one sample, one line
        else if (len == 0 || (len == 1 && s[i] < 0x20 && s[i] != '\t') || (len == 1 && s[i] == 0x7F)) fprintf(f, "\\x%02x", s[i]);
        else fwrite(s + i, 1, len, f);
        i += len ? len : 1;
    }
}

void run_decoder_print(const RunDecoder* dec, const char* kind, const int* ids, int n) {
    printf("sample (%s): ", kind);
    if (!dec->ready) {
        for (int i = 0; i < n; i++) printf("%d ", ids[i]);
        printf("\n");
        return;
    }
    // the tokens' bytes joined first: a character of a byte-level BPE may span tokens
    size_t total = 0, len;
    for (int i = 0; i < n; i++) {
        tokenizer_decode(&dec->tok, ids[i], &len);
        total += len;
    }
    uint8_t* text = (uint8_t*)malloc_check(total + 1);
    total = 0;
    for (int i = 0; i < n; i++) {
        const uint8_t* bytes = tokenizer_decode(&dec->tok, ids[i], &len);
        memcpy(text + total, bytes, len);
        total += len;
    }
    run_text_print(stdout, text, total);
    printf("\n");
    free(text);
}
