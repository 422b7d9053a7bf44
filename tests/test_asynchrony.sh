#!/usr/bin/env bash
# TD-Pipe's asynchrony made safe: staleness compensation (none is bitwise today's run; each method
# deterministic and bitwise equal at P = 1, 2, 4 with and without jitter; prediction at W = 0 is 1F1B),
# per-stage windows, the drift monitor (cosine 1 at W = 0, below 1 and logged at W > 0), the gradient
# noise scale, the guard (an injected NaN rolls back, halves W, never reaches a checkpoint or
# model.bin; a resume afterwards is bitwise the unbroken run; the give-up path exits non-zero with the
# last checkpoint intact), --aew auto's simulated choice, and every refusal of the new flags.
source tests/lib.sh
use_mpi asynchrony
same_run() { [ "$(losses "$1" | wc -l)" -ge 1 ] && diff <(losses "$1") <(losses "$2") >/dev/null && cmp -s "$1/model.bin" "$2/model.bin"; }
S="-e d4 -b 2 -t 16 -x 16 -v 0 -s 0 --micro-batches 4 --schedule tdpipe"

# --- compensation: off is today's run; each method the same at every P, jitter or not
check "tdpipe W = 4, no --stale-comp" $BIN $S --aew 4 -o "$TMP/plain"
cp "$TMP/out" "$TMP/plain.txt"
check "  P = 1 with a window: the step lines show the staleness (ceil(4 / 4) = 1)" grep -q "^step    16/16 .* | stale 1 | eta" "$TMP/plain.txt"
check "tdpipe W = 4 --grad-cache 8: a cap, not a size (the ring takes the 2 slots it needs)" $BIN $S --aew 4 --grad-cache 8 -o "$TMP/gc8"
check "  the end table's grad ring: 2" bash -c "awk '/grad ring/ { getline; print \$(NF-2) }' '$TMP/out' | grep -qx 2"
check "  and the run is bitwise the one without it" same_run "$TMP/plain" "$TMP/gc8"
check "tdpipe W = 4, --stale-comp none" $BIN $S --aew 4 --stale-comp none -o "$TMP/none"
check "  none is bitwise the run without the flag" same_run "$TMP/plain" "$TMP/none"
check "--stale-comp predict at W = 0 (nothing stale)" $BIN $S --aew 0 --stale-comp predict -o "$TMP/p0"
check "  it holds no weight stash (it held one that no micro-batch could use)" test "$(end_holds "$TMP/out")" = "0:1,0,1 "
check "1f1b" $BIN ${S/--schedule tdpipe/--schedule 1f1b} -o "$TMP/f1b"
check "  prediction with no stale micro-batch is 1F1B, bitwise" same_run "$TMP/p0" "$TMP/f1b"
for c in predict dcasgd lr; do
    check "--stale-comp $c, W = 4, P = 1" $BIN $S --aew 4 --stale-comp $c --dc-lambda 300 -o "$TMP/${c}1"
    differs() { ! cmp -s "$TMP/${c}1/model.bin" "$TMP/plain/model.bin"; }
    check "  $c changes the run" differs
    for PJ in "2 0" "4 0" "4 0.3"; do
        set -- $PJ
        check "--stale-comp $c, P = $1, jitter $2: bitwise the P = 1 run" \
            bash -c "$MPI -np $1 $BIN $S --aew 4 --stale-comp $c --dc-lambda 300 --stages $1 --jitter $2 -o '$TMP/${c}$1j$2' >/dev/null 2>&1"
        check "  losses and model equal" same_run "$TMP/${c}$1j$2" "$TMP/${c}1"
    done
done
# combined methods (tests/test_stale.c holds each against the method written out): the same at every P
for c in predict+lr predict+dcasgd; do
    check "--stale-comp $c, W = 8 (two updates stale), P = 1" $BIN $S --aew 8 --stale-comp $c --dc-lambda 300 -o "$TMP/${c}w8"
    check "--stale-comp predict, W = 8, P = 1" $BIN $S --aew 8 --stale-comp predict -o "$TMP/pw8"
    differs8() { ! cmp -s "$TMP/${c}w8/model.bin" "$TMP/pw8/model.bin"; }
    check "  $c is not predict alone there" differs8
    check "--stale-comp $c, W = 8, P = 2, jitter 0.3: bitwise the P = 1 run" \
        bash -c "$MPI -np 2 $BIN $S --aew 8 --stale-comp $c --dc-lambda 300 --stages 2 --jitter 0.3 -o '$TMP/${c}w8p2' >/dev/null 2>&1"
    check "  losses and model equal" same_run "$TMP/${c}w8p2" "$TMP/${c}w8"
