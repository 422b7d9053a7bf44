#!/usr/bin/env bash
# The plotting scripts: each reads what the trainer or the benchmark writes (a --trace file, a
# log.jsonl, bench_schedules.sh's table; the last as a committed fixture, since the benchmark takes
# minutes) and refuses what it cannot read. Their --summary modes need no matplotlib; the images
# are checked where matplotlib is installed (said so otherwise: nothing to count).
source tests/lib.sh
PY=python3
command -v $PY >/dev/null || { echo "FAIL python3 not found"; echo "0 passed, 1 failed"; exit 1; }

check "a short run with --trace and a log" $BIN -e d2 -x 4 -v 2 -s 0 --micro-batches 2 --trace "$TMP/trace.json" -o "$TMP/run"
check "plot_trace --summary reads it" $PY scripts/plot_trace.py "$TMP/trace.json" --summary
cp "$TMP/out" "$TMP/summary.txt"
check "  one row, 4 steps x (2 F + 2 B + 1 U) = 20 ops" grep -q "^# 20 ops, 1 rows" "$TMP/summary.txt"
check "  with what the stage waited for" grep -q "wait_F_ms wait_B_ms wait_U_ms" "$TMP/summary.txt"
check "plot_trace --summary --steps 1:3 counts those steps' ops" $PY scripts/plot_trace.py "$TMP/trace.json" --summary --steps 1:3
check "  2 steps x 5 ops" grep -Eq "^ +0 +0 +10 " "$TMP/out"
check "  every op's compute lies inside its traced span" $PY -c "
import json, sys
ev = json.load(open('$TMP/trace.json'))['traceEvents']
bad = [e['name'] for e in ev if not (e['ts'] - 1e-3 <= e['args']['compute_ts'] and
       e['args']['compute_ts'] + e['args']['compute_dur'] <= e['ts'] + e['dur'] + 1e-3 and e['args']['compute_dur'] >= 0)]
