#!/usr/bin/env python3
"""Fits the polynomial coefficients of llmc/vec_math.c: minimax in relative error by Lawson's
iteration (weighted least squares whose weights grow where the error is largest), on Chebyshev
nodes, against mpmath at 40 digits. Prints each fit's worst relative error and its coefficients
rounded to float, lowest degree first, as the C file lists them highest first.
usage: pip install numpy mpmath; python3 dev/fit_vec_math.py"""
import sys

if sys.argv[1:]:  # it takes no arguments: --help is this text, anything else a refusal
    asked = sys.argv[1:] in (["-h"], ["--help"])
    print(__doc__, file=sys.stdout if asked else sys.stderr)
    sys.exit(0 if asked else 1)
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def lawson(xs, target, weight, degree, rounds=80):
    """c minimising max |weight * (sum_k c_k xs^k - target)|"""
    A = np.vstack([xs**k for k in range(degree + 1)]).T
    lw = np.ones_like(xs)
    for _ in range(rounds):
        W = weight * lw
        c, *_ = np.linalg.lstsq(A * W[:, None], target * W, rcond=None)
        err = np.abs((A @ c - target) * weight)
        lw = lw * err / err.max()
    return c, np.abs((A @ c - target) * weight).max()


def report(name, c, err):
    print(f"{name}: worst relative error {err:.3g}")
    print("  " + " ".join("%.9e" % np.float32(v) for v in c))


def chebyshev(lo, hi, n=3000):
    return np.array([lo + (hi - lo) * (0.5 - 0.5 * np.cos(np.pi * (i + 0.5) / n)) for i in range(n)])


# tanh x = x + x^3 P(x^2) for |x| < 0.625 (TANH_SMALL): P fitted to (tanh x - x) / x^3, weighted by
# x^3 / tanh x so that the error minimised is tanh's relative error
xs = chebyshev(1e-4, 0.625)
x = [mp.mpf(v) for v in xs]
target = np.array([float((mp.tanh(v) - v) / v**3) for v in x])
weight = np.array([float(v**3 / mp.tanh(v)) for v in x])
report("tanh: P(z), z = x^2", *lawson(xs**2, target, weight, 4))

# e^r = 1 + r + r^2 Q(r) for |r| <= ln2 / 2 (1% wider): Q fitted to (e^r - 1 - r) / r^2, weighted by
# r^2 / e^r (e^r's relative error)
h = float(mp.log(2) / 2) * 1.01
xs = chebyshev(-h, h)
xs = xs[np.abs(xs) > 1e-6]
r = [mp.mpf(v) for v in xs]
target = np.array([float((mp.exp(v) - 1 - v) / v**2) for v in r])
weight = np.array([float(v**2 / mp.exp(v)) for v in r])
report("exp: Q(r)", *lawson(xs, target, weight, 4))
