#!/usr/bin/env bash
# A stop at a random moment held against the unbroken run (README, Training: what SIGINT, SIGTERM and
# SIGUSR1 do). Each case is one seeded draw of flags (dev/sweep_lib.sh, as dev/flag_sweep.sh draws
# them; 12 steps, validation every 4) run at a drawn P x D twice: unbroken, and sent a drawn signal
# at a drawn rank (every fourth case: SIGUSR1 at mpirun, which forwards it to every rank) once its
# log holds a drawn step (one case in six: at a drawn moment of its start-up).
# What must hold, by what the stopped run says:
#   mid-run    "stopped by signal": exit 0, and a resume (-y 1, at another drawn P, every second case on
#              the other CPU backend) ends with every loss, norm, LR and val loss and model.bin bitwise
#              the unbroken run's (every third case: the resume, signalled in its start-up in turn,
#              resumed once more);
#   last-step  "signal N at the last step": the unbroken run's figures and model.bin (less the last
#              val loss where the stop cut that validation short);
#   late       the signal came as the run ended: the same as last-step;
#   start-up   a non-zero exit before any step, no checkpoint written, and the same run started again
#              in its folder ends as the unbroken one.
# One line a case ("case N ok|DIFF KIND ..."; the flags after "::"), then the tally; exit 1 where any
# case differs. Needs mpirun and make_shards (make builds it). A case takes 10-60 s on 2 cores.
# usage: dev/signal_sweep.sh [CASES (default 20)] [SEED (default 1)] [binary (default ./train_tdpipe)]
set -u
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"
source "$(dirname "$0")/sweep_lib.sh"; sweep_start signal_sweep "$@"
STEPS=12

# ranks DIR [mpirun]: the pids of the trainer processes writing to DIR, in pid order (or of the
# mpirun that launched them)
ranks() {
    local p names=(train_tdpipe "$(basename "$BIN" | cut -c1-15)")
    [ "${2:-}" = mpirun ] && names=(mpirun)
    for p in $(for n in "${names[@]}"; do pgrep -x "$n"; done | sort -nu); do
        tr '\0' ' ' < "/proc/$p/cmdline" 2> /dev/null | grep -qF -- "-o $1 " && echo "$p"
    done
}
# has_step DIR K: DIR's log holds step K's record
has_step() { grep -qE "^\{\"step\": $2, \"loss\"" "$1/log.jsonl" 2> /dev/null; }

