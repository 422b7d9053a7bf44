// The data loader (see dataloader.h): shard validation, per-epoch orders from a splitmix64 stream
// (integer arithmetic only, so the same on every platform), rank slicing, and the resumable position.
#include "dataloader.h"
#include "rng.h"
#include "shard.h"
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Fisher-Yates over order (n); drawing the index by modulo has a bias below n / 2^64, irrelevant here.
static void shuffle_int64(int64_t* order, int64_t n, uint64_t* s) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(rng_splitmix64(s) % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

// Shard order of the current epoch and where each shard's windows start in the global sequence.
static void build_epoch_order(DataLoader* dl) {
    for (int k = 0; k < dl->num_shards; k++) dl->shard_order[k] = k;
    if (dl->shuffle) {
        uint64_t s = dl->seed + (uint64_t)dl->epoch;
        shuffle_int64(dl->shard_order, dl->num_shards, &s);
    }
    dl->shard_start[0] = 0;
    for (int k = 0; k < dl->num_shards; k++)
        dl->shard_start[k + 1] = dl->shard_start[k] + dl->shard_windows[dl->shard_order[k]];
}

// Refuses a token >= V; name is the file (or "<memory>") for the message.
static int check_tokens(const uint16_t* tokens, int64_t n, int V, const char* name, char* err, size_t errlen) {
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] >= V) {
            snprintf(err, errlen, "%s: token %u at token offset %lld (byte offset %lld) is >= V = %d", name,
                     tokens[i], (long long)i, (long long)(SHARD_HEADER_BYTES + 2 * i), V);
            return -1;
        }
    }
    return 0;
}

// Puts shard f into dl->tokens (a no-op when it is already there, and always for memory).
static int load_shard(DataLoader* dl, int f, char* err, size_t errlen) {
    if (dl->cur_shard == f) return 0;
    dl->cur_shard = -1;
    ShardInfo info;
    if (shard_read(dl->paths[f], &info, dl->tokens, (size_t)dl->shard_tokens[f], err, errlen) != 0) return -1;
    if (info.num_tokens != dl->shard_tokens[f] || shard_tokenizer_kind(info.tokenizer) != dl->tokenizer) {
        snprintf(err, errlen, "%s: changed since the loader opened it (%lld tokens, tokenizer %d; was %lld, %d)",
                 dl->paths[f], (long long)info.num_tokens, info.tokenizer, (long long)dl->shard_tokens[f],
                 dl->tokenizer);
        return -1;
    }
    if (check_tokens(dl->tokens, info.num_tokens, dl->V, dl->paths[f], err, errlen) != 0) return -1;
    dl->cur_shard = f;
    return 0;
}

// Checks the arguments and zeroes dl; shared by both inits.
static int setup(DataLoader* dl, int B, int T, int rank, int world, int shuffle, uint64_t seed, int V, char* err,
                 size_t errlen) {
    memset(dl, 0, sizeof *dl);
    dl->cur_shard = -1;
    dl->order_epoch = -1;
    if (V > 65536) {
        snprintf(err, errlen, "the model's vocabulary V = %d: tokens are uint16, as in llm.c's shards, so V is at most 65536", V);
        return -1;
    }
    if (B < 1 || T < 1 || world < 1 || rank < 0 || rank >= world || V < 1) {
        snprintf(err, errlen, "data loader: bad arguments B=%d T=%d rank=%d world=%d V=%d", B, T, rank, world, V);
        return -1;
    }
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->world = world;
    dl->shuffle = shuffle != 0;
    dl->seed = seed;
    dl->V = V;
    return 0;
}

