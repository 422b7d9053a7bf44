// Tokenizer tests: GPT-2 ids equal tiktoken's (fixture from dev/data/tiktoken_reference.py), round
// trips of Tiny Shakespeare, the byte tokenizer, refusals of missing or malformed vocab files, and
// decoded samples printed safely (run_text_print).
// Run from the repository root: GPT-2's files from data/gpt2 (tests/run_all.sh fills it through
// dev/data/get_gpt2_tokenizer.sh), the text from $TINYSHAKESPEARE, ../shared/data or
// data/tinyshakespeare/input.txt.
#include "llmc/tokenizer.h"
#include "llmc/shard.h"
#include "tdpipe/run_data.h"
#include "tests/test.h"
#include "tests/tiny_vocab.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GPT2_DIR "data/gpt2"
// the text: $TINYSHAKESPEARE, else ../shared's copy, else the one prepare_tinyshakespeare.sh downloads
static const char* shakespeare_path(void) {
    const char* env = getenv("TINYSHAKESPEARE");
    if (env && env[0]) return env;
    return access("../shared/data/tinyshakespeare.txt", R_OK) == 0 ? "../shared/data/tinyshakespeare.txt" : "data/tinyshakespeare/input.txt";
}
#define SHAKESPEARE shakespeare_path()

static char* read_file(const char* path, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static void write_file(const char* path, const char* text) {
    FILE* f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

// Concatenated bytes of ids (n) equal text (len)?
static int decodes_to(const Tokenizer* tok, const int* ids, size_t n, const char* text, size_t len) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const uint8_t* b = tokenizer_decode(tok, ids[i], &k);
        if (!b || at + k > len || memcmp(text + at, b, k) != 0) return 0;
        at += k;
    }
    return at == len;
}

// GPT-2's pre-tokenizer regex, worked by hand on text whose pieces it names (NULL-ended): pieces are
// encoded apart (no merge crosses a piece), so the text's ids are the pieces' ids one after another
static int splits_as(const Tokenizer* tok, const char* text, const char* const* pieces) {
    int whole[64], part[64];
    size_t n = tokenizer_encode(tok, text, strlen(text), 0, whole, 64), at = 0;
    for (int i = 0; pieces[i]; i++) {
        size_t k = tokenizer_encode(tok, pieces[i], strlen(pieces[i]), 0, part, 64);
        if (at + k > n || memcmp(whole + at, part, k * sizeof(int)) != 0) return 0;
        at += k;
    }
    return at == n;
}

static void test_pretoken_edges(const Tokenizer* tok) {
    // " \u00a0word": \s+(?!\S) backs off to " " (U+00A0 is \s), then \s+ takes U+00A0 alone, then
    // the letters: a whitespace run keeps its last character for the next piece even when that
    // character is two bytes long (GPT-2 has a token for space + C2 A0, so a run kept whole shows)
    const char* nbsp[] = {" ", "\xc2\xa0", "word", NULL};
    CHECK(splits_as(tok, " \xc2\xa0word", nbsp), "\" \\u00a0word\" pre-tokenizes as [\" \", \"\\u00a0\", \"word\"]");
}

