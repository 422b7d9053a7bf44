#!/usr/bin/env python3
# One row of bench_dp_sync.sh's part 2: a data-parallel run's exposed gradient communication, from
# its log.jsonl and its --trace. usage: dp_exposure.py LOG TRACE NAME D MODE ALONE_MS
import json, statistics, sys
USAGE = "usage: scripts/dp_exposure.py LOG TRACE NAME D MODE ALONE_MS   (one row of scripts/bench_dp_sync.sh's part 2)"
if sys.argv[1:2] in (["-h"], ["--help"]):
    print(USAGE)
    sys.exit(0)
if len(sys.argv) != 7:  # called by scripts/bench_dp_sync.sh, which gives all six
    sys.exit(USAGE)
rows = [json.loads(l) for l in open(sys.argv[1]) if '"dp_bytes"' in l][1:]  # the first step warms up
name, D, mode, alone = sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6])
mean = lambda k, i=0: sum(r[k][i] if isinstance(r[k], list) else r[k] for r in rows) / len(rows)
wait, span, ms = mean('dp_wait_ms'), mean('dp_span_ms'), mean('ms')
hidden = 100 * (1 - wait / alone) if alone == alone and alone > 0 else float('nan')
# Per step (after the first): exposed = stage 0's wait for the average after its last backward, on
# replica 0 (log.jsonl's dp_wait_ms); from the trace (one clock for the ranks of a host), skew = how
# much later the last replica's last backward ended than replica 0's; late = exposed - skew (at least
# 0): the part of the wait that is the exchange itself, not a slower replica still computing its
# backward (load skew, which four ranks on two cores make large)
cend = {}  # (step, replica) -> compute end of the step's last backward on stage 0
for e in json.load(open(sys.argv[2]))["traceEvents"]:
    if e["tid"] != 0 or e["name"][0] != "B": continue
    key = (int(e["name"].lstrip("BIW").split(".")[0]) + 1, e["pid"])  # log.jsonl's steps are 1-based
    cend[key] = max(cend.get(key, 0.0), e["args"]["compute_ts"] + e["args"]["compute_dur"])
exp, late = [], []
for r in rows:
    w = r['dp_wait_ms'][0] if isinstance(r['dp_wait_ms'], list) else r['dp_wait_ms']
    skew = (max(cend[(r['step'], q)] for q in range(int(D))) - cend[(r['step'], 0)]) / 1e3
    exp.append(w)
    late.append(max(0.0, w - skew))
med_exp, med_late = statistics.median(exp), statistics.median(late)
ok = alone == alone and alone > 0
hid_med, hid_late = (100 * (1 - med_exp / alone), 100 * (1 - med_late / alone)) if ok else (float('nan'), float('nan'))
print(f"{name:<30s} {D:>2s} {mode:<14s} {ms:10.1f} {wait:10.2f} {span:10.2f} {alone:10.2f} {hidden:9.1f} {med_exp:9.2f} {med_late:9.2f} {hid_med:9.1f} {hid_late:10.1f} {mean('dp_bytes'):8.3g}")
