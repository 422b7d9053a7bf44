// Token shards in llm.c's format (see shard.h): atomic writing, validated reading.
#include "shard.h"
#include "common.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int shard_write(const char* path, const uint16_t* tokens, size_t n, int tokenizer, char* err, size_t errlen) {
    if ((long long)n > SHARD_MAX_TOKENS) {
        snprintf(err, errlen, "%s: %zu tokens do not fit one shard (at most %lld)", path, n, SHARD_MAX_TOKENS);
        return -1;
    }
    if (tokenizer < SHARD_TOKENIZER_UNSPECIFIED || tokenizer > SHARD_TOKENIZER_BYTES) {
        snprintf(err, errlen, "%s: unknown tokenizer id %d", path, tokenizer);
        return -1;
    }
    int32_t header[SHARD_HEADER_INTS] = {0};
    header[0] = SHARD_MAGIC;
    header[1] = SHARD_VERSION;
    header[2] = (int32_t)n;
    header[3] = tokenizer;

    size_t plen = strlen(path);
    char* tmp = malloc(plen + 5);
    if (!tmp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int fd = td_create_regular(tmp, "token shard", err, errlen);
    FILE* f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) {
            snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
            close(fd);
        }
        free(tmp);
        return -1;
    }
    int ok = fwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, f) == SHARD_HEADER_INTS
          && fwrite(tokens, sizeof(uint16_t), n, f) == n
          && fflush(f) == 0
          && fsync(fileno(f)) == 0;
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(saved));
        remove(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

// Opens path and validates its header; on success the stream is positioned at the first token.
static FILE* shard_open(const char* path, ShardInfo* info, char* err, size_t errlen) {
    long long file_bytes;
    FILE* f = td_fopen_regular(path, "token shard", &file_bytes, err, errlen);
    if (!f) return NULL;
    int32_t header[SHARD_HEADER_INTS];
    if (file_bytes < SHARD_HEADER_BYTES || fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f) != SHARD_HEADER_INTS) {
        snprintf(err, errlen, "%s: too short for a shard header (%lld bytes, a header is %d)", path, file_bytes,
                 SHARD_HEADER_BYTES);
        fclose(f);
        return NULL;
    }
    const char* problem = NULL;
    char buf[160];
    if (header[0] != SHARD_MAGIC) {
        snprintf(buf, sizeof buf, "bad magic %d (a token shard has %d)", header[0], SHARD_MAGIC);
        problem = buf;
    } else if (header[1] != SHARD_VERSION) {
        snprintf(buf, sizeof buf, "unsupported version %d (expected %d)", header[1], SHARD_VERSION);
        problem = buf;
    } else if (header[2] < 0) {
        snprintf(buf, sizeof buf, "negative token count %d", header[2]);
        problem = buf;
    } else if (header[3] < SHARD_TOKENIZER_UNSPECIFIED || header[3] > SHARD_TOKENIZER_BYTES) {
        snprintf(buf, sizeof buf, "unknown tokenizer id %d in header[3]", header[3]);
        problem = buf;
    } else if (file_bytes != SHARD_HEADER_BYTES + 2LL * header[2]) {
        snprintf(buf, sizeof buf, "header says %d tokens (%lld bytes) but the file has %lld bytes", header[2],
                 SHARD_HEADER_BYTES + 2LL * header[2], file_bytes);
        problem = buf;
    }
    if (problem) {
        snprintf(err, errlen, "%s: %s", path, problem);
        fclose(f);
        return NULL;
    }
    info->num_tokens = header[2];
    info->tokenizer = header[3];
    return f;
}

int shard_read_header(const char* path, ShardInfo* info, char* err, size_t errlen) {
    FILE* f = shard_open(path, info, err, errlen);
    if (!f) return -1;
    fclose(f);
    return 0;
}

int shard_read(const char* path, ShardInfo* info, uint16_t* tokens, size_t cap, char* err, size_t errlen) {
    FILE* f = shard_open(path, info, err, errlen);
    if (!f) return -1;
    size_t n = (size_t)info->num_tokens;
    if (n > cap) {
        snprintf(err, errlen, "%s: %zu tokens do not fit the buffer of %zu", path, n, cap);
        fclose(f);
        return -1;
    }
    if (fread(tokens, sizeof(uint16_t), n, f) != n) {
        snprintf(err, errlen, "%s: read failed after the header: %s", path, ferror(f) ? strerror(errno) : "file shrank");
        fclose(f);
        return -1;
    }
    fclose(f);
    return 0;
}
