#!/usr/bin/env bash
# The pipeline runtime under mpirun: every synchronous schedule (and tdpipe with W = 0) gives
# bitwise the losses of one process for P in {1, 2, 4} and D in {1, 2}; across D the losses agree
# within 1e-5; TD-Pipe with W > 0 gives bitwise the losses of one process with the same W at every
# P, jittered or not, and with W in {1, 2, 4} converges like the synchronous run; the device-
# backend path (cpu-staged) matches the CPU, stashes and device-side averages included; the tied
# embedding's copies stay bitwise equal; resumes across shapes; a 200-step jittered run at P = 4
# and a P = 8 synthetic run finish with every micro-batch counted; bad pipeline shapes and caps
# give one message from rank 0 and no hang.
source tests/lib.sh
use_mpi pipeline
vals() { grep -o '"val_loss": [^,}]*' "$1/log.jsonl" | cut -d' ' -f2; }
SMALL="-e d4 -b 2 -t 16 -x 20 -v 0 -s 0 --micro-batches 4"

# --- bitwise equality with one process, for the same D and global batch
check "reference: P = 1, D = 1" $BIN $SMALL -o "$TMP/ref1"
check "reference: P = 1, D = 2" $MPI -np 2 $BIN $SMALL -o "$TMP/ref2"
for D in 1 2; do
    for P in 2 4; do
        for sch in gpipe 1f1b zbh1 tdpipe; do
            out="$TMP/p${P}d${D}$sch"
            $MPI -np $((P * D)) $BIN $SMALL --stages $P --schedule $sch -o "$out" >"$out.txt" 2>&1
            # the model too: the 20th update shows in no loss
            same() { [ "$(losses "$1" | wc -l)" -eq 20 ] && diff <(losses "$1") <(losses "$TMP/ref$D") >/dev/null && cmp -s "$1/model.bin" "$TMP/ref$D/model.bin"; }
            check "P = $P, D = $D, $sch$([ $sch = tdpipe ] && echo ' W = 0'): 20 losses and the model bitwise equal to P = 1" same "$out"
        done
        check "P = $P, D = $D: tied embedding copies bitwise equal after training" grep -q "tied embedding copies bitwise equal" "$out.txt"
    done
done
# the same global batch of 4 micro-batches as ref1: 2 replicas x M = 2 (their gradients are averaged,
# so the sums run in another order: equal within 1e-5, not bitwise)
check "P = 1, D = 2, M = 2" $MPI -np 2 $BIN ${SMALL/--micro-batches 4/--micro-batches 2} -o "$TMP/refd2"
close() { [ "$(losses "$TMP/refd2" | wc -l)" -eq 20 ] && paste <(losses "$TMP/ref1") <(losses "$TMP/refd2") | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ } END { exit bad > 0 }'; }
check "across D = 1 and 2: losses equal within 1e-5 relative (different summation order)" close
# --global-batch 8 (sequences, over the replicas) at -b 2: M = 8 / (2 x D), 2 at D = 2: the run above, bitwise
check "P = 1, D = 2, --global-batch 8 in place of --micro-batches 2" $MPI -np 2 $BIN ${SMALL/--micro-batches 4/--global-batch 8} -o "$TMP/gbd2"
check "  says M = 2, D = 2" grep -q "^| batch .*B 2, T 16, M 2, D 2: 128 tokens per step" "$TMP/out"
check "  bitwise the --micro-batches 2 run" diff <(losses "$TMP/refd2") <(losses "$TMP/gbd2")
# ranks sharing a host: the trainer splits its cores between them (no note); OMP_NUM_THREADS of one
# thread more than the cores at each of 2 ranks: a note (nproc answers OMP_NUM_THREADS where it is set)
over=$(($(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) + 1))
check "2 ranks, OMP_NUM_THREADS unset" env -u OMP_NUM_THREADS $MPI -np 2 $BIN -x 1 -s 0 -v 0 -o "$TMP/omp_unset"
check "  no note of too many threads" bash -c "! grep -q 'note: OMP_NUM_THREADS' '$TMP/err'"
check "2 ranks, OMP_NUM_THREADS=$over" env OMP_NUM_THREADS="$over" $MPI -np 2 $BIN -x 1 -s 0 -v 0 -o "$TMP/omp_over"
check "  a note of 2 rank(s) x $over threads" grep -q "note: OMP_NUM_THREADS=$over: $over threads a rank, 2 rank(s) on this host" "$TMP/err"
check "the step line reports bubble and staleness" grep -q "bubble .*stale " "$TMP/p4d1tdpipe.txt"
check "log.jsonl holds per-stage bubble and staleness" grep -q '"bubble_per_stage": \[[0-9.]*, [0-9.]*, [0-9.]*, [0-9.]*\], "staleness_per_stage"' "$TMP/p4d1tdpipe/log.jsonl"

