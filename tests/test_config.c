// Tests of the YAML config reader (tdpipe/config.c, through args_load_config): sections applied, and
// every refusal with its line: a repeated key or section, a second document, unknown keys,
// non-mapping shapes; and the window flags' value parsers (args_aew, args_aew_start).
#include "tdpipe/args.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// writes text to a fresh file in the test folder and loads it into *a (defaults first); returns the rc
static int load(const char* text, TrainArgs* a, char* err, size_t errlen) {
    static int k = 0;
    char name[32];
    snprintf(name, sizeof name, "c%d.yaml", k++);
    const char* path = test_path(name);
    FILE* f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    args_defaults(a);
    err[0] = 0;
    return args_load_config(a, path, err, errlen);
}

static void test_accepted(void) {
    TrainArgs a;
    char err[1024];
    int rc = load("pipeline: {stages: 4, micro_batch: 8}\nmodel:\n  batch: 2\n  seq_len: 16\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.stages == 4 && a.grad_accum == 8 && a.B == 2 && a.T == 16, "sections applied (%s)", err);
    rc = load("---\noptimizer: {lr: 0.5}\n...\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.lr == 0.5f, "one document with explicit start and end markers (%s)", err);
    rc = load("", &a, err, sizeof err);
    CHECK(rc == 0 && a.stages == 1, "an empty file sets nothing (%s)", err);
    rc = load("data:\n  train:\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:2: key 'data.train' has no value"), "a key without a value (YAML's null): %s", err);
    rc = load("data: {train: \"\"}\n", &a, err, sizeof err);
    CHECK(rc == 0 && !a.train_pattern[0], "an empty quoted value is a value (%s)", err);
    char* deep = (char*)malloc(70000);
    memset(deep, '[', 69999);
    deep[69999] = 0;
    rc = load(deep, &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "69999 bytes, more than a config file's 65536 at most"), "a file far past any config, refused unread: %s", err);
    free(deep);
    rc = load("model: {batch: 2}\nlogging: {val_every: 3}\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.B == 2 && a.val_every == 3, "different sections with different keys (%s)", err);
}

// README's example config ("Config file"), verbatim: every key lands on its flag's field
static void test_readme_example(void) {
    TrainArgs a;
    char err[1024];
    int rc = load("pipeline: {stages: 4, micro_batch: 8, aew_window: 2, grad_cache: 0, schedule: tdpipe}\n"
                  "model: {init: d4, batch: 8, seq_len: 64}\n"
                  "optimizer: {lr: 0.003, warmup: 20, steps: 300, clip: 1.0}\n"
                  "data: {train: \"data/tinyshakespeare/ts_train.bin\", val: \"data/tinyshakespeare/ts_val.bin\"}\n"
                  "checkpoint: {out_dir: out, every: 100, keep: 3}\n"
                  "logging: {val_every: 50, sample_every: 100}\n",
                  &a, err, sizeof err);
    CHECK(rc == 0, "README's example config loads (%s)", err);
    // the defaults differ from the example where it can tell (clip 1.0 and keep 3 are defaults: set apart below)
    CHECK(a.stages == 4 && a.grad_accum == 8 && !strcmp(a.aew, "2") && !strcmp(a.grad_cache, "0") && !strcmp(a.schedule, "tdpipe"),
          "  pipeline section: stages 4, micro_batch 8, aew_window 2, grad_cache 0, schedule tdpipe");
    CHECK(!strcmp(a.init, "d4") && a.B == 8 && a.T == 64 && a.lr == 0.003f && a.warmup == 20 && a.steps == 300,
          "  model and optimizer sections: init d4, batch 8, seq_len 64, lr 0.003, warmup 20, steps 300");
    CHECK(!strcmp(a.train_pattern, "data/tinyshakespeare/ts_train.bin") && !strcmp(a.val_pattern, "data/tinyshakespeare/ts_val.bin") &&
              !strcmp(a.out_dir, "out") && a.ckpt_every == 100 && a.val_every == 50 && a.sample_every == 100,
          "  data, checkpoint and logging sections: train, val, out_dir, every 100, val_every 50, sample_every 100");
    rc = load("optimizer: {clip: 0.25}\ncheckpoint: {keep: 7}\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.clip == 0.25f && a.keep == 7, "  optimizer.clip and checkpoint.keep set their flags (%s)", err);
    // ranges shared with the flags: beta2 = 1 makes AdamW's bias correction 1 - beta2^t zero; keep 0
    // would leave no checkpoint to resume from; a seed past 2^53 stays exact (a long, not a double)
    const char* out_of_range[2][2] = {{"optimizer: {beta2: 1}\n", "optimizer.beta2: 1 is out of range"},
                                      {"checkpoint: {keep: 0}\n", "checkpoint.keep: 0 is out of range"}};
    for (int i = 0; i < 2; i++) {
        rc = load(out_of_range[i][0], &a, err, sizeof err);
        CHECK(rc == -1 && strstr(err, out_of_range[i][1]), "refused: %s", err);
    }
    rc = load("optimizer: {seed: 9007199254740993}\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.seed == 9007199254740993L, "seed 2^53 + 1 kept exactly (got %ld)", a.seed);
}

static void test_duplicates(void) {
    TrainArgs a;
    char err[1024];
    int rc = load("pipeline:\n  stages: 4\n  stages: 8\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:3: key 'pipeline.stages' appears twice (first at line 2)"), "duplicate key: %s", err);
    rc = load("pipeline: {stages: 4, micro_batch: 2, stages: 8}\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:1: key 'pipeline.stages' appears twice"), "duplicate key in a flow mapping: %s", err);
    rc = load("model:\n  batch: 2\noptimizer:\n  lr: 0.1\nmodel:\n  seq_len: 8\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:5: section 'model' appears twice (first at line 1)"), "duplicate section: %s", err);
    rc = load("model:\n  batch: 2\n\"model\":\n  batch: 3\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:3: section 'model' appears twice"), "a quoted spelling of the same section: %s", err);
    rc = load("model:\n  \"batch\\0x\": 2\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:2:") && strstr(err, "NUL"), "a key with a NUL inside: %s", err);
}