done
# second-order prediction (the default) against first order, and its trajectory across a resume
check "--stale-comp predict --predict-order 1, W = 8, P = 1" $BIN $S --aew 8 --stale-comp predict --predict-order 1 -o "$TMP/po1"
differs_o1() { ! cmp -s "$TMP/po1/model.bin" "$TMP/pw8/model.bin"; }
check "  first order is not the default second order" differs_o1
check "--predict-order 1, W = 8, P = 2, jitter 0.3: bitwise the P = 1 run" \
    bash -c "$MPI -np 2 $BIN $S --aew 8 --stale-comp predict --predict-order 1 --stages 2 --jitter 0.3 -o '$TMP/po1p2' >/dev/null 2>&1"
check "  losses and model equal" same_run "$TMP/po1p2" "$TMP/po1"
check "--stale-comp predict+lr, W = 8, a checkpoint at step 8" $BIN $S --aew 8 --stale-comp predict+lr -n 8 -o "$TMP/prc"
mkdir -p "$TMP/prr" && cp "$TMP/prc/ckpt_00000008.tdck" "$TMP/prr/"
check "  resumed from it" $BIN $S --aew 8 --stale-comp predict+lr -n 8 -y 1 -o "$TMP/prr"
tail_same_pr() { diff <(losses "$TMP/prc" | tail -8) <(losses "$TMP/prr") >/dev/null && cmp -s "$TMP/prc/model.bin" "$TMP/prr/model.bin"; }
check "  steps 9..16 and the model bitwise the unbroken run's (the trajectory starts afresh at each chunk)" tail_same_pr
check "--stale-comp lr+predict names the same method" $BIN $S --aew 8 --stale-comp lr+predict -o "$TMP/lpw8"
check "  bitwise predict+lr" same_run "$TMP/lpw8" "$TMP/predict+lrw8"
check "--stale-comp predict through cpu-staged's backend, P = 2" $MPI -np 2 $BIN $S --aew 4 --stale-comp predict --stages 2 --device cpu-staged -o "$TMP/pst"
check "  bitwise the CPU's" same_run "$TMP/pst" "$TMP/predict1"
check "--stale-comp dcasgd through cpu-staged's backend, P = 2" $MPI -np 2 $BIN $S --aew 4 --stale-comp dcasgd --dc-lambda 300 --stages 2 --device cpu-staged -o "$TMP/dst"
check "  bitwise the CPU's" same_run "$TMP/dst" "$TMP/dcasgd1"

# --- a window per stage: the same windows as one W are that W; deterministic under jitter
P4="$S --stages 4"
check "--aew 2,2,2,2 at P = 4" $MPI -np 4 $BIN $P4 --aew 2,2,2,2 -o "$TMP/w2222"
check "--aew 2 at P = 4" $MPI -np 4 $BIN $P4 --aew 2 -o "$TMP/w2"
check "  bitwise equal" same_run "$TMP/w2222" "$TMP/w2"
check "--aew 6,4,2,0 at P = 4" $MPI -np 4 $BIN $P4 --aew 6,4,2,0 -o "$TMP/wl"
cp "$TMP/out" "$TMP/wl.txt" # (its end table: what each stage allocated)
# the memory plan takes each stage's own window: --print-schedule's table is what that run allocated
# (stage 3, at W 0, holds no stash and one ring slot; planned at the widest window it had 2 and 3)
check "  --print-schedule of it: each stage's own window's slots, stashes and ring" bash -c "$BIN $P4 --aew 6,4,2,0 --print-schedule > '$TMP/wl_plan.txt'"
check "  what the run allocated, stage by stage" test "$(plan_holds "$TMP/wl_plan.txt")" = "$(end_holds "$TMP/wl.txt")"
check "  stage 3 (W 0): no stash, one ring slot" grep -Eq "^3 +2 +0 +1$" "$TMP/wl_plan.txt"
check "--aew 6,4,2,0 at P = 4 with jitter 0.3" $MPI -np 4 $BIN $P4 --aew 6,4,2,0 --jitter 0.3 -o "$TMP/wlj"
check "  bitwise equal" same_run "$TMP/wl" "$TMP/wlj"
# across P: each window applies to its stage's layers, so the same window per layer at another P is
# the same run (P = 2 with 2 layers a stage at 4,2 against P = 4 at 4,4,2,2), and not the uniform W
check "--aew 4,4,2,2 at P = 4" $MPI -np 4 $BIN $P4 --aew 4,4,2,2 -o "$TMP/w4422"
check "--aew 4,2 at P = 2, --partition 2,2 (the same window per layer)" $MPI -np 2 $BIN $S --stages 2 --partition 2,2 --aew 4,2 -o "$TMP/w42"
check "  bitwise equal" same_run "$TMP/w4422" "$TMP/w42"
check "  and neither --aew 2's run nor --aew 4's (each stage ran its own window)" \
    bash -c "! cmp -s '$TMP/w42/model.bin' '$TMP/w2/model.bin' && ! cmp -s '$TMP/w42/model.bin' '$TMP/plain/model.bin'"