# --- TD-Pipe with W > 0: a forward's weight version is fixed by its micro-batch (schedule.h), not by
# timing, so the stale updates are the same at every P and in whatever order the event-driven
# stages ran (jitter reorders them): bitwise equal to one process with the same W
for W in 2 4; do
    check "reference: P = 1, tdpipe W = $W" $BIN $SMALL --schedule tdpipe --aew $W -o "$TMP/tref$W"
    for PD in "2 1" "4 1" "2 2"; do
        set -- $PD
        [ "$2" = 2 ] && $MPI -np 2 $BIN $SMALL --schedule tdpipe --aew $W -o "$TMP/tref${W}d2" >/dev/null 2>&1
        ref="$TMP/tref$W$([ "$2" = 2 ] && echo d2)"
        out="$TMP/tp$1d$2w$W"
        $MPI -np $(($1 * $2)) $BIN $SMALL --stages $1 --schedule tdpipe --aew $W --jitter 0.3 -o "$out" >"$out.txt" 2>&1
        tsame() { [ "$(losses "$1" | wc -l)" -eq 20 ] && diff <(losses "$1") <(losses "$2") >/dev/null && cmp -s "$1/model.bin" "$2/model.bin"; }
        check "P = $1, D = $2, tdpipe W = $W, jitter 0.3: 20 losses and the model bitwise equal to P = 1" tsame "$out" "$ref"
    done
done
check "  and the runs were stale: staleness 1 in the step lines" grep -q "stale 1" "$TMP/tp4d1w4.txt"

# --- the device-backend path with the CPU behind it (what GPU stages do: messages kept in the
# backend's memory and moved by a link, as NCCL does; or, with --comm mpi, staged through host
# memory): bitwise the same as the CPU, validation and checkpoints included
STG="-e d4 -b 2 -t 16 -x 20 -v 10 -s 0 --micro-batches 4"
check "--device cpu-staged, P = 1" $BIN $STG --device cpu-staged -o "$TMP/st1"
check "--device cpu, P = 1" $BIN $STG -o "$TMP/sc1"
for PD in "2 2" "4 1"; do
    set -- $PD
    check "--device cpu-staged, P = $1, D = $2" $MPI -np $(($1 * $2)) $BIN $STG --device cpu-staged --stages $1 -o "$TMP/st$1$2"
    cp "$TMP/out" "$TMP/st$1$2.txt"
done
# training losses, validation losses (every stage's forward outside the executor) and the model
staged_same() { diff <(losses "$1") <(losses "$TMP/sc1") >/dev/null && [ "$(losses "$1" | wc -l)" -eq 20 ] && [ "$(vals "$1" | wc -l)" -eq 2 ] &&
    diff <(vals "$1") <(vals "$TMP/sc1") >/dev/null && cmp -s "$1/model.bin" "$2/model.bin"; }
check "  P = 1: losses, validation losses and model bitwise equal to the CPU path" staged_same "$TMP/st1" "$TMP/sc1"
check "  P = 4, D = 1: losses, validation losses and model bitwise equal to the CPU path" staged_same "$TMP/st41" "$TMP/sc1"
# its checkpoint comes from the backend's memory (to_host: weights and both AdamW moments) and goes
# back into it (from_host): a resume is bitwise the unbroken run (no test resumed a cpu-staged run, so
# a checkpoint without the backend's adam_v passed)
SR="-e d4 -b 2 -t 16 -x 8 -v 0 -s 0 --micro-batches 4 --device cpu-staged -n 4"
check "--device cpu-staged, P = 1, checkpoints at steps 4 and 8" $BIN $SR -o "$TMP/stn"
mkdir -p "$TMP/stres" && cp "$TMP/stn/ckpt_00000004.tdck" "$TMP/stres/"
check "  resumed from step 4" $BIN $SR -y 1 -o "$TMP/stres"
staged_resumed() { diff <(losses "$TMP/stn" | tail -4) <(losses "$TMP/stres") >/dev/null && cmp -s "$TMP/stn/model.bin" "$TMP/stres/model.bin"; }
check "  steps 5..8 and the model bitwise the unbroken run's" staged_resumed
staged_same2() { diff <(losses "$1") <(losses "$TMP/sc2") >/dev/null && [ "$(losses "$1" | wc -l)" -eq 20 ] && [ "$(vals "$1" | wc -l)" -eq 2 ] &&
    diff <(vals "$1") <(vals "$TMP/sc2") >/dev/null && cmp -s "$1/model.bin" "$TMP/sc2/model.bin"; }
