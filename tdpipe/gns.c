// The gradient noise scale's estimators and --lr-gns's rule (see gns.h).
#include "gns.h"
#include <math.h>

void gns_estimate(double small, double big, double b_small, double b_big, double* g2, double* trace) {
    *g2 = (b_big * big - b_small * small) / (b_big - b_small);
    *trace = (small - big) / (1.0 / b_small - 1.0 / b_big);
}

double gns_update(GnsState* st, double small, double big, double b_small, double b_big, double* lr_factor) {
    double g2, trace;
    gns_estimate(small, big, b_small, b_big, &g2, &trace);
    st->n++;
    st->s_ema = GNS_DECAY * st->s_ema + (1.0 - GNS_DECAY) * trace;
    st->g2_ema = GNS_DECAY * st->g2_ema + (1.0 - GNS_DECAY) * g2;
    double debias = 1.0 - pow(GNS_DECAY, (double)st->n), g2_now = st->g2_ema / debias;
    double b = g2_now > 0 ? (st->s_ema / debias) / g2_now : NAN;
    double b_pos = isfinite(b) && b > 0 ? b : 0.0; // a negative estimate (noise) counts as no noise
    if (lr_factor) {
        double f = 1.0;
        if (st->b_n >= GNS_WARM) {
            f = (1.0 + st->b_sum / st->b_n / b_big) / (1.0 + b_pos / b_big);
            f = f < 0.5 ? 0.5 : f > 2.0 ? 2.0 : f;
        }
        *lr_factor = f;
    }
    st->b_sum += b_pos;
    st->b_n++;
    return b;
}
