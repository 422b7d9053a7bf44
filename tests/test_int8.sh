#!/usr/bin/env bash
# The replicas' gradient sync (tdpipe/dp_sync.h): fp32 in buckets is bitwise the blocking average; int8
# with error feedback keeps the replicas bitwise equal, is deterministic across runs, thread counts and
# P, resumes bitwise (also at another P), is cleared by a rollback, counts the bytes the formula says, converges within 0.5 % of
# fp32; the drift monitor compares it with fp32; a NaN in a gradient is reported; the article's own
# YAML config runs; every bad value is refused.
source tests/lib.sh
use_mpi int8
same_run() { [ "$(losses "$1" | wc -l)" -ge 1 ] && diff <(losses "$1") <(losses "$2") >/dev/null && cmp -s "$1/model.bin" "$2/model.bin"; }
S="-e d4 -b 2 -t 16 -x 12 -v 0 -s 0 --micro-batches 4"
Q="$S --grad-quant int8 --quant-block 64 --grad-cache 16KB" # several buckets on this small model

# --- fp32 in buckets: the same sums in the same order as the blocking average
check "D = 2, blocking fp32 average" $MPI -np 2 $BIN $S -o "$TMP/blk"
check "D = 2, fp32 in 16 KB buckets overlapped with backward" $MPI -np 2 $BIN $S --grad-cache 16KB -o "$TMP/b32"
check "  bitwise the blocking run" same_run "$TMP/blk" "$TMP/b32"
check "P = 2 x D = 2, zbh1, fp32 buckets" $MPI -np 4 $BIN $S --grad-cache 16KB --stages 2 --schedule zbh1 -o "$TMP/b32z"
check "  bitwise too" same_run "$TMP/blk" "$TMP/b32z"
check "cpu-staged (the gradient a device's: the sync after the step), fp32 buckets" $MPI -np 2 $BIN $S --grad-cache 16KB --device cpu-staged -o "$TMP/b32s"
check "  bitwise too" same_run "$TMP/blk" "$TMP/b32s"
# a device stage whose replicas average in host memory sends the tied shares through host buffers,
# over MPI (tied_link: NCCL, where GPU messages go, takes device buffers)
check "int8, P = 2 x D = 2" $MPI -np 4 $BIN $S --grad-quant int8 --stages 2 -o "$TMP/i8p2"
check "int8, P = 2 x D = 2, cpu-staged (the tied shares through host memory)" $MPI -np 4 $BIN $S --grad-quant int8 --stages 2 --device cpu-staged -o "$TMP/i8p2s"
check "  bitwise equal" same_run "$TMP/i8p2" "$TMP/i8p2s"
# D = 3: an owner's own share sits between the others' in the replica-ordered sum; blocks of 7
# cut the slices into uneven pieces
check "D = 3, blocking fp32 average" $MPI -np 3 $BIN $S -o "$TMP/blk3"
check "D = 3, fp32 in 16 KB buckets, blocks of 7" $MPI -np 3 $BIN $S --grad-cache 16KB --quant-block 7 -o "$TMP/b32d3"
check "  bitwise the blocking D = 3 run" same_run "$TMP/blk3" "$TMP/b32d3"

# --- int8: replicas equal, deterministic, the same at every P and thread count
check "D = 2, int8 with error feedback, checkpoint at step 6" $MPI -np 2 $BIN $Q -n 6 --keep 5 -o "$TMP/i8"
cp "$TMP/out" "$TMP/i8.txt"
check "  the start-up table says how" grep -q "gradients averaged over the 2 replicas: int8 blocks of 64, error feedback on, two-shot, [0-9]* buckets" "$TMP/i8.txt"
check "  the replicas hold bitwise the same weights at each consistency point" grep -q "consistency: 2 replica(s) agree" "$TMP/i8.txt"
differs() { ! cmp -s "$TMP/i8/model.bin" "$TMP/blk/model.bin"; }
check "  and int8 changed the run" differs
check "the same run again" $MPI -np 2 $BIN $Q -o "$TMP/i8b"
check "  bitwise the first" same_run "$TMP/i8" "$TMP/i8b"
check "with two OpenMP threads per rank" env OMP_NUM_THREADS=2 $MPI -np 2 $BIN $Q -o "$TMP/i8t"
check "  bitwise the one-thread run" same_run "$TMP/i8" "$TMP/i8t"
check "P = 2 x D = 2 (block owners do not depend on the stages)" $MPI -np 4 $BIN $Q --stages 2 -o "$TMP/i8p2"
check "  bitwise the P = 1 run" same_run "$TMP/i8" "$TMP/i8p2"
# --placement replicas: launch ranks 0, 1 hold stage 0's replicas, 2, 3 stage 1's; the grid (and so
# every sum's order) is the same, so the run is too
check "P = 2 x D = 2, replicas first (--placement replicas)" $MPI -np 4 $BIN $Q --stages 2 --placement replicas -o "$TMP/i8pr"
check "  the start-up table says so" grep -q "replicas first: mpirun's rank r holds stage r / D, replica r % D" "$TMP/out"
check "  bitwise the stages-first run" same_run "$TMP/i8p2" "$TMP/i8pr"
check "P = 2 x D = 2, tdpipe W = 4 with jitter 0.3" $MPI -np 4 $BIN $Q --stages 2 --aew 4 --jitter 0.3 -o "$TMP/i8w"
check "P = 1 x D = 2, tdpipe W = 4" $MPI -np 2 $BIN $Q --aew 4 -o "$TMP/i8w1"
check "  bitwise equal" same_run "$TMP/i8w" "$TMP/i8w1"
check "D = 4, int8" $MPI -np 4 $BIN $Q -o "$TMP/i8d4"
check "  the 4 replicas agree" grep -q "consistency: 4 replica(s) agree" "$TMP/out"

