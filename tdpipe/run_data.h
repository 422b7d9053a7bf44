// A run's data: the built-in Markov corpus (its entropy floor known) or llm.c token shards, read on
// the first and last stage; the vocabulary a fresh model gets from them; and the decoding of samples.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "llmc/builtin_data.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "tdpipe/args.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    DataLoader train, val;
    int has_train, has_val;
    int tokenizer;        // SHARD_TOKENIZER_*: decides V for fresh models and how samples decode
    int builtin;          // 1 when training on the built-in dataset
    MarkovSource source;  // the built-in dataset's source (its entropy floor)
    int first_token;      // where samples start: the first validation (or training) token
} RunData;

// the vocabulary a fresh model gets from the data: 256 for bytes (the built-in data too), 50257 for
// GPT-2's tokens, from the first shard's header (every shard's tokenizer is checked equal later)
int run_data_vocab(const TrainArgs* a);
// every replica reads its own slice of the training data (replica of D); validation is the same for
// all. Every rank validates the shards (the same verdict everywhere); ranks that need no data (middle
// stages) keep only the tokenizer. V_limit: every token must be below it (the model's vocabulary).
// 0, or -1 with what is wrong in why (naming -i or -j)
int run_data_init(RunData* d, const TrainArgs* a, int V_limit, int needs_data, int replica, int D, char* why, size_t whylen);
void run_data_free(RunData* d);

typedef struct {
    Tokenizer tok;
    int ready; // 0: samples print token ids
} RunDecoder;

// the tokenizer the shards name (GPT-2's from --tokenizer-dir), for samples of a model of vocabulary
// V; a note on stderr, and samples as token ids, when it cannot load or has fewer than V tokens
void run_decoder_init(RunDecoder* dec, const RunData* d, const TrainArgs* a, int V);
// one sample on one line: "sample (kind): text"
void run_decoder_print(const RunDecoder* dec, const char* kind, const int* ids, int n);
// decoded text to f as one line a terminal shows safely: valid UTF-8 as it is, newlines as spaces,
// other control bytes and bytes of no valid UTF-8 sequence as \xNN (an untrained model's byte-level
// samples hold NULs, bells and escapes)
void run_text_print(FILE* f, const uint8_t* s, size_t n);

#ifdef __cplusplus
}
#endif