static void test_fixture(const Tokenizer* tok) {
    size_t len, idlen;
    char* text = read_file("tests/fixtures/tokenizer_text.txt", &len);
    char* idtext = read_file("tests/fixtures/tokenizer_ids.txt", &idlen);
    CHECK(text && idtext, "fixture files tests/fixtures/tokenizer_{text,ids}.txt exist");
    if (!text || !idtext) return;
    int* want = malloc(len * sizeof(int));
    size_t nwant = 0;
    for (char *p = idtext, *end; nwant < len; p = end) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        want[nwant++] = (int)v;
    }
    int* got = malloc(len * sizeof(int));
    size_t ngot = tokenizer_encode(tok, text, len, 1, got, len);
    size_t first = 0;
    while (first < ngot && first < nwant && got[first] == want[first]) first++;
    if (first < ngot || first < nwant) {
        printf("     first mismatch at id %zu of %zu (tiktoken) / %zu (ours)\n", first, nwant, ngot);
        size_t lo = first > 5 ? first - 5 : 0;
        printf("     tiktoken:");
        for (size_t i = lo; i < first + 5 && i < nwant; i++) printf(" %d", want[i]);
        printf("\n     ours:    ");
        for (size_t i = lo; i < first + 5 && i < ngot; i++) printf(" %d", got[i]);
        printf("\n     text from id %zu on, as ours decodes it: \"", lo);
        for (size_t i = lo; i < first + 5 && i < ngot; i++) {
            size_t k;
            const uint8_t* b = tokenizer_decode(tok, got[i], &k);
            if (b) fwrite(b, 1, k, stdout);
        }
        printf("\"\n");
    }
    CHECK(ngot == nwant && first == nwant, "fixture: %zu ids equal tiktoken's %zu (%zu bytes of varied text)", ngot,
          nwant, len);
    int eots = 0;
    for (size_t i = 0; i < ngot; i++) eots += got[i] == tokenizer_eot(tok);
    CHECK(eots == 1, "fixture: <|endoftext|> in the text is the one EOT id %d with allow_special", tokenizer_eot(tok));
    CHECK(decodes_to(tok, got, ngot, text, len), "fixture: ids decode to the exact text");

    size_t nord = tokenizer_encode(tok, text, len, 0, got, len);
    eots = 0;
    for (size_t i = 0; i < nord; i++) eots += got[i] == tokenizer_eot(tok);
    CHECK(eots == 0 && nord > ngot && decodes_to(tok, got, nord, text, len),
          "fixture without allow_special: no EOT id, <|endoftext|> encoded as text (%zu ids), exact round trip", nord);

    // a short cap: the count is still the whole text's, and nothing is written past cap
    int small[9];
    small[8] = -12345;
    size_t nsmall = tokenizer_encode(tok, text, len, 1, small, 8);
    CHECK(nsmall == ngot && small[8] == -12345 && memcmp(small, want, 8 * sizeof(int)) == 0,
          "cap of 8: returns the full count %zu, writes only the first 8", nsmall);
    free(want);
    free(got);
    free(text);
    free(idtext);
}

static void test_shakespeare(const Tokenizer* gpt2) {
    size_t len;
    char* text = read_file(SHAKESPEARE, &len);
    CHECK(text != NULL, "%s exists (TINYSHAKESPEARE=file, ../shared beside the repository, or dev/data/prepare_tinyshakespeare.sh's download; run from the repo root)", SHAKESPEARE);
    if (!text) return;
    int* ids = malloc(len * sizeof(int));
    size_t n = tokenizer_encode(gpt2, text, len, 0, ids, len);
    // tiktoken's GPT-2 encoding gives 338025 ids for this text (encode_ordinary)
    CHECK(n == 338025, "Tiny Shakespeare: %zu GPT-2 ids (tiktoken: 338025)", n);
    CHECK(decodes_to(gpt2, ids, n, text, len), "Tiny Shakespeare: GPT-2 round trip is byte-exact (%zu bytes)", len);

    Tokenizer bytes;
    tokenizer_init_bytes(&bytes);
    size_t nb = tokenizer_encode(&bytes, text, len, 1, ids, len);
    int same = nb == len;
    for (size_t i = 0; same && i < len; i++) same = ids[i] == (uint8_t)text[i];
    CHECK(same && decodes_to(&bytes, ids, nb, text, len), "Tiny Shakespeare: byte tokenizer ids are the bytes, round trip");
    free(ids);
    free(text);
    tokenizer_free(&bytes);
}

static void test_bytes(void) {
    Tokenizer t;
    tokenizer_init_bytes(&t);
    CHECK(t.kind == SHARD_TOKENIZER_BYTES && tokenizer_vocab_size(&t) == 256 && tokenizer_eot(&t) == -1,
          "byte tokenizer: V = 256, no EOT");
    const char text[] = "a\0\xff<|endoftext|>\x80";
    int ids[32];
    size_t n = tokenizer_encode(&t, text, sizeof text - 1, 1, ids, 32);
    CHECK(n == sizeof text - 1 && ids[1] == 0 && ids[2] == 255 && ids[3] == '<' && decodes_to(&t, ids, n, text, n),
          "byte tokenizer: every byte (NUL, 0xFF, invalid UTF-8, no special) is its own id");
    size_t k;
    CHECK(tokenizer_decode(&t, 256, &k) == NULL && k == 0 && tokenizer_decode(&t, -1, &k) == NULL,
          "decode of an id outside [0, V) gives NULL");
    tokenizer_free(&t);
}

