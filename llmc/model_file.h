// llm.c model files: 256 x int32 header (magic 20240326, version 3 = fp32 or 5 = bf16, maxT, V, L,
// NH, C, Vp) then the parameters in llm.c's order. Import of both versions, export of fp32.
#pragma once
#include <stdio.h>
#include "gpt2.h"
#ifdef __cplusplus
extern "C" {
#endif

#define MODEL_FILE_MAGIC 20240326
#define MODEL_FILE_VERSION_FP32 3
#define MODEL_FILE_VERSION_BF16 5

// reads the header of `path` into cfg; 0 on success, -1 with a message naming the file and problem
int model_file_read_config(const char* path, GPT2Config* cfg, char* err, size_t errlen);
// reads the whole model's parameters (laid out for range [0, L) with embed and head) into `params`
// (allocated here, fp32); checks the file's length against the header
int model_file_load(const char* path, GPT2Config* cfg, float** params, char* err, size_t errlen);
// reads only range r's parameters (laid out for r) into params, cfg being the file's (model_file_read_config):
// what a stage loads without the memory for the whole model; the same checks on what it reads
int model_file_load_range(const char* path, const GPT2Config* cfg, const GPT2Range* r, float* params, char* err, size_t errlen);
// writes the full model, params (laid out for [0, L) with embed and head), in fp32 (version 3),
// atomically (temp file, fsync, rename)
int model_file_save(const char* path, const GPT2Config* cfg, const float* params, char* err, size_t errlen);

// The same file written as the parameters arrive (a pipeline's stages in turn): open writes the
// header to "<path>.tmp", put appends the next n parameters in layout order, commit checks that all
// of them came, fsyncs and renames. Any failure removes the temp file (-1 + err, then only abort).
typedef struct {
    FILE* f;
    char path[4096], tmp[4100];
    size_t n, given; // the model's parameters, and how many put has written
} ModelFileWriter;
int model_file_writer_open(ModelFileWriter* w, const char* path, const GPT2Config* cfg, char* err, size_t errlen);
int model_file_writer_put(ModelFileWriter* w, const float* params, size_t n, char* err, size_t errlen);
int model_file_writer_commit(ModelFileWriter* w, char* err, size_t errlen);
void model_file_writer_abort(ModelFileWriter* w); // (a writer that failed or was never opened too)

#ifdef __cplusplus
}
#endif
