#!/usr/bin/env bash
# Checkpoints through the trainer: a run stopped at step k and resumed gives bitwise the losses of
# the run that never stopped; SIGTERM finishes the step, checkpoints and exits 0; damaged
# checkpoints are skipped (saying so) or refused, and a failed write never harms the last good one.
source tests/lib.sh
Q="-s 0 -v 0 --shuffle 1"
losses_from() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1/log.jsonl" | awk -v k="$2" '{ s=$2; sub(",", "", s); if (s + 0 > k + 0) print $4 }'; }

# --- resume equivalence: stop at 10 (keep only that checkpoint), resume, compare steps 11..20
check "unbroken run: 20 steps, checkpoints every 10" $BIN -x 20 -n 10 $Q -o "$TMP/a"
check "checkpoints at 10 and 20" test -f "$TMP/a/ckpt_00000010.tdck" -a -f "$TMP/a/ckpt_00000020.tdck"
mkdir -p "$TMP/b" && cp "$TMP/a/ckpt_00000010.tdck" "$TMP/b/"
check "resume from step 10 with -y 1" $BIN -x 20 -n 10 $Q -y 1 -o "$TMP/b"
check "it says where it resumed" grep -q "resumed from .*ckpt_00000010.tdck at step 10" "$TMP/out"
same() { [ "$(losses_from "$TMP/b" 10 | wc -l)" -eq 10 ] && diff <(losses_from "$TMP/a" 10) <(losses_from "$TMP/b" 10); }
check "steps 11..20 bitwise equal to the unbroken run" same
check "final checkpoints bitwise equal" cmp "$TMP/a/ckpt_00000020.tdck" "$TMP/b/ckpt_00000020.tdck"
check "final models bitwise equal" cmp "$TMP/a/model.bin" "$TMP/b/model.bin"

# validation is a function of the weights alone: each evaluation reads the same validation batches
# from the start, so a resumed run's step-20 val loss is the unbroken run's, bitwise (a loader left
# where the step-10 evaluation stopped reads other batches in the unbroken run only)
check "unbroken run with validation at 10 and 20" $BIN -x 20 -n 10 -s 0 -v 10 -o "$TMP/va"
mkdir -p "$TMP/vb" && cp "$TMP/va/ckpt_00000010.tdck" "$TMP/vb/"
check "  resumed from step 10" $BIN -x 20 -n 10 -s 0 -v 10 -y 1 -o "$TMP/vb"
val20() { grep -o '"step": 20, "val_loss": [^,}]*' "$1/log.jsonl"; }
check "  step 20's val loss bitwise the unbroken run's" bash -c "[ -n \"\$1\" ] && [ \"\$1\" = \"\$2\" ]" _ "$(val20 "$TMP/va")" "$(val20 "$TMP/vb")"

# --- a run killed after its last checkpoint, before model.bin was in place: -y 1 with the same -x
# writes it (the resume was refused as past -x: the model could not be had as model.bin at all)
mkdir -p "$TMP/nm" && cp "$TMP/a/ckpt_00000020.tdck" "$TMP/nm/"
check "the last step's checkpoint without model.bin: -y 1 with the same -x writes it" $BIN -x 20 -n 10 $Q -y 1 -o "$TMP/nm"
check "  the unbroken run's model, bitwise" cmp "$TMP/a/model.bin" "$TMP/nm/model.bin"

# --- --keep: only the newest K stay
check "--keep 2 with a checkpoint every 5 steps" $BIN -x 20 -n 5 --keep 2 $Q -o "$TMP/k"
check "--keep 2 leaves the two newest" test "$(ls "$TMP/k"/ckpt_*.tdck | xargs -n1 basename | xargs)" = "ckpt_00000015.tdck ckpt_00000020.tdck"

