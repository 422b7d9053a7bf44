#!/usr/bin/env python3
"""Draw a pipeline timeline from a tdpipe Chrome trace (--trace FILE): one row per stage (and
replica), forwards, backwards and updates as bars, forwards on an older weight version hatched.

usage: scripts/plot_trace.py trace.json -o timeline.png [--steps A:B]
       scripts/plot_trace.py trace.json --summary [--steps A:B]   (no plot, no matplotlib: per row,
       busy share, stale forwards, and idle time before forwards, backwards and updates)
       scripts/plot_trace.py trace.json --op-times [--steps A:B]  (no plot: each stage's mean compute
       time per op kind, each link's message time and where in a backward its input gradient left,
       key=value lines for build/dev/sim_replay;
       --cores C: the stages shared C cores, so print each op's work on a core of its own)
Needs matplotlib for the plot (pip install -r scripts/requirements.txt).
"""
import argparse
import json
import re
import sys

# op names as the trainer writes them: F1.3, F1.3@0 (stale forward), B1.3, BI1.3, BW1.3, U1
OP = re.compile(r"^(F|B|BI|BW|U)(\d+)(?:\.(\d+))?(?:@(\d+))?$")
COLOURS = {"F": "#4c72b0", "B": "#dd8452", "BI": "#dd8452", "BW": "#c44e52", "U": "#55a868"}


