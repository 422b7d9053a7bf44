// The YAML config file (--config): sections of scalar keys applied to TrainArgs through args_set;
// an unknown key is refused with its line number.
#pragma once
#include "args.h"
#ifdef __cplusplus
extern "C" {
#endif

int config_load_yaml(TrainArgs* a, const char* path, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
