// The gradient noise scale's estimators and --lr-gns's rule (see gns.h).
#include "gns.h"
#include <math.h>

void gns_estimate(double small, double big, double b_small, double b_big, double* g2, double* trace) {
    *g2 = (b_big * big - b_small * small) / (b_big - b_small);
    *trace = (small - big) / (1.0 / b_small - 1.0 / b_big);
}

// B_simple of the smoothed estimates (NaN while |G|^2 <= 0)
static double smoothed_b(const GnsState* st) {
    double debias = 1.0 - pow(GNS_DECAY, (double)st->n), g2_now = st->g2_ema / debias;
    return g2_now > 0 ? (st->s_ema / debias) / g2_now : NAN;
}

// --lr-gns's factor for an estimate b against the mean of those before it (1 while they are fewer than GNS_WARM)
static double factor_for(const GnsState* st, double b, double b_big) {
    if (st->b_n < GNS_WARM) return 1.0;
    double b_pos = isfinite(b) && b > 0 ? b : 0.0; // a negative estimate (noise) counts as no noise
    double f = (1.0 + st->b_sum / st->b_n / b_big) / (1.0 + b_pos / b_big);
    return f < 0.5 ? 0.5 : f > 2.0 ? 2.0 : f;
}

double gns_update(GnsState* st, double small, double big, double b_small, double b_big, double* lr_factor) {
    double g2, trace;
    gns_estimate(small, big, b_small, b_big, &g2, &trace);
    st->n++;
    st->s_ema = GNS_DECAY * st->s_ema + (1.0 - GNS_DECAY) * trace;
    st->g2_ema = GNS_DECAY * st->g2_ema + (1.0 - GNS_DECAY) * g2;
    double b = smoothed_b(st);
    if (lr_factor) *lr_factor = factor_for(st, b, b_big);
    st->b_sum += isfinite(b) && b > 0 ? b : 0.0;
    st->b_n++;
    return b;
}

double gns_lr_factor_now(const GnsState* st, double b_big) { return st->n ? factor_for(st, smoothed_b(st), b_big) : 1.0; }
