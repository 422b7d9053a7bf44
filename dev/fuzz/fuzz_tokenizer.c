// libFuzzer target: GPT-2's tokenizer files (llmc/tokenizer.c). The input is encoder.json, a NUL
// byte, then vocab.bpe; a tokenizer that loads must encode that input and decode it back exactly.
#include "dev/fuzz/fuzz_file.h"
#include "llmc/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, n);
    size_t enc_n = nul ? (size_t)(nul - data) : n;
    const uint8_t* bpe = nul ? nul + 1 : data + n;
    const char* enc_path = fuzz_file(0, data, enc_n);
    const char* bpe_path = fuzz_file(1, bpe, (size_t)(data + n - bpe));
    Tokenizer tok;
    char err[1024];
    if (tokenizer_init_gpt2(&tok, enc_path, bpe_path, err, sizeof err) != 0) return 0;
    for (int special = 0; special < 2; special++) {
        int* ids = (int*)malloc((n + 1) * sizeof(int)); // (n + 1,): never more ids than bytes
        size_t k = tokenizer_encode(&tok, (const char*)data, n, special, ids, n + 1);
        if (k > n) abort();
        size_t at = 0;
        for (size_t i = 0; i < k; i++) {
            size_t len;
            const uint8_t* b = tokenizer_decode(&tok, ids[i], &len);
            if (!b || at + len > n || memcmp(b, data + at, len) != 0) abort();
            at += len;
        }
        if (at != n) abort();
        free(ids);
    }
    tokenizer_free(&tok);
    return 0;
}