d2_ref() { $MPI -np 2 $BIN $STG -o "$TMP/sc2" >/dev/null 2>&1 && staged_same2 "$TMP/st22"; }
check "  P = 2, D = 2: losses, validation losses and model bitwise equal to the CPU path with D = 2" d2_ref
check "  it averaged where the gradient lives (what NCCL does on GPUs)" grep -q "averaged over the 2 replicas in the backend's memory" "$TMP/st22.txt"
check "  activations and gradients stayed in the backend's memory (what NCCL does between GPUs)" grep -q "between stages in the backend's memory" "$TMP/st41.txt"
check "--device cpu-staged, P = 4, --comm mpi (messages through host memory)" $MPI -np 4 $BIN $STG --device cpu-staged --stages 4 --comm mpi -o "$TMP/st41m"
cp "$TMP/out" "$TMP/st41m.txt"
check "  losses and model bitwise equal to the CPU path" staged_same "$TMP/st41m" "$TMP/sc1"
check "  it says so" grep -q "between stages in host memory, MPI" "$TMP/st41m.txt"
check "--device cpu-staged, P = 2, D = 2, --comm mpi (gradients through host memory)" $MPI -np 4 $BIN $STG --device cpu-staged --stages 2 --comm mpi -o "$TMP/st22m"
cp "$TMP/out" "$TMP/st22m.txt"
check "  losses and model bitwise equal to the CPU path with D = 2" staged_same2 "$TMP/st22m"
check "  it says so" grep -q "averaged over the 2 replicas in host memory, MPI" "$TMP/st22m.txt"
refuse "--comm with an unknown value" "--comm nccl2: expected auto or mpi" $BIN --comm nccl2 -x 1
# samples go through the backend (a one-row sample slot on every stage, messages over the link)
SMP="-e d4 -b 2 -t 16 -x 6 -v 0 -s 3 -g 12 --micro-batches 4"
samples() { grep -a '^sample (' "$1"; }
check "samples on the CPU, P = 1" $BIN $SMP -o "$TMP/smp1"
cp "$TMP/out" "$TMP/smp1.txt"
check "samples through cpu-staged's backend, P = 2" $MPI -np 2 $BIN $SMP --device cpu-staged --stages 2 -o "$TMP/smp2"
cp "$TMP/out" "$TMP/smp2.txt"
same_samples() { [ "$(samples "$TMP/smp1.txt" | wc -l)" -eq 4 ] && diff <(samples "$TMP/smp1.txt") <(samples "$TMP/smp2.txt") >/dev/null; }
check "  the same 4 samples as the CPU (temperature 1 and greedy, steps 3 and 6)" same_samples
# TD-Pipe behind the backend interface: stashes and the gradient ring kept by the backend
check "--device cpu-staged, tdpipe W = 2, P = 1" $BIN $SMALL --device cpu-staged --schedule tdpipe --aew 2 -o "$TMP/sw1"
check "--device cpu-staged, tdpipe W = 2, P = 4, jitter 0.3" $MPI -np 4 $BIN $SMALL --device cpu-staged --stages 4 --schedule tdpipe --aew 2 --jitter 0.3 -o "$TMP/sw4"
check "--device cpu-staged, tdpipe W = 2, P = 2, D = 2" $MPI -np 4 $BIN $SMALL --device cpu-staged --stages 2 --schedule tdpipe --aew 2 -o "$TMP/sw22"
check "  P = 1: losses and model bitwise equal to the CPU path" tsame "$TMP/sw1" "$TMP/tref2"
check "  P = 4: losses and model bitwise equal to the CPU path" tsame "$TMP/sw4" "$TMP/tref2"
check "  P = 2, D = 2: losses and model bitwise equal to the CPU path with D = 2" tsame "$TMP/sw22" "$TMP/tref2d2"
check "--device cpu-staged, tdpipe W = 2, P = 4, jitter 0.3, --comm mpi" $MPI -np 4 $BIN $SMALL --device cpu-staged --stages 4 --schedule tdpipe --aew 2 --jitter 0.3 --comm mpi -o "$TMP/sw4m"
cp "$TMP/out" "$TMP/sw4m.txt" # (its end table: what each stage allocated)
check "  losses and model bitwise equal to the CPU path" tsame "$TMP/sw4m" "$TMP/tref2"
check "--device cpu-staged, zbh1, P = 4 (split backward: one message buffer per slot)" $MPI -np 4 $BIN $SMALL --device cpu-staged --stages 4 --schedule zbh1 -o "$TMP/sz4"
check "  losses and model bitwise equal to the CPU path" tsame "$TMP/sz4" "$TMP/ref1"

