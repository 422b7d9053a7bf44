#!/usr/bin/env python3
"""Plots for scripts/reproduce_tables.sh: throughput against model size (the article's claims, the
physical ceiling and the three simulated systems) and utilisation against jitter beta (simulated by
build/dev/sim_schedules; measured by the trainer when the full run made it).

usage: scripts/plot_reproduce.py OUT_DIR   (reads OUT_DIR/throughput.csv, tables.csv, utilisation_sim.txt;
                                            writes OUT_DIR/throughput.png and OUT_DIR/utilisation.png)
Needs matplotlib (pip install -r scripts/requirements.txt).
"""
import csv
import os
import sys


def floats(row, key):
    try:
        return float(row[key])
    except (KeyError, ValueError):
        return None


def finish(ax, fig, path, xlabel, ylabel, title):
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    out = sys.argv[1]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        sys.exit("plot_reproduce: matplotlib is not installed (pip install -r scripts/requirements.txt)")
    with open(os.path.join(out, "throughput.csv")) as f:
        rows = list(csv.DictReader(f))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = [float(r["params"]) / 1e9 for r in rows]
    for key, label, style in [("ceiling_6n", "ceiling (100% of peak, 6N)", "k--"), ("megatron", "Megatron-LM-like (sim)", "o-"),
                              ("deepspeed", "DeepSpeed-like (sim)", "s-"), ("tdpipe", "tdpipe (sim)", "^-"), ("article", "article's claim", "r*")]:
        pts = [(xi, floats(r, key)) for xi, r in zip(x, rows) if floats(r, key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label, markersize=10 if key == "article" else 6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    # the models' own sizes as the x ticks: the log axis's own labels (2 x 10^1 ...) ran into each other
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:.0f}" for v in x])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    finish(ax, fig, os.path.join(out, "throughput.png"), "parameters (billions)", "samples/s on 64 A100 80 GB (T 512)",
           "throughput: claims, ceiling, simulation (a missing point: does not fit)")

    sims = {}  # (schedule, W) -> [(beta, util)]
    beta = None
    with open(os.path.join(out, "utilisation_sim.txt")) as f:
        for line in f:
            p = line.split()
            if len(p) == 2 and p[0] == "beta":
                beta = float(p[1])
            elif beta is not None and len(p) >= 6 and p[0] in ("1f1b", "interleaved", "tdpipe", "zbh1"):
                sims.setdefault((p[0], int(p[1])), []).append((beta, float(p[5])))
    measured = {}
    with open(os.path.join(out, "tables.csv")) as f:
        for r in csv.DictReader(f):
            if r["table"] == "util":
                try:
                    measured[r["row"]] = float(r["measured"])
                except ValueError:
                    pass
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (sched, w), pts in sorted(sims.items()):
        if sched == "tdpipe" and w == 0:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"{sched}" + (f" W {w}" if sched == "tdpipe" else "") + " (sim)")
    for name, u in measured.items():
        ax.plot([0.3], [u], "x", markersize=10, label=f"{name} (measured)")
    ax.axhline(95, color="r", linestyle=":", label="article: 95%")
    finish(ax, fig, os.path.join(out, "utilisation.png"), "jitter beta (CV of op times)", "utilisation (%)",
           "pipeline utilisation, P = 8, M = 16: simulated (lines), measured (x)")


if __name__ == "__main__":
    main()