sys.exit(f'outside their spans: {bad[:5]}' if bad else 0)"
# trace.h: times from the earliest start: the first op at 0, none before it (a t0 taken as the latest
# start instead put every op but the last at negative times, which the relative checks above never see)
check "  the trace's times start at the earliest op: the least ts is 0, none negative" $PY -c "
import json, sys
ts = [e['ts'] for e in json.load(open('$TMP/trace.json'))['traceEvents']]
sys.exit(0 if min(ts) == 0 else f'least ts {min(ts)}')"
check "plot_trace --op-times gives the simulator each op kind's compute" $PY scripts/plot_trace.py "$TMP/trace.json" --op-times
check "  stages=1, f=, b=, u=" bash -c "grep -qx 'stages=1' '$TMP/out' && grep -Eq '^f=[0-9.]+$' '$TMP/out' && grep -Eq '^b=[0-9.]+$' '$TMP/out' && grep -Eq '^u=[0-9.]+$' '$TMP/out'"
# two stages computing [0, 2] ms at once, then stage 1 alone [2, 3]: on one shared core the first two
# each did 1 ms of work, the last 1 ms (processor sharing); on a core each, 2 and 1
cat > "$TMP/shared.json" <<'JSON'
{"traceEvents": [
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 2000, "args": {"compute_ts": 0, "compute_dur": 2000}},
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 2000, "args": {"compute_ts": 0, "compute_dur": 2000}},
{"name": "F1.1", "ph": "X", "pid": 0, "tid": 1, "ts": 2000, "dur": 1000, "args": {"compute_ts": 2000, "compute_dur": 1000}}
]}
JSON
check "plot_trace --op-times --cores 1: the work of ops that shared a core" $PY scripts/plot_trace.py "$TMP/shared.json" --op-times --cores 1
check "  by hand: f=1.0000,1.0000" grep -qx "f=1.0000,1.0000" "$TMP/out"
check "plot_trace --op-times without --cores: their time" $PY scripts/plot_trace.py "$TMP/shared.json" --op-times
cp "$TMP/out" "$TMP/shared.ops"
check "  by hand: f=2.0000,1.5000" grep -qx "f=2.0000,1.5000" "$TMP/shared.ops"
check "  and how much compute overlapped: two stages [0, 2], one [2, 3]: at_once=0.0000,0.3333,0.6667" grep -qx "at_once=0.0000,0.3333,0.6667" "$TMP/shared.ops"
# each link's message time (sim_replay --msg-f, --msg-b), by hand: on 0 -> 1 four activations; the
# first waited for from 0.5 came in at 3.0 (sent at 1.0: 2.0 ms), the second at 4.0 (sent at 1.5,
# awaited from 3.2, queued behind the first until 3.0: 0.8), the third was in before any wait (no
# sample), the fourth at 6.0 (awaited from 4.5: 1.5); median 1.5. One gradient: 7.25 - 7.0 = 0.25.
cat > "$TMP/msgs.json" <<'JSON'
{"traceEvents": [
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1000, "args": {"compute_ts": 0, "compute_dur": 900, "sent_ts": 1000}},
{"name": "F1.1", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 500, "args": {"compute_ts": 1000, "compute_dur": 400, "sent_ts": 1500}},
{"name": "F1.2", "ph": "X", "pid": 0, "tid": 0, "ts": 1500, "dur": 500, "args": {"compute_ts": 1500, "compute_dur": 400, "sent_ts": 2000}},
{"name": "F1.3", "ph": "X", "pid": 0, "tid": 0, "ts": 2000, "dur": 500, "args": {"compute_ts": 2000, "compute_dur": 400, "sent_ts": 2500}},
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 500, "dur": 3200, "args": {"compute_ts": 3000, "compute_dur": 200, "awaited_ts": 500, "arrived_ts": 3000}},
{"name": "F1.1", "ph": "X", "pid": 0, "tid": 1, "ts": 3200, "dur": 1000, "args": {"compute_ts": 4000, "compute_dur": 200, "awaited_ts": 3200, "arrived_ts": 4000}},
{"name": "F1.2", "ph": "X", "pid": 0, "tid": 1, "ts": 4200, "dur": 300, "args": {"compute_ts": 4200, "compute_dur": 300}},
{"name": "F1.3", "ph": "X", "pid": 0, "tid": 1, "ts": 4500, "dur": 1700, "args": {"compute_ts": 6000, "compute_dur": 200, "awaited_ts": 4500, "arrived_ts": 6000}},
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 6200, "dur": 800, "args": {"compute_ts": 6200, "compute_dur": 800, "sent_ts": 7000}},
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 6500, "dur": 1000, "args": {"compute_ts": 7250, "compute_dur": 250, "awaited_ts": 6500, "arrived_ts": 7250}}
]}
JSON
check "plot_trace --op-times measures each link's message time" $PY scripts/plot_trace.py "$TMP/msgs.json" --op-times
check "  by hand: msg_f=1.5000, msg_b=0.2500 from 3 and 1 samples, from the marks" bash -c "grep -qx 'msg_f=1.5000' '$TMP/out' && grep -qx 'msg_b=0.2500' '$TMP/out' && grep -qx 'msg_samples=3,1' '$TMP/out' && grep -qx 'msg_from=marks' '$TMP/out'"
# a direction where no receiver waited (here no gradient at all): 0 ms from 0 samples, the other kept
$PY -c "import json; t = json.load(open('$TMP/msgs.json')); t['traceEvents'] = [e for e in t['traceEvents'] if e['name'][0] != 'B']; json.dump(t, open('$TMP/msgs_f.json', 'w'))"
check "plot_trace --op-times: a direction no receiver waited for" $PY scripts/plot_trace.py "$TMP/msgs_f.json" --op-times
check "  msg_f=1.5000 from 3 samples, msg_b=0.0000 from 0" bash -c "grep -qx 'msg_f=1.5000' '$TMP/out' && grep -qx 'msg_b=0.0000' '$TMP/out' && grep -qx 'msg_samples=3,0' '$TMP/out'"
# the replay over them, by hand: GPipe, P = 2, M = 1: F 1 ms, B 2 ms a stage; a step is F, F, B, B
# = 6 ms, and with 0.5 ms each way on the link 7 ms
R=build/dev/sim_replay
check "sim_replay: GPipe P = 2 M = 1 without messages: 6 ms a step" bash -c "$R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 | grep -qx step_ms=6.0000"
check "  --detail 1: each stage idle half of each step, never both computing" bash -c "$R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --detail 1 > '$TMP/d.txt' && grep -qx bubble_per_stage=0.5000,0.5000 '$TMP/d.txt' && grep -qx at_once=0.0000,1.0000,0.0000 '$TMP/d.txt'"
check "  with --msg-f 0.5 --msg-b 0.5: 7 ms" bash -c "$R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --msg-f 0.5 --msg-b 0.5 | grep -qx step_ms=7.0000"
refuse "sim_replay refuses --msg-f without --msg-b" "come together" $R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --msg-f 0.5
refuse "sim_replay refuses a message time per stage instead of per link" "expected 1 times" $R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --msg-f 0.5,1 --msg-b 1
refuse "sim_replay refuses message times at P = 1" "need --stages >= 2" $R --schedule gpipe --stages 1 --micro-batches 1 --steps 4 --f 1 --b 2 --msg-f 0.5 --msg-b 1
refuse "sim_replay refuses a negative message time" "expected 1 times >= 0" $R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --msg-f -1 --msg-b 1
# where in a backward its input gradient left (sim_replay --b-send): stage 1's three B ops computed
# 800 us each and sent at 200, 400 and 600 us into it: shares 0.25, 0.5, 0.75, median 0.5; stage 0
# sends none (1, unused). The replay by hand: the 7 ms GPipe step above with B1's gradient leaving
# after 1 of its 2 ms: 6 ms
cat > "$TMP/bsend.json" <<'JSON'
{"traceEvents": [
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 800, "args": {"compute_ts": 0, "compute_dur": 800, "sent_ts": 200}},
{"name": "B1.1", "ph": "X", "pid": 0, "tid": 1, "ts": 1000, "dur": 800, "args": {"compute_ts": 1000, "compute_dur": 800, "sent_ts": 1400}},
{"name": "B1.2", "ph": "X", "pid": 0, "tid": 1, "ts": 2000, "dur": 800, "args": {"compute_ts": 2000, "compute_dur": 800, "sent_ts": 2600}},
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 900, "dur": 500, "args": {"compute_ts": 900, "compute_dur": 500}}
]}
JSON
check "plot_trace --op-times measures where B's input gradient left" $PY scripts/plot_trace.py "$TMP/bsend.json" --op-times
check "  by hand: b_send=1.0000,0.5000" grep -qx "b_send=1.0000,0.5000" "$TMP/out"
check "sim_replay --b-send 1,0.5: the 7 ms step in 6" bash -c "$R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --msg-f 0.5 --msg-b 0.5 --b-send 1,0.5 | grep -qx step_ms=6.0000"
refuse "sim_replay refuses a share of B above 1" "share 1.5 is above 1" $R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --b-send 1,1.5
refuse "sim_replay refuses a share per link instead of per stage" "expected 2 shares of B's time" $R --schedule gpipe --stages 2 --micro-batches 1 --steps 4 --f 1,1 --b 2,2 --b-send 0.5
check "  no message times where no receiver waited for one" bash -c "$PY scripts/plot_trace.py '$TMP/shared.json' --op-times | grep -c msg_ | grep -qx 0"
# a trace from before the marks: estimated from the spans. Stage 1's F waited from 0 until its compute
# at 2.5 ms for an activation stage 0's F sent at its end, 1.0: 1.5 ms; stage 0's B from 1.0 until 4.5
# for the gradient stage 1's B sent at its compute's end, 4.0: 0.5 ms
cat > "$TMP/old.json" <<'JSON'
{"traceEvents": [
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1000, "args": {"compute_ts": 0, "compute_dur": 900}},
{"name": "F1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 3000, "args": {"compute_ts": 2500, "compute_dur": 500}},
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 1, "ts": 3000, "dur": 1000, "args": {"compute_ts": 3000, "compute_dur": 1000}},
{"name": "B1.0", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 4000, "args": {"compute_ts": 4500, "compute_dur": 500}}
]}
JSON
check "plot_trace --op-times estimates message times from the spans of a trace without marks" $PY scripts/plot_trace.py "$TMP/old.json" --op-times
check "  by hand: msg_f=1.5000, msg_b=0.5000, and says so" bash -c "grep -qx 'msg_f=1.5000' '$TMP/out' && grep -qx 'msg_b=0.5000' '$TMP/out' && grep -qx 'msg_from=spans' '$TMP/out'"
check "  and no b_send= (where B's gradient left is not in its spans)" bash -c "! grep -q '^b_send=' '$TMP/out'"
refuse "plot_trace refuses --cores -1" "expected a number of cores >= 0" $PY scripts/plot_trace.py "$TMP/shared.json" --op-times --cores -1
echo '{"traceEvents": [{"name": "allreduce", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 1}]}' > "$TMP/foreign.json"
refuse "plot_trace refuses a trace that is not tdpipe's" "event 0 is not a tdpipe op" $PY scripts/plot_trace.py "$TMP/foreign.json" --summary
echo '{"traceEvents": [' > "$TMP/cut.json"
refuse "plot_trace refuses a truncated file" "not JSON" $PY scripts/plot_trace.py "$TMP/cut.json" --summary
refuse "plot_trace refuses a missing file" "No such file" $PY scripts/plot_trace.py "$TMP/none.json" --summary
refuse "plot_trace refuses a bad --steps" "expected A:B with A < B" $PY scripts/plot_trace.py "$TMP/trace.json" -o "$TMP/t.png" --steps 3:1

