#!/usr/bin/env bash
# The trainer under bad conditions: tokens a fresh model cannot hold, a fresh run in an earlier run's
# folder (moved aside, nothing lost), two runs sharing -o, a run too big for the memory, a model.bin that cannot be written, an unwritable
# --trace, signals (during validation, twice, on a rank other than 0, SIGUSR1 to mpirun), a stopped rank under
# --comm-timeout (and the resume afterwards), a resume past -x, log.jsonl trimmed on resume, left-over
# temporary files removed. Each ends with one clear message and a non-zero exit, or with the run going on.
source tests/lib.sh
use_mpi reliability
S="-e d2 -b 2 -t 16 -v 0 -s 0"
# rank_pid R DIR: the process of world rank R of the run writing to DIR (Open MPI puts the rank in its environment)
rank_pid() {
    local p
    for p in $(pgrep -f "^${BIN%% *} .*-o $2"); do
        tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo $p; return; }
    done
}

# shard DIR NAME TOKENIZER TOKEN: a shard of 4096 tokens 0..99 with TOKEN once in the middle
# (header: 256 int32, magic 20240520, version 1, token count, tokenizer id: 1 gpt2, 2 bytes)
shard() { python3 - "$@" <<'EOF'
import struct, sys
d, name, tok, bad = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
toks = [i % 100 for i in range(4096)]
toks[2049] = bad
hdr = [0] * 256
hdr[0], hdr[1], hdr[2], hdr[3] = 20240520, 1, len(toks), tok
open(f"{d}/{name}", "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(toks)}H", *toks))
EOF
}

# --- tokens a fresh model's vocabulary cannot hold: refused before training, naming file and offset
mkdir -p "$TMP/data"
shard "$TMP/data" bytes_train.bin 2 300
refuse "a byte-level shard holding token 300 (a fresh model has V = 256)" "bytes_train.bin: token 300 at token offset 2049 .* is >= V = 256" \
    $BIN $S -x 2 -i "$TMP/data/bytes_train.bin" -o "$TMP/tok1"
shard "$TMP/data" gpt2_train.bin 1 65535
refuse "a GPT-2 shard holding token 65535 (a fresh model has V = 50257)" "gpt2_train.bin: token 65535 at token offset 2049 .* is >= V = 50257" \
    $BIN $S -x 2 -i "$TMP/data/gpt2_train.bin" -o "$TMP/tok2"
shard "$TMP/data" ok_train.bin 2 99
check "a byte-level shard within V trains" $BIN $S -x 2 -i "$TMP/data/ok_train.bin" -o "$TMP/tok3"

# --- a fresh run in the folder of an earlier one: its files move to earlier-run-*/, intact
check "a first run, checkpoint every 2 steps" $BIN $S -x 4 -n 2 -o "$TMP/again"
sha_before=$(cd "$TMP/again" && sha256sum ckpt_*.tdck log.jsonl model.bin | sort)
check "a second, fresh run in the same -o" $BIN $S -x 3 -o "$TMP/again"
cp "$TMP/err" "$TMP/again.err"
check "  says where the earlier run's files went" grep -q "an earlier run's files (2 checkpoints.*) moved to .*earlier-run-.*(nothing deleted)" "$TMP/again.err"
moved_intact() {
    local sub; sub=$(ls -d "$TMP/again"/earlier-run-* | head -1)
    [ "$(cd "$sub" && sha256sum ckpt_*.tdck log.jsonl model.bin | sort)" = "$sha_before" ] &&
        [ "$(losses "$TMP/again" | wc -l)" -eq 3 ] && ! ls "$TMP/again"/ckpt_00000002.tdck 2>/dev/null
}
check "  every earlier file is there byte for byte; the new log holds only the new run" moved_intact
# a fresh run by mistake, killed before its first checkpoint (its checkpoint removed here): a resume
# finds none in -o and says where the earlier run's went
rm -f "$TMP/again"/ckpt_*.tdck
refuse "-y 1 after a fresh run moved the checkpoints aside" "no checkpoint in .*again to resume from \(a fresh run there moved an earlier run's files to .*again/earlier-run-[0-9]{8}-[0-9]{6}: move its checkpoints back" \
    $BIN $S -x 6 -y 1 -o "$TMP/again"

# stopped_step ERR SIG: the step after which a run says signal SIG stopped it (empty if it does not)
stopped_step() { grep -o "stopped by signal $2 after step [0-9]*" "$1" | grep -o "[0-9]*$"; }
# has_ckpt DIR STEP: the checkpoint of that step is there
has_ckpt() { [ -n "$2" ] && test -s "$1/ckpt_$(printf %08d "$2").tdck"; }

