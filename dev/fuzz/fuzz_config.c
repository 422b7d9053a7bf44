// libFuzzer target: the YAML config reader (tdpipe/config.c, libyaml) applying keys to TrainArgs
// through args_load_config.
#include "dev/fuzz/fuzz_file.h"
#include "tdpipe/args.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t n) {
    const char* path = fuzz_file(0, data, n);
    TrainArgs a;
    args_defaults(&a);
    char err[1024];
    args_load_config(&a, path, err, sizeof err);
    return 0;
}