# --- checkpoints are laid out independently of P and D: a one-process checkpoint resumes as a pipeline
steps_from() { grep -o '^{"step": [0-9]*, "loss": [^,]*' "$1/log.jsonl" | awk -v k="$2" '{ s = $2; sub(",", "", s); if (s + 0 > k + 0) print $4 }'; }
check "one process, checkpoint at step 10" $BIN $SMALL --shuffle 1 -n 10 -o "$TMP/c1"
mkdir -p "$TMP/c4" "$TMP/c22" && cp "$TMP/c1/ckpt_00000010.tdck" "$TMP/c4/" && cp "$TMP/c1/ckpt_00000010.tdck" "$TMP/c22/"
check "resume it as P = 4 (zbh1)" $MPI -np 4 $BIN $SMALL --shuffle 1 --stages 4 --schedule zbh1 -y 1 -o "$TMP/c4"
resumed_same() { [ "$(steps_from "$TMP/c4" 10 | wc -l)" -eq 10 ] && diff <(steps_from "$TMP/c1" 10) <(steps_from "$TMP/c4" 10) >/dev/null && cmp -s "$TMP/c1/model.bin" "$TMP/c4/model.bin"; }
check "  steps 11..20 and the final model bitwise equal to the one-process run" resumed_same
check "resume it as P = 2 x D = 2 with M = 2 (the same global batch)" $MPI -np 4 $BIN ${SMALL/--micro-batches 4/--micro-batches 2} --shuffle 1 --stages 2 -y 1 -o "$TMP/c22"
resumed_close() { [ "$(steps_from "$TMP/c22" 10 | wc -l)" -eq 10 ] && paste <(steps_from "$TMP/c1" 10) <(steps_from "$TMP/c22" 10) | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $1) bad++ } END { exit bad > 0 }'; }
check "  steps 11..20 within 1e-5 of the one-process run (replicas average in another order)" resumed_close
# TD-Pipe with W > 0 is deterministic too (op order from the schedule, flushed at checkpoints)
TDR="-e d4 --stages 2 --schedule tdpipe --aew 2 --micro-batches 4 -b 2 -t 16 -x 12 -v 0 -s 0 -n 6 --shuffle 1"
check "tdpipe W = 2, checkpoint every 6 steps" $MPI -np 2 $BIN $TDR -o "$TMP/ta"
mkdir -p "$TMP/tb" && cp "$TMP/ta/ckpt_00000006.tdck" "$TMP/tb/"
check "resume it at step 6" $MPI -np 2 $BIN $TDR -y 1 -o "$TMP/tb"
td_same() { [ "$(steps_from "$TMP/tb" 6 | wc -l)" -eq 6 ] && diff <(steps_from "$TMP/ta" 6) <(steps_from "$TMP/tb" 6) >/dev/null && grep -q '"staleness": 1' "$TMP/tb/log.jsonl"; }
check "  steps 7..12 (stale ones among them) bitwise equal to the unbroken run" td_same
refuse "resume with another global batch is refused" "checkpoint has micro-batches per step \(M x D\) = 4 but this run has 8" $MPI -np 4 $BIN $SMALL --stages 2 -y 1 -o "$TMP/c1"

# --- TD-Pipe W in {1, 2, 4}: S = 150 steps at P = 2, M = 8 (the first W micro-batches of each
# step are 1-stale); the validation loss must come within X = 0.03 nats of the synchronous (W = 0)
# run's. Both are measured on the same 16384 validation tokens, so most sampling noise cancels;
# measured gaps are ~0.002-0.011 nats (README), so 0.03 leaves room while a broken stash or ring
# (wrong weights, a gradient lost or counted twice) moves the loss by far more. W = M (every
# micro-batch stale) costs far more at this learning rate: README gives the figure.
CONV="--stages 2 --schedule tdpipe -x 150 -v 150 --val-batches 32 -s 0 --micro-batches 8 -b 1"
val() { grep -o 'val loss [0-9.]*' "$1" | tail -1 | cut -d' ' -f3; }
check "tdpipe W = 0 (synchronous reference), 150 steps" $MPI -np 2 $BIN $CONV --aew 0 -o "$TMP/w0"
cp "$TMP/out" "$TMP/w0.txt"
for W in 1 2 4; do
    check "tdpipe W = $W, 150 steps" $MPI -np 2 $BIN $CONV --aew $W -o "$TMP/w$W"
    cp "$TMP/out" "$TMP/w$W.txt"
    near() { awk -v a="$(val "$TMP/w$W.txt")" -v b="$(val "$TMP/w0.txt")" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d < 0.03) }'; }
    check "tdpipe W = $W: val loss $(val "$TMP/w$W.txt") within 0.03 nats of the synchronous $(val "$TMP/w0.txt")" near
    stale_ok() { grep -q "stale 1" "$TMP/w$W.txt" && ! grep -q "stale [2-9]" "$TMP/w$W.txt"; }
    check "tdpipe W = $W: staleness 1 reached, never above ceil(W/M) = 1" stale_ok
done

# --- stress: 200 steps, jitter, a random W at P = 4; the harness's timeout bounds the time
W=$(( (RANDOM % 8) + 1 ))
check "stress: P = 4, tdpipe W = $W, --jitter 0.3, 200 steps finish (timeout 180 s)" \
    $MPI -np 4 $BIN -e d4 --stages 4 --schedule tdpipe --aew $W --jitter 0.3 --seed $RANDOM -x 200 -v 0 -s 0 --micro-batches 4 -b 1 -t 16 --consistency-every 37 -o "$TMP/stress"
cp "$TMP/out" "$TMP/stress.txt"
check "stress: no micro-batch lost or duplicated on any rank" grep -q "every rank ran exactly forwards and backwards (expected 800 each)" "$TMP/stress.txt"
consistency_points() { [ "$(grep -c "^step [0-9]*: consistency: tied embedding copies bitwise equal" "$TMP/stress.txt")" -eq 6 ] && grep -q "^step 185: consistency" "$TMP/stress.txt"; }
check "  the copies checked at every consistency point (steps 37, 74, ..., 185, and 200 for the checkpoint)" consistency_points

