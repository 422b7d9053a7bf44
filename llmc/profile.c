// The profiling hook's buckets (see profile.h): a short table searched linearly, since a step has a
// few dozen distinct (family, pass, shape) keys.
#include "profile.h"
#include <string.h>

#define PROFILE_MAX 128

int profile_on = 0;
static ProfileEntry entries[PROFILE_MAX];
static int n_entries = 0;

void profile_add(double t0, const char* family, const char* pass, int a, int b, int c, double flops, double bytes) {
    double dt = now_seconds() - t0;
    ProfileEntry* e = NULL;
    for (int i = 0; i < n_entries && !e; i++) {
        ProfileEntry* x = &entries[i];
        if (!strcmp(x->family, family) && !strcmp(x->pass, pass) && x->shape[0] == a && x->shape[1] == b && x->shape[2] == c) e = x;
    }
    if (!e) {
        if (n_entries == PROFILE_MAX) return; // full: later keys go uncounted (they land in "the rest")
        e = &entries[n_entries++];
        *e = (ProfileEntry){family, pass, {a, b, c}, 0.0, 0.0, 0.0, 0};
    }
    e->seconds += dt;
    e->flops += flops;
    e->bytes += bytes;
    e->calls++;
}

int profile_entries(const ProfileEntry** out) {
    *out = entries;
    return n_entries;
}

void profile_reset(void) { n_entries = 0; }
