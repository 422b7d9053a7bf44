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

// "parameter i (name[k])" or "parameter i (layer l's name[k])" of the whole model's element i
static void describe_param(const GPT2Config* cfg, size_t i, char* out, size_t cap) {
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], at = i;
    gpt2_param_sizes(cfg, &all, sizes);
    int t = 0;
    while (at >= sizes[t]) at -= sizes[t++];
    size_t per = sizes[t] / (size_t)cfg->num_layers;
    if (!gpt2_param_is_layer(t)) snprintf(out, cap, "parameter %zu (%s[%zu])", i, gpt2_param_name(t), at);
    else snprintf(out, cap, "parameter %zu (layer %zu's %s[%zu])", i, at / per, gpt2_param_name(t), at % per);
}

#define BF16_CHUNK ((size_t)1 << 20) // bf16 values converted at a time

// n values of the file at element `first` into dst as fp32; the count read
static size_t read_values(FILE* f, int version, size_t first, float* dst, size_t n) {
    int bf16 = version == MODEL_FILE_VERSION_BF16;
    if (n == 0 || fseeko(f, (off_t)(256 * sizeof(int) + first * (bf16 ? 2 : 4)), SEEK_SET) != 0) return 0;
    if (!bf16) return fread(dst, sizeof(float), n, f);
    uint16_t* tmp = (uint16_t*)malloc_check((n < BF16_CHUNK ? n : BF16_CHUNK) * sizeof(uint16_t));
    size_t got = 0;
    while (got < n) { // bf16: the upper 16 bits of an fp32
        size_t want = n - got < BF16_CHUNK ? n - got : BF16_CHUNK, k = fread(tmp, sizeof(uint16_t), want, f);
        for (size_t i = 0; i < k; i++) {
            uint32_t bits = (uint32_t)tmp[i] << 16;
            memcpy(dst + got + i, &bits, 4);
        }
        got += k;
        if (k < want) break;
    }
    free(tmp);
    return got;
}

int model_file_load_range(const char* path, const GPT2Config* cfg, const GPT2Range* r, float* params, char* err, size_t errlen) {
    FILE* f;
    int h[256];
    long bytes;
    GPT2Config file_cfg;
    if (read_header(path, &f, h, &bytes, err, errlen)) return -1;
    if (check_header(path, h, bytes, &file_cfg, err, errlen)) {
        fclose(f);
        return -1;
    }
    if (memcmp(&file_cfg, cfg, sizeof(GPT2Config)) != 0) {
        fclose(f);
        return td_error(err, errlen, "%s: the model's shape changed since its header was read", path);
    }
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(cfg, &all, sizes);
    GPT2Piece pc[GPT2_NUM_PARAM_TENSORS];
    gpt2_slice_pieces(cfg, r, pc);
    for (int i = 0; i < GPT2_NUM_PARAM_TENSORS; i++) {
        float* dst = params + pc[i].stage_off; // (n)
        size_t got = read_values(f, h[1], pc[i].full_off, dst, pc[i].n);
        if (got != pc[i].n) {
            fclose(f);
            return td_error(err, errlen, "%s: truncated model file (%zu of %zu parameters)", path, pc[i].full_off + got, n);
        }
        // a NaN or Inf would train on (one in a row no batch reaches, such as wpe past T, until the
        // final checkpoint refuses the state): refused here, named by tensor, layer and element
        for (size_t k = 0; k < pc[i].n; k++) {
            if (isfinite(dst[k])) continue;
            char what[160];
            describe_param(cfg, pc[i].full_off + k, what, sizeof what);
            fclose(f);
            return td_error(err, errlen, "%s: %s is %g: the model's weights are not finite", path, what, dst[k]);
        }
    }
    fclose(f);
    return 0;
}

int model_file_load(const char* path, GPT2Config* cfg, float** params, char* err, size_t errlen) {
    if (model_file_read_config(path, cfg, err, errlen)) return -1;
    GPT2Range all = {0, cfg->num_layers, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS];
    float* p = (float*)malloc_check(gpt2_param_sizes(cfg, &all, sizes) * sizeof(float));
    if (model_file_load_range(path, cfg, &all, p, err, errlen)) {
        free(p);
        return -1;
    }
    *params = p;
    return 0;
}

// closes and removes the temp file; -1 with what went wrong
static int writer_fail(ModelFileWriter* w, int e, char* err, size_t errlen) {
    model_file_writer_abort(w);
    return td_error(err, errlen, "%s: writing the model file failed: %s", w->path, strerror(e));
}

int model_file_writer_open(ModelFileWriter* w, const char* path, const GPT2Config* cfg, char* err, size_t errlen) {
    memset(w, 0, sizeof *w);
    if (snprintf(w->path, sizeof w->path, "%s", path) >= (int)sizeof w->path) return td_error(err, errlen, "%.200s...: model file path too long", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    int fd = td_create_regular(w->tmp, "model file", err, errlen);
    if (fd < 0) return -1;
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        int e = errno;
        close(fd);
        unlink(w->tmp);
        return td_error(err, errlen, "%s: cannot write model file: %s", w->tmp, strerror(e));
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
    w->n = gpt2_param_sizes(cfg, &all, sizes);
    if (fwrite(h, sizeof(int), 256, w->f) != 256) return writer_fail(w, errno, err, errlen);
    return 0;
}

int model_file_writer_put(ModelFileWriter* w, const float* params, size_t n, char* err, size_t errlen) {
    if (!w->f) return td_error(err, errlen, "%s: model file not open (an earlier error)", w->path);
    if (n > w->n - w->given) {
        model_file_writer_abort(w);
        return td_error(err, errlen, "%s: %zu parameters put after %zu of the model's %zu", w->path, n, w->given, w->n);
    }
    if (fwrite(params, sizeof(float), n, w->f) != n) return writer_fail(w, errno, err, errlen);
    w->given += n;
    return 0;
}

int model_file_writer_commit(ModelFileWriter* w, char* err, size_t errlen) {
    if (!w->f) return td_error(err, errlen, "%s: model file not open (an earlier error)", w->path);
    if (w->given != w->n) {
        model_file_writer_abort(w);
        return td_error(err, errlen, "%s: %zu of the model's %zu parameters given", w->path, w->given, w->n);
    }
    int ok = fflush(w->f) == 0 && fsync(fileno(w->f)) == 0, e = errno;
    if (fclose(w->f) != 0 && ok) ok = 0, e = errno;
    w->f = NULL;
    if (ok && rename(w->tmp, w->path) != 0) ok = 0, e = errno;
    if (!ok) {
        unlink(w->tmp);
        return td_error(err, errlen, "%s: writing the model file failed: %s", w->path, strerror(e));
    }
    return 0;
}

void model_file_writer_abort(ModelFileWriter* w) {
    if (!w->f) return;
    fclose(w->f);
    w->f = NULL;
    unlink(w->tmp);
}

int model_file_save(const char* path, const GPT2Config* cfg, const float* params, char* err, size_t errlen) {
    ModelFileWriter w;
    if (model_file_writer_open(&w, path, cfg, err, errlen) || model_file_writer_put(&w, params, w.n, err, errlen)) return -1;
    return model_file_writer_commit(&w, err, errlen);
}