# --- --synthetic-compute: timed waits instead of the model, so P = 8 fits on two cores (what
# scripts/bench_schedules.sh measures; its figures are timing, so only completion is tested here,
# and each wait's length from below)
check "--synthetic-compute, P = 8, tdpipe W = 8, jitter 0.3, 4 steps" $MPI -np 8 $BIN -e d8 --stages 8 --schedule tdpipe --aew 8 --synthetic-compute --jitter 0.3 --micro-batches 16 -x 4 -o "$TMP/syn"
cp "$TMP/out" "$TMP/syn.txt"
check "  every micro-batch counted on every rank" grep -q "every rank ran exactly forwards and backwards (expected 64 each)" "$TMP/syn.txt"
check "  the step lines report bubble and staleness 1" grep -q "bubble .*stale 1" "$TMP/syn.txt"
# the waits' lengths, one-sided (a wait never ends early, so no timing noise fails it): one stage of
# the whole model waits f = 2 ms per forward and b = 2 f per backward, b / 2 per zero-bubble half
# (train_tdpipe.cu); 1% below covers the trace's rounding to 1 ns, and a halved wait is 50% below
syn_min() { grep -o "\"name\": \"$2[0-9][^}]*\"compute_dur\": [0-9.]*" "$1" | awk -F'"compute_dur": ' 'BEGIN { m = -1 } { if (m < 0 || $2 < m) m = $2 } END { print m }'; }
syn_waits() { # trace: prefix want_us ... : every op of each prefix computed at least 0.99 want_us
    local t=$1; shift
    while [ $# -gt 0 ]; do
        awk -v m="$(syn_min "$t" "$1")" -v w="$2" 'BEGIN { exit !(m >= 0.99 * w) }' || { echo "$1: shortest $(syn_min "$t" "$1") us, want $2" >&2; return 1; }
        shift 2
    done
}
SYN1="--synthetic-compute --jitter 0 -e d2 -b 2 -t 16 -x 2 -v 0 -s 0"
$BIN $SYN1 --trace "$TMP/syn1f1b.json" -o "$TMP/syn1" >/dev/null 2>&1
$BIN $SYN1 --schedule zbh1 --trace "$TMP/synzb.json" -o "$TMP/synzb" >/dev/null 2>&1
check "  synthetic waits, 1f1b: forwards 2 ms, backwards 4 ms or more" syn_waits "$TMP/syn1f1b.json" F 2000 B 4000
check "  synthetic waits, zbh1: input- and weight-gradient halves 2 ms or more" syn_waits "$TMP/synzb.json" BI 2000 BW 2000

# --- --aew auto, the trace and the per-stage memory table
check "--aew auto measures beta and picks W" $MPI -np 4 $BIN -e d4 --stages 4 --schedule tdpipe --aew auto -b 2 -t 16 -x 6 -v 0 -s 0 --micro-batches 4 --trace "$TMP/trace.json" -o "$TMP/auto"
cp "$TMP/out" "$TMP/auto.txt"
check "  it says so: the simulated choice beside the article's ceil(P (1 - beta)), on every rank" grep -Eq "aew auto: chose W = [0-9]+ \([0-9.]+%.*the article's ceil\(P \(1 - beta\)\) = ceil\(4 x \(1 - [0-9.]+\)\) = [0-9]+ would give [0-9.]+%; the same on all 4 ranks" "$TMP/auto.txt"
check "  a memory table per stage: activation slots, stashes, gradient ring" grep -q "act. slots .* stashes .* grad ring" "$TMP/auto.txt"
trace_ok() { python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))['traceEvents']
kinds = {e['name'][0] for e in d}
assert sorted({e['tid'] for e in d}) == [0, 1, 2, 3], 'one row per stage'
assert len(d) == 4 * 6 * (4 + 4 + 1), len(d)  # per stage: 6 steps x (4 F + 4 B + 1 U)
assert kinds == {'F', 'B', 'U'}, kinds
# named by the run's step, not the chunk's (--aew auto runs step 0 alone, then the rest)
assert sorted(e['name'] for e in d if e['tid'] == 0 and e['name'][0] == 'U') == ['U%d' % i for i in range(6)]
" "$TMP/trace.json"; }
check "--trace writes a Chrome trace: every op of every stage" trace_ok
marks_ok() { python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))['traceEvents']
def sends(e): return e['name'][0] == 'F' and e['tid'] < 3 or e['name'][0] == 'B' and e['tid'] > 0
bad = [e['name'] for e in d if sends(e) != ('sent_ts' in e['args'])]
assert not bad, 'sent_ts where a message leaves, and only there: %s' % bad[:4]
late = [e['name'] for e in d if 'sent_ts' in e['args'] and not e['ts'] <= e['args']['sent_ts'] <= e['ts'] + e['dur'] + 1e-3]
assert not late, 'sent inside the op: %s' % late[:4]
got = [e for e in d if 'arrived_ts' in e['args']]
assert got, 'some message was waited for'
assert all(e['name'][0] in 'FB' and e['args']['awaited_ts'] <= e['args']['arrived_ts'] for e in got), 'awaited, then arrived'
" "$TMP/trace.json"; }
check "  each op's messages marked: sent where one leaves, awaited and arrived where one was waited for" marks_ok