# --- resume: the residuals are in the checkpoint
mkdir -p "$TMP/res" && cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/res/"
check "resume the int8 run from step 6" $MPI -np 2 $BIN $Q -n 6 -y 1 -o "$TMP/res"
tail_same() { diff <(losses "$TMP/i8" | tail -6) <(losses "$TMP/$1") >/dev/null && cmp -s "$TMP/i8/model.bin" "$TMP/$1/model.bin"; }
check "  steps 7..12 and the model bitwise the unbroken run's" tail_same res
mkdir -p "$TMP/resp" && cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/resp/"
check "resume it at P = 2 x D = 2" $MPI -np 4 $BIN $Q -n 6 -y 1 --stages 2 -o "$TMP/resp"
check "  bitwise too" tail_same resp
mkdir -p "$TMP/respr" && cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/respr/"
check "resume it at P = 2 x D = 2, replicas first" $MPI -np 4 $BIN $Q -n 6 -y 1 --stages 2 --placement replicas -o "$TMP/respr"
check "  bitwise too" tail_same respr
# a checkpoint written at P = 2: wte's residual is the first stage's (the last stage's wte part is
# never synced; the stream took it, zeros, and a resume drifted from step 2 on after it)
check "the int8 run at P = 2 x D = 2, checkpoint at step 6" $MPI -np 4 $BIN $Q -n 6 --stages 2 -o "$TMP/i8p2"
mkdir -p "$TMP/resp1" && cp "$TMP/i8p2/ckpt_00000006.tdck" "$TMP/resp1/"
check "resume its step-6 checkpoint at P = 1" $MPI -np 2 $BIN $Q -n 6 -y 1 -o "$TMP/resp1"
check "  steps 7..12 and the model bitwise the unbroken P = 1 run's" tail_same resp1
check "  and the P = 2 checkpoint is byte for byte the P = 1 one" cmp "$TMP/i8p2/ckpt_00000006.tdck" "$TMP/i8/ckpt_00000006.tdck"
mkdir -p "$TMP/resd" && cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/resd/"
check "resume it with D = 4 (M = 2: the same micro-batches per step)" $MPI -np 4 $BIN ${Q/--micro-batches 4/--micro-batches 2} -n 6 -y 1 -o "$TMP/resd"
check "  says what happens to the residuals" grep -q "residuals start at zero: they are for D = 2 replicas and blocks of 64, this run has D = 4" "$TMP/err"
mkdir -p "$TMP/resf" && cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/resf/"
check "resume it in fp32" $MPI -np 2 $BIN $S -n 6 -y 1 -o "$TMP/resf"
check "  says the residuals are not used" grep -q "holds an int8 sync's error-feedback residuals; this run does not use them" "$TMP/err"

