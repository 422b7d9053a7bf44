#!/usr/bin/env python3
# Why LR scaling beside weight prediction counts delta - 1: the stability limit of delayed AdamW on a
# quadratic, per staleness delta and compensation. Plain Python (no numpy); prints a table.
#
# The model: one direction of curvature h in AdamW's preconditioned coordinates, with v frozen, so an
# update is momentum SGD, m_t = b m_(t-1) + (1 - b) h x_used, x_(t+1) = x_t - eta m_t. The gradient of
# update t comes from the weights a stale micro-batch ran on:
#   none:    x_used = x_(t-delta)                                     (TD-Pipe's window, plain)
#   predict: x_used = x_(t-delta) + delta (x_(t-delta) - x_(t-delta-1)) (adamw_predict: the last update,
#            the one the moments of version t-delta made, extrapolated delta times)
#   lr:      eta scaled by 1 / (1 + delta);  predict+lr: by 1 / delta (tdpipe/staleness.h)
# The largest eta h for which the iteration decays is the limit; a run at the edge of stability
# (sharpness rises until it meets the limit) pays for a lower limit with spikes, as the runs in README
# show at delta = 2. Read it as: prediction at delta is about as stable as no prediction at delta - 1,
# and scaling the rate by 1 / delta gives prediction at delta the margin prediction has at delta = 1,
# where it trains within half a percent of 1F1B.
# usage: python3 dev/stale_stability.py [beta1 (default 0.9)]
import sys


def decays(eh, delta, mode, b):
    n = delta + 2
    xs, m = [1.0] * n, 0.0  # history of x, oldest first
    for _ in range(3000):
        v = len(xs) - 1 - delta
        xu = xs[v] + delta * (xs[v] - xs[v - 1]) if mode == "predict" else xs[v]
        m = b * m + (1 - b) * xu
        xs.append(xs[-1] - eh * m)
        if abs(xs[-1]) > 1e8:
            return False
        xs = xs[-n:]
    return abs(xs[-1]) < 1e-3


def limit(delta, mode, b, factor=1.0):
    lo, hi = 0.0, 200.0  # bisection on eta h (stable below the limit)
    for _ in range(40):
        mid = (lo + hi) / 2
        if decays(mid * factor, delta, mode, b):
            lo = mid
        else:
            hi = mid
    return lo


def main():
    b = float(sys.argv[1]) if len(sys.argv) > 1 else 0.9
    print(f"# stale_stability: limit of eta*h (AdamW's rate x preconditioned curvature) for delayed updates, beta1 {b}")
    print(f"# command: python3 dev/stale_stability.py {b}")
    print(f"{'#delta':>6} {'none':>8} {'predict':>8} {'lr':>8} {'predict+lr':>11}")
    for d in range(4):
        cols = [limit(d, "none", b), limit(d, "predict", b), limit(d, "none", b, 1 / (1 + d)),
                limit(d, "predict", b, 1 / max(d, 1))]
        print(f"{d:>6} " + " ".join(f"{c:>8.2f}" if i < 3 else f"{c:>11.2f}" for i, c in enumerate(cols)))


if __name__ == "__main__":
    main()