# --- the schedule printed as data
check "--print-schedule prints every stage's ops" $BIN --print-schedule --schedule 1f1b --micro-batches 4 -e d4
$MPI -np 2 $BIN --print-schedule --stages 2 --schedule zbh1 --micro-batches 2 -e d4 > "$TMP/sched.txt" 2>&1
check "--print-schedule under mpirun: rank 0 prints both stages' lists once" test "$(grep -c '^stage [01]' "$TMP/sched.txt")" -eq 2
$BIN --print-schedule --stages 4 --schedule tdpipe --aew 2 --micro-batches 4 -e d4 > "$TMP/sched4.txt" 2>&1
# what each stage holds: (P - s) + W slots but 2 on the last stage, 1 stash, a ring of 2; and it is what
# the P = 4 run of the same shape above allocated (its end table)
check "--print-schedule: what each stage holds (6, 5, 4 and 2 activation slots, 1 stash, a ring of 2)" test "$(plan_holds "$TMP/sched4.txt")" = "0:6,1,2 1:5,1,2 2:4,1,2 3:2,1,2 "
check "  what the P = 4 run allocated, stage by stage" test "$(plan_holds "$TMP/sched4.txt")" = "$(end_holds "$TMP/sw4m.txt")"
check "--print-schedule prints P = 4 from one process (no ranks needed to print)" test "$(grep -c '^stage [0-3]:' "$TMP/sched4.txt")" -eq 4

# --- the partition: per-rank speed and memory steer the dynamic program
$MPI -np 4 $BIN --print-schedule -e d8 --stages 4 --micro-batches 4 --rank-speed 1,1,0.5,1 > "$TMP/part.txt" 2>&1
check "--rank-speed 1,1,0.5,1: the half-speed rank gets the fewest layers" grep -Eq "^2 +\[[0-9]+,[0-9]+\) +1 " "$TMP/part.txt"
refuse "--rank-mem too small for any split" "no split of 8 layers over 2 stages fits the memory limits" $MPI -np 2 $BIN --print-schedule -e d8 --stages 2 --micro-batches 2 --rank-mem 0.001,1
refuse "  a limit below a byte is not printed as 0 B" "rank 0 has 0.00107 B" $BIN --print-schedule -e d8 --stages 2 --micro-batches 2 --rank-mem 1e-12,1
refuse "--rank-speed with the wrong count" "--rank-speed 1,2: expected 4 positive numbers" $MPI -np 4 $BIN --print-schedule -e d8 --stages 4 --micro-batches 4 --rank-speed 1,2
# --partition auto times a layer, the embeddings and the head on each rank (tdpipe/layer_costs.c): the
# split may move with the timings, the losses may not
same_ref1() { [ "$(losses "$1" | wc -l)" -eq 20 ] && diff <(losses "$1") <(losses "$TMP/ref1") >/dev/null; }
check "--partition auto at P = 2: the split from timed passes" $MPI -np 2 $BIN $SMALL --stages 2 -o "$TMP/prof"
check "  the start-up table says so, with every stage's measured times" \
    bash -c "grep -q 'partition (auto, from timed passes' '$TMP/out' && grep -Eq 'stage 1 measured: a layer [0-9.]+ ms, embeddings [0-9.]+ ms, head [0-9.]+ ms' '$TMP/out'"
check "  20 losses bitwise equal to P = 1" same_ref1 "$TMP/prof"
# the timed passes run on the run's device: cpu-staged's is the path a GPU's takes (its own buffers,
# each pass ended by stage_finish)
check "--partition auto on cpu-staged at P = 2: timed on the device's path" $MPI -np 2 $BIN $SMALL --device cpu-staged --stages 2 -o "$TMP/profst"
check "  the start-up table has every stage's measured times" \
    bash -c "grep -q 'partition (auto, from timed passes' '$TMP/out' && grep -Eq 'stage 1 measured: a layer [0-9.]+ ms, embeddings [0-9.]+ ms, head [0-9.]+ ms' '$TMP/out'"
check "  20 losses bitwise equal to P = 1" same_ref1 "$TMP/profst"
check "--partition model at P = 2: the FLOP model, not profiled" $MPI -np 2 $BIN $SMALL --stages 2 --partition model -o "$TMP/pmod"
check "  the start-up table says so" grep -q "partition (model; predicted time in FLOPs" "$TMP/out"
check "  20 losses bitwise equal to P = 1" same_ref1 "$TMP/pmod"
# any split, not only the even one model chooses here (2,2): each stage's part of the whole
# model's weights (gpt2_init_range) and of a model file (model_file_load_range) at an uneven offset
same_ref1_model() { same_ref1 "$1" && cmp -s "$1/model.bin" "$TMP/ref1/model.bin"; }
for split in 1,3 3,1; do
    check "--partition $split at P = 2" $MPI -np 2 $BIN $SMALL --stages 2 --partition $split -o "$TMP/part$split"
    check "  20 losses and the model bitwise equal to P = 1" same_ref1_model "$TMP/part$split"