# --- a rollback clears the residuals: the refused attempt's sync left its rounding in them. Resumed
# from step 6 with a NaN at step 7, from the checkpoint as written and from a copy without its
# residuals (dev/ckpt_drop.py: they start at zero), both runs clear them at the rollback and so end bitwise equal;
# without the NaN the same two differ, so the residuals they resumed with do reach the losses
for v in ef noef efnan noefnan; do mkdir -p "$TMP/rb_$v"; done
cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/rb_ef/"; cp "$TMP/i8/ckpt_00000006.tdck" "$TMP/rb_efnan/"
check "dev/ckpt_drop.py: the step-6 checkpoint without its residuals' sections" python3 dev/ckpt_drop.py "$TMP/i8/ckpt_00000006.tdck" "$TMP/rb_noef/ckpt_00000006.tdck" grad_ef
check "  both replicas' two" grep -q "dropped (grad_ef grad_ef_replica_0 grad_ef_owner_0 grad_ef_replica_1 grad_ef_owner_1)" "$TMP/out"
cp "$TMP/rb_noef/ckpt_00000006.tdck" "$TMP/rb_noefnan/"
check "resume the int8 run's step-6 checkpoint" $MPI -np 2 $BIN $Q -x 9 -n 6 -y 1 -o "$TMP/rb_ef"
check "resume a copy without its residuals" $MPI -np 2 $BIN $Q -x 9 -n 6 -y 1 -o "$TMP/rb_noef"
check "  which start at zero" grep -q "residuals start at zero: it holds none" "$TMP/err"
check "  the two differ (the residuals reach the losses)" bash -c "! cmp -s '$TMP/rb_ef/model.bin' '$TMP/rb_noef/model.bin'"
check "the same two with a NaN at step 7: as written" $MPI -np 2 $BIN $Q -x 9 -n 6 -y 1 --inject-nan 7 -o "$TMP/rb_efnan"
check "  and without residuals" $MPI -np 2 $BIN $Q -x 9 -n 6 -y 1 --inject-nan 7 -o "$TMP/rb_noefnan"
check "  each rolled back at step 7" test "$(grep -c '"step": 7, "rollback"' "$TMP/rb_efnan/log.jsonl" "$TMP/rb_noefnan/log.jsonl" | grep -c ':1$')" -eq 2
check "  and the two bitwise equal after it (losses, model): the rollback cleared the residuals" same_run "$TMP/rb_efnan" "$TMP/rb_noefnan"

# --- bytes: at D = 2 replica 0 sends and receives every bucket's whole buffer once each way, so a
# step's dp_bytes is 2 (n + 4 blocks) for int8 and 2 * 4 n for fp32, n the gradient's elements (the
# stage's parameters and the LM head's share of wte), blocks cut per tensor slice
bytes_ok() { python3 - "$TMP" <<'EOF'
import json, math, struct, sys
d = sys.argv[1]
maxT, V, L, NH, C, Vp = struct.unpack('<6i', open(d + '/i8/model.bin', 'rb').read(8 + 24)[8:])
per_layer = [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
slices = [Vp * C, maxT * C] + per_layer * L + [C, C] + [Vp * C]  # the LM head's share last
n = sum(slices)
blocks = sum(math.ceil(s / 64) for s in slices)
def got(run):
    return {r['dp_bytes'][0] for r in map(json.loads, open(f'{d}/{run}/log.jsonl')) if 'dp_bytes' in r}
assert got('i8') == {2 * (n + 4 * blocks)}, (got('i8'), 2 * (n + 4 * blocks))
assert got('blk') == {8 * n} and got('b32') == {8 * n}, (got('blk'), got('b32'), 8 * n)
print(f'n = {n}, {blocks} blocks: int8 {2 * (n + 4 * blocks)} B, fp32 {8 * n} B a step: {8 * n / (2 * (n + 4 * blocks)):.3f}x fewer')
EOF
}
check "dp_bytes per step: the formula, for int8, fp32 buckets and blocking fp32" bytes_ok
entropy_logged() { grep -q '"dp_entropy_bits": [0-9.]*' "$TMP/i8/log.jsonl"; }
check "the int8 values' entropy is logged (bits per value)" entropy_logged

# --- the drift monitor: int8 against fp32 on the same local gradients
check "--drift-every 4 with int8, D = 2" $MPI -np 2 $BIN $Q --drift-every 4 -o "$TMP/dr"
check "  the line" grep -Eq "int8 sync at step 4 \| cosine to the fp32 average of the same local gradients: lowest 0\.99" "$TMP/out"
dr_ok() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if 'drift_int8_cos' in l]
assert len(rows) == 3 and all(0.99 < r['drift_int8_min_cos'] < 1 for r in rows), rows" "$TMP/dr/log.jsonl"; }
check "  and its records, one per measurement, each cosine in (0.99, 1)" dr_ok