check "plot_utilisation --summary reads bench_schedules' table" $PY scripts/plot_utilisation.py tests/fixtures/bench_schedules.txt --summary
check "  every schedule and window, measured and simulated" grep -q "^tdpipe W=16 .*beta 0.3: 94.0% (sim 95.3%)" "$TMP/out"
head -3 tests/fixtures/bench_schedules.txt > "$TMP/noheader.txt"
refuse "plot_utilisation refuses a file without the table's header" "no bench_schedules header" $PY scripts/plot_utilisation.py "$TMP/noheader.txt" --summary
sed 's/^tdpipe      16   0.3      94.0/tdpipe      16   0.3      x/' tests/fixtures/bench_schedules.txt > "$TMP/bad.txt"
refuse "plot_utilisation refuses a row whose figures are not numbers" "must be numbers" $PY scripts/plot_utilisation.py "$TMP/bad.txt" --summary

if $PY -c "import matplotlib" 2>/dev/null; then
    png() { [ -s "$1" ] && [ "$(head -c 4 "$1" | tail -c 3)" = "PNG" ]; }
    check "plot_trace draws the timeline" $PY scripts/plot_trace.py "$TMP/trace.json" -o "$TMP/timeline.png"
    check "  a PNG" png "$TMP/timeline.png"
    check "plot_utilisation draws utilisation against beta" $PY scripts/plot_utilisation.py tests/fixtures/bench_schedules.txt -o "$TMP/util.png"
    check "  a PNG" png "$TMP/util.png"
    check "plot_log draws the loss curves" $PY scripts/plot_log.py "$TMP/run/log.jsonl" -o "$TMP/loss.png"
    check "  a PNG" png "$TMP/loss.png"
else
    echo "(matplotlib is not installed: the images are not drawn here; pip install -r scripts/requirements.txt)"
fi
finish