# --- --keep counts only valid checkpoints: junk, a token shard, a FIFO and a folder named like
# newer checkpoints are neither counted nor deleted, and resume passes over them without waiting
mkdir -p "$TMP/j" && cp "$TMP/k"/ckpt_*.tdck "$TMP/j/"
for s in 97 98 99; do head -c 3000 /dev/urandom > "$TMP/j/ckpt_000000$s.tdck"; done
printf 'a token shard, not a checkpoint\n%.0s' {1..50} > "$TMP/j.txt"
build/dev/data/make_shards --tokenizer bytes -o "$TMP/jshard" "$TMP/j.txt" >/dev/null && cp "$TMP/jshard_train.bin" "$TMP/j/ckpt_00000001.tdck"
mkfifo "$TMP/j/ckpt_00000096.tdck"; mkdir "$TMP/j/ckpt_00000095.tdck"
check "resume among impostors, --keep 2, a checkpoint every 5 steps" $BIN -x 30 -n 5 --keep 2 $Q -y 1 -o "$TMP/j"
check "it resumed from step 20, skipping the junk, the FIFO and the folder" grep -q "resumed from .*ckpt_00000020.tdck at step 20" "$TMP/out"
check "the two newest valid ones (25, 30) kept, every impostor still there" \
    test "$(ls "$TMP/j" | grep '^ckpt_' | xargs)" = "ckpt_00000001.tdck ckpt_00000025.tdck ckpt_00000030.tdck ckpt_00000095.tdck ckpt_00000096.tdck ckpt_00000097.tdck ckpt_00000098.tdck ckpt_00000099.tdck"

# --- SIGTERM: finish the step, checkpoint, exit 0, say how to resume
$BIN -x 100000 $Q -o "$TMP/sig" >"$TMP/sig.out" 2>"$TMP/sig.err" &
pid=$!
for i in $(seq 1 200); do [ -f "$TMP/sig/log.jsonl" ] && [ "$(wc -l < "$TMP/sig/log.jsonl")" -ge 3 ] && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
check "SIGTERM: exit 0" test $rc -eq 0
check "SIGTERM: says how to resume" grep -q "resume with the same flags and -y 1" "$TMP/sig.err"
k=$(ls "$TMP/sig"/ckpt_*.tdck 2>/dev/null | head -1 | grep -o '[0-9]\{8\}' | sed 's/^0*//')
check "SIGTERM: a checkpoint of the last finished step (${k:-none})" test -n "$k" -a "$(wc -l < "$TMP/sig/log.jsonl")" = "$k"
check "SIGTERM: the run resumes from it" $BIN -x $((k + 2)) $Q -y 1 -o "$TMP/sig"
$BIN -x 100000 $Q -o "$TMP/int" >/dev/null 2>"$TMP/int.err" & pid=$!
for i in $(seq 1 200); do [ -s "$TMP/int/log.jsonl" ] && break; sleep 0.1; done
kill -INT $pid; wait $pid; rc=$?
check "SIGINT: exit 0 with a checkpoint" test $rc -eq 0 -a -n "$(ls "$TMP/int"/ckpt_*.tdck 2>/dev/null)"

# --- SIGTERM during a validation: the checkpoint owes it ('val_owed'), and the resumed run runs it
# before its first step, so its log is the unbroken run's (before, that val loss was never computed)
V="-x 3 -v 2 --val-batches 800 -s 0"
numbers() { grep -o '"step": [0-9]*, "\(loss\|val_loss\)": [^,}]*' "$1/log.jsonl"; }
check "unbroken: validation at steps 2 and 3" $BIN $V -o "$TMP/vu"
$BIN $V -o "$TMP/vs" >"$TMP/vs.out" 2>"$TMP/vs.err" & pid=$!
for i in $(seq 1 300); do [ -f "$TMP/vs/log.jsonl" ] && [ "$(wc -l < "$TMP/vs/log.jsonl")" -ge 2 ] && break; sleep 0.05; done
kill -TERM $pid; wait $pid; rc=$?
check "SIGTERM in step 2's validation: exit 0, a checkpoint at step 2" test $rc -eq 0 -a -f "$TMP/vs/ckpt_00000002.tdck"
check "  and no val loss logged for it (the signal landed inside)" test -z "$(grep val_loss "$TMP/vs/log.jsonl")"
check "  resumed" $BIN $V -y 1 -o "$TMP/vs"
check "  its losses and val losses (steps 2 and 3) bitwise the unbroken run's" diff <(numbers "$TMP/vu") <(numbers "$TMP/vs")
check "  and its model" cmp "$TMP/vu/model.bin" "$TMP/vs/model.bin"