# windows that differ make the split part of the result (each W applies to its stage's layers), so
# --partition auto takes the FLOP model there: before, d3 at P = 2 with --aew 3,0 split 1,2 or 2,1 by
# the timed passes, and the same command gave one of two models from run to run
W3="-e d3 -b 1 -t 8 -x 6 -v 0 -s 0 --micro-batches 3 --schedule tdpipe --stages 2 --aew 3,0"
check "--aew 3,0 at P = 2, d3, --partition auto" $MPI -np 2 $BIN $W3 -o "$TMP/wdauto"
check "  it says auto took the FLOP model" grep -q "partition (auto: the FLOP model, not timed passes, as the per-stage windows --aew 3,0 make the results depend on the split" "$TMP/out"
check "--aew 3,0 at P = 2, d3, --partition model" $MPI -np 2 $BIN $W3 --partition model -o "$TMP/wdmodel"
check "  bitwise equal (the same split on every run)" same_run "$TMP/wdauto" "$TMP/wdmodel"
check "--aew 2,2 at P = 2 (one window): auto still times its passes" $MPI -np 2 $BIN ${W3/3,0/2,2} -o "$TMP/wdeven"
check "  it says so" grep -q "partition (auto, from timed passes" "$TMP/out"
# --stale-comp lr scales each stage's rate by its own staleness: end stages with different windows would
# update the tied embedding's two copies at two rates (the run failed its consistency check at step 3)
refuse "--stale-comp lr with the end stages' windows different" "--stale-comp lr with --aew 0,1: .*tied embedding's two copies would be updated at two rates" \
    $MPI -np 2 $BIN -e d2 -b 1 -t 8 -x 3 -v 0 -s 0 --micro-batches 2 --stages 2 --aew 0,1 --stale-comp lr -o "$TMP/lrw"
check "--stale-comp lr with --aew 0,3,0 (equal end windows) at P = 3" $MPI -np 3 $BIN -e d3 -b 1 -t 8 -x 5 -v 0 -s 0 --micro-batches 3 --stages 3 --aew 0,3,0 --stale-comp lr -o "$TMP/lrw3"
check "  the tied embedding's copies bitwise equal" grep -q "step 5: consistency: tied embedding copies bitwise equal" "$TMP/out"
# a window wider than the run holds only what the run's steps can use: 2 steps leave one old version and
# open two steps (it reserved ceil(1000/3) = 334 stashes and 335 ring slots, 28 GiB, and was refused)
check "--aew 1000 of M 3 for a 2-step run, d6" $BIN -e d6 -b 1 -t 8 -x 2 -v 0 -s 0 --micro-batches 3 --aew 1000 -o "$TMP/wwide"
# (and one activation slot: at P = 1 the stage is the last, whose backward follows each forward; 6 before)
check "  stage 0 holds 1 activation slot, 1 stash and 2 ring slots" grep -Eq "^0 +\[0,6\) .* +1 +[0-9.]+ +1 +[0-9.]+ +2 +[0-9.]+ +[0-9.]+$" "$TMP/out"
refuse "--aew with a list of the wrong length" "--aew 2,2: 2 windows for 4 stages" $BIN --schedule tdpipe --stages 4 --aew 2,2
refuse "--aew with a negative window in a list" "--aew 2,-1,2,2: expected a window size" $BIN --schedule tdpipe --stages 4 --aew 2,-1,2,2

