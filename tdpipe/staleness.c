// Staleness compensation's pure functions (see staleness.h).
#include "staleness.h"
#include <string.h>

static const char* const NAMES[] = {"none", "predict", "dcasgd", "lr"};

int staleness_parse(const char* name, StaleMethod* method) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, NAMES[i])) {
            *method = (StaleMethod)i;
            return 0;
        }
    return -1;
}

const char* staleness_name(StaleMethod method) { return method >= STALE_NONE && method <= STALE_LR ? NAMES[method] : "unknown"; }

double staleness_lr_factor(const StaleComp* c, const Schedule* sch, int s, int t) {
    if (c->method != STALE_LR) return 1.0;
    double sum = 0.0;
    int g0 = (t - sch->first_step) * sch->M;
    for (int m = 0; m < sch->M; m++) {
        Op f = schedule_mb_op(sch, s, OP_F, g0 + m);
        sum += staleness_applies(c, STALE_LR, &f) ? 1.0 / (1.0 + staleness_of(&f)) : 1.0;
    }
    return sum / sch->M;
}
