#!/usr/bin/env bash
# README's bitwise claims held against random flag combinations. Each case is one seeded draw
# (dev/sweep_lib.sh) of the model and its initial weights (-e dN, or an fp32 or bf16 llm.c file),
# batch, schedule, window, compensation, jitter, recomputation, backend, int8 sync, guard, drift
# monitor, noise scale, partition (and the ranks' speeds it weighs), placement, thread count, LR
# schedule, beta1, seed, data (built-in or shards) and its order, how M is given and the comm
# timeout, run three ways: at P = 1 (the reference), at a drawn P > 1
# (every second case from --print-config's file of its flags), and resumed at another drawn P from
# the reference's step-3 checkpoint (every second case on the other CPU backend). Every step's
# loss, norm, LR and val loss, and model.bin, must be bitwise the reference's. A seed names the same
# cases on every machine. One line a case ("case N ok" or "case N DIFF what differed"; the flags
# after "::"), then a total; exit 1 where any case differs or a run fails. Needs mpirun and
# make_shards (make builds it). A case takes 5-30 s on 2 cores.
# usage: dev/flag_sweep.sh [CASES (default 20)] [SEED (default 1)] [binary (default ./train_tdpipe)]
set -u
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"
source "$(dirname "$0")/sweep_lib.sh"; sweep_start flag_sweep "$@"

bad=0
for i in $(seq 1 "$N"); do
    sweep_draw "-x 6 -v 3 --val-batches 2"
    dev_s=$dev; [ $((i % 2)) -eq 0 ] && dev_s=$dev_other
    run "$TMP/r$i" "$D" $F
    rc_r=$?
    pf="$F --stages $P --partition $part $RS" via=flags rc_p=0
    if [ $((i % 2)) -eq 0 ]; then # every second case: those flags through --print-config's file
        via=config
        "$BIN" $pf --print-config > "$TMP/p$i.yaml" 2> "$TMP/p$i.txt" || rc_p=$?
        pf="--config $TMP/p$i.yaml --inject-nan $nan" # a test switch, which the file has no key for
    fi
    if [ "$rc_p" -eq 0 ]; then
        OMP_NUM_THREADS=$threads run "$TMP/p$i" $((P * D)) $pf
        rc_p=$?
    fi
    mkdir -p "$TMP/s$i" && cp "$TMP/r$i/ckpt_00000003.tdck" "$TMP/s$i/" 2> /dev/null
    run "$TMP/s$i" $((P2 * D)) $F --stages "$P2" --device "$dev_s" -y 1
    rc_s=$?
    what=""
    for r in "r $rc_r" "p $rc_p" "s $rc_s"; do
        set -- $r
        [ "$2" -ne 0 ] && what="$what run-$1-exit-$2($(first_error "$TMP/$1$i.txt"))"
    done
    if [ -z "$what" ]; then
        sweep_numbers "$TMP/r$i/log.jsonl" > "$TMP/r$i.n"; sweep_numbers "$TMP/p$i/log.jsonl" > "$TMP/p$i.n"
        sweep_numbers "$TMP/r$i/log.jsonl" 4 > "$TMP/r$i.n4"; sweep_numbers "$TMP/s$i/log.jsonl" 4 > "$TMP/s$i.n4"
        [ -s "$TMP/r$i.n" ] || what="$what no-numbers"
        cmp -s "$TMP/r$i.n" "$TMP/p$i.n" || what="$what P-numbers"
        cmp -s "$TMP/r$i/model.bin" "$TMP/p$i/model.bin" || what="$what P-model"
        cmp -s "$TMP/r$i.n4" "$TMP/s$i.n4" || what="$what resumed-numbers"
        cmp -s "$TMP/r$i/model.bin" "$TMP/s$i/model.bin" || what="$what resumed-model"
    fi
    [ -n "$what" ] && bad=$((bad + 1))
    printf 'case %d %s P %d from %s resumed-P %d resumed-device %s D %d partition %s%s threads %d :: %s\n' "$i" "${what:+DIFF$what}" "$P" "$via" "$P2" "$dev_s" "$D" "$part" "${RS:+ ($RS)}" "$threads" "$F" |
        sed 's/^\(case [0-9]*\)  /\1 ok /'
done
echo "flag_sweep: $bad of $N cases differ (seed $SEED)"
[ "$bad" -eq 0 ]