// tests/tiny_vocab.h's vocabulary, as two files in dir
static void write_tiny_vocab(const char* dir, char* enc_path, char* bpe_path) {
    sprintf(enc_path, "%s/tiny_encoder.json", dir);
    sprintf(bpe_path, "%s/tiny_vocab.bpe", dir);
    FILE* enc = fopen(enc_path, "wb");
    FILE* bpe = fopen(bpe_path, "wb");
    tiny_vocab_write(enc, bpe);
    fclose(enc);
    fclose(bpe);
}

static void test_tiny_vocab(const char* dir) {
    char enc[512], bpe[512], err[512];
    write_tiny_vocab(dir, enc, bpe);
    Tokenizer t;
    int rc = tokenizer_init_gpt2(&t, enc, bpe, err, sizeof err);
    CHECK(rc == 0, "tiny vocabulary with \\u escapes loads (%s)", rc ? err : "ok");
    if (rc) return;
    CHECK(tokenizer_vocab_size(&t) == 260 && tokenizer_eot(&t) == 259, "tiny vocabulary: V = 260, EOT = 259");
    int ids[16];
    // "abcb": merge "a b" (rank 0) first, then "ab c" (rank 2); "c b" is no merge
    size_t n = tokenizer_encode(&t, "abcb", 4, 0, ids, 16);
    CHECK(n == 2 && ids[0] == 258 && ids[1] == 'b', "\"abcb\" -> [abc, b] by merge priority");
    // "bcab": "b c" (rank 1) and "a b" (rank 0): "ab" first, then "bc"; "bc ab" makes nothing
    n = tokenizer_encode(&t, "bcab", 4, 0, ids, 16);
    CHECK(n == 2 && ids[0] == 257 && ids[1] == 256, "\"bcab\" -> [bc, ab]");
    n = tokenizer_encode(&t, "ab<|endoftext|>ab", 17, 1, ids, 16);
    CHECK(n == 3 && ids[0] == 256 && ids[1] == 259 && ids[2] == 256, "special token splits the text");
    tokenizer_free(&t);
}

static void refuse_encoder(const char* dir, const char* name, const char* json, const char* want) {
    char enc[512], bpe[512], err[512] = "";
    sprintf(enc, "%s/bad_%s.json", dir, name);
    sprintf(bpe, "%s/tiny_vocab.bpe", dir);
    write_file(enc, json);
    Tokenizer t;
    int rc = tokenizer_init_gpt2(&t, enc, bpe, err, sizeof err);
    CHECK(rc == -1 && strstr(err, enc) && strstr(err, want), "refuses encoder.json with %s: %s", name, err);
}

