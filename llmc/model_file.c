// llm.c model files: import (fp32 and bf16) and export (fp32) (see model_file.h).
#include "model_file.h"
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common.h"

static int check_header(const char* path, const int* h, long file_bytes, GPT2Config* cfg, char* err, size_t errlen) {
    if (h[0] != MODEL_FILE_MAGIC) return td_error(err, errlen, "%s: not an llm.c model file (magic %d, expected %d)", path, h[0], MODEL_FILE_MAGIC);
    if (h[1] != MODEL_FILE_VERSION_FP32 && h[1] != MODEL_FILE_VERSION_BF16)
        return td_error(err, errlen, "%s: model file version %d not supported (3 = fp32, 5 = bf16)", path, h[1]);
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    if (cfg->max_seq_len <= 0 || cfg->vocab_size <= 0 || cfg->num_layers <= 0 || cfg->num_heads <= 0 || cfg->channels <= 0 ||
        cfg->padded_vocab_size < cfg->vocab_size || cfg->channels % cfg->num_heads != 0 || cfg->max_seq_len > (1 << 20) ||
        cfg->channels > (1 << 16) || cfg->num_layers > 1024 || cfg->padded_vocab_size > (1 << 24))
        return td_error(err, errlen, "%s: implausible model shape in header (maxT %d, V %d, L %d, NH %d, C %d, Vp %d)", path,
                    h[2], h[3], h[4], h[5], h[6], h[7]);
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(cfg, &all, sizes);
    long expected = 256 * 4 + (long)n * (h[1] == MODEL_FILE_VERSION_FP32 ? 4 : 2);
    if (file_bytes >= 0 && file_bytes != expected)
        return td_error(err, errlen, "%s: file is %ld bytes but its header describes %ld (%s)", path, file_bytes, expected,
                    file_bytes < expected ? "truncated" : "trailing data");
    return 0;
}

static int read_header(const char* path, FILE** f, int h[256], long* file_bytes, char* err, size_t errlen) {
    long long bytes;
    *f = td_fopen_regular(path, "model file", &bytes, err, errlen);
    if (!*f) return -1;
    *file_bytes = (long)bytes;
    if (fread(h, sizeof(int), 256, *f) != 256) {
        fclose(*f);
        return td_error(err, errlen, "%s: truncated model file (shorter than its 1024-byte header)", path);
    }
    return 0;
}

int model_file_read_config(const char* path, GPT2Config* cfg, char* err, size_t errlen) {
    FILE* f;
    int h[256];
    long bytes;
    if (read_header(path, &f, h, &bytes, err, errlen)) return -1;
    fclose(f);
    return check_header(path, h, bytes, cfg, err, errlen);
}

int model_file_load(const char* path, GPT2Config* cfg, float** params, char* err, size_t errlen) {
    FILE* f;
    int h[256];
    long bytes;
    if (read_header(path, &f, h, &bytes, err, errlen)) return -1;
    if (check_header(path, h, bytes, cfg, err, errlen)) {
        fclose(f);
        return -1;
    }
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(cfg, &all, sizes);
    float* p = (float*)malloc_check(n * sizeof(float));
    size_t got;
    if (h[1] == MODEL_FILE_VERSION_FP32) {
        got = fread(p, sizeof(float), n, f);
    } else { // bf16: the upper 16 bits of an fp32
        uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
        got = fread(tmp, sizeof(uint16_t), n, f);
        for (size_t i = 0; i < got; i++) {
            uint32_t bits = (uint32_t)tmp[i] << 16;
            memcpy(p + i, &bits, 4);
        }
        free(tmp);
    }
    fclose(f);
    if (got != n) {
        free(p);
        return td_error(err, errlen, "%s: truncated model file (%zu of %zu parameters)", path, got, n);
    }
    // a NaN or Inf would train on (one in a row no batch reaches, such as wpe past T, until the
    // final checkpoint refuses the state): refused here, named by tensor, layer and element
    for (size_t i = 0; i < n; i++) {
        if (isfinite(p[i])) continue;
        size_t at = i;
        int t = 0;
        while (at >= sizes[t]) at -= sizes[t++];
        float bad = p[i];
        free(p);
        if (!gpt2_param_is_layer(t))
            return td_error(err, errlen, "%s: parameter %zu (%s[%zu]) is %g: the model's weights are not finite", path, i, gpt2_param_name(t), at, bad);
        size_t per = sizes[t] / (size_t)cfg->num_layers;
        return td_error(err, errlen, "%s: parameter %zu (layer %zu's %s[%zu]) is %g: the model's weights are not finite", path, i, at / per,
                        gpt2_param_name(t), at % per, bad);
    }
    *params = p;
    return 0;
}

int model_file_save(const char* path, const GPT2Config* cfg, const float* params, char* err, size_t errlen) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = td_create_regular(tmp, "model file", err, errlen);
    FILE* f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return fd < 0 ? -1 : td_error(err, errlen, "%s: cannot write model file: %s", tmp, strerror(errno));
    }
    int h[256] = {0};
    h[0] = MODEL_FILE_MAGIC;
    h[1] = MODEL_FILE_VERSION_FP32;
    h[2] = cfg->max_seq_len;
    h[3] = cfg->vocab_size;
    h[4] = cfg->num_layers;
    h[5] = cfg->num_heads;
    h[6] = cfg->channels;
    h[7] = cfg->padded_vocab_size;
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    size_t n = gpt2_param_sizes(cfg, &all, sizes);
    int ok = fwrite(h, sizeof(int), 256, f) == 256 && fwrite(params, sizeof(float), n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved_errno = errno;
        unlink(tmp);
        return td_error(err, errlen, "%s: writing the model file failed: %s", path, strerror(saved_errno));
    }
    return 0;
}
