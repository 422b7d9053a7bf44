// The memory this process may use: MemAvailable, capped by the memory cgroups (v2 and v1) it is
// in, from its own cgroup up to the root (see outdir.h).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/common.h"
#include "outdir.h"

#define PATH_CAP 4096

// the first number in file path after key (key NULL: at its start); 0 when there is none. "max"
// (cgroup v2's no limit) reads as UINT64_MAX.
static int read_number(const char* path, const char* key, uint64_t* v) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    int found = 0;
    size_t klen = key ? strlen(key) : 0;
    while (!found && fgets(line, sizeof line, f)) {
        const char* p = line;
        if (key) {
            if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != ':')) continue;
            p = line + klen + 1;
        }
        while (*p == ' ' || *p == '\t') p++;
        if (strncmp(p, "max", 3) == 0) {
            *v = UINT64_MAX;
            found = 1;
        } else {
            char* end;
            unsigned long long x = strtoull(p, &end, 10);
            found = end != p;
            if (found) *v = (uint64_t)x;
        }
        if (key) break;
    }
    fclose(f);
    return found;
}

typedef struct {
    const char* version;   // "v2" or "v1", for the message
    const char* limit;     // the limit's file name
    const char* usage;     // the usage's file name
    const char* inactive;  // memory.stat's key of reclaimable file cache
} CgroupFiles;

static const CgroupFiles V2 = {"v2", "memory.max", "memory.current", "inactive_file"};
static const CgroupFiles V1 = {"v1", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"};
// v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712); anything that
// large is no limit
#define NO_LIMIT_ABOVE (UINT64_C(1) << 62)

// every cgroup from base + rel up to base: the smallest limit - (usage - inactive file cache)
static void walk_cgroups(const char* base, const char* rel, const CgroupFiles* cf, OutdirMemory* m) {
    // a cgroup that is not there is skipped: in a container, its own cgroup is mounted as the base
    char dir[PATH_CAP];
    if (snprintf(dir, sizeof dir, "%s%s", base, rel) >= (int)sizeof dir) snprintf(dir, sizeof dir, "%s", base);
    size_t base_len = strlen(base);
    for (;;) {
        char p[PATH_CAP + 32];
        uint64_t limit, usage, inactive = 0;
        snprintf(p, sizeof p, "%s/%s", dir, cf->limit);
        if (read_number(p, NULL, &limit) && limit < NO_LIMIT_ABOVE) {
            snprintf(p, sizeof p, "%s/%s", dir, cf->usage);
            if (!read_number(p, NULL, &usage)) usage = 0;
            snprintf(p, sizeof p, "%s/memory.stat", dir);
            read_number(p, cf->inactive, &inactive);
            uint64_t used = usage > inactive ? usage - inactive : 0;
            uint64_t room = limit > used ? limit - used : 0;
            if (room < m->cgroup_room) {
                m->cgroup_room = room;
                snprintf(m->source, sizeof m->source, "cgroup %s %.500s/%s: limit %.1f MiB, in use %.1f MiB", cf->version, dir, cf->limit,
                         (double)limit / 1048576.0, (double)used / 1048576.0);
            }
        }
        char* slash = strrchr(dir, '/');
        if (strlen(dir) <= base_len || !slash || (size_t)(slash - dir) < base_len) break;
        *slash = 0;
    }
}

int outdir_memory_available_at(const char* root, OutdirMemory* m, char* err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->cgroup_room = UINT64_MAX;
    char p[PATH_CAP];
    snprintf(p, sizeof p, "%s/proc/meminfo", root);
    uint64_t kib;
    if (!read_number(p, "MemAvailable", &kib)) return td_error(err, errlen, "%s: no MemAvailable line (or it cannot be read)", p);
    m->mem_available = kib * 1024;
    snprintf(p, sizeof p, "%s/proc/self/cgroup", root);
    FILE* f = fopen(p, "r");
    char line[PATH_CAP];
    while (f && fgets(line, sizeof line, f)) { // "0::/path" (v2), "4:memory:/path" (v1)
        line[strcspn(line, "\n")] = 0;
        char* c1 = strchr(line, ':');
        char* c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = 0;
        *c2 = 0;
        const char* controllers = c1 + 1;
        const char* rel = strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1;
        char base[PATH_CAP];
        if (strcmp(line, "0") == 0 && controllers[0] == 0) {
            // unified alone, or beside v1 controllers (hybrid: mounted at unified/)
            snprintf(base, sizeof base, "%s/sys/fs/cgroup", root);
            walk_cgroups(base, rel, &V2, m);
            snprintf(base, sizeof base, "%s/sys/fs/cgroup/unified", root);
            walk_cgroups(base, rel, &V2, m);
        } else if (strstr(controllers, "memory")) {
            snprintf(base, sizeof base, "%s/sys/fs/cgroup/%s", root, controllers);
            walk_cgroups(base, rel, &V1, m);
        }
    }
    if (f) fclose(f);
    m->bytes = m->mem_available < m->cgroup_room ? m->mem_available : m->cgroup_room;
    if (m->mem_available <= m->cgroup_room)
        snprintf(m->source, sizeof m->source, "MemAvailable %.1f MiB (%.500s/proc/meminfo)", (double)m->mem_available / 1048576.0, root);
    return 0;
}

int outdir_memory_available(OutdirMemory* m, char* err, size_t errlen) { return outdir_memory_available_at("", m, err, errlen); }