# --- --aew-start: the window opens after step N; the steps before it are W = 0's, bitwise, at any P
check "--aew-start 6, W = 4" $BIN $S --aew 4 --aew-start 6 -o "$TMP/start6"
check "tdpipe W = 0" $BIN $S --aew 0 -o "$TMP/start_w0"
first6() { [ "$(losses "$1" | wc -l)" -eq 16 ] && diff <(losses "$1" | head -6) <(losses "$2" | head -6) >/dev/null; }
check "  steps 1..6 bitwise W = 0's" first6 "$TMP/start6" "$TMP/start_w0"
stale_from7() { # the log's per-step staleness: 0 through step 6, above 0 after (W = 4 of M = 4)
    grep -o '"staleness": [0-9]*' "$1/log.jsonl" | cut -d' ' -f2 | awk 'NR <= 6 && $1 != 0 { bad = 1 } NR > 6 && $1 > 0 { later = 1 } END { exit bad || !later }'
}
check "  stale 0 through step 6, stale forwards after" stale_from7 "$TMP/start6"
check "  and the later steps are not W = 0's" bash -c "! cmp -s '$TMP/start6/model.bin' '$TMP/start_w0/model.bin'"
check "--aew-start 6, P = 2, jitter 0.3: bitwise the P = 1 run" \
    bash -c "$MPI -np 2 $BIN $S --aew 4 --aew-start 6 --stages 2 --jitter 0.3 -o '$TMP/start6p2' >/dev/null 2>&1"
check "  losses and model equal" same_run "$TMP/start6p2" "$TMP/start6"
check "  the start-up table says when the window opens" bash -c "$BIN $S --aew 4 --aew-start 6 -x 1 -o '$TMP/start6t' | grep -q 'AEW W = 4 from step 7 (steps 1..6 synchronous)'"
refuse "--aew-start on a synchronous schedule" "--aew-start 3: only the tdpipe schedule has a window to open" $BIN --schedule 1f1b --aew-start 3 -x 1
refuse "--aew-start below 0" "--aew-start -1: expected a number of steps >= 0, or auto" $BIN --schedule tdpipe --aew 2 --aew-start -1 -x 1
refuse "--aew-start not a number" "--aew-start 6x: expected a number of steps >= 0, or auto" $BIN --schedule tdpipe --aew 2 --aew-start 6x -x 1

# --- the drift monitor
check "--drift-every 4 at W = 0 (1F1B)" $BIN $S --aew 0 --drift-every 4 -o "$TMP/dr0"
cos_one() { python3 - "$1/log.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"drift_cos"' in l]
assert len(rows) == 4, len(rows)
# the applied gradient is the exact one bitwise (same micro-batches, same order, same weights): every
# unit's cosine is 1 to the rounding of dot / (|a| |b|) in double (a few 1e-16), the error exactly 0
assert all(abs(c - 1) <= 1e-12 for r in rows for c in r['drift_cos']), rows
assert all(e == 0 for r in rows for e in r['drift_rel_err']), rows
EOF
}
check "  every unit's cosine 1 (within 1e-12) and relative error 0, in log.jsonl" cos_one "$TMP/dr0"
check "--drift-every 4 at W = 4, P = 2" $MPI -np 2 $BIN $S --aew 4 --drift-every 4 --stages 2 -o "$TMP/dr4"
cp "$TMP/out" "$TMP/dr4.txt"
cos_below() { python3 - "$1/log.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"drift_cos"' in l]
assert len(rows) == 4 and all(len(r['drift_cos']) == 6 for r in rows), rows  # L + 2 units
assert all(r['drift_min_cos'] < 0.999 for r in rows), [r['drift_min_cos'] for r in rows]
EOF
}
check "  stale: the lowest cosine below 1, per unit in log.jsonl" cos_below "$TMP/dr4"
check "  the line says so" grep -q "drift at step 4 | cosine to the exact synchronous gradient: lowest" "$TMP/dr4.txt"
check "  the drift passes are counted: every micro-batch ran once more per measurement" grep -q "every rank ran exactly forwards and backwards (expected 80 each)" "$TMP/dr4.txt"
# a measured step ends a chunk and changes nothing else: --drift-every N is --consistency-every N's
# run, bitwise, and (at W > 0, where a flush moves the stale forwards) not the run without it
check "--consistency-every 4 at W = 4, P = 2" $MPI -np 2 $BIN $S --aew 4 --consistency-every 4 --stages 2 -o "$TMP/ce4"
check "  bitwise the --drift-every 4 run" same_run "$TMP/dr4" "$TMP/ce4"
check "  and not the run without either (W = 4 at P = 1, bitwise P = 2's above)" bash -c "! cmp -s '$TMP/dr4/model.bin' '$TMP/plain/model.bin'"
check "--drift-min-cos 0.999 halves the window" $MPI -np 2 $BIN $S --aew 4 --drift-every 4 --drift-min-cos 0.999 --stages 2 -o "$TMP/drh"
check "  and says so" grep -q "below --drift-min-cos 0.999: AEW W 4 -> 2" "$TMP/out"
check "  bitwise at every P: the same run at P = 1" $BIN $S --aew 4 --drift-every 4 --drift-min-cos 0.999 -o "$TMP/drh1"
check "  losses and model equal" same_run "$TMP/drh" "$TMP/drh1"