# --- two runs sharing -o: the second is refused at once and the first goes on untouched. The first
# runs until told to stop (a fixed -x finished before the probes on a fast CI machine), then stops on SIGINT
$BIN $S -x 100000000 -o "$TMP/shared" >/dev/null 2>"$TMP/first.err" & first=$!
for _ in $(seq 100); do [ -s "$TMP/shared/log.jsonl" ] && break; sleep 0.1; done
refuse "a second run on an -o in use" "-o .*shared is in use by process $first on host" $BIN $S -x 2 -o "$TMP/shared"
refuse "  also with -y 1" "is in use by process $first" $BIN $S -x 2 -y 1 -o "$TMP/shared"
kill -INT $first; wait $first; rc=$?
first_intact() { # RC: exit 0, one log record per step up to the step it names, and that step's checkpoint
    local k; k=$(stopped_step "$TMP/first.err" 2)
    [ "$1" -eq 0 ] && has_ckpt "$TMP/shared" "$k" && [ "$(losses "$TMP/shared" | wc -l)" -eq "$k" ]
}
check "  the first run, stopped by SIGINT (exit $rc), logged every step once and checkpointed the last" first_intact $rc
check "  and its lock is gone: a later run may use the folder" $BIN $S -x 2 -y 0 -o "$TMP/shared"

# --- memory: a run that cannot fit is refused with the figures before anything is allocated
refuse "-e d12 -b 2000 -t 64 on this machine (one slot: no recomputation offered)" \
    "this run would reserve [0-9.]+ GiB of host memory .* but [0-9.]+ GiB are available .*: lower -b, -t or the model$" \
    $BIN -e d12 -b 2000 -t 64 -x 1 -o "$TMP/big"