// Once shard_tokens is known (and paths for files): windows per shard, buffers, epoch 0.
static int finish_init(DataLoader* dl, char* err, size_t errlen) {
    int64_t bt = (int64_t)dl->B * dl->T;
    int n = dl->num_shards;
    dl->shard_windows = calloc((size_t)n, sizeof(int64_t));
    dl->shard_order = calloc((size_t)n, sizeof(int64_t));
    dl->shard_start = calloc((size_t)n + 1, sizeof(int64_t));
    if (!dl->shard_windows || !dl->shard_order || !dl->shard_start) {
        snprintf(err, errlen, "data loader: out of memory");
        return -1;
    }
    int64_t max_windows = 0;
    for (int f = 0; f < n; f++) {
        const char* name = dl->paths ? dl->paths[f] : "<memory>";
        dl->shard_windows[f] = (dl->shard_tokens[f] - 1) / bt;
        if (dl->shard_tokens[f] < bt + 1) {
            snprintf(err, errlen, "%s: %lld tokens are too few for one window of B*T+1 = %lld tokens", name,
                     (long long)dl->shard_tokens[f], (long long)(bt + 1));
            return -1;
        }
        dl->num_tokens += dl->shard_tokens[f];
        dl->num_windows += dl->shard_windows[f];
        if (dl->shard_windows[f] > max_windows) max_windows = dl->shard_windows[f];
    }
    if (dl->num_windows < dl->world) {
        snprintf(err, errlen, "%s: %lld windows of %lld tokens cannot give each of %d ranks one",
                 dl->paths ? dl->paths[0] : "<memory>", (long long)dl->num_windows, (long long)(bt + 1), dl->world);
        return -1;
    }
    if (dl->shuffle) {
        dl->window_order = malloc((size_t)max_windows * sizeof(int64_t));
        if (!dl->window_order) {
            snprintf(err, errlen, "data loader: out of memory");
            return -1;
        }
    }
    dataloader_reset(dl);
    return 0;
}

static int path_cmp(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int dataloader_init(DataLoader* dl, const char* pattern, int B, int T, int rank, int world, int shuffle,
                    uint64_t seed, int V, char* err, size_t errlen) {
    if (setup(dl, B, T, rank, world, shuffle, seed, V, err, errlen) != 0) return -1;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0 || g.gl_pathc == 0) {
        snprintf(err, errlen, "%s: %s", pattern, rc == GLOB_NOMATCH ? "no file matches" : "cannot expand the pattern");
        if (rc != GLOB_NOMATCH) globfree(&g);
        return -1;
    }
    // glob sorts by the locale's collation; strcmp makes the order the same everywhere.
    dl->num_shards = (int)g.gl_pathc;
    dl->paths = calloc(g.gl_pathc, sizeof(char*));
    dl->shard_tokens = calloc(g.gl_pathc, sizeof(int64_t));
    int fail = !dl->paths || !dl->shard_tokens;
    for (size_t i = 0; !fail && i < g.gl_pathc; i++) fail = !(dl->paths[i] = strdup(g.gl_pathv[i]));
    globfree(&g);
    if (fail) {
        snprintf(err, errlen, "%s: out of memory", pattern);
        goto error;
    }
    qsort(dl->paths, (size_t)dl->num_shards, sizeof(char*), path_cmp);

    int64_t max_tokens = 0;
    for (int f = 0; f < dl->num_shards; f++) {
        ShardInfo info;
        if (shard_read_header(dl->paths[f], &info, err, errlen) != 0) goto error;
        if (f == 0) dl->tokenizer = shard_tokenizer_kind(info.tokenizer);
        if (shard_tokenizer_kind(info.tokenizer) != dl->tokenizer) {
            snprintf(err, errlen, "%s: tokenizer id %d differs from %s's %d: a set of shards must share one tokenizer",
                     dl->paths[f], info.tokenizer, dl->paths[0], dl->tokenizer);
            goto error;
        }
        dl->shard_tokens[f] = info.num_tokens;
        if (info.num_tokens > max_tokens) max_tokens = info.num_tokens;
    }
    dl->tokens = malloc((size_t)max_tokens * sizeof(uint16_t) + 1);
    if (!dl->tokens) {
        snprintf(err, errlen, "%s: out of memory for a shard of %lld tokens", pattern, (long long)max_tokens);
        goto error;
    }
    for (int f = 0; f < dl->num_shards; f++)
        if (load_shard(dl, f, err, errlen) != 0) goto error;
    if (finish_init(dl, err, errlen) != 0) goto error;
    return 0;
error:
    dataloader_free(dl);
    return -1;
}

int dataloader_init_memory(DataLoader* dl, const uint16_t* tokens, size_t n, int B, int T, int rank, int world,
                           int shuffle, uint64_t seed, int V, char* err, size_t errlen) {
    if (setup(dl, B, T, rank, world, shuffle, seed, V, err, errlen) != 0) return -1;
    dl->num_shards = 1;
    dl->tokenizer = SHARD_TOKENIZER_UNSPECIFIED;
    dl->shard_tokens = malloc(sizeof(int64_t));
    dl->tokens = malloc(n * sizeof(uint16_t) + 1);
    if (!dl->shard_tokens || !dl->tokens) {
        snprintf(err, errlen, "<memory>: out of memory for %zu tokens", n);
        goto error;
    }
    dl->shard_tokens[0] = (int64_t)n;
    memcpy(dl->tokens, tokens, n * sizeof(uint16_t));
    dl->cur_shard = 0;
    if (check_tokens(dl->tokens, (int64_t)n, V, "<memory>", err, errlen) != 0) goto error;
    if (finish_init(dl, err, errlen) != 0) goto error;
    return 0;
error:
    dataloader_free(dl);
    return -1;
}