# --- the gradient noise scale
check "--gns 1 at P = 2 with jitter" $MPI -np 2 $BIN $S --aew 2 --gns 1 --stages 2 --jitter 0.3 -o "$TMP/gns2"
check "--gns 1 at P = 1" $BIN $S --aew 2 --gns 1 -o "$TMP/gns1"
gns_same() { diff <(grep -o '"gns_b_simple": [^}]*' "$TMP/gns1/log.jsonl") <(grep -o '"gns_b_simple": [^}]*' "$TMP/gns2/log.jsonl") >/dev/null &&
    [ "$(grep -c gns_b_simple "$TMP/gns1/log.jsonl")" -eq 16 ] && same_run "$TMP/gns1" "$TMP/gns2"; }
check "  B_simple logged every step, bitwise the same at P = 1 and 2" gns_same
check "--lr-gns 1 runs (the rate scaled by the measured noise)" $BIN $S --aew 2 --lr-gns 1 -o "$TMP/lrg"
lr_moved() { ! diff <(grep -o '"lr": [^,]*' "$TMP/lrg/log.jsonl") <(grep -o '"lr": [^,]*' "$TMP/gns1/log.jsonl") >/dev/null; }
check "  and its learning rates differ from --gns 1 alone's after the warm-up" lr_moved
# weight prediction extrapolates with the rates the coming updates apply, --lr-gns's factor in them
# (as the noise scale measures it now): the same on every stage, so still bitwise across P
check "--stale-comp predict with --lr-gns 1 at P = 2, jitter" $MPI -np 2 $BIN $S -x 24 --aew 4 --stale-comp predict --lr-gns 1 --stages 2 --jitter 0.3 -o "$TMP/plg2"
check "  at P = 1" $BIN $S -x 24 --aew 4 --stale-comp predict --lr-gns 1 -o "$TMP/plg1"
check "  losses and model bitwise equal" same_run "$TMP/plg1" "$TMP/plg2"

# --- the guard: an injected NaN at step 7 of a P = 2 run rolls back to the consistency point of step 5
# (steps 6 and 7 ran in a chunk with a window, so step 6 was computed stale and is undone too), halves
# W, finishes finite
G="--device cpu -e d4 -b 2 -t 16 -x 20 -v 10 -s 0 --micro-batches 4 --stages 2 --schedule tdpipe --aew 4 --inject-nan 7 -n 5 --keep 10"
check "--inject-nan 7 at P = 2" $MPI -np 2 ./train_tdpipe $G -o "$TMP/nan"
cp "$TMP/out" "$TMP/nan.txt"
check "  rolled back to step 5, step 6 undone, the window halved: one line" \
    grep -q "step     7/20 | not applied: the gradient norm is not finite .* rolled back to step 5, the consistency point (step 6, computed stale, undone).*AEW W 4 -> 2" "$TMP/nan.txt"
