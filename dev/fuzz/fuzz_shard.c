// libFuzzer target: llm.c token shards (llmc/shard.c), and the data loader over one shard.
#include "dev/fuzz/fuzz_file.h"
#include "llmc/dataloader.h"
#include "llmc/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(0, data, n);
    ShardInfo info;
    char err[1024];
    if (shard_read_header(path, &info, err, sizeof err) != 0) return 0;
    uint16_t* tokens = (uint16_t*)malloc((size_t)info.num_tokens * sizeof(uint16_t) + 1); // (num_tokens,)
    if (shard_read(path, &info, tokens, (size_t)info.num_tokens, err, sizeof err) != 0) abort(); // its header just passed
    free(tokens);
    // windows of B*T = 4 tokens, V = 300 (a shard with larger tokens must be refused)
    DataLoader dl;
    if (dataloader_init(&dl, path, 1, 4, 0, 1, 1, 7, 300, err, sizeof err) != 0) return 0;
    int in[4], tg[4]; // (B*T,)
    for (int i = 0; i < 3; i++) {
        if (dataloader_next(&dl, in, tg) != 0) abort();
        for (int j = 0; j < 4; j++)
            if (in[j] < 0 || in[j] >= 300 || tg[j] < 0 || tg[j] >= 300) abort();
    }
    dataloader_free(&dl);
    return 0;
}
