// The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
// appendix A): the unbiased estimates of |G|^2 and tr(Sigma) from a small and a large batch's squared
// gradient norms, smoothed over steps; B_simple = tr(Sigma) / |G|^2; and --lr-gns's rule.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

#define GNS_DECAY 0.95 // the moving averages' decay (the per-step estimates are very noisy)
#define GNS_WARM 10    // estimates before --lr-gns scales anything

// the running estimate, carried from step to step (and in checkpoints)
typedef struct {
    double s_ema, g2_ema; // moving averages of tr(Sigma) and |G|^2 (not yet bias-corrected)
    long n;               // estimates folded into them
    double b_sum;         // the B_simple estimates so far, summed (--lr-gns's reference is their mean)
    long b_n;
} GnsState;

// one step's unbiased estimates: small = E|g_small|^2 (the mean squared norm of gradients over
// b_small examples each), big = |g_big|^2 (the gradient over b_big > b_small examples):
// |G|^2 = (b_big big - b_small small) / (b_big - b_small), tr(Sigma) = (small - big) / (1/b_small - 1/b_big)
void gns_estimate(double small, double big, double b_small, double b_big, double* g2, double* trace);
// folds one step into st and returns B_simple of the smoothed estimates (NaN while |G|^2 <= 0);
// *lr_factor (if not NULL) gets --lr-gns's factor for this step: (1 + mean B / b_big) / (1 + B / b_big),
// the ratio of SGD's optimal rate eps_max / (1 + B_noise / B) (their eq. 2.6) now to its mean over
// the run so far, clamped to [0.5, 2]; 1 for the first GNS_WARM estimates
double gns_update(GnsState* st, double small, double big, double b_small, double b_big, double* lr_factor);
// the factor the coming updates are expected to apply: gns_update's rule with the current smoothed
// B_simple as the next estimate (what weight prediction extrapolates with; 1 before any estimate)
double gns_lr_factor_now(const GnsState* st, double b_big);

#ifdef __cplusplus
}
#endif