int dataloader_next(DataLoader* dl, int* inputs, int* targets) {
    int64_t used = dl->num_windows / dl->world * dl->world;
    if (dl->window + dl->world > used) { // every rank has had its last window of this epoch
        dl->epoch++;
        dl->window = 0;
        build_epoch_order(dl);
    }
    int64_t g = dl->window + dl->rank;
    // the shard holding global window g: the last k with shard_start[k] <= g
    int lo = 0, hi = dl->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->shard_start[mid] <= g) lo = mid;
        else hi = mid - 1;
    }
    int f = (int)dl->shard_order[lo];
    int64_t j = g - dl->shard_start[lo];
    if (load_shard(dl, f, dl->err, sizeof dl->err) != 0) return -1;
    if (dl->shuffle) {
        if (dl->order_epoch != dl->epoch || dl->order_shard != f) {
            // a stream per (seed + epoch, shard), independent of the order shards are visited in
            uint64_t s = dl->seed + (uint64_t)dl->epoch;
            s = rng_splitmix64(&s) ^ (0xD1B54A32D192ED03ULL * (uint64_t)(f + 1));
            for (int64_t i = 0; i < dl->shard_windows[f]; i++) dl->window_order[i] = i;
            shuffle_int64(dl->window_order, dl->shard_windows[f], &s);
            dl->order_epoch = dl->epoch;
            dl->order_shard = f;
        }
        j = dl->window_order[j];
    }
    int64_t bt = (int64_t)dl->B * dl->T;
    const uint16_t* w = dl->tokens + j * bt; // (B*T+1)
    for (int64_t i = 0; i < bt; i++) {
        inputs[i] = w[i];
        targets[i] = w[i + 1];
    }
    dl->window += dl->world;
    return 0;
}

void dataloader_reset(DataLoader* dl) {
    dl->epoch = 0;
    dl->window = 0;
    dl->order_epoch = -1;
    build_epoch_order(dl);
}

void dataloader_get_state(const DataLoader* dl, DataLoaderState* state) {
    memset(state, 0, sizeof *state);
    state->epoch = dl->epoch;
    state->window = dl->window;
    state->num_tokens = dl->num_tokens;
    state->window_tokens = (int64_t)dl->B * dl->T;
    state->seed = dl->seed;
    state->shuffle = dl->shuffle;
}

int dataloader_set_state(DataLoader* dl, const DataLoaderState* s, char* err, size_t errlen) {
    const char* name = dl->paths ? dl->paths[0] : "<memory>";
    if (s->num_tokens != dl->num_tokens || s->window_tokens != (int64_t)dl->B * dl->T) {
        snprintf(err, errlen,
                 "data loader state is for %lld tokens in windows of B*T = %lld, but the data (%s, ...) has %lld "
                 "tokens and B*T = %lld",
                 (long long)s->num_tokens, (long long)s->window_tokens, name, (long long)dl->num_tokens,
                 (long long)dl->B * dl->T);
        return -1;
    }
    if (s->seed != dl->seed || s->shuffle != dl->shuffle) {
        snprintf(err, errlen, "data loader state has seed %llu shuffle %lld, the loader seed %llu shuffle %d",
                 (unsigned long long)s->seed, (long long)s->shuffle, (unsigned long long)dl->seed, dl->shuffle);
        return -1;
    }
    if (s->epoch < 0 || s->window < 0 || s->window > dl->num_windows) {
        snprintf(err, errlen, "data loader state epoch %lld window %lld is outside the data (%lld windows per epoch)",
                 (long long)s->epoch, (long long)s->window, (long long)dl->num_windows);
        return -1;
    }
    dl->epoch = s->epoch;
    dl->window = s->window;
    dl->order_epoch = -1;
    build_epoch_order(dl);
    return 0;
}

void dataloader_free(DataLoader* dl) {
    if (dl->paths)
        for (int f = 0; f < dl->num_shards; f++) free(dl->paths[f]);
    free(dl->paths);
    free(dl->shard_tokens);
    free(dl->shard_windows);
    free(dl->shard_order);
    free(dl->shard_start);
    free(dl->tokens);
    free(dl->window_order);
    memset(dl, 0, sizeof *dl);
    dl->cur_shard = -1;
}