# --- a NaN in a gradient: reported, not quantized; the guard refuses the step and rolls back
check "--inject-nan 5 with int8, D = 2" $MPI -np 2 $BIN $Q --inject-nan 5 -o "$TMP/nan"
cp "$TMP/err" "$TMP/nan.err"
check "  reported" grep -q "stage 0 replica [01]: 1 gradient values of step 5 are not finite: their int8 blocks are not quantized" "$TMP/nan.err"
check "  by both replicas, each counting its own one value (the owner counted its averaged block's 64 too)" \
    test "$(grep -c "stage 0 replica [01]: 1 gradient values of step 5 are not finite" "$TMP/nan.err")" -eq 2
check "  and rolled back" grep -q '"step": 5, "rollback": "the gradient norm is not finite' "$TMP/nan/log.jsonl"

# --- convergence on the built-in data: int8 with error feedback within 0.5 % of fp32
C="-e d4 -b 4 -t 32 -x 60 -v 60 --val-batches 16 -s 0 --micro-batches 2"
val() { grep -o '"val_loss": [0-9.]*' "$1/log.jsonl" | tail -1 | cut -d' ' -f2; }
check "convergence: fp32, D = 2, 60 steps" $MPI -np 2 $BIN $C -o "$TMP/cf"
check "convergence: int8 + error feedback" $MPI -np 2 $BIN $C --grad-quant int8 -o "$TMP/ci"
check "convergence: int8 without error feedback" $MPI -np 2 $BIN $C --grad-quant int8 --error-feedback 0 -o "$TMP/cn"
gap() { python3 -c "import sys; f, i = float(sys.argv[1]), float(sys.argv[2]); print(f'{100 * (i - f) / f:+.3f}%')" "$(val "$TMP/cf")" "$(val "$TMP/$1")"; }
echo "     val loss: fp32 $(val "$TMP/cf"), int8 + EF $(val "$TMP/ci") ($(gap ci)), int8 alone $(val "$TMP/cn") ($(gap cn))"
within() { python3 -c "import sys; f, i = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(i - f) / f > 0.005)" "$(val "$TMP/cf")" "$(val "$TMP/ci")"; }
check "  int8 + error feedback within 0.5 % of fp32 ($(gap ci))" within

# --- the article's config as written, and a window that implies the tdpipe schedule
printf 'pipeline: {stages: 8, micro_batch: 16, aew_window: 6, grad_cache: 4MB}\n' > "$TMP/article.yaml"
check "the article's YAML (8 stages, 16 micro-batches, AEW 6, grad_cache 4MB) on 8 ranks" \
    $MPI -np 8 $BIN --config "$TMP/article.yaml" -e d8 -b 1 -t 16 -x 2 -v 0 -s 0 -o "$TMP/art"
check "  runs the tdpipe schedule with W = 6" grep -q "schedule tdpipe.*AEW W = 6" "$TMP/out"
check "--aew 2 without --schedule: tdpipe" $BIN -e d2 -b 2 -t 16 -x 2 -v 0 -s 0 --micro-batches 4 --aew 2 -o "$TMP/aew"
check "  the start-up table says so" grep -q "schedule tdpipe" "$TMP/out"
check "int8 with one replica: a note, and the run goes on unquantized" $BIN -e d2 -b 2 -t 16 -x 2 -v 0 -s 0 --grad-quant int8 -o "$TMP/d1"
check "  the note" grep -q "note: --grad-quant int8 with one replica per stage: there is nothing to average" "$TMP/err"

# --- refusals
refuse "an unknown --grad-quant" "--grad-quant fp16: expected none or int8" $BIN --grad-quant fp16
refuse "--quant-block 0" "--quant-block: 0 is out of range" $BIN --quant-block 0
refuse "--error-feedback 2" "--error-feedback: 2 is out of range" $BIN --error-feedback 2
refuse "--grad-cache with an unknown unit" "--grad-cache 4XB: unknown unit 'XB'" $BIN --grad-cache 4XB
refuse "--grad-cache 2000 slots" "--grad-cache 2000: a slot count is a whole number from 0 to 1024" $BIN --grad-cache 2000
refuse "--grad-cache 1B (less than one value)" "--grad-cache 1B: a bucket holds at least one fp32 value" $BIN --grad-cache 1B
refuse "--grad-cache -3" "--grad-cache -3: expected a count" $BIN --grad-cache -3
refuse "YAML grad_cache: 4 parsecs" "grad_cache|--grad-cache 4 parsecs: unknown unit" bash -c "printf 'pipeline: {grad_cache: 4 parsecs}\n' > '$TMP/bad.yaml' && $BIN --config '$TMP/bad.yaml'"
finish
