// The YAML config file (--config): one document of sections of scalar keys, each pair handed to a
// setter as "section.key" = value; a setter's refusal is reported with the key's line number.
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

// applies one setting ("pipeline.stages", "4"); 0, or -1 with a message in msg naming the problem
typedef int (*ConfigSetFn)(void* ctx, const char* key, const char* value, char* msg, size_t msglen);

// reads path and calls set(ctx, ...) for each key in file order; 0, or -1 with "path:line: ..." in err
int config_load_yaml(const char* path, ConfigSetFn set, void* ctx, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
