// Every file reader (model file, shard and loader glob, checkpoint, tokenizer, YAML config) refuses
// a directory or a FIFO, without waiting, in one message naming the path; every writer refuses
// a FIFO or directory where its temporary file goes.
#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/model_file.h"
#include "llmc/shard.h"
#include "llmc/tokenizer.h"
#include "tdpipe/args.h"
#include "tests/test.h"
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// runs every reader on path; each must fail with a message holding path and want
static void expect_all_refuse(const char* path, const char* want, const char* kind) {
    char err[1024], pattern[600], other[600];
    GPT2Config cfg;
    float* params = NULL;
    int rc = model_file_read_config(path, &cfg, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want), "model file header of %s: %s", kind, err);
    rc = model_file_load(path, &cfg, &params, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want) && strstr(err, "model file"), "model file of %s: %s", kind, err);
    ShardInfo info;
    rc = shard_read_header(path, &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want) && strstr(err, "token shard"), "shard header of %s: %s", kind, err);
    uint16_t tokens[4];
    rc = shard_read(path, &info, tokens, 4, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want), "shard of %s: %s", kind, err);
    DataLoader dl;
    snprintf(pattern, sizeof pattern, "%s*", path); // a glob that matches it
    rc = dataloader_init(&dl, pattern, 1, 4, 0, 1, 0, 1, 256, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want), "data loader glob matching %s: %s", kind, err);
    Ckpt c;
    rc = ckpt_read(path, &c, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want) && strstr(err, "checkpoint"), "checkpoint of %s: %s", kind, err);
    rc = ckpt_verify(path, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want), "checkpoint verify of %s: %s", kind, err);
    Tokenizer tok;
    snprintf(other, sizeof other, "%s", test_path("none.bpe"));
    rc = tokenizer_init_gpt2(&tok, path, other, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want) && strstr(err, "tokenizer file"), "encoder.json of %s: %s", kind, err);
    TrainArgs a;
    args_defaults(&a);
    rc = args_load_config(&a, path, err, sizeof err);
    CHECK(rc == -1 && strstr(err, path) && strstr(err, want) && strstr(err, "YAML config"), "config of %s: %s", kind, err);
}

int main(void) {
    // a FIFO that no one writes would hang a blocking open: this bounds a regression to a failure
    alarm(120);
    const char* dir_path = test_dir_make("test_readers");
    char dir[1024], fifo[1024];
    snprintf(dir, sizeof dir, "%s", test_path("ckpt_00000005.tdck")); // a name every reader might be given
    snprintf(fifo, sizeof fifo, "%s", test_path("fifo.bin"));
    if (mkdir(dir, 0755) != 0 || mkfifo(fifo, 0644) != 0) {
        perror("mkdir/mkfifo");
        return 1;
    }
    expect_all_refuse(dir, "is a directory", "a directory");
    expect_all_refuse(fifo, "is a FIFO, not a", "a FIFO");
    char err[1024];
    ShardInfo info;
    int rc;
    if (mkfifo(test_path(".ckpt_00000003.tdck.tmp"), 0644) != 0 || mkfifo(test_path("m.bin.tmp"), 0644) != 0 || mkdir(test_path("s.bin.tmp"), 0755) != 0) {
        perror("mkfifo");
        return 1;
    }
    CkptWriter* w = ckpt_writer_open(dir_path, 3, 1, 1, err, sizeof err);
    CHECK(!w && strstr(err, ".ckpt_00000003.tdck.tmp: is a FIFO, not a checkpoint file"), "checkpoint writer, a FIFO at its temp name: %s", err);
    GPT2Config cfg = {.max_seq_len = 4, .vocab_size = 8, .num_layers = 1, .num_heads = 1, .channels = 4, .padded_vocab_size = 8};
    float params[400] = {0};
    rc = model_file_save(test_path("m.bin"), &cfg, params, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "m.bin.tmp: is a FIFO, not a model file"), "model file writer, a FIFO at its temp name: %s", err);
    uint16_t t[4] = {1, 2, 3, 4};
    rc = shard_write(test_path("s.bin"), t, 4, SHARD_TOKENIZER_BYTES, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "s.bin.tmp: is a directory, not a token shard"), "shard writer, a directory at its temp name: %s", err);
    rc = shard_read_header("/dev/null", &info, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "/dev/null: is a character device, not a token shard"), "a device: %s", err);
    return test_summary();
}