static void test_refusals(const char* dir) {
    char err[512] = "";
    Tokenizer t;
    int rc = tokenizer_init_gpt2(&t, "/nonexistent/encoder.json", GPT2_DIR "/vocab.bpe", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "/nonexistent/encoder.json") && strstr(err, "cannot open"),
          "refuses a missing encoder.json: %s", err);
    rc = tokenizer_init_gpt2(&t, GPT2_DIR "/encoder.json", "/nonexistent/vocab.bpe", err, sizeof err);
    CHECK(rc == -1 && strstr(err, "/nonexistent/vocab.bpe"), "refuses a missing vocab.bpe: %s", err);

    refuse_encoder(dir, "truncation", "{\"a\": 0, \"b\": 1", "malformed JSON");
    refuse_encoder(dir, "missing_colon", "{\"a\" 0}", "expected ':'");
    refuse_encoder(dir, "bad_escape", "{\"\\q\": 0}", "unknown escape");
    refuse_encoder(dir, "bad_hex", "{\"\\u00g1\": 0}", "bad \\u escape");
    refuse_encoder(dir, "lone_surrogate", "{\"\\ud800x\": 0}", "unpaired surrogate");
    refuse_encoder(dir, "trailing_comma", "{\"a\": 0,}", "comma");
    refuse_encoder(dir, "negative_id", "{\"a\": -1}", "token id");
    refuse_encoder(dir, "outside_alphabet", "{\"\\u4e2d\": 0}", "outside GPT-2's byte alphabet");
    refuse_encoder(dir, "raw_space", "{\"a b\": 0}", "outside GPT-2's byte alphabet");
    refuse_encoder(dir, "garbage_after", "{\"a\": 0} x", "expected the object to end");
    refuse_encoder(dir, "too_few", "{\"a\": 0, \"b\": 1}", "ids must be 0..N-1");

    // a merge of tokens that are not in the encoder
    char enc[512], bpe[512];
    write_tiny_vocab(dir, enc, bpe);
    write_file(bpe, "#version: 0.2\na b\nx yz\n");
    rc = tokenizer_init_gpt2(&t, enc, bpe, err, sizeof err);
    CHECK(rc == -1 && strstr(err, bpe) && strstr(err, "line 3"), "refuses vocab.bpe with an unknown merge: %s", err);
    write_file(bpe, "#version: 0.2\nab\n");
    rc = tokenizer_init_gpt2(&t, enc, bpe, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "line 2") && strstr(err, "two tokens"), "refuses a merge line without two tokens: %s",
          err);
}

// what run_text_print makes of n bytes, as a C string (static)
static const char* printed(const char* bytes, size_t n) {
    static char out[512];
    FILE* f = fmemopen(out, sizeof(out), "w");
    run_text_print(f, (const uint8_t*)bytes, n);
    fclose(f);
    return out;
}

// samples reach a terminal: valid UTF-8 (a character split across byte-level tokens is joined
// before this) passes as it is, control bytes and bytes of no valid sequence become \xNN
static void test_text_print(void) {
    const char* s = printed("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\ta", 16);
    CHECK(!strcmp(s, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\ta"), "valid UTF-8 (2, 3, 4 bytes) and a tab pass as they are: %s", s);
    s = printed("a\nb", 3);
    CHECK(!strcmp(s, "a b"), "a newline prints as a space (one sample, one line): %s", s);
    s = printed("\x00\x07\x1b[2J\r\x7f", 8);
    CHECK(!strcmp(s, "\\x00\\x07\\x1b[2J\\x0d\\x7f"), "NUL, bell, escape, carriage return, DEL escaped: %s", s);
    s = printed("\x80\xc0\x80\xed\xa0\x80\xf5\x80\xc3", 9);
    CHECK(!strcmp(s, "\\x80\\xc0\\x80\\xed\\xa0\\x80\\xf5\\x80\\xc3"),
          "a lone continuation, an overlong form, a surrogate, a byte above U+10FFFF's, a cut sequence: each byte escaped: %s", s);
    s = printed("\xe0\x9f\x80\xf0\x8f\x80\x80\xf4\x90\x80\x80", 11);
    CHECK(!strcmp(s, "\\xe0\\x9f\\x80\\xf0\\x8f\\x80\\x80\\xf4\\x90\\x80\\x80"), "overlong 3- and 4-byte forms and one above U+10FFFF escaped: %s", s);
}

int main(void) {
    char dir[] = "/tmp/test_tokenizer.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    Tokenizer gpt2;
    char err[512];
    int rc = tokenizer_init_gpt2(&gpt2, GPT2_DIR "/encoder.json", GPT2_DIR "/vocab.bpe", err, sizeof err);
    CHECK(rc == 0, "GPT-2 vocabulary loads from " GPT2_DIR " (%s)", rc ? err : "ok");
    if (rc == 0) {
        CHECK(gpt2.kind == SHARD_TOKENIZER_GPT2 && tokenizer_vocab_size(&gpt2) == 50257 && tokenizer_eot(&gpt2) == 50256,
              "GPT-2: V = 50257, EOT = 50256");
        test_fixture(&gpt2);
        test_shakespeare(&gpt2);
        test_pretoken_edges(&gpt2);
        tokenizer_free(&gpt2);
    }
    test_bytes();
    test_text_print();
    test_tiny_vocab(dir);
    test_refusals(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
    return test_summary();
}