done
EF="-e $TMP/ref1/model.bin -b 2 -t 16 -x 4 -v 0 -s 0 --micro-batches 4"
check "-e model.bin, P = 1, 4 steps" $BIN $EF -o "$TMP/ef1"
check "-e model.bin, P = 2, --partition 1,3" $MPI -np 2 $BIN $EF --stages 2 --partition 1,3 -o "$TMP/ef2"
ef_same() { [ "$(losses "$TMP/ef2" | wc -l)" -eq 4 ] && diff <(losses "$TMP/ef1") <(losses "$TMP/ef2") >/dev/null && cmp -s "$TMP/ef1/model.bin" "$TMP/ef2/model.bin"; }
check "  4 losses and the model bitwise equal to P = 1" ef_same

# --- bad pipeline shapes: one message from rank 0, non-zero exit, no hang (timeout)
once() { [ "$(grep -c "$1" "$TMP/err")" -eq 1 ]; }
refuse "P larger than the number of layers" "--stages 5 exceeds the model's 4 layers" $MPI -np 5 $BIN -e d4 --stages 5 --micro-batches 8
check "  said once, by rank 0" once "exceeds the model's 4 layers"
refuse "M < P where the schedule needs M >= P" "--micro-batches" $MPI -np 4 $BIN -e d4 --stages 4 --schedule 1f1b --micro-batches 2
refuse "a rank count that is not P x D" "--stages 2 does not divide the 3 ranks" $MPI -np 3 $BIN -e d4 --stages 2
check "  said once, by rank 0" once "does not divide the 3 ranks"
refuse "--aew on a synchronous schedule" "--aew 2: only the tdpipe schedule" $BIN --schedule 1f1b --aew 2
refuse "an unknown schedule" "--schedule pipedream: expected gpipe, 1f1b, zbh1 or tdpipe" $BIN --schedule pipedream
refuse "interleaved 1F1B: schedule data and simulated, not run by the trainer (one contiguous range per rank)" "--schedule interleaved: the trainer cannot run it" $BIN --schedule interleaved
refuse "a bad --placement" "--placement nodes: expected stages, replicas or auto" $BIN -e d4 --placement nodes
refuse "a bad --partition" "--partition" $MPI -np 2 $BIN -e d4 --stages 2 --partition 3,3
refuse "--stages > 1 without mpirun" "--stages 2 does not divide the 1 rank" $BIN -e d4 --stages 2

# --- the gradient-cache ring's cap (--grad-cache, the YAML's pipeline.grad_cache)
refuse "--grad-cache smaller than the window needs" "--grad-cache 1: the tdpipe schedule with --aew 2 needs 2 gradient-cache slots per stage" $MPI -np 2 $BIN -e d4 --stages 2 --schedule tdpipe --aew 2 --micro-batches 4 -x 2 --grad-cache 1 -o "$TMP/gc"
check "  refused before training: no log written" test ! -e "$TMP/gc/log.jsonl"
check "--grad-cache 2 is enough for W = 2" $MPI -np 2 $BIN -e d4 --stages 2 --schedule tdpipe --aew 2 --micro-batches 4 -b 2 -t 16 -x 2 -v 0 -s 0 --grad-cache 2 -o "$TMP/gc2"

# --- without a single-copy path between processes (as in some containers; forced here), Open MPI's
# shared-memory fragments are raised to 1 MiB, said once by rank 0, unless the user gave a size; the
# run's results do not depend on how the bytes travelled
NOCOPY="--mca btl_vader_single_copy_mechanism none"
check "a pipeline without single-copy between processes" $MPI $NOCOPY -np 2 $BIN $SMALL --stages 2 -o "$TMP/nc"
check "  rank 0 says why and what it set, once" bash -c "[ \$(grep -c '^comm: no single-copy path between processes here (btl_vader_single_copy_mechanism is none): Open MPI.s shared-memory fragments set to 1 MiB' '$TMP/err') -eq 1 ]"
check "  the same model as with single-copy" bash -c "$MPI -np 2 $BIN $SMALL --stages 2 -o '$TMP/nc_ref' >/dev/null 2>&1 && cmp -s '$TMP/nc/model.bin' '$TMP/nc_ref/model.bin'"
check "  a fragment size the user gave is kept, and said so" $MPI $NOCOPY --mca btl_vader_max_send_size 65536 -np 2 $BIN $SMALL -x 2 --stages 2 -o "$TMP/nc2"
check "    (the note)" grep -q "^comm: no single-copy path .*the shared-memory fragment size given is kept" "$TMP/err"