# --- damaged checkpoints: the newest truncated -> fall back and say so; all damaged -> refuse
mkdir -p "$TMP/d" && cp "$TMP/a"/ckpt_*.tdck "$TMP/d/"
truncate -s 5000 "$TMP/d/ckpt_00000020.tdck" && cp "$TMP/d/ckpt_00000020.tdck" "$TMP/d20.damaged"
check "newest truncated: resumes from the older one" $BIN -x 20 $Q -y 1 -o "$TMP/d"
cp "$TMP/out" "$TMP/d.out"; cp "$TMP/err" "$TMP/d.err"
check "and says it skipped the newest" grep -q "skipping checkpoint .*ckpt_00000020.tdck: .*truncated" "$TMP/err"
check "and resumed at step 10" grep -q "at step 10" "$TMP/d.out"
# its own step-20 checkpoint does not write over the damaged file (it was renamed over it)
check "the damaged file is kept aside, byte for byte, not written over" cmp "$TMP/d20.damaged" "$TMP/d/ckpt_00000020.tdck.kept"
check "  saying so, and the new step-20 checkpoint is there" \
    bash -c "grep -q 'ckpt_00000020.tdck was there already .*kept as .*ckpt_00000020.tdck.kept' '$TMP/d.err' && test \$(stat -c %s '$TMP/d/ckpt_00000020.tdck') -gt 5000"
mkdir -p "$TMP/f" && cp "$TMP/a/ckpt_00000010.tdck" "$TMP/f/"
size=$(stat -c %s "$TMP/f/ckpt_00000010.tdck")
for off in 2000 $((size / 2)) $((size - 100)); do  # a flipped bit in the config section, params, adam_v
    cp "$TMP/a/ckpt_00000010.tdck" "$TMP/f/ckpt_00000010.tdck"
    byte=$(od -A n -t u1 -j $off -N 1 "$TMP/f/ckpt_00000010.tdck" | xargs)
    printf "$(printf '\\%03o' $((byte ^ 16)))" | dd of="$TMP/f/ckpt_00000010.tdck" bs=1 seek=$off conv=notrunc 2>/dev/null
    refuse "a flipped bit at byte $off: refused, no usable checkpoint" "ckpt_00000010.tdck: .*(CRC|damaged|corrupt)" $BIN -x 20 $Q -y 1 -o "$TMP/f"
done
mkdir -p "$TMP/m" && cp "$TMP/a/ckpt_00000010.tdck" "$TMP/m/"
printf '\x00\x00\x00\x00' | dd of="$TMP/m/ckpt_00000010.tdck" conv=notrunc 2>/dev/null
refuse "a checkpoint with a wrong magic" "ckpt_00000010.tdck: not a tdpipe checkpoint" $BIN -x 20 $Q -y 1 -o "$TMP/m"
refuse "a checkpoint whose model shape disagrees with the flags" "checkpoint has L = 2 but this run has 3" $BIN -e d3 -x 20 $Q -y 1 -o "$TMP/b"
refuse "a checkpoint whose batch disagrees with the flags" "checkpoint has B \(-b\) = 8 but this run has 4" $BIN -b 4 -x 20 $Q -y 1 -o "$TMP/b"
refuse "a resume with another --seed: the flags that set the data's order are named" "data loader state has seed 1337 .*\\(resume with the run's --seed and --shuffle\\)" \
    $BIN -x 30 $Q -y 1 --seed 7 -o "$TMP/b"
mkdir -p "$TMP/empty"
refuse "-y 1 with no checkpoint" "no checkpoint in .* to resume from" $BIN -x 20 $Q -y 1 -o "$TMP/empty"
refuse "-y 1 with an -o that does not exist (a typo): refused, not created" "-y 1: -o .*/typo does not exist: there is no run there to resume" $BIN -x 20 $Q -y 1 -o "$TMP/typo"
check "  and the folder was not made" test ! -e "$TMP/typo"

# --- a disk that fills during a write (RLIMIT_FSIZE: 2 MiB, the checkpoint needs more)
mkdir -p "$TMP/full" && cp "$TMP/a/ckpt_00000010.tdck" "$TMP/full/"
refuse "disk full while checkpointing: clear message, non-zero exit" "checkpoint at step 20 not written: .*(File too large|No space)" \
    bash -c "ulimit -f 2048; exec $BIN -x 20 $Q -y 1 -o '$TMP/full'"
check "the last good checkpoint is untouched" cmp "$TMP/a/ckpt_00000010.tdck" "$TMP/full/ckpt_00000010.tdck"
check "no temporary file is left behind" test -z "$(ls -A "$TMP/full" | grep tmp)"
check "and the run resumes from it afterwards" $BIN -x 20 $Q -y 1 -o "$TMP/full"

finish
