// Tokenizers: GPT-2's byte-level BPE (encoder.json + vocab.bpe, tiktoken-exact ids) and the byte
// tokenizer (V = 256, id = byte). Encoding text to ids and decoding ids to bytes.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int kind;       // SHARD_TOKENIZER_GPT2 or SHARD_TOKENIZER_BYTES (shard.h): the shard header's id
    int vocab_size; // 50257 for GPT-2, 256 for bytes
    int eot;        // id of <|endoftext|>; -1 for bytes
    // token i is the bytes blob[offsets[i] .. offsets[i+1])
    uint8_t* blob;     // (offsets[vocab_size])
    uint32_t* offsets; // (vocab_size + 1)
    // GPT-2 only (NULL/0 for bytes)
    int32_t* rank;        // (vocab_size) merge priority: line of vocab.bpe that makes the token; INT32_MAX if none
    int32_t byte_token[256]; // id of each single byte
    int32_t* piece_slots; // (piece_mask + 1) open-addressing table bytes -> id, -1 empty
    uint64_t piece_mask;
    uint64_t* pair_keys;  // (pair_mask + 1) (left id << 32 | right id) + 1, 0 empty
    int32_t* pair_vals;   // (pair_mask + 1) the token whose bytes are left's + right's
    uint64_t pair_mask;
} Tokenizer;

// Loads GPT-2's encoder.json and vocab.bpe. Returns 0, or -1 with a message naming the file and
// the problem (missing, malformed JSON, a token outside GPT-2's byte alphabet, a merge of unknown tokens).
int tokenizer_init_gpt2(Tokenizer* tok, const char* encoder_json_path, const char* vocab_bpe_path, char* err,
                        size_t errlen);
int tokenizer_init_bytes(Tokenizer* tok);
void tokenizer_free(Tokenizer* tok);

// Encodes text (len bytes) into ids_out (cap) and returns the number of ids the whole text takes;
// only the first cap are written (as snprintf does), and it is never more than len, so cap = len
// always suffices. allow_special: "<|endoftext|>" in the text becomes the eot id; otherwise it is
// encoded as ordinary text. Bytes that are not valid UTF-8 are encoded as themselves (they pre-tokenise
// as punctuation), so decoding always gives back the exact input bytes.
size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int allow_special, int* ids_out,
                        size_t cap);

// The bytes of token id (*len of them, not NUL-terminated); NULL and *len = 0 for an id out of range.
const uint8_t* tokenizer_decode(const Tokenizer* tok, int id, size_t* len);

int tokenizer_vocab_size(const Tokenizer* tok);
int tokenizer_eot(const Tokenizer* tok); // -1 when the tokenizer has none

#ifdef __cplusplus
}
#endif