check "  and did not create -o" test ! -e "$TMP/big"
# a model file whose header describes 206 G parameters (L 1024, C 4096; sparse: the header, then a
# hole of the size it describes): its weights alone are refused, naming -e, before they are
# allocated (malloc failed first, with a message naming neither -e nor what did not fit)
python3 - "$TMP/huge.bin" <<'PY'
import struct, sys
maxT, V, L, NH, C, Vp = 1024, 50257, 1024, 16, 4096, 50304
n = Vp*C + maxT*C + L*(12*C*C + 13*C) + 2*C
with open(sys.argv[1], 'wb') as f:
    f.write(struct.pack('<256i', *([20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248)))
    f.truncate(1024 + 4*n)
PY
refuse "a model file of 206 G parameters" "-e $TMP/huge.bin: the model needs [0-9.]+ GiB of host memory \\(weights, gradient and AdamW state, 16 bytes a parameter, 1 rank\\(s\\)\\) but [0-9.]+ GiB are available" \
    $BIN -e "$TMP/huge.bin" -b 2 -t 16 -x 1 -o "$TMP/big"
check "  and did not create -o" test ! -e "$TMP/big"
refuse "GPipe's 100001 micro-batches in flight (more than one slot: recomputation is offered)" \
    "this run would reserve [0-9.]+ GiB .* 100001 activation slots.*: lower -b, -t, --micro-batches \\(GPipe holds them all in flight\\) or the model, or give --recompute 1$" \
    $BIN -e d12 -b 1 -t 16 --micro-batches 100001 --schedule gpipe -x 1 -o "$TMP/big"
# a window's stashes at P = 1: its one stage is the last, whose backward follows each forward, so one
# activation slot; 1000 steps of W 100000 over M 1 keep 999 older versions
refuse "a window of 100000 micro-batches' 999 stashes over 1000 steps (one slot: no recomputation offered)" \
    "this run would reserve [0-9.]+ GiB .* 1 activation slots, 999 weight stashes .*: lower -b, -t, --aew or the model$" \
    $BIN -e d12 -b 1 -t 16 --micro-batches 1 --schedule tdpipe --aew 100000 -x 1000 --consistency-every 1000 -o "$TMP/big"
check "  and did not create -o" test ! -e "$TMP/big"
check "--aew 8 with M = 8: runs with a note that every micro-batch is stale" $BIN $S -x 2 --micro-batches 8 --schedule tdpipe --aew 8 -o "$TMP/stale"
check "  the note" grep -q "note: --aew 8 with M = 8: every micro-batch of a step runs on weights at least one update old" "$TMP/err"
check "--aew auto with a compensation (it may choose up to 2M)" $BIN $S -x 3 --micro-batches 4 --schedule tdpipe --aew auto --stale-comp predict -o "$TMP/auto_note"
check "  no such note before it has chosen (it said every micro-batch was stale, then chose W = 0 or 1)" bash -c "! grep -q 'every micro-batch of a step runs on weights' '$TMP/err'"

# --- an output the run cannot write is refused before training, not at the end
refuse "--trace into a folder that does not exist" "--trace $TMP/nowhere/trace.json: " $BIN $S -x 2 --trace "$TMP/nowhere/trace.json" -o "$TMP/tr"
check "  nothing trained: no log" test ! -e "$TMP/tr/log.jsonl"
# model.bin is written at the end, as model.bin.tmp renamed over it: a folder at model.bin (or a
# FIFO at the temporary name) failed that write after the whole run had trained
check "a run with a checkpoint" $BIN $S -x 2 -n 2 -o "$TMP/mdir"
rm "$TMP/mdir/model.bin" && mkdir "$TMP/mdir/model.bin"
refuse "a directory at -o's model.bin: refused at start" "-o $TMP/mdir/model.bin: is a directory, where the run writes its model at the end" \
    $BIN $S -x 4 -n 2 -o "$TMP/mdir"
untouched() { ! ls "$TMP/mdir" | grep -q earlier-run && test "$(losses "$TMP/mdir" | wc -l)" -eq 2; }
check "  nothing trained, the earlier run's files not moved aside" untouched
refuse "  the same on a resume" "-o $TMP/mdir/model.bin: is a directory" $BIN $S -x 4 -n 2 -y 1 -o "$TMP/mdir"
rmdir "$TMP/mdir/model.bin" && mkfifo "$TMP/mdir/model.bin.tmp"
refuse "a FIFO at -o's model.bin.tmp: refused at start" "-o $TMP/mdir/model.bin.tmp: is a FIFO, where the run writes its model" \
    $BIN $S -x 4 -n 2 -y 1 -o "$TMP/mdir"
check "  the log is as it was" untouched
# --trace writes its file whole, so it may only name a new file or an earlier trace: never the run's
# own files (by name, existing or not) nor an input (each was written over, exit 0)
check "a run with checkpoints and a trace" $BIN $S -x 2 -n 1 -o "$TMP/own" --trace "$TMP/own.json"
check "  the same --trace again: an earlier trace is written over" $BIN $S -x 2 -n 1 -o "$TMP/own2" --trace "$TMP/own.json"
for f in log.jsonl model.bin ckpt_00000001.tdck tdpipe.lock ckpt_00000009.tdck; do
    refuse "--trace naming the run's $f" "--trace $TMP/own/$f: is the run's own $f in -o" $BIN $S -x 3 -n 1 -y 1 -o "$TMP/own" --trace "$TMP/own/$f"
done
check "  and each file is as it was: the log has 2 records, the checkpoint reads" test "$(losses "$TMP/own" | wc -l)" -eq 2
check "  resume from it" $BIN $S -x 3 -n 1 -y 1 -o "$TMP/own"
cp "$TMP/own/model.bin" "$TMP/input.bin"
refuse "--trace naming the -e model file" "--trace $TMP/input.bin: exists and is not a trace" $BIN $S -e "$TMP/input.bin" -x 1 -o "$TMP/own3" --trace "$TMP/input.bin"
check "  which is untouched" cmp "$TMP/input.bin" "$TMP/own/model.bin"
refuse "-y 1 with --synthetic-compute (it cut a real run's log back to step 0)" "-y 1 with --synthetic-compute: a synthetic run has no model" \
    $BIN -x 4 -y 1 --synthetic-compute -v 0 -s 0 -b 2 -t 16 -o "$TMP/own"
check "  the log is as it was" test "$(losses "$TMP/own" | wc -l)" -eq 3
# a log that cannot be written (a full disk; here a 4 KiB file-size limit, SIGXFSZ ignored so that
# the write fails with EFBIG): said once with the step, the run goes on, and exits 1
full_log() { (trap '' XFSZ; ulimit -f 4; exec $BIN --synthetic-compute -x 60 -v 0 -s 0 -b 2 -t 16 -o "$TMP/full") >/dev/null; }
refuse "a log.jsonl whose writes fail" "log.jsonl: the record of step [0-9]+ could not be written \(File too large\)" full_log
check "  said once" test "$(grep -c "could not be written" "$TMP/err")" -eq 1
# an error only a later stage meets (a NaN in lnfb, which only the last stage loads) is said by that rank
cp "$TMP/own/model.bin" "$TMP/nan_last.bin"
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan_last.bin" bs=1 seek=$(( $(stat -c %s "$TMP/nan_last.bin") - 4 )) conv=notrunc 2>/dev/null
refuse "a NaN weight that only stage 1 of 2 loads: rank 1 names it" "rank 1 \(stage 1, replica 0\): -e: .*nan_last.bin: parameter [0-9]+ \(lnfb\[[0-9]+\]\) is nan" \
    $MPI -np 2 $BIN $S -e "$TMP/nan_last.bin" --stages 2 --micro-batches 2 -x 1 -o "$TMP/nan2"

# --- a resume with -x at or below the checkpoint's step, and a resume that trims log.jsonl
check "a run to step 6, checkpoints at 3 and 6" $BIN $S -x 6 -n 3 -o "$TMP/res"
refuse "-y 1 -x 6 (nothing left to do)" "-y 1: the newest checkpoint in .* is at step 6, already at or past -x 6" $BIN $S -x 6 -n 3 -y 1 -o "$TMP/res"
rm "$TMP/res/ckpt_00000006.tdck"
check "resume from step 3 with steps 4..6 already in log.jsonl" $BIN $S -x 8 -n 3 -y 1 -o "$TMP/res"
check "  says so" grep -q "3 record(s) after step 3 removed" "$TMP/err"
check "a run to step 8 without a break" $BIN $S -x 8 -n 3 -o "$TMP/res_plain"
one_per_step() { [ "$(losses "$TMP/res" | wc -l)" -eq 8 ] && diff <(losses "$TMP/res") <(losses "$TMP/res_plain") >/dev/null; }
check "  the resumed log has each step once, and its losses are the unbroken run's" one_per_step
# a log whose last record was cut off mid-write (the step's own, not one past it): said as that
check "a run to step 3 with a checkpoint at 3" $BIN $S -x 3 -n 3 -o "$TMP/torn"
printf '{"step": 3, "lo' >> "$TMP/torn/log.jsonl"
check "resume from step 3 with a torn last line in log.jsonl" $BIN $S -x 4 -n 3 -y 1 -o "$TMP/torn"
check "  says the torn line went, and counts no record past step 3" sh -c "grep -q 'its last line, cut off in the middle of its write, removed' '$TMP/err' && ! grep -q 'record(s) after step' '$TMP/err'"
check "  and the log is whole records, steps 1 to 4 once each" sh -c "[ \"\$(grep -c '\"loss\"' '$TMP/torn/log.jsonl')\" -ge 4 ] && ! grep -q '\"lo\$' '$TMP/torn/log.jsonl'"

# --- temporary files a killed run left behind are removed by the next
check "a run with a checkpoint" $BIN $S -x 2 -n 2 -o "$TMP/tmpf"
echo junk > "$TMP/tmpf/.ckpt_00000004.tdck.tmp"; echo junk > "$TMP/tmpf/model.bin.tmp"; echo junk > "$TMP/tmpf/log.jsonl.tmp"
check "a resume in a folder with .tmp left-overs" $BIN $S -x 4 -n 2 -y 1 -o "$TMP/tmpf"
check "  the left-overs are gone and the checkpoint of step 4 is real" bash -c "test -z \"\$(ls -A '$TMP/tmpf' | grep -E 'tmp|trim')\" && test -s '$TMP/tmpf/ckpt_00000004.tdck' && ! grep -q junk '$TMP/tmpf/ckpt_00000004.tdck'"

# --- signals. SIGINT during a long validation is honoured within the validation, with a checkpoint
$BIN $S -x 20 -v 10 --val-batches 1000000 -o "$TMP/sigval" >"$TMP/sv.out" 2>"$TMP/sv.err" & pid=$!
for _ in $(seq 200); do [ "$(losses "$TMP/sigval" 2>/dev/null | wc -l)" -ge 10 ] && break; sleep 0.1; done
sleep 1; t0=$(date +%s.%N); kill -INT $pid; wait $pid; rc=$?; t1=$(date +%s.%N)
check "SIGINT during a validation of a million batches: exit $rc (a graceful stop) within $(printf %.1f "$(echo "$t1 - $t0" | bc)") s" \
    test $rc -eq 0 -a "$(echo "$t1 - $t0 < 20" | bc)" -eq 1
check "  says which signal and how to resume" grep -q "stopped by signal 2 after step 10; resume with the same flags and -y 1" "$TMP/sv.err"
check "  and wrote the step-10 checkpoint" test -s "$TMP/sigval/ckpt_00000010.tdck"
# a signal at the last step (here in its validation): nothing is left to resume (-y 1 would be refused,
# as past -x), so the run ends as it would have, with model.bin (it used to skip it and say to resume)
$BIN $S -x 1 -v 1 --val-batches 1000000 -o "$TMP/siglast" >/dev/null 2>"$TMP/sl.err" & pid=$!
for _ in $(seq 200); do [ "$(losses "$TMP/siglast" 2>/dev/null | wc -l)" -ge 1 ] && break; sleep 0.1; done
kill -TERM $pid; wait $pid; rc=$?
check "SIGTERM during the last step's validation: exit $rc, and model.bin is written" test $rc -eq 0 -a -s "$TMP/siglast/model.bin"
check "  says the run ends as it would have, not how to resume" bash -c "grep -q 'signal 15 at the last step (1): the run ends' '$TMP/sl.err' && ! grep -q 'resume with' '$TMP/sl.err'"
# a second SIGINT ends a run at once, even when the first is being honoured
# (a step of d8 at B = 16, T = 128 takes seconds here, so the first is still being honoured)
$BIN -e d8 -b 16 -t 128 -x 1000 -v 0 -s 0 -n 1 -o "$TMP/sig2" >/dev/null 2>"$TMP/s2.err" & pid=$!
for _ in $(seq 600); do [ -s "$TMP/sig2/log.jsonl" ] && break; sleep 0.1; done
kill -INT $pid; sleep 0.05; kill -INT $pid; wait $pid; rc=$?
check "a second SIGINT exits at once with 128 + 2 (exit $rc)" test $rc -eq 130
check "  and says so" grep -q "a second signal: exiting at once" "$TMP/s2.err"
# SIGTERM delivered to rank 1 only: every rank stops after the same step and rank 0 names signal 15
$MPI -np 2 $BIN $S -x 100000000 --stages 2 --micro-batches 2 -n 1 --keep 2 -o "$TMP/sigr" >/dev/null 2>"$TMP/sr.err" & mpid=$!
for _ in $(seq 300); do [ "$(losses "$TMP/sigr" 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
rank1=$(rank_pid 1 "$TMP/sigr")
kill -TERM "$rank1"; wait $mpid; rc=$?
check "SIGTERM to the last rank only: rank 0 reports signal 15 (exit $rc)" grep -q "stopped by signal 15 after step" "$TMP/sr.err"
check "  the checkpoint of the step it names is there" has_ckpt "$TMP/sigr" "$(stopped_step "$TMP/sr.err" 15)"
# SIGUSR1 to mpirun: Open MPI forwards it to every rank at once (SIGTERM it holds for
# odls_base_sigkill_timeout, 1 s by default, then kills the ranks: a run stopped so wrote no checkpoint)
$MPI -np 2 $BIN $S -x 100000000 --stages 2 --micro-batches 2 -n 1 --keep 2 -o "$TMP/sigu" >/dev/null 2>"$TMP/su.err" & mpid=$!
for _ in $(seq 300); do [ "$(losses "$TMP/sigu" 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.1; done
pkill -USR1 -P $mpid; wait $mpid; rc=$? # (-P: mpirun, the child of $MPI's timeout, which USR1 would end)
check "SIGUSR1 to mpirun: exit $rc, and rank 0 reports signal 10" bash -c "[ $rc -eq 0 ] && grep -q 'stopped by signal 10 after step' '$TMP/su.err'"
check "  the checkpoint of the step it names is there" has_ckpt "$TMP/sigu" "$(stopped_step "$TMP/su.err" 10)"

# --- a stopped rank: --comm-timeout 3 names what the others wait for, every rank exits non-zero
check "a P = 2 run with a checkpoint at step 2" $MPI -np 2 $BIN $S -x 2 --stages 2 --micro-batches 2 -n 2 -o "$TMP/hang"
$MPI -np 2 $BIN $S -x 100000 --stages 2 --micro-batches 2 -n 2 -y 1 --comm-timeout 3 -o "$TMP/hang" >/dev/null 2>"$TMP/hang.err" & mpid=$!
for _ in $(seq 300); do [ "$(losses "$TMP/hang" | wc -l)" -ge 5 ] && break; sleep 0.1; done
rank1=$(rank_pid 1 "$TMP/hang")
kill -STOP "$rank1"; t0=$(date +%s); wait $mpid; rc=$?; t1=$(date +%s); kill -CONT "$rank1" 2>/dev/null; kill -KILL "$rank1" 2>/dev/null
check "SIGSTOP of one rank under --comm-timeout 3: the run ends (exit $rc) in $((t1 - t0)) s" test $rc -ne 0 -a $((t1 - t0)) -lt 60
# (stopped while rank 0 writes a checkpoint, the wait had comm_timeout_allow's allowance too, and says so)
check "  naming the stage, what it waited for and the timeout" grep -Eq "stage 0 \(replica 0\) waited [0-9]+ s for .* \(--comm-timeout 3( \+ [0-9.e+]+ s for [^)]*)?\): a rank may be stopped, hung or gone" "$TMP/hang.err"
# the stopped rank, continued by mpirun to be ended, finds its own deadline past: the stop is not
# waiting (comm.c's WaitClock), so it does not blame the rank that waited for it
check "  the stopped rank (stage 1) does not report a wait of its own" bash -c "! grep -q 'stage 1 (replica 0) waited' '$TMP/hang.err'"
sleep 1
check "  a resume afterwards goes on from the newest checkpoint" $MPI -np 2 $BIN $S -x 100 --stages 2 --micro-batches 2 -n 50 -y 1 -o "$TMP/hang"
refuse "--comm-timeout -1" "--comm-timeout: -1 is out of range" $BIN --comm-timeout -1
# rank 0 writing a checkpoint (d8: 257 MB, 3 s and more here) while replica 1 waits under --comm-timeout 2 (1 s is
# too close to a healthy first step's wait on a loaded machine):
# comm_timeout_allow gives that wait the write's time, so the healthy run does not time out
check "a D = 2 run of d8 under --comm-timeout 2 with a checkpoint: the other rank waits out rank 0's write" \
    $MPI -np 2 $BIN -e d8 -b 1 -t 16 -v 0 -s 0 -x 1 -n 1 --comm-timeout 2 -o "$TMP/slowck"
check "  no wait timed out, and the checkpoint is there" bash -c "! grep -q 'waited' '$TMP/err' && test -s '$TMP/slowck/ckpt_00000001.tdck'"
rm -rf "$TMP/slowck"

# --- consistency points catch copies that drifted apart (--inject-diverge: one bit of the last rank's
# wte): the run stops there, with no checkpoint of the diverged weights
DV="$S -x 6 --consistency-every 2 -n 2 --inject-diverge 4"
refuse "a bit flipped in the last stage's tied wte at P = 2: step 4's check fails" \
    "step 4: consistency check FAILED: the tied embedding's copies on the first and last stage differ$" \
    $MPI -np 2 $BIN $DV --stages 2 --micro-batches 2 -o "$TMP/dvp"
check "  the checkpoint of step 2 stays, none of step 4 is written" bash -c "[ -e '$TMP/dvp/ckpt_00000002.tdck' ] && ! ls '$TMP/dvp'/ckpt_00000004* 2>/dev/null"
refuse "a bit flipped in replica 1's weights at D = 2: step 4's check fails" "step 4: consistency check FAILED: the replicas' weights differ$" \
    $MPI -np 2 $BIN $DV -o "$TMP/dvd"
# a flip the run would never make, or never check, is refused before anything runs
refuse "--inject-diverge 3: no check after step 3 (-n 2, --consistency-every 2, -x 6)" \
    "^train_tdpipe: --inject-diverge 3: the copies are not checked after step 3 \\(checks: every --consistency-every 2, every -n 2, and -x 6\\)" \
    $MPI -np 2 $BIN $S -x 6 --consistency-every 2 -n 2 --inject-diverge 3 -o "$TMP/dv3"
check "  no output folder" test ! -e "$TMP/dv3"
refuse "--inject-diverge 7 past -x 6" "^train_tdpipe: --inject-diverge 7: past the run's last step \\(-x 6\\)" \
    $MPI -np 2 $BIN $S -x 6 --inject-diverge 7 -o "$TMP/dv7"
refuse "--inject-diverge on one rank: no other copy" "^train_tdpipe: --inject-diverge 2: one rank holds the only copy of the weights" \
    $BIN $S -x 2 --inject-diverge 2 -o "$TMP/dv1"
finish