# --- --recompute 1: a slot keeps its stage input and output only, and a backward runs its forward again
# in one working set (tdpipe/stage_cpu.c): the same kernels on the same weights and tokens, so every
# loss and the model are bitwise those of the run that kept the activations, under every schedule (the
# zero-bubble weight half recomputing once more where its input half's working set was taken), TD-Pipe
# with stashed and predicted weights, DC-ASGD and the noise scale (a micro-batch's gradient alone),
# the drift monitor, the int8 sync, cpu-staged; and the stages hold fewer activation MiB (end table)
act_mib() { awk '/act\. slots/ { f = 1; next } f && !/^[0-9]/ { f = 0 } f { s += $7 } END { print s }' "$1"; } # (its rows: stage ... slots MiB ...)
RC="-e d4 -b 2 -t 32 -x 6 -v 3 -s 0 --micro-batches 4"
rc_case() { # NAME RANKS MIB FLAGS...: MIB less (the recomputed run's activation MiB below the other's) or same
    local name=$1 np=$2 want=$3
    shift 3
    $MPI -np $np $BIN $RC "$@" -o "$TMP/rc0_$name" >"$TMP/rc0_$name.out" 2>&1 &&
        $MPI -np $np $BIN $RC "$@" --recompute 1 -o "$TMP/rc1_$name" >"$TMP/rc1_$name.out" 2>&1 || return 1
    local m0 m1
    m0=$(act_mib "$TMP/rc0_$name.out") m1=$(act_mib "$TMP/rc1_$name.out")
    echo "     $name: activation MiB $m0 kept, $m1 recomputed"
    diff <(grep -Eo '"(val_)?loss": [^,}]*' "$TMP/rc0_$name/log.jsonl") <(grep -Eo '"(val_)?loss": [^,}]*' "$TMP/rc1_$name/log.jsonl") >/dev/null &&
        cmp -s "$TMP/rc0_$name/model.bin" "$TMP/rc1_$name/model.bin" && awk -v a="$m0" -v b="$m1" -v w="$want" 'BEGIN { exit !(w == "less" ? b < a : b == a) }'
}
check "--recompute 1, P = 2 1f1b: bitwise the same, fewer activation MiB" rc_case p2 2 less --stages 2
check "--recompute 1, P = 2 zbh1" rc_case zb 2 less --stages 2 --schedule zbh1
check "--recompute 1, P = 2 tdpipe W = 3, jitter 0.3, weight prediction" rc_case td 2 less --stages 2 --aew 3 --jitter 0.3 --stale-comp predict
# P = 1: each backward follows its own forward, so nothing is recomputed and nothing saved (one slot)
check "--recompute 1, P = 1 tdpipe W = 4, DC-ASGD, --gns, drift monitor: bitwise the same, the same activation MiB" rc_case dc 1 same --aew 4 --stale-comp dcasgd --gns 1 --drift-every 2
check "--recompute 1, P = 2 tdpipe W = 2, a rollback (--inject-nan 3) and its restored snapshot" rc_case nan 2 less --stages 2 --aew 2 --inject-nan 3 -n 2
check "--recompute 1, P = 2 x D = 2 int8, cpu-staged" rc_case i8 4 less --stages 2 --grad-quant int8 --device cpu-staged
check "  the start-up table says what a micro-batch keeps" grep -q "activations 0.0 MiB per micro-batch in flight (--recompute: its input and output; backward runs its forward again in [0-9.]* MiB held once)" "$TMP/rc1_dc.out"

# --- the sweeps (README, Reliability), each on two seeded draws, and each seen to report a difference:
# sweep_sees SWEEP SEED PATTERN REPORT: run on a wrapper that trains the runs whose flags match the
# case PATTERN at another learning rate, the sweep reports its case 1 as REPORT and exits 1
sweep_sees() {
    printf '#!/bin/sh\ncase "$*" in %s) exec ./train_tdpipe "$@" -l 1e-3 ;; esac\nexec ./train_tdpipe "$@"\n' "$3" > "$TMP/lr_wrapper"
    chmod +x "$TMP/lr_wrapper"
    ! bash "$1" 1 "$2" "$TMP/lr_wrapper" > "$TMP/sweep.txt" && grep -q "^case 1 DIFF $4" "$TMP/sweep.txt"
}
# random flag combinations (dev/flag_sweep.sh): at P = 1, at a drawn P > 1 (case 2: from --print-config's
# file) and resumed at another P, bitwise
check "dev/flag_sweep.sh 2 7: two random flag combinations bitwise at P = 1, at P > 1 and resumed at another P" \
    bash dev/flag_sweep.sh 2 7 ./train_tdpipe
check "  a P > 1 run at another learning rate is reported (case 1 DIFF, exit 1)" sweep_sees dev/flag_sweep.sh 7 '*--stages*' "P-numbers P-model"
# a stop at a random moment, then a resume (dev/signal_sweep.sh): both cases of seed 4 are stopped
# mid-run by SIGINT or SIGTERM at one rank of P = 2 and resumed at P = 1 (the second on the other
# backend), bitwise the unbroken run
check "dev/signal_sweep.sh 2 4: two runs stopped at a random moment end bitwise the unbroken ones" \
    bash dev/signal_sweep.sh 2 4 ./train_tdpipe
check "  a resume at another learning rate is reported (case 1 DIFF, exit 1)" sweep_sees dev/signal_sweep.sh 4 '*"-y 1"*' "numbers model mid-run"

finish