def read_trace(path):
    """[(replica, stage, kind, step, mb, stale, start_ms, dur_ms, compute, marks)] from a Chrome trace
    file; compute: (start_ms, dur_ms) of the op's compute inside its span, None in traces without it;
    marks: {"awaited", "arrived", "sent"} in ms, those of the op's messages the trace has (its input's
    wait began, a wait saw it in; its own message posted)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        sys.exit(f"plot_trace: {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        sys.exit(f"plot_trace: {path}: not JSON ({e})")
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        sys.exit(f"plot_trace: {path}: no traceEvents list (is it a tdpipe --trace file?)")
    ops = []
    for i, e in enumerate(events):
        m = OP.match(str(e.get("name", "")))
        if not m or e.get("ph") != "X":
            sys.exit(f"plot_trace: {path}: event {i} is not a tdpipe op ({e.get('name')!r})")
        kind, step, mb, ver = m.group(1), int(m.group(2)), m.group(3), m.group(4)
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        compute = None
        if "compute_ts" in args and "compute_dur" in args:
            compute = (float(args["compute_ts"]) / 1e3, float(args["compute_dur"]) / 1e3)
        marks = {k: float(args[k + "_ts"]) / 1e3 for k in ("awaited", "arrived", "sent") if k + "_ts" in args}
        ops.append((int(e["pid"]), int(e["tid"]), kind, step, int(mb) if mb else -1, ver is not None,
                    float(e["ts"]) / 1e3, float(e["dur"]) / 1e3, compute, marks))
    if not ops:
        sys.exit(f"plot_trace: {path}: the trace has no events")
    return ops


def summary(ops, steps):
    """Per row: ops, busy time, busy share, stale forwards, and the idle time just before each kind of
    op (what the stage was waiting for: an activation, a gradient, or its update's pipeline sum).
    With steps, only ops of those steps count, but each op's idle time is measured from the op
    before it whatever its step (stages interleave steps). busy_% = busy / (busy + idle)."""
    rows = sorted({(o[0], o[1]) for o in ops})
    print(f"# {len(ops)} ops, {len(rows)} rows" + (f", steps [{steps[0]}, {steps[1]})" if steps else ""))
    print(f"{'#replica':>8} {'stage':>5} {'ops':>6} {'busy_ms':>9} {'busy_%':>7} {'stale_F':>7} "
          f"{'wait_F_ms':>9} {'wait_B_ms':>9} {'wait_U_ms':>9}")
    for r in rows:
        mine = sorted((o for o in ops if (o[0], o[1]) == r), key=lambda o: o[6])
        gap = [0.0] + [max(0.0, o[6] - (p[6] + p[7])) for p, o in zip(mine, mine[1:])]
        picked = [(o, g) for o, g in zip(mine, gap) if in_steps(o[3], steps)]
        busy = sum(o[7] for o, _ in picked if o[2] != "U")
        stale = sum(1 for o, _ in picked if o[2] == "F" and o[5])
        wait = {"F": 0.0, "B": 0.0, "U": 0.0}
        for o, g in picked:
            wait["B" if o[2] in ("B", "BI", "BW") else o[2]] += g
        total = busy + sum(wait.values())
        print(f"{r[0]:>8} {r[1]:>5} {len(picked):>6} {busy:>9.3f} {100 * busy / total if total else 0:>7.1f} {stale:>7} "
              f"{wait['F']:>9.1f} {wait['B']:>9.1f} {wait['U']:>9.1f}")


def in_steps(step, steps):
    """Whether a step is in --steps A:B (A <= step < B; every step without --steps)."""
    return not steps or steps[0] <= step < steps[1]


def overlap(spans):
    """The spans' ends, sorted (edges), each end's place among them (index), and active[i]: the spans
    computing in [edges[i], edges[i + 1])."""
    edges = sorted({t for span in spans for t in span})
    index = {t: i for i, t in enumerate(edges)}
    active = [0] * len(edges)
    for a, b in spans:
        for i in range(index[a], index[b]):
            active[i] += 1
    return edges, index, active


def shared_work(spans, cores):
    """Each span's work on a dedicated core, when the spans' stages share `cores` cores: k spans
    computing at once each run at min(1, cores / k) of a core (processor sharing), so a span's work
    is the integral of that rate over it. cores 0: the span's length. The simulator (SimCost.cores)
    stretches op times by the inverse of the same rate."""
    if not cores:
        return [b - a for a, b in spans]
    edges, index, active = overlap(spans)
    work = []
    for a, b in spans:
        work.append(sum((edges[i + 1] - edges[i]) * min(1.0, cores / active[i]) for i in range(index[a], index[b])))
    return work


def at_once(spans, P):
    """The share of the time from the first span's start to the last one's end during which k = 0..P
    of the spans are computing at once (sim_replay --detail prints the same for its replay: with
    stages sharing cores, how much compute overlaps decides how much of a step counts as busy)."""
    edges, _, active = overlap(spans)
    share = [0.0] * (P + 1)
    for i in range(len(edges) - 1):
        share[min(active[i], P)] += edges[i + 1] - edges[i]
    total = edges[-1] - edges[0]
    return [x / total if total > 0 else 0.0 for x in share]


def op_times(ops, steps, cores=0):
    """Replica 0's mean compute time (ms) of each op kind on each stage, as key=value lines
    (f=, b=, bi=, bw=, u=: one figure per stage, comma-separated; at_once=: the share of the time k =
    0..P stages computed at once, over the F and B ops of those steps). A traced op spans its wait for its
    input too (a synchronous list receives inside the op); the trainer records the compute inside it.
    Traces without that record are estimated: compute = end - max(start, arrival), arrival being the
    end of what it waits for: F, the same micro-batch's F on the stage before; B or BI, its own F and
    the B or BI on the stage after; BW, its BI; U, every stage's last B or BW of its step (the clocks
    agree: every rank of one host reads the same monotonic clock). With cores, the stages share that
    many cores, and each op's time is its work on a core of its own (shared_work)."""
    mine = [o for o in ops if o[0] == 0]
    P = max(o[1] for o in mine) + 1
    end = {}   # (stage, 'F' | 'B' (input gradient out) | 'W' (weight gradient done), step, mb) -> end
    grads = {}  # (stage, step) -> last B/BW end
    for rep, s, kind, step, mb, stale, start, dur, compute, _ in mine:
        e = start + dur
        if kind == "F":
            end[(s, "F", step, mb)] = e
        if kind in ("B", "BI"):
            end[(s, "B", step, mb)] = e
        if kind in ("B", "BW"):
            end[(s, "W", step, mb)] = e
            grads[(s, step)] = max(grads.get((s, step), 0.0), e)
    spans = []  # each op's compute: [max(start, arrival), end]
    for rep, s, kind, step, mb, stale, start, dur, compute, _ in mine:
        if compute:
            spans.append((compute[0], compute[0] + compute[1]))
            continue
        if kind == "F":
            arrival = end.get((s - 1, "F", step, mb), 0.0) if s > 0 else 0.0
        elif kind in ("B", "BI"):
            arrival = max(end.get((s, "F", step, mb), 0.0), end.get((s + 1, "B", step, mb), 0.0) if s < P - 1 else 0.0)
        elif kind == "BW":
            arrival = end.get((s, "B", step, mb), 0.0)
        else:
            arrival = max(grads.get((q, step), 0.0) for q in range(P))
        spans.append((min(max(start, arrival), start + dur), start + dur))
    sums = {}
    for o, w in zip(mine, shared_work(spans, cores)):
        rep, s, kind, step = o[:4]
        if steps and not steps[0] <= step < steps[1]:
            continue
        t, n = sums.get((s, kind), (0.0, 0))
        sums[(s, kind)] = (t + w, n + 1)
    print(f"stages={P}")
    if cores:
        print(f"cores={cores}")
    for kind in ("F", "B", "BI", "BW", "U"):
        if all((s, kind) in sums for s in range(P)):
            print(f"{kind.lower()}=" + ",".join(f"{sums[(s, kind)][0] / sums[(s, kind)][1]:.4f}" for s in range(P)))
    picked = [sp for o, sp in zip(mine, spans) if o[2] != "U" and in_steps(o[3], steps)]
    if picked:
        print("at_once=" + ",".join(f"{x:.4f}" for x in at_once(picked, P)))
    marked = any(o[9] for o in mine)
    shares = b_send_shares(mine, P, steps) if marked else None
    if shares:
        print("b_send=" + ",".join(f"{x:.4f}" for x in shares))
    links = message_times(mine if marked else [span_marks(o) for o in mine], P, steps)
    if links:
        for d in ("f", "b"):
            print(f"msg_{d}=" + ",".join(f"{links[d][s][0]:.4f}" for s in range(P - 1)))
        print("msg_samples=" + ",".join(f"{links[d][s][1]}" for d in ("f", "b") for s in range(P - 1)))
        print(f"msg_from={'marks' if marked else 'spans'}")