# signal_when DIR JOB MOMENT [mpirun]: once the run writing DIR (background job JOB) reaches the moment
# (start: start_ms after its first rank exists; step: step K's record in its log, then delay_ms, into
# its validation where it has one), sends SIG to one of its ranks, drawn, or to its mpirun (which
# forwards SIGUSR1 to every rank: README's way to stop a run under mpirun); target: the pid, or none
signal_when() {
    local d=$1 job=$2 _ pids
    for _ in $(seq 6000); do [ -n "$(ranks "$d")" ] || ! kill -0 "$job" 2> /dev/null && break; sleep 0.01; done
    if [ "$3" = start ]; then
        sleep "$(printf '0.%03d' "$start_ms")"
    else
        for _ in $(seq 6000); do has_step "$d" "$K" || ! kill -0 "$job" 2> /dev/null && break; sleep 0.01; done
        sleep "$(printf '0.%03d' "$delay_ms")"
    fi
    pids=($(ranks "$d" "${4:-}"))
    target=none
    [ ${#pids[@]} -gt 0 ] && target=${pids[$((rank % ${#pids[@]}))]} && kill -"$sig" "$target" 2> /dev/null
    return 0
}

# resume: the stopped run resumed (-y 1) at P2 stages on the backend dev_s, with the drawn thread count
resume() { OMP_NUM_THREADS=$threads run "$k" $((P2 * D)) $F --stages "$P2" --device "$dev_s" -y 1; }

bad=0 mid=0 lastn=0 late=0 startup=0 vcut=0 resumes=0
for i in $(seq 1 "$N"); do
    sweep_draw "-x $STEPS -v 4 --val-batches 20"
    pick sig TERM INT USR1
    K=$((1 + RANDOM % STEPS)) at_start=$((RANDOM % 6 == 0)) delay_ms=$((RANDOM % 40)) start_ms=$((RANDOM % 800)) rank=$RANDOM
    dev_s=$dev; [ $((i % 2)) -eq 0 ] && dev_s=$dev_other
    u=$TMP/u$i k=$TMP/k$i np=$((P * D))
    run "$u" "$np" $F --stages "$P"
    rc_u=$?
    run "$k" "$np" $F --stages "$P" &
    job=$!
    to=rank; [ $((i % 4)) -eq 0 ] && to=mpirun sig=USR1 # every fourth: README's way under mpirun
    if [ "$at_start" -eq 1 ]; then signal_when "$k" $job start $to; else signal_when "$k" $job step $to; fi
    target1=$target
    wait $job
    rc_k=$?
    mv "$k.txt" "$k.stop.txt"
    what="" kind="" in_val=0
    sweep_numbers "$u/log.jsonl" > "$u.n" 2> /dev/null
    if [ "$rc_u" -ne 0 ]; then
        what=" unbroken-exit-$rc_u($(first_error "$u.txt"))"
    elif [ "$rc_k" -ne 0 ]; then
        kind=start-up
        [ "$target1" != none ] || what="$what exit-$rc_k-unsignalled($(first_error "$k.stop.txt"))"
        [ -z "$(sweep_numbers "$k/log.jsonl" 2> /dev/null)" ] || what="$what exit-$rc_k-after-a-step"
        ! compgen -G "$k/ckpt_*.tdck" > /dev/null || what="$what a-checkpoint" # (compgen globs under set -f)
        # and nothing it left (a lock, an empty log) stands in the way of the same run started again
        if [ -z "$what" ]; then
            run "$k" "$np" $F --stages "$P"
            rc_r=$?
            [ $rc_r -eq 0 ] || what="$what rerun-exit-$rc_r($(first_error "$k.txt"))"
            sweep_numbers "$k/log.jsonl" > "$k.n"
            cmp -s "$u.n" "$k.n" || what="$what rerun-numbers"
            cmp -s "$u/model.bin" "$k/model.bin" || what="$what rerun-model"
        fi
    else
        # a stop that cut a validation short: the unbroken run has a val loss at the stopped run's last step, it has none
        sweep_numbers "$k/log.jsonl" > "$k.n"
        last=$(awk 'END { print $1 }' "$k.n")
        grep -q "^$last val_loss\"" "$u.n" && ! grep -q "^$last val_loss\"" "$k.n" && in_val=1
        if grep -q "^stopped by signal" "$k.stop.txt"; then
            kind=mid-run again=1
            if [ $((i % 3)) -eq 0 ]; then # every third: the resume is signalled too, in its start-up, and resumed again
                resume &
                job=$!
                signal_when "$k" $job start
                wait $job
                rc_r=$?
                mv "$k.txt" "$k.resume1.txt"
                if [ $rc_r -ne 0 ]; then kind="$kind,resume-stopped-in-start-up"
                elif grep -q "^stopped by signal" "$k.resume1.txt"; then kind="$kind,resume-stopped-mid-run"
                else kind="$kind,resume-late" again=0; fi
                resumes=$((resumes + again))
            fi
            if [ $again -eq 1 ]; then
                resume
                rc_r=$?
                [ $rc_r -eq 0 ] || what="$what resume-exit-$rc_r($(first_error "$k.txt"))"
            fi
        else
            kind=late; grep -q "at the last step" "$k.stop.txt" && kind=last-step
        fi
        sweep_numbers "$k/log.jsonl" > "$k.n"
        # a stop in the last step's validation ends the run without that val loss (README, Training)
        grep -v "^$STEPS val_loss\"" "$u.n" > "$u.cut"
        cmp -s "$u.n" "$k.n" || { [ "$kind" = last-step ] && [ "$in_val" = 1 ] && cmp -s "$u.cut" "$k.n"; } || what="$what numbers"
        cmp -s "$u/model.bin" "$k/model.bin" || what="$what model"
    fi
    [ "$in_val" = 1 ] && kind="$kind(validation-cut)" vcut=$((vcut + 1))
    case $kind in mid-run*) mid=$((mid + 1)) ;; last-step*) lastn=$((lastn + 1)) ;; late) late=$((late + 1)) ;; start-up) startup=$((startup + 1)) ;; esac
    [ -n "$what" ] && bad=$((bad + 1))
    when="step $K + $delay_ms ms"; [ "$at_start" -eq 1 ] && when="start-up + $start_ms ms"
    printf 'case %d %s %s SIG%s to %s pid %s of %d at %s P %d D %d resumed-P %d resumed-device %s :: %s\n' "$i" "${what:+DIFF$what}" \
        "${kind:-none}" "$sig" "$to" "$target1" "$np" "$when" "$P" "$D" "$P2" "$dev_s" "$F" | sed 's/^\(case [0-9]*\)  /\1 ok /'
done
echo "signal_sweep: $bad of $N cases differ (seed $SEED): $mid stopped mid-run, $lastn at the last step, $late late, $startup in start-up; $vcut of them in a validation; $resumes resumes stopped in turn"
[ "$bad" -eq 0 ]