static void test_documents(void) {
    TrainArgs a;
    char err[1024];
    int rc = load("model: {batch: 2}\n---\nmodel: {batch: 3}\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:2: a second YAML document"), "second document: %s", err);
    CHECK(a.B == 8, "and nothing of the first is applied (B %d)", a.B);
    rc = load("model: {batch: 2}\n---\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:2: a second YAML document"), "an empty second document: %s", err);
    rc = load("---\nmodel: {batch: 2}\n---\n---\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:3: a second YAML document"), "a third after a second: %s", err);
    rc = load("model: {batch: 2}\n---\n  [1, 2\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "YAML error"), "a broken second document: %s", err);
}

static void test_other_refusals(void) {
    TrainArgs a;
    char err[1024];
    int rc = load("optimizer:\n  lr: 0.1\n  momentum: 0.9\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:3: unknown key 'optimizer.momentum'"), "unknown key: %s", err);
    rc = load("- 1\n- 2\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:1: the top level must be a mapping"), "a list at the top: %s", err);
    rc = load("model: 3\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:1: each top-level key must name a section"), "a section that is a scalar: %s", err);
    rc = load("model: {batch: [1]}\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:1: 'model' must map keys to plain values"), "a list as a value: %s", err);
    rc = load("model: {batch: &x 2, seq_len: *x}\n", &a, err, sizeof err);
    CHECK(rc == 0 && a.B == 2 && a.T == 2, "an alias is the value it names (%s)", err);
    // a section that is an alias of another's mapping: its nodes carry the anchor's lines, so the
    // error is put at the aliasing section's line, naming the anchor's
    rc = load("pipeline: &p\n  stages: 1\noptimizer:\n  lr: 0.001\nmodel: *p\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:5: unknown key 'model.stages' (in the mapping anchored at line 1)"), "an aliased section: %s", err);
    rc = load("optimizer:\n  lr: &v 0.5x\npipeline:\n  stages: *v\n", &a, err, sizeof err);
    CHECK(rc == -1 && strstr(err, ".yaml:2: optimizer.lr"), "an anchored bad value is refused where it is first used: %s", err);
}

// the window flags' parsers (tdpipe/args.h), which the trainer and a config file's value share
static void test_window_values(void) {
    char err[512];
    int W = 0, stage_W[4] = {9, 9, 9, 9}, start = -1;
    CHECK(args_aew("auto", 4, &W, stage_W, err, sizeof err) == 0 && W == -1 && stage_W[3] == 0, "--aew auto: W -1, every stage 0 until measured");
    CHECK(args_aew("3", 4, &W, stage_W, err, sizeof err) == 0 && W == 3 && stage_W[0] == 3 && stage_W[3] == 3, "--aew 3: every stage 3");
    CHECK(args_aew("8,8,4,4", 4, &W, stage_W, err, sizeof err) == 0 && W == -2 && stage_W[1] == 8 && stage_W[2] == 4, "--aew 8,8,4,4: one per stage");
    CHECK(args_aew("8,4", 4, &W, stage_W, err, sizeof err) == -1 && strstr(err, "2 windows for 4 stages"), "two windows for four stages: %s", err);
    CHECK(args_aew("2,x", 4, &W, stage_W, err, sizeof err) == -1 && strstr(err, "--aew 2,x: expected"), "a malformed list: %s", err);
    CHECK(args_aew("-1", 1, &W, stage_W, err, sizeof err) == -1, "a negative window");
    CHECK(args_aew_start("auto", -1, 1, 20, &start, err, sizeof err) == 0 && start == 20, "--aew-start auto with auto and a compensation: the warm-up's 20");
    CHECK(args_aew_start("auto", -1, 0, 20, &start, err, sizeof err) == 0 && start == 0, "--aew-start auto without a compensation: 0");
    CHECK(args_aew_start("auto", 4, 1, 20, &start, err, sizeof err) == 0 && start == 0, "--aew-start auto with a window given: 0");
    CHECK(args_aew_start("7", 4, 0, 20, &start, err, sizeof err) == 0 && start == 7, "--aew-start 7");
    CHECK(args_aew_start("-3", 4, 0, 20, &start, err, sizeof err) == -1 && strstr(err, "--aew-start -3: expected"), "--aew-start -3: %s", err);
}

int main(void) {
    test_dir_make("test_config");
    test_window_values();
    test_accepted();
    test_readme_example();
    test_duplicates();
    test_documents();
    test_other_refusals();
    return test_summary();
}
