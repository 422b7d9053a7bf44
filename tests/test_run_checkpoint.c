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
    // TD-Pipe's state, each field its own value, and the loader 3 windows in: what a resume continues
    state.aew_requested = 4, state.aew_base = 4, state.aew_halvings = 1, state.rollbacks_in_row = 2;
    state.losses.n = 3, state.losses.next = 3, state.losses.loss[0] = 5.5, state.losses.loss[1] = 5.25, state.losses.loss[2] = 5.125;
    state.gns = (GnsState){.s_ema = 1.5, .g2_ema = 2.5, .n = 7, .b_sum = 3.25, .b_n = 6};
    int ins[16], tgts[16];
    for (int i = 0; i < 3; i++) dataloader_next(&dl, ins, tgts);

    // the good state: its arrays are the checkpoint's sections, bitwise
    CHECK(run_checkpoint_save(&rc, &pl, 4, &dl, &state, NULL) == 0, "a finite state is saved");
    // the write's allowance on --comm-timeout lasts for the write only: later waits have the bare timeout
    CHECK(c.allowance == 0 && c.allowance_for == NULL, "  its allowance on --comm-timeout withdrawn afterwards (%g s for %s)", c.allowance,
          c.allowance_for ? c.allowance_for : "nothing");
    ckpt_path(want_path, sizeof want_path, dir, 4);
    Ckpt ck;
    int read = ckpt_read(want_path, &ck, err, sizeof err) == 0;
    size_t bytes = 0;
    const void* sec = read ? ckpt_section(&ck, "adam_v", &bytes) : NULL;
    CHECK(sec && bytes == n * sizeof(float) && memcmp(sec, st.adam_v, bytes) == 0, "its adam_v is the stage's, bitwise (%zu bytes)", bytes);
    sec = read ? ckpt_section(&ck, "params", &bytes) : NULL;
    CHECK(sec && bytes == n * sizeof(float) && memcmp(sec, st.params, bytes) == 0, "its params are the stage's, bitwise");
    CHECK(read && !ckpt_section_entry(&ck, "val_owed"), "  no 'val_owed' section: its step's validation is not owed");
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
    CHECK(c.allowance == 0 && c.allowance_for == NULL, "  its allowance on --comm-timeout withdrawn afterwards (%g s)", c.allowance);
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

    // resumed into a fresh state and loader: checkpoint 4 (the newest good one), every field as saved
    RunState back;
    memset(&back, 0, sizeof back);
    back.aew_requested = 4; // the same --aew: the window's history continues
    DataLoader dl2;
    DataLoaderState saved, got;
    CHECK(dataloader_init_memory(&dl2, tokens, 200, 2, 8, 0, 1, 0, 1, 37, err, sizeof err) == 0, "a second loader over the same tokens");
    int step = run_checkpoint_resume(&rc, &st, &dl2, &back, NULL, path, sizeof path, err, sizeof err);
    dataloader_get_state(&dl, &saved);
    dataloader_get_state(&dl2, &got);
    CHECK(step == 4 && !memcmp(&saved, &got, sizeof saved) && !memcmp(st.params, full, n * sizeof(float)),
          "resumed at step %d: the loader's position (window %lld) and the parameters as saved: %s", step, (long long)got.window, step < 0 ? err : "");
    CHECK(!memcmp(&back, &state, sizeof back), "  and TD-Pipe's state field for field: window %lld >> %lld, %lld rollbacks, %d guard losses, "
          "noise scale s %g g2 %g n %ld", (long long)back.aew_base, (long long)back.aew_halvings, (long long)back.rollbacks_in_row, back.losses.n,
          back.gns.s_ema, back.gns.g2_ema, back.gns.n);

    // a validation a signal cut short: the checkpoint owes it (its own section), and the resume says so
    state.val_owed = 1;
    CHECK(run_checkpoint_save(&rc, &pl, 6, &dl, &state, NULL) == 0, "a state that owes its step's validation is saved");
    ckpt_path(path, sizeof path, dir, 6);
    read = ckpt_read(path, &ck, err, sizeof err) == 0;
    sec = read ? ckpt_section(&ck, "val_owed", &bytes) : NULL;
    CHECK(sec && bytes == 8 && *(const int64_t*)sec == 1, "  in a section 'val_owed' of one int64 1 (%zu bytes)", bytes);
    if (read) ckpt_free(&ck);
    memset(&back, 0, sizeof back);
    back.aew_requested = 4;
    step = run_checkpoint_resume(&rc, &st, &dl2, &back, NULL, path, sizeof path, err, sizeof err);
    CHECK(step == 6 && back.val_owed == 1 && !memcmp(&back, &state, sizeof back), "  resumed at step %d owing it (val_owed %lld): %s", step,
          (long long)back.val_owed, step < 0 ? err : "");
    // the section with a value this version does not write: refused by name
    state.val_owed = 2;
    CHECK(run_checkpoint_save(&rc, &pl, 7, &dl, &state, NULL) == 0, "a checkpoint whose 'val_owed' holds 2");
    step = run_checkpoint_resume(&rc, &st, &dl2, &back, NULL, path, sizeof path, err, sizeof err);
    CHECK(step == -1 && strstr(err, "ckpt_00000007.tdck: section 'val_owed' is not the one 8-byte 1 this version writes"), "  is refused: %s", err);
    dataloader_free(&dl2);
    stage_destroy(&st);
    dataloader_free(&dl);
    free(full);
    comm_finalize(&c);
    return test_summary();
}
