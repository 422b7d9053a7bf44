#!/usr/bin/env python3
# Why LR scaling beside weight prediction counts delta - 1: the stability limit of delayed AdamW on a
# quadratic, per staleness delta and compensation. Plain Python (no numpy); prints a table.
#
# The model: one direction of curvature h in AdamW's preconditioned coordinates, with v frozen, so an
# update is momentum SGD, m_t = b m_(t-1) + (1 - b) h x_used, x_(t+1) = x_t - eta m_t. The gradient of
# update t comes from the weights a stale micro-batch ran on:
#   none:    x_used = x_(t-delta)                                     (TD-Pipe's window, plain)
#   predict/o1: x_used = x_v + delta u_v, v = t - delta, u_v = x_v - x_(v-1) (compensation_predict: the last
#            update, the one the moments of version v made, extrapolated delta times)
#   predict: x_used = x_v + delta u_v + delta (delta + 1) / 2 (u_v - u_(v-1)) (second order, the
#            default: compensation_curvature)
#   lr:      eta scaled by 1 / (1 + delta);  predict+lr: by 1 / delta (tdpipe/staleness.h)
# The largest eta h for which the iteration decays is the limit; a run at the edge of stability
# (sharpness rises until it meets the limit) pays for a lower limit with spikes, as the runs in README
# show at delta = 2. Read it as: first-order prediction at delta is about as stable as no prediction at
# delta - 1; the second order roughly doubles the limit at delta = 1 and 2; and scaling the rate by
# 1 / delta gives prediction at delta about the margin it has at delta = 1, where the second order
# trains within half a percent of 1F1B (README).
# usage: python3 dev/stale_stability.py [beta1 (default 0.9)]
import sys


def decays(eh, delta, mode, b):
    n = delta + 3
    xs, m = [1.0] * n, 0.0  # history of x, oldest first
    for _ in range(3000):
        v = len(xs) - 1 - delta
        u, u_prev = xs[v] - xs[v - 1], xs[v - 1] - xs[v - 2]
        xu = xs[v]
        if mode != "none":
            xu += delta * u
        if mode == "predict":
            xu += delta * (delta + 1) / 2 * (u - u_prev)
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
    usage = "usage: python3 dev/stale_stability.py [beta1 (default 0.9), 0 <= beta1 < 1]"
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(usage)
        return
    try:
        b = float(sys.argv[1]) if len(sys.argv) > 1 else 0.9
    except ValueError:
        b = -1.0
    if len(sys.argv) > 2 or not 0.0 <= b < 1.0:
        sys.exit(f"stale_stability: expected one beta1 in [0, 1), got {' '.join(sys.argv[1:])}\n{usage}")
    print(f"# stale_stability: limit of eta*h (AdamW's rate x preconditioned curvature) for delayed updates, beta1 {b}")
    print(f"# command: python3 dev/stale_stability.py {b}")
    names = ["none", "predict/o1", "predict", "lr", "predict/o1+lr", "predict+lr"]
    print("#delta " + " ".join(f"{x:>13}" for x in names))
    for d in range(4):
        f = 1 / max(d, 1)  # predict+lr's factor
        cols = [limit(d, "none", b), limit(d, "o1", b), limit(d, "predict", b), limit(d, "none", b, 1 / (1 + d)),
                limit(d, "o1", b, f), limit(d, "predict", b, f)]
        print(f"{d:>6} " + " ".join(f"{c:>13.2f}" for c in cols))


if __name__ == "__main__":
    main()
