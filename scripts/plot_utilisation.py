#!/usr/bin/env python3
"""Plot utilisation against jitter beta from scripts/bench_schedules.sh's table: one line per
schedule (tdpipe per window W), measured solid, the simulator's figure dashed.

usage: scripts/bench_schedules.sh 12 > bench.txt; scripts/plot_utilisation.py bench.txt -o util.png
       scripts/plot_utilisation.py bench.txt --summary   (no plot: the parsed series, no matplotlib)
Needs matplotlib for the plot (pip install -r scripts/requirements.txt).
"""
import argparse
import sys

COLUMNS = ["#sched", "W", "beta", "util_%", "sim_%", "theory_%", "stale", "W_used", "step_ms"]


def read_table(path):
    """{label: [(beta, util, sim or None)]} from bench_schedules output."""
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"plot_utilisation: {path}: {e.strerror}")
    header = [ln for ln in lines if ln.startswith("#sched")]
    if not header or header[0].split() != COLUMNS:
        sys.exit(f"plot_utilisation: {path}: no bench_schedules header ({' '.join(COLUMNS)})")
    series = {}
    for n, ln in enumerate(lines, 1):
        if not ln.strip() or ln.startswith("#"):
            continue
        f = ln.split()
        if len(f) != len(COLUMNS):
            sys.exit(f"plot_utilisation: {path}:{n}: expected {len(COLUMNS)} columns, got {len(f)}")
        try:
            beta, util = float(f[2]), float(f[3])
            sim = None if f[4] == "-" else float(f[4])
        except ValueError:
            sys.exit(f"plot_utilisation: {path}:{n}: beta, util_% and sim_% must be numbers")
        label = f[0] if f[0] != "tdpipe" else f"tdpipe W={f[1]}"
        series.setdefault(label, []).append((beta, util, sim))
    if not series:
        sys.exit(f"plot_utilisation: {path}: the table has no rows")
    return series


def main():
    ap = argparse.ArgumentParser(description="utilisation against beta from bench_schedules.sh output")
    ap.add_argument("table")
    ap.add_argument("-o", "--out", help="image to write (png, svg, pdf)")
    ap.add_argument("--summary", action="store_true", help="print the parsed series instead of plotting")
    args = ap.parse_args()
    series = read_table(args.table)
    if args.summary:
        for label, pts in series.items():
            print(f"{label:16s} " + "  ".join(f"beta {b:g}: {u:.1f}%" + (f" (sim {s:.1f}%)" if s is not None else "")
                                            for b, u, s in sorted(pts)))
        return
    if not args.out:
        sys.exit("plot_utilisation: say where the image goes (-o FILE) or ask for --summary")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_utilisation: needs matplotlib (pip install -r scripts/requirements.txt); --summary works without")
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, pts) in enumerate(series.items()):
        pts.sort()
        colour = plt.get_cmap("tab20")(i % 20)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=label)
        sim = [(p[0], p[2]) for p in pts if p[2] is not None]
        if sim:
            ax.plot([p[0] for p in sim], [p[1] for p in sim], "--", color=colour, alpha=0.6)
    ax.set_xlabel("jitter beta (coefficient of variation of op times)")
    ax.set_ylabel("utilisation (1 - bubble), %")
    ax.set_title("measured (solid) and simulated (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_utilisation: wrote {args.out}")


if __name__ == "__main__":
    main()