check "  and one log.jsonl record" grep -q '"step": 7, "rollback": "the gradient norm is not finite[^"]*", "back_to": 5,' "$TMP/nan/log.jsonl"
finite_end() { python3 - "$TMP/nan" <<'EOF'
import json, math, struct, sys, glob, zlib
d = sys.argv[1]
rows = [json.loads(l) for l in open(d + '/log.jsonl')]
steps = [r for r in rows if 'loss' in r]
assert [r['step'] for r in steps] == list(range(1, 21)), 'each step once, in order (the undone step 6 is cut from the log)'
assert all(math.isfinite(r['loss']) for r in steps), steps[-1]
raw = open(d + '/model.bin', 'rb').read()
w = struct.unpack('<%df' % ((len(raw) - 1024) // 4), raw[1024:])
assert all(math.isfinite(x) for x in w), 'model.bin holds a non-finite weight'
EOF
}
check "  20 applied steps each logged once, every loss finite, model.bin all finite" finite_end
check "  every micro-batch counted (the refused chunk's run again)" grep -q "every rank ran exactly forwards and backwards" "$TMP/nan.txt"
# the rollback is a function of the steps too (the chunk's start, the window halved, the micro-batches
# skipped), not of P: one process with the same window and NaN runs the same 20 steps
check "--inject-nan 7 at P = 1" ./train_tdpipe ${G/--stages 2/} -o "$TMP/nan1"
check "  rolled back to step 5 too" grep -q "step     7/20 | not applied: .* rolled back to step 5" "$TMP/out"
nan_same() { same_run "$TMP/nan1" "$TMP/nan" && diff <(grep -o '"val_loss": [^,}]*' "$TMP/nan1/log.jsonl") <(grep -o '"val_loss": [^,}]*' "$TMP/nan/log.jsonl") >/dev/null; }
check "  losses, validation losses and model bitwise the P = 2 run's" nan_same
mkdir -p "$TMP/nanr" && cp "$TMP/nan/ckpt_00000010.tdck" "$TMP/nanr/"
check "resume the rolled-back run from its step-10 checkpoint" $MPI -np 2 ./train_tdpipe $G -y 1 -o "$TMP/nanr"
tail_same() { diff <(losses "$TMP/nan" | tail -10) <(losses "$TMP/nanr") >/dev/null && cmp -s "$TMP/nan/model.bin" "$TMP/nanr/model.bin"; }
check "  steps 11..20 and the model bitwise the unbroken run's (the halved window went into the checkpoint)" tail_same
# a run that keeps failing at W = 0 stops with the last checkpoint untouched
check "a stable start, checkpoint at step 5" $BIN -e d2 -x 5 -v 0 -s 0 -n 5 -o "$TMP/div"
cp "$TMP/div/ckpt_00000005.tdck" "$TMP/ckpt5.copy"
refuse "lr 10: NaN at every retry: stops after --max-rollbacks 3 rollbacks at W = 0" "after 3 rollbacks in a row at W = 0 \(--max-rollbacks 3\): the run stops" \
    $BIN -e d2 -x 40 -v 0 -s 0 -n 1 --keep 100 -l 10 -c 10 -u 0 -y 1 -o "$TMP/div"
cp "$TMP/err" "$TMP/div.err"
check "  and it did roll back 3 times first" test "$(grep -c 'rolled back' "$TMP/out")" -eq 3
check "  the checkpoint it resumed from is as it was" cmp -s "$TMP/div/ckpt_00000005.tdck" "$TMP/ckpt5.copy"
before_failure() { # checkpoints every step: only those of steps before the refused one exist
    local k newest
    k=$(grep -o "^train_tdpipe: step [0-9]*" "$TMP/div.err" | grep -o "[0-9]*$")
    newest=$(ls "$TMP/div" | grep -o "ckpt_[0-9]*" | sort | tail -1 | grep -o "[1-9][0-9]*$")
    [ -n "$k" ] && [ -n "$newest" ] && [ "$newest" -lt "$k" ]
}
check "  every checkpoint written is of a step before the refused one (a non-finite state is never written)" before_failure
names_newest() { # the message names the newest checkpoint there is, by its step
    local newest
    newest=$(ls "$TMP/div" | grep -o "ckpt_[0-9]*" | sort | tail -1 | grep -o "[1-9][0-9]*$")
    grep -q "the run stops; its last checkpoint (step $newest) in $TMP/div is as it was" "$TMP/div.err"
}
check "  and the message names that checkpoint, by its step" names_newest
refuse "the same with no checkpoint written (-n 0): the message says there is none" "the run stops; it wrote no checkpoint \(-n 0\)" \
    $BIN -e d2 -x 40 -v 0 -s 0 -n 0 -l 10 -c 10 -u 0 -o "$TMP/div0"
json_ok() { python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$TMP/div/log.jsonl"; }
check "  log.jsonl is valid JSON (no NaN literal)" json_ok
check "--spike-z 3: a run without spikes goes through" $BIN -e d2 -x 40 -v 0 -s 0 --spike-z 3 -o "$TMP/spk"

# --- --aew auto: the simulator's choice, the same on every rank
check "--aew auto with --stale-comp predict and --aew-start 0 (windows up to M)" $MPI -np 4 $BIN $P4 --aew auto --stale-comp predict --aew-start 0 -x 4 -o "$TMP/auto"
cp "$TMP/out" "$TMP/auto.out"
check "  the simulated utilisations, the choice and the article's ceil(P (1 - beta)), the same on all 4 ranks" \
    grep -Eq "aew auto: chose W = [0-9]+ .*up to W = 4, the staleness predict handles.*the same on all 4 ranks" "$TMP/auto.out"
# the executor sends a backward's input gradient before its weight-gradient half: stages 1..3 each
# measured a share of B strictly inside (0, 1), which the simulation is given
check "  where in B each stage's input gradient left: three shares inside (0, 1)" bash -c "
    grep -Eo 'input gradient out after( [0-9.]+)+ of B' '$TMP/auto.out' | awk '{ n = 0; for (i = 5; i < NF - 1; i++) { n++; if (!(\$i > 0 && \$i < 1)) exit 1 } exit n != 3 }'"
check "--aew auto with predict, --aew-start left to its default (auto)" $MPI -np 4 $BIN $P4 --aew auto --stale-comp predict -x 4 -o "$TMP/auto_d"
cp "$TMP/out" "$TMP/auto_d.out"
check "  the window opens after --warmup's 20 steps" grep -q "AEW W = auto from step 21 (steps 1..20 synchronous)" "$TMP/auto_d.out"
check "  so auto may choose up to 2M" grep -Eq "up to W = 8, the staleness predict handles with the window opening after the warm-up" "$TMP/auto_d.out"
check "--aew auto without a compensation: the window opens at step 1 (auto start is 0)" \
    bash -c "$MPI -np 4 $BIN $P4 --aew auto -x 2 -o '$TMP/auto_n' | grep -q 'AEW W = auto$'"
check "an explicit window: --aew-start auto is 0" bash -c "$BIN $S --aew 4 --stale-comp predict --aew-start auto -x 1 -o '$TMP/auto_e' | grep -q 'AEW W = 4$'"
check "  and the note on a window of M says that opening it after the warm-up costs less" grep -q "opening it after the warm-up, --aew-start N >= --warmup, costs less" "$TMP/err"
check "--aew auto with predict and the window opening after the warm-up (windows up to 2M)" \
    $MPI -np 4 $BIN $P4 --aew auto --stale-comp predict --warmup 2 --aew-start 2 -x 5 -o "$TMP/auto2"
check "  up to W = 8, and it says why" grep -Eq "up to W = 8, the staleness predict handles with the window opening after the warm-up" "$TMP/out"
check "--aew auto with --aew-start below --warmup: up to M" $MPI -np 4 $BIN $P4 --aew auto --stale-comp predict --warmup 3 --aew-start 2 -x 5 -o "$TMP/auto3"
check "  up to W = 4" grep -Eq "up to W = 4, the staleness predict handles\)" "$TMP/out"

# --- refusals
refuse "an unknown --stale-comp" "--stale-comp ewma: expected none, or predict, dcasgd and lr alone or joined by \+ \(predict\+lr\)" $BIN --stale-comp ewma
refuse "a --stale-comp method twice" "--stale-comp predict\+predict: expected none" $BIN --stale-comp predict+predict
refuse "a --stale-comp with an empty method" "--stale-comp lr\+: expected none" $BIN --stale-comp lr+
refuse "none joined with a method" "--stale-comp none\+lr: expected none" $BIN --stale-comp none+lr
refuse "a negative --dc-lambda" "--dc-lambda: -1 is out of range" $BIN --dc-lambda -1
refuse "--predict-order 3" "--predict-order: 3 is out of range" $BIN --predict-order 3
refuse "a negative --stale-tau" "--stale-tau: -2 is out of range" $BIN --stale-tau -2
refuse "--drift-min-cos above 1" "--drift-min-cos: 2 is out of range" $BIN --drift-min-cos 2
refuse "--max-rollbacks 0" "--max-rollbacks: 0 is out of range" $BIN --max-rollbacks 0
finish
