// A tiny GPT-2-style vocabulary for tests and fuzz seeds: the 256 bytes in GPT-2's alphabet (as
// \u escapes), "ab", "bc", "abc", <|endoftext|>, and the merges "a b", "b c", "ab c" (in that priority).
#pragma once
#include <stdio.h>

// writes the encoder.json and vocab.bpe texts into the open streams enc and bpe
static inline void tiny_vocab_write(FILE* enc, FILE* bpe) {
    fprintf(enc, "{");
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        fprintf(enc, "\"\\u%04x\": %d, ", printable ? b : 256 + extra++, b);
    }
    fprintf(enc, "\"ab\": 256,\n\"bc\": 257, \"abc\" :258 , \"<|endoftext|>\": 259}\n");
    fputs("#version: 0.2\na b\nb c\nab c\n", bpe);
}
