// A run's checkpoint and model.bin as world rank 0 writes them from the stages' stream (one process,
// P = 1): what they hold, and the refusal of a state that is not finite, which leaves no file.
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include "llmc/checkpoint.h"
#include "llmc/model_file.h"
#include "test.h"
#include "tdpipe/run_checkpoint.h"
#include "tdpipe/stage_cpu.h"

static int exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int main(int argc, char** argv) {
    const char* dir = test_dir_make("tdpipe_run_ckpt");
    Comm c;
    comm_init(&c, &argc, &argv);
    char err[1024], path[1200], want_path[1200], model[1200];
    CHECK(comm_grid(&c, 1, PLACE_STAGES_FIRST, err, sizeof err) == 0, "one process, one stage: %s", err);
    GPT2Config cfg = {16, 37, 128, 2, 2, 8};
    GPT2Range all = {0, 2, 1, 1};
    size_t sizes[GPT2_NUM_PARAM_TENSORS], n = gpt2_param_sizes(&cfg, &all, sizes);
    float* full = (float*)malloc(n * sizeof(float));
    gpt2_init_full(&cfg, full, 5);
    StageInit init = {.cfg = &cfg, .range = all, .B = 2, .T = 8, .full = full, .comm = &c};
    Stage st;
    stage_create(&st, &STAGE_CPU, &init);
    for (size_t i = 0; i < st.num_params; i++) st.adam_m[i] = 1e-3f * (float)(i % 11), st.adam_v[i] = 1e-6f * (float)(i % 13);
    Pipeline pl = {&c, &st, 1, &st.range, NULL};
    uint16_t tokens[200];
    for (int i = 0; i < 200; i++) tokens[i] = (uint16_t)(i * 7 % 37);
    DataLoader dl;
    CHECK(dataloader_init_memory(&dl, tokens, 200, 2, 8, 0, 1, 0, 1, 37, err, sizeof err) == 0, "data: %s", err);
    RunCheckpoint rc = {dir, 3, 1, 2, 8, 1};
    RunState state;
    memset(&state, 0, sizeof state);
    state.aew_base = -1;

    // the good state: its arrays are the checkpoint's sections, bitwise
    CHECK(run_checkpoint_save(&rc, &pl, 4, &dl, &state, NULL) == 0, "a finite state is saved");
    ckpt_path(want_path, sizeof want_path, dir, 4);
    Ckpt ck;
    int read = ckpt_read(want_path, &ck, err, sizeof err) == 0;
    size_t bytes = 0;
    const void* sec = read ? ckpt_section(&ck, "adam_v", &bytes) : NULL;
    CHECK(sec && bytes == n * sizeof(float) && memcmp(sec, st.adam_v, bytes) == 0, "its adam_v is the stage's, bitwise (%zu bytes)", bytes);
    sec = read ? ckpt_section(&ck, "params", &bytes) : NULL;
    CHECK(sec && bytes == n * sizeof(float) && memcmp(sec, st.params, bytes) == 0, "its params are the stage's, bitwise");
    if (read) ckpt_free(&ck);

    // a NaN in AdamW's second moment: refused by name and index; the last good checkpoint stays the newest
    size_t at = n - 3;
    float keep = st.adam_v[at];
    st.adam_v[at] = NAN;
    CHECK(run_checkpoint_save(&rc, &pl, 5, &dl, &state, NULL) == -1, "a state with a NaN is refused");
    ckpt_path(path, sizeof path, dir, 5);
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s/.ckpt_00000005.tdck.tmp", dir);
    CHECK(!exists(path) && !exists(tmp) && exists(want_path), "no checkpoint 5, no temporary file; checkpoint 4 is there");
    st.adam_v[at] = keep;

    // model.bin: llm.c's file of the stage's parameters, what model_file_save writes of them
    snprintf(model, sizeof model, "%s/model.bin", dir);
    snprintf(want_path, sizeof want_path, "%s/want.bin", dir);
    CHECK(run_checkpoint_save_model(&pl, model, err, sizeof err) == 0, "model.bin written: %s", err);
    CHECK(model_file_save(want_path, &cfg, st.params, err, sizeof err) == 0, "the reference written whole");
    size_t a_n = 0, b_n = 0;
    unsigned char *a = test_slurp(model, &a_n), *b = test_slurp(want_path, &b_n);
    CHECK(a && b && a_n == b_n && a_n == 1024 + n * 4 && memcmp(a, b, a_n) == 0, "byte for byte the same file (%zu bytes)", a_n);
    free(a);
    free(b);
    // an infinite parameter: refused by index, and no model.bin or temporary file left
    unlink(model);
    st.params[7] = INFINITY;
    CHECK(run_checkpoint_save_model(&pl, model, err, sizeof err) == -1 && strstr(err, "parameter[7] is inf: the state is not finite"),
          "a state with an Inf is refused: %s", err);
    snprintf(tmp, sizeof tmp, "%s.tmp", model);
    CHECK(!exists(model) && !exists(tmp), "no model.bin, no temporary file");

    stage_destroy(&st);
    dataloader_free(&dl);
    free(full);
    comm_finalize(&c);
    return test_summary();
}