def b_send_shares(mine, P, steps):
    """Per stage, the median share of a full backward's compute after which its input gradient left
    (sim_replay --b-send; the trainer sends it between the input- and the weight-gradient halves):
    (sent - compute start) / compute time over the B ops that sent one. Stage 0 sends none: 1 there,
    unused. None when a later stage has no such op (zero-bubble's split ops, or no marks)."""
    if P < 2:
        return None
    got = {s: [] for s in range(1, P)}
    for rep, s, kind, step, mb, stale, start, dur, compute, marks in mine:
        if kind == "B" and s > 0 and compute and compute[1] > 0 and "sent" in marks and in_steps(step, steps):
            got[s].append(min(1.0, max(0.0, (marks["sent"] - compute[0]) / compute[1])))
    if any(not v for v in got.values()):
        return None
    return [1.0] + [sorted(got[s])[len(got[s]) // 2] for s in range(1, P)]


SPAN_WAITED_MS = 0.2  # an op whose compute began this long after its span did was waiting for its input


def span_marks(o):
    """The marks estimated from an op's span and compute, for traces written before the trainer
    marked messages: its input awaited from the span's start and arrived at its compute's start
    where that came SPAN_WAITED_MS or more later; its own message sent at the span's end (F) or the
    compute's end (B, BI: the input gradient in fact leaves mid-compute, before the weight gradient)."""
    rep, s, kind, step, mb, stale, start, dur, compute, _ = o
    if not compute:
        return o
    marks = {"sent": start + dur if kind == "F" else compute[0] + compute[1]}
    if compute[0] - start >= SPAN_WAITED_MS:
        marks.update(awaited=start, arrived=compute[0])
    return o[:9] + (marks,)


def message_times(mine, P, steps):
    """Each link's message time (ms) both ways, for the simulator's links (a message holds its link
    for its time, in the order sent): {"f": [(median ms, samples)] (P - 1), "b": the same}, or None
    when the trace lacks the marks or no link has a sample. Activations go from F on stage s to F on
    s + 1, input gradients from B or BI on s + 1 to B or BI on s (the same step and micro-batch). A
    message is timed where the receiver was waiting when it came in (its wait saw it arrive): from
    the latest of its sending, the start of that wait and the previous message's arrival on the link
    (it queued behind that one) to its arrival. A link and direction with no such message gets 0 ms
    from 0 samples (TD-Pipe's window often hides one direction entirely)."""
    if P < 2:
        return None
    got = {}  # ("f" | "b", stage, step, mb) -> the marks of the op that sends and receives that way
    for rep, s, kind, step, mb, stale, start, dur, compute, marks in mine:
        if kind in ("F", "B", "BI"):
            got[("f" if kind == "F" else "b", s, step, mb)] = marks
    out = {"f": [], "b": []}
    for d in ("f", "b"):
        for s in range(P - 1):
            src, dst = (s, s + 1) if d == "f" else (s + 1, s)
            msgs = []  # (sent, awaited, arrived, step) of each message on the link
            for (kd, ks, step, mb), m in got.items():
                if kd != d or ks != src or "sent" not in m:
                    continue
                r = got.get((d, dst, step, mb), {})
                msgs.append((m["sent"], r.get("awaited", 0.0), r.get("arrived", 0.0), step))
            msgs.sort()
            samples, prev = [], 0.0
            for sent, awaited, arrived, step in msgs:
                if arrived > 0 and in_steps(step, steps):
                    samples.append(max(0.0, arrived - max(sent, awaited, prev)))
                prev = arrived if arrived > 0 else max(prev, sent)
            samples.sort()
            out[d].append((samples[len(samples) // 2], len(samples)) if samples else (0.0, 0))
    # a link and direction where no receiver ever waited hid all of its messages' time: 0 there (its
    # count says so), unless nothing was measured anywhere (then there is nothing to give the replay)
    return out if any(n for d in out for _, n in out[d]) else None


def plot(ops, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        sys.exit("plot_trace: needs matplotlib (pip install -r scripts/requirements.txt); --summary works without")
    rows = sorted({(o[0], o[1]) for o in ops})
    y = {r: i for i, r in enumerate(rows)}
    t0 = min(o[6] for o in ops)
    fig, ax = plt.subplots(figsize=(14, 0.5 * len(rows) + 1.5))
    for rep, stage, kind, step, mb, stale, start, dur, _, _ in ops:
        ax.broken_barh([(start - t0, max(dur, 1e-3))], (y[(rep, stage)] - 0.4, 0.8), facecolors=COLOURS[kind],
                       edgecolor="white", linewidth=0.3, hatch="///" if stale else None)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"r{r} s{s}" if len({x[0] for x in rows}) > 1 else f"stage {s}" for r, s in rows])
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    kinds = {o[2] for o in ops}
    legend = [(k, Patch(color=COLOURS[k], label=name)) for k, name in
              [("F", "forward"), ("B", "backward"), ("BI", "input-gradient backward"), ("BW", "weight-gradient backward"),
               ("U", "update")] if k in kinds]
    handles = [h for _, h in legend]
    if any(o[5] for o in ops):
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="forward on an older version"))
    # above the axes: below them it sat on the "ms" label of a one-row timeline
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=120, bbox_inches="tight")
    print(f"plot_trace: wrote {out}")


def main():
    ap = argparse.ArgumentParser(description="pipeline timeline from a tdpipe --trace file")
    ap.add_argument("trace")
    ap.add_argument("-o", "--out", help="image to write (png, svg, pdf)")
    ap.add_argument("--steps", help="only steps A..B-1, as A:B (counted from 0: the step line's step k is k-1 here)")
    ap.add_argument("--summary", action="store_true", help="print per-row busy share instead of plotting")
    ap.add_argument("--op-times", action="store_true", help="print each stage's mean compute time per op kind (ms)")
    ap.add_argument("--cores", type=int, default=0,
                    help="with --op-times: the stages shared this many cores; print each op's work on a core of its own")
    args = ap.parse_args()
    steps = None
    if args.steps:
        m = re.match(r"^(\d+):(\d+)$", args.steps)
        if not m or int(m.group(1)) >= int(m.group(2)):
            sys.exit(f"plot_trace: --steps {args.steps}: expected A:B with A < B")
        steps = (int(m.group(1)), int(m.group(2)))
    ops = read_trace(args.trace)
    if steps and not any(steps[0] <= o[3] < steps[1] for o in ops):
        sys.exit(f"plot_trace: no ops of steps [{steps[0]}, {steps[1]})")
    if args.op_times:
        if args.cores < 0:
            sys.exit(f"plot_trace: --cores {args.cores}: expected a number of cores >= 0")
        op_times(ops, steps, args.cores)
    elif args.summary:
        summary(ops, steps)
    elif args.out:
        plot([o for o in ops if in_steps(o[3], steps)], args.out)
    else:
        sys.exit("plot_trace: say where the image goes (-o FILE) or ask for --summary")


if __name__ == "__main__":
    main()
