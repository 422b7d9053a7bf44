// The data loader: windows of B*T+1 tokens from a set of shards (or an in-memory token array), in a
// deterministic, optionally seeded-shuffled order, split across data-parallel ranks, resumable.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Order of an epoch: the shards (sorted by path, or shuffled), and inside each shard its windows
// (in file order, or shuffled); epoch e draws both from seed + e. Window j of a shard is tokens
// [j*B*T, j*B*T + B*T] (so consecutive windows share one token: the last target). Concatenated, this
// gives the epoch's global sequence of num_windows windows; rank r of D takes global windows
// r, r+D, r+2D, ... Each epoch uses the first floor(num_windows/D)*D of them (the rest, at most D-1,
// are skipped this epoch), so all ranks wrap to the next epoch on the same call and the D ranks
// together see each used window of the epoch exactly once.

// The position, as plain fixed-width integers for a checkpoint. It does not depend on the rank or D,
// so a run may resume with a different number of data-parallel replicas.
typedef struct {
    int64_t epoch;         // epochs completed
    int64_t window;        // global windows of this epoch consumed by all ranks together
    int64_t num_tokens;    // the data the state belongs to: must match on set_state
    int64_t window_tokens; // B*T: must match
    uint64_t seed;         // must match
    int64_t shuffle;       // must match
} DataLoaderState;

typedef struct {
    // configuration
    int B, T, rank, world, shuffle, V;
    uint64_t seed;
    // the data; read these fields, do not write them
    int tokenizer;        // the shards' shard_tokenizer_kind (llm.c's 0 read as GPT-2), the same in all; 0 for memory
    int num_shards;       // 1 for an in-memory array
    int64_t num_tokens;   // over all shards
    int64_t num_windows;  // per epoch, over all ranks
    char** paths;         // (num_shards) file names, sorted; NULL for an in-memory array
    int64_t* shard_tokens;  // (num_shards)
    int64_t* shard_windows; // (num_shards)
    // position
    int64_t epoch;
    int64_t window;       // next global window of the group (see DataLoaderState)
    int64_t* shard_order; // (num_shards) shard indices in this epoch's order
    int64_t* shard_start; // (num_shards+1) global window where each shard of shard_order starts
    // the one shard in memory, and a window order drawn for shard order_shard in epoch order_epoch
    int cur_shard;        // index of the shard in tokens, -1 none
    uint16_t* tokens;     // (max shard tokens)
    int64_t* window_order; // (max shard windows) used when shuffling
    int64_t order_epoch;  // -1: none drawn yet
    int order_shard;
    char err[512];        // message of the last failed dataloader_next
} DataLoader;

// pattern: a glob, e.g. "data/ts/*_train.bin". Reads every matching shard once to validate it:
// header, tokenizer ids all equal, each token < V, room for at least one window, enough windows for
// world ranks. Returns 0, or -1 with a message in err naming the file and the problem.
int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world, int shuffle,
                    uint64_t seed, int V, char* err, size_t errlen);
// The same over an in-memory array tokens (n), which is copied; behaves as a single shard.
int dataloader_init_memory(DataLoader* dl, const uint16_t* tokens, size_t n, int B, int T, int rank, int world,
                           int shuffle, uint64_t seed, int V, char* err, size_t errlen);

// The next window of this rank: inputs (B*T) and targets (B*T), targets shifted by one token.
// Returns 0, or -1 with dl->err set when a shard can no longer be read as it was at init
// (changed or removed since).
int dataloader_next(DataLoader* dl, int* inputs, int* targets);

void dataloader_reset(DataLoader* dl); // back to epoch 0, window 0
void dataloader_get_state(const DataLoader* dl, DataLoaderState* state);
// Continues exactly where state was taken. Refuses (-1, message) a state of other data, B*T, seed
// or shuffle, or a position outside the data.
int dataloader_set_state(DataLoader* dl, const DataLoaderState* state, char* err, size_t errlen);
void dataloader_free(DataLoader* dl);

#ifdef __cplusplus
}
#endif
