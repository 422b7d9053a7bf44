// make_shards: text files -> llm.c token shards (PREFIX_val.bin, PREFIX_train.bin) with the GPT-2 or
// the byte tokenizer. The validation split is taken from the START of the token stream, as llm.c does.
#include "llmc/common.h"
#include "llmc/shard.h"
#include "llmc/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE* f) {
    fprintf(f,
            "usage: make_shards [options] -o PREFIX INPUT.txt [INPUT.txt ...]\n"
            "Tokenizes the inputs (in order) and writes PREFIX_val.bin and PREFIX_train.bin in llm.c's shard\n"
            "format (header[3] records the tokenizer). The first tokens go to the validation shard.\n"
            "\n"
            "  -o PREFIX               output prefix, e.g. data/tinyshakespeare/ts (its folder must exist)\n"
            "  --tokenizer gpt2|bytes  GPT-2 BPE (V = 50257) or one token per byte (V = 256)  [gpt2]\n"
            "  --gpt2-dir DIR          folder holding encoder.json and vocab.bpe            [data/gpt2]\n"
            "  --val-fraction F        fraction of all tokens for PREFIX_val.bin, in [0, 1);\n"
            "                          0 writes no validation shard                          [0.1]\n"
            "  --val-tokens N          exactly N tokens for validation (overrides --val-fraction)\n"
            "GPT-2 only:\n"
            "  --eot-at-blank-lines    also start a new document after every blank line (\"\\n\\n\"), as\n"
            "                          llm.c's tinyshakespeare.py does; each input file always starts\n"
            "                          with <|endoftext|>\n"
            "  --allow-special         the text \"<|endoftext|>\" in an input is the EOT token, not text\n"
            "  -h, --help              this text\n");
}

// Growable token stream.
typedef struct {
    uint16_t* p;
    size_t n, cap;
} Tokens;

static void tokens_push(Tokens* t, int id) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1 << 20;
        uint16_t* p = malloc_check(cap * sizeof(uint16_t));
        if (t->n) memcpy(p, t->p, t->n * sizeof(uint16_t));
        free(t->p);
        t->p = p;
        t->cap = cap;
    }
    t->p[t->n++] = (uint16_t)id;
}

static void encode_into(const Tokenizer* tok, const char* text, size_t len, int allow_special, Tokens* out) {
    int* ids = malloc_check((len + 1) * sizeof(int)); // never more ids than bytes
    size_t n = tokenizer_encode(tok, text, len, allow_special, ids, len + 1);
    for (size_t i = 0; i < n; i++) tokens_push(out, ids[i]);
    free(ids);
}

static char* read_text(const char* path, size_t* len) {
    char err[1200];
    char* text = (char*)td_read_file(path, "text file", len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "make_shards: %s\n", err);
        exit(1);
    }
    return text;
}

static void write_or_die(const char* prefix, const char* suffix, const uint16_t* tokens, size_t n, int kind) {
    size_t len = strlen(prefix) + strlen(suffix) + 1;
    char* path = malloc_check(len);
    snprintf(path, len, "%s%s", prefix, suffix);
    char err[512];
    if (shard_write(path, tokens, n, kind, err, sizeof err) != 0) {
        fprintf(stderr, "make_shards: %s\n", err);
        exit(1);
    }
    printf("wrote %s: %zu tokens\n", path, n);
    free(path);
}

