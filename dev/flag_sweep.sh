#!/usr/bin/env bash
# README's bitwise claims held against random flag combinations. Each case is one seeded draw of the
# model, batch, schedule, window, compensation, jitter, recomputation, backend, int8 sync, guard,
# drift monitor, noise scale, partition, placement and thread count, run three ways: at P = 1 (the
# reference), at a drawn P > 1, and resumed at another drawn P from the reference's step-3
# checkpoint. Every step's loss, norm, LR and val loss, and model.bin, must be bitwise the reference's.
# One line a case ("case N ok" or "case N DIFF what differed"; the flags after "::"), then a total;
# exit 1 where any case differs or a run fails. Needs mpirun. A case takes 5-30 s on 2 cores.
# usage: dev/flag_sweep.sh [CASES (default 20)] [SEED (default 1)] [binary (default ./train_tdpipe)]
set -u
source "$(dirname "$0")/../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional flag_sweep "$@"
N=${1:-20} SEED=${2:-1} BIN=${3:-./train_tdpipe}
cli_count flag_sweep CASES "$N" 1; cli_count flag_sweep SEED "$SEED" 0
[ -x "$BIN" ] || { echo "flag_sweep: $BIN: no such program (make builds ./train_tdpipe)" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "flag_sweep: needs mpirun (openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="timeout 300 mpirun --oversubscribe --mca mpi_yield_when_idle 1"
TMP=$(mktemp -d /tmp/flag_sweep.XXXXXX); trap 'rm -rf "$TMP"' EXIT
RANDOM=$SEED

pick() { local a=("$@"); echo "${a[$((RANDOM % ${#a[@]}))]}"; }
# run DIR RANKS FLAGS...: the trainer on RANKS ranks (one: no mpirun), its output in DIR.txt
run() {
    local d=$1 np=$2; shift 2
    if [ "$np" -eq 1 ]; then timeout 300 "$BIN" "$@" -o "$d" > "$d.txt" 2>&1 < /dev/null
    else $MPI -np "$np" "$BIN" "$@" -o "$d" > "$d.txt" 2>&1 < /dev/null; fi
}
# what must be bitwise equal, a line a record of log.jsonl from step FROM on: the figures that depend
# neither on P nor on timing (losses, norms, LRs, the noise scale, the drift monitor's cosines)
numbers() {
    awk -v from="${2:-1}" 'match($0, /"step": [0-9]+/) {
        step = substr($0, RSTART + 8, RLENGTH - 8) + 0
        if (step < from) next
        out = ""; n = split($0, f, /, "|[{}]/)
        for (j = 1; j <= n; j++) if (f[j] ~ /^"?(loss|grad_norm|lr|val_loss|gns_b_simple|drift_min_cos|drift_mean_cos)"/) out = out " " f[j]
        if (out != "") print step out
    }' "$1"
}

bad=0
for i in $(seq 1 "$N"); do
    L=$(pick 4 6) M=$(pick 2 4 6 8) D=$(pick 1 1 2) sch=$(pick gpipe 1f1b zbh1 tdpipe tdpipe tdpipe)
    F="-e d$L -b $(pick 1 2 3) -t $(pick 8 16 24) -x 6 -v 3 --val-batches 2 -s 0 -n 3 --keep 5 --micro-batches $M --schedule $sch"
    [ "$sch" = tdpipe ] && F="$F --aew $((RANDOM % (2 * M + 1))) --stale-comp $(pick none predict dcasgd lr predict+lr dcasgd+lr predict+dcasgd)
        --predict-order $(pick 1 2) --stale-tau $(pick 0 0 1) --aew-start $(pick 0 0 2) --drift-min-cos $(pick 0 0 0.99)"
    F="$F --jitter $(pick 0 0.3) --recompute $(pick 0 1) --device $(pick cpu cpu cpu-staged) --gns $(pick 0 0 1) --lr-gns $(pick 0 0 1)
        --drift-every $(pick 0 0 2) --clip $(pick 1 0.5 0) -c $(pick 0 0.1) --inject-nan $(pick 0 0 0 2 4) --consistency-every $(pick 2 50)
        --spike-z $(pick 0 0 3) --eps $(pick 1e-8 1e-6) --beta2 $(pick 0.95 0.999)"
    [ "$D" = 2 ] && F="$F --grad-quant $(pick none int8) --error-feedback $(pick 0 1) --placement $(pick stages replicas auto)
        --quant-block $(pick 256 64 100) --grad-cache $(pick 0 0 4KB 64KB)"
    F=$(printf '%s ' $F) F=${F% } # one line (echo would take -e for its own)
    # every schedule needs a micro-batch per stage; a stage needs a layer
    P=$(pick 2 3 4 5 6) P2=$(pick 1 2 3 4 5 6) part=$(pick auto uniform model) threads=$(pick 1 2)
    for lim in "$M" "$L"; do [ "$P" -gt "$lim" ] && P=$lim; [ "$P2" -gt "$lim" ] && P2=$lim; done
    run "$TMP/r$i" "$D" $F
    rc_r=$?
    OMP_NUM_THREADS=$threads run "$TMP/p$i" $((P * D)) $F --stages "$P" --partition "$part"
    rc_p=$?
    mkdir -p "$TMP/s$i" && cp "$TMP/r$i/ckpt_00000003.tdck" "$TMP/s$i/" 2> /dev/null
    run "$TMP/s$i" $((P2 * D)) $F --stages "$P2" -y 1
    rc_s=$?
    what=""
    for r in "r $rc_r" "p $rc_p" "s $rc_s"; do
        set -- $r
        [ "$2" -ne 0 ] && what="$what run-$1-exit-$2($(grep -m1 'train_tdpipe:' "$TMP/$1$i.txt" | cut -c1-120))"
    done
    if [ -z "$what" ]; then
        numbers "$TMP/r$i/log.jsonl" > "$TMP/r$i.n"; numbers "$TMP/p$i/log.jsonl" > "$TMP/p$i.n"
        numbers "$TMP/r$i/log.jsonl" 4 > "$TMP/r$i.n4"; numbers "$TMP/s$i/log.jsonl" 4 > "$TMP/s$i.n4"
        [ -s "$TMP/r$i.n" ] || what="$what no-numbers"
        cmp -s "$TMP/r$i.n" "$TMP/p$i.n" || what="$what P-numbers"
        cmp -s "$TMP/r$i/model.bin" "$TMP/p$i/model.bin" || what="$what P-model"
        cmp -s "$TMP/r$i.n4" "$TMP/s$i.n4" || what="$what resumed-numbers"
        cmp -s "$TMP/r$i/model.bin" "$TMP/s$i/model.bin" || what="$what resumed-model"
    fi
    [ -n "$what" ] && bad=$((bad + 1))
    printf 'case %d %s P %d resumed-P %d D %d partition %s threads %d :: %s\n' "$i" "${what:+DIFF$what}" "$P" "$P2" "$D" "$part" "$threads" "$F" |
        sed 's/^\(case [0-9]*\)  /\1 ok /'
done
echo "flag_sweep: $bad of $N cases differ (seed $SEED)"
[ "$bad" -eq 0 ]
