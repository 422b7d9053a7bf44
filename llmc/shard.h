// Token shards in llm.c's format: a 256 × int32 header (magic, version, token count, tokenizer id)
// followed by the tokens as uint16. Writing is atomic; reading validates the header against the file.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_MAGIC 20240520
#define SHARD_VERSION 1
#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAX_TOKENS 2147483647LL // the count is an int32 in the header

// header[3]: which tokenizer produced the tokens. llm.c leaves it 0, and its shards are GPT-2.
enum {
    SHARD_TOKENIZER_UNSPECIFIED = 0, // treat as GPT-2
    SHARD_TOKENIZER_GPT2 = 1,        // GPT-2 byte-level BPE, V = 50257
    SHARD_TOKENIZER_BYTES = 2,       // one token per byte, V = 256
};

// what a tokenizer id means: llm.c's 0 is GPT-2, so 0 and 1 are the same tokens
static inline int shard_tokenizer_kind(int id) { return id == SHARD_TOKENIZER_UNSPECIFIED ? SHARD_TOKENIZER_GPT2 : id; }

typedef struct {
    int64_t num_tokens; // header[2]
    int tokenizer;      // header[3], one of SHARD_TOKENIZER_*
} ShardInfo;

// Writes tokens (n) to path through path.tmp + fsync + rename, so a reader never sees half a file.
// Returns 0, or -1 with a message in err.
int shard_write(const char* path, const uint16_t* tokens, size_t n, int tokenizer, char* err, size_t errlen);

// Reads and validates path's header (magic, version, tokenizer id, token count against the file's
// length). Returns 0 and fills info, or -1 with a message naming the file and the problem.
int shard_read_header(const char* path, ShardInfo* info, char* err, size_t errlen);

// Validates the header, then reads all tokens into tokens (capacity cap; needs info->num_tokens).
// Returns 0, or -1 with a message.
int shard_read(const char* path, ShardInfo* info, uint16_t* tokens, size_t cap, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
