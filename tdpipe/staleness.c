// Staleness compensation's pure functions (see staleness.h).
#include "staleness.h"
#include <string.h>

// by bits: predict 1, dcasgd 2, lr 4
static const char* const NAMES[8] = {"none", "predict", "dcasgd", "predict+dcasgd", "lr", "predict+lr", "dcasgd+lr", "predict+dcasgd+lr"};

int staleness_parse(const char* name, unsigned* methods) {
    if (!strcmp(name, "none")) return *methods = STALE_NONE, 0;
    unsigned bits = 0;
    for (const char* p = name;;) {
        size_t n = strcspn(p, "+");
        unsigned bit = 0;
        for (unsigned b = 1; b <= STALE_LR; b <<= 1)
            if (strlen(NAMES[b]) == n && !strncmp(p, NAMES[b], n)) bit = b;
        if (!bit || (bits & bit)) return -1;
        bits |= bit;
        if (!p[n]) break;
        p += n + 1;
    }
    *methods = bits;
    return 0;
}

const char* staleness_name(unsigned methods) { return methods < 8 ? NAMES[methods] : "unknown"; }

double staleness_lr_factor(const StaleComp* c, const Schedule* sch, int s, int t) {
    if (!(c->methods & STALE_LR)) return 1.0;
    double sum = 0.0;
    int g0 = (t - sch->first_step) * sch->M;
    for (int m = 0; m < sch->M; m++) {
        Op f = schedule_mb_op(sch, s, OP_F, g0 + m);
        int delta = staleness_of(&f) - (staleness_ahead(c, &f) > 0);
        sum += staleness_applies(c, STALE_LR, &f) ? 1.0 / (1.0 + delta) : 1.0;
    }
    return sum / sch->M;
}