int main(int argc, char** argv) {
    const char* prefix = NULL;
    const char* tokenizer = "gpt2";
    const char* gpt2_dir = "data/gpt2";
    double val_fraction = 0.1;
    long long val_tokens = -1;
    int eot_at_blank_lines = 0, allow_special = 0;
    char** inputs = argv; // the input paths, gathered in place (always behind the parsing position)
    int num_inputs = 0;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") && has_value) {
            prefix = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && has_value) {
            tokenizer = argv[++i];
        } else if (!strcmp(a, "--gpt2-dir") && has_value) {
            gpt2_dir = argv[++i];
        } else if (!strcmp(a, "--val-fraction") && has_value) {
            char* end;
            val_fraction = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(val_fraction >= 0 && val_fraction < 1)) {
                fprintf(stderr, "make_shards: --val-fraction %s: expected a number in [0, 1)\n", argv[i]);
                return 1;
            }
        } else if (!strcmp(a, "--val-tokens") && has_value) {
            char* end;
            val_tokens = strtoll(argv[++i], &end, 10);
            if (*end || end == argv[i] || val_tokens < 0) {
                fprintf(stderr, "make_shards: --val-tokens %s: expected a count >= 0\n", argv[i]);
                return 1;
            }
        } else if (!strcmp(a, "--eot-at-blank-lines")) {
            eot_at_blank_lines = 1;
        } else if (!strcmp(a, "--allow-special")) {
            allow_special = 1;
        } else if (a[0] == '-' && a[1] != 0) {
            fprintf(stderr, "make_shards: %s: unknown option or missing value (see --help)\n", a);
            return 1;
        } else {
            inputs[num_inputs++] = argv[i];
        }
    }
    if (!prefix || num_inputs == 0) {
        fprintf(stderr, "make_shards: need -o PREFIX and at least one input file (see --help)\n");
        return 1;
    }
    if (!prefix[0] || prefix[strlen(prefix) - 1] == '/') { // the files would be "_train.bin" and "_val.bin" in that folder
        fprintf(stderr, "make_shards: -o '%s': the prefix needs a file-name part, e.g. data/ts (writes data/ts_train.bin)\n", prefix);
        return 1;
    }

    Tokenizer tok;
    int kind;
    if (!strcmp(tokenizer, "gpt2")) {
        kind = SHARD_TOKENIZER_GPT2;
        size_t len = strlen(gpt2_dir) + 32;
        char* enc_path = malloc_check(len);
        char* bpe_path = malloc_check(len);
        snprintf(enc_path, len, "%s/encoder.json", gpt2_dir);
        snprintf(bpe_path, len, "%s/vocab.bpe", gpt2_dir);
        char err[512];
        if (tokenizer_init_gpt2(&tok, enc_path, bpe_path, err, sizeof err) != 0) {
            fprintf(stderr, "make_shards: %s\n", err);
            return 1;
        }
        free(enc_path);
        free(bpe_path);
    } else if (!strcmp(tokenizer, "bytes")) {
        kind = SHARD_TOKENIZER_BYTES;
        tokenizer_init_bytes(&tok);
        if (eot_at_blank_lines || allow_special) {
            fprintf(stderr, "make_shards: --eot-at-blank-lines and --allow-special need --tokenizer gpt2 "
                            "(the byte tokenizer has no EOT token)\n");
            return 1;
        }
    } else {
        fprintf(stderr, "make_shards: --tokenizer %s: expected gpt2 or bytes\n", tokenizer);
        return 1;
    }

    Tokens all = {0};
    double t0 = now_seconds();
    size_t total_bytes = 0;
    for (int f = 0; f < num_inputs; f++) {
        size_t len;
        char* text = read_text(inputs[f], &len);
        total_bytes += len;
        int eot = tokenizer_eot(&tok);
        if (eot >= 0) tokens_push(&all, eot); // documents start with <|endoftext|>, as in GPT-2's training data
        size_t start = 0;
        if (eot_at_blank_lines) { // [EOT] s0 "\n\n" [EOT] s1 "\n\n" ... exactly llm.c's sections
            for (size_t i = 0; i + 1 < len; i++) {
                if (text[i] == '\n' && text[i + 1] == '\n') {
                    encode_into(&tok, text + start, i + 2 - start, allow_special, &all);
                    tokens_push(&all, eot);
                    start = i + 2;
                    i++;
                }
            }
        }
        encode_into(&tok, text + start, len - start, allow_special, &all);
        free(text);
    }
    size_t n_val = val_tokens >= 0 ? (size_t)val_tokens : (size_t)(val_fraction * (double)all.n + 0.5);
    printf("%s: %zu bytes from %d file(s) -> %zu tokens in %.2f s\n", tokenizer, total_bytes, num_inputs, all.n,
           now_seconds() - t0);
    if (val_tokens < 0 && val_fraction > 0 && n_val == 0) {
        fprintf(stderr, "make_shards: %zu tokens are too few for a validation fraction of %g\n", all.n, val_fraction);
        return 1;
    }
    if (n_val >= all.n) {
        fprintf(stderr, "make_shards: %zu tokens leave none for training after %zu validation tokens\n", all.n, n_val);
        return 1;
    }
    if (n_val > 0) write_or_die(prefix, "_val.bin", all.p, n_val, kind);
    write_or_die(prefix, "_train.bin", all.p + n_val, all.n - n_val, kind);
    free(all.p);
    tokenizer_free(&tok);
    return 0;
}
