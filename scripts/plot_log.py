#!/usr/bin/env python3
"""Plot train and validation loss against step from one or more tdpipe log.jsonl files.

usage: scripts/plot_log.py out/log.jsonl [other/log.jsonl ...] -o loss.png [--floor 1.213008]
Needs matplotlib (pip install -r scripts/requirements.txt).
"""
import argparse
import json
import os
import sys


def read_log(path):
    steps, loss, vsteps, vloss = [], [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not a JSON object ({e})")
            # step lines carry "loss", validation lines "val_loss"; both carry "step"
            if "step" not in rec or ("loss" not in rec and "val_loss" not in rec):
                sys.exit(f"{path}:{n}: a log line needs 'step' and 'loss' or 'val_loss'")
            if "loss" in rec:
                steps.append(rec["step"])
                loss.append(rec["loss"])
            if "val_loss" in rec:
                vsteps.append(rec["step"])
                vloss.append(rec["val_loss"])
    return steps, loss, vsteps, vloss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="log.jsonl files")
    ap.add_argument("-o", "--output", default="loss.png", help="PNG to write (default loss.png)")
    ap.add_argument("--floor", type=float, help="draw a horizontal line at this loss (e.g. the entropy floor)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        sys.exit("plot_log: needs matplotlib (pip install -r scripts/requirements.txt)")

    fig, ax = plt.subplots(figsize=(8, 5))
    for path in args.logs:
        if not os.path.exists(path):
            sys.exit(f"{path}: no such file")
        steps, loss, vsteps, vloss = read_log(path)
        label = os.path.basename(os.path.dirname(os.path.abspath(path))) or path
        line, = ax.plot(steps, loss, lw=1, alpha=0.7, label=f"{label} train")
        if vsteps:
            ax.plot(vsteps, vloss, "o-", color=line.get_color(), ms=3, label=f"{label} val")
    if args.floor is not None:
        ax.axhline(args.floor, color="k", ls="--", lw=1, label=f"floor {args.floor:g}")
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # (a short run got ticks at 1.5, 2.5)
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
