// libFuzzer target: llm.c model files (llmc/model_file.c), header and parameters.
#include "dev/fuzz/fuzz_file.h"
#include "llmc/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(0, data, n);
    GPT2Config cfg;
    float* params = NULL;
    char err[1024];
    if (model_file_read_config(path, &cfg, err, sizeof err) == 0 && model_file_load(path, &cfg, &params, err, sizeof err) == 0)
        free(params);
    return 0;
}
