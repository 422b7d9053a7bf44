# What dev/flag_sweep.sh and dev/signal_sweep.sh share (sourced): their command line, the random flag
# combinations they draw (a seed names the same cases in both), how a run is launched and what of its
# log must be bitwise equal.

# sweep_start NAME ARG...: the command line (CASES SEED binary) into N, SEED and BIN, refused by name
# where wrong; mpirun's settings in MPI; a scratch folder in TMP, removed at exit, with sweep_shards'
# shards (made by MAKE_SHARDS, default build/dev/data/make_shards) and sweep_models' model files;
# RANDOM seeded (and sweep_draw's second stream, by the seed and the case)
sweep_start() {
    local name=$1; shift
    cli_positional "$name" "$@"
    N=${1:-20} SEED=${2:-1} BIN=${3:-./train_tdpipe}
    cli_count "$name" CASES "$N" 1; cli_count "$name" SEED "$SEED" 0
    [ -x "$BIN" ] || { echo "$name: $BIN: no such program (make builds ./train_tdpipe)" >&2; exit 1; }
    command -v mpirun > /dev/null || { echo "$name: needs mpirun (openmpi-bin)" >&2; exit 1; }
    command -v python3 > /dev/null || { echo "$name: needs python3 (for its bf16 model files)" >&2; exit 1; }
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    MPI="timeout 300 mpirun --oversubscribe --mca mpi_yield_when_idle 1"
    local ms=${MAKE_SHARDS:-$(dirname "$0")/../build/dev/data/make_shards}
    [ -x "$ms" ] || { echo "$name: $ms: no such program (make builds it)" >&2; exit 1; }
    TMP=$(mktemp -d "/tmp/$name.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    sweep_shards "$ms" "$TMP/shards"
    sweep_models "$name" "$TMP/models"
    RANDOM=$SEED SWEEP_CASE=0
    # the shard globs in F reach the trainer as written (it expands them); no script here globs
    set -f
}

# sweep_models NAME DIR: llm.c model files of d4 and d6 (one step trained, so not the dN init that
# -e dN gives) in DIR/dL_fp32.bin, and the same as bf16 (version 5: each value's upper 16 bits) in
# DIR/dL_bf16.bin, for the cases that draw -e FILE: every stage then loads its own range of the file
sweep_models() {
    local L
    mkdir -p "$2"
    for L in 4 6; do
        "$BIN" -e "d$L" -x 1 -v 0 -s 0 -o "$2/d$L" > "$2/d$L.txt" 2>&1 < /dev/null ||
            { echo "$1: the d$L model file for the -e cases: $(first_error "$2/d$L.txt")" >&2; exit 1; }
        mv "$2/d$L/model.bin" "$2/d${L}_fp32.bin"
        python3 - "$2/d${L}_fp32.bin" "$2/d${L}_bf16.bin" << 'EOF'
import sys
from array import array
raw = open(sys.argv[1], "rb").read()
head, values = array("i", raw[:1024]), array("I", raw[1024:])
assert head[0] == 20240326 and head[1] == 3, "not an llm.c fp32 model file"
head[1] = 5
open(sys.argv[2], "wb").write(head.tobytes() + array("H", [v >> 16 for v in values]).tobytes())
EOF
    done
}

# sweep_shards MAKE_SHARDS DIR: byte-level shards (V = 256, as a fresh dN model's) cut from a fixed
# pseudo-random text of words: training shards of 450, 1000 and 150 tokens, so that a run crosses
# them and often wraps (a step takes 16-1152 tokens), and validation shards of 200 and 300 (a window
# is at most 73). The same bytes on every machine: the text comes from an LCG exact in awk's doubles
sweep_shards() {
    local k sizes=(650:200 1300:300 150:0) size val
    mkdir -p "$2"
    for k in 0 1 2; do
        size=${sizes[$k]%:*} val=${sizes[$k]#*:}
        awk -v n="$size" -v s=$((k + 1)) 'BEGIN {
            for (i = 0; i < n; i++) {
                s = (s * 75 + 74) % 65537
                printf "%s", (s % 7 == 0) ? " " : (s % 53 == 0) ? "\n" : sprintf("%c", 97 + s % 26)
            }
        }' > "$2/text$k"
        if [ "$val" -gt 0 ]; then "$1" --tokenizer bytes --val-tokens "$val" -o "$2/s$k" "$2/text$k" > /dev/null
        else "$1" --tokenizer bytes --val-fraction 0 -o "$2/s$k" "$2/text$k" > /dev/null; fi || exit 1
    done
}

# run DIR RANKS FLAGS...: the trainer on RANKS ranks (one: no mpirun), its output in DIR.txt
run() {
    local d=$1 np=$2; shift 2
    if [ "$np" -eq 1 ]; then timeout 300 "$BIN" "$@" -o "$d" > "$d.txt" 2>&1 < /dev/null
    else $MPI -np "$np" "$BIN" "$@" -o "$d" > "$d.txt" 2>&1 < /dev/null; fi
}

# first_error FILE: a run's first line naming the trainer (what it said when it failed), cut to 120 characters
first_error() { grep -m1 'train_tdpipe:' "$1" | cut -c1-120; }

# pick VAR CHOICE...: VAR set to one of the choices; opt NAME CHOICE...: "NAME choice" added to F. Both
# draw in this shell: bash 5 reseeds RANDOM in every subshell, so a $(...) draw would not follow the seed
pick() { local pick_var=$1; shift; local pick_from=("$@"); printf -v "$pick_var" "%s" "${pick_from[$((RANDOM % $#))]}"; }
opt() { local opt_value; pick opt_value "${@:2}"; F="$F $1 $opt_value"; }
# pick2 VAR CHOICE...: as pick, from a second stream (X2, an LCG sweep_draw seeds anew for each case
# from the seed and the case's number), so that draws added after RANDOM's leave every draw of RANDOM
# as it was (the flags drawn before them, and signal_sweep's signal, rank and moment, which it draws
# after sweep_draw), and a pick2 added at the end leaves every case's earlier pick2s as they were
pick2() {
    X2=$(((X2 * 1103515245 + 12345) % 2147483648)) # (bits 16-30 picked: an LCG's low bits cycle)
    local pick_var=$1; shift; local pick_from=("$@"); printf -v "$pick_var" "%s" "${pick_from[$(((X2 >> 16) % $#))]}"
}

# sweep_draw RUNFLAGS: one case. F: its flags (RUNFLAGS, the steps and validation, among them), on
# one line; L, M, D: its depth, micro-batches and replicas; P and P2: two stage counts it allows (every
# schedule needs a micro-batch per stage, a stage a layer); part, threads: a partition, a thread count;
# dev, dev_other: the CPU backend it runs on, and the other one (which a resume may change to);
# nan: the step of the injected NaN (0: none), kept apart because --print-config's file has no key for it;
# RS: --rank-speed with one drawn speed per stage for a P-stage run split by auto or model (else empty)
sweep_draw() {
    local sch lim
    pick L 4 6; pick M 2 4 6 8; pick D 1 1 2; pick sch gpipe 1f1b zbh1 tdpipe tdpipe tdpipe
    F="-e d$L"; pick B 1 2 3; F="$F -b $B"; opt -t 8 16 24; F="$F $1 -s 0 -n 3 --keep 5 --micro-batches $M --schedule $sch"
    if [ "$sch" = tdpipe ]; then
        F="$F --aew $((RANDOM % (2 * M + 1)))"; opt --stale-comp none predict dcasgd lr predict+lr dcasgd+lr predict+dcasgd
        opt --predict-order 1 2; opt --stale-tau 0 0 1; opt --aew-start 0 0 2; opt --drift-min-cos 0 0 0.99
    fi
    opt --jitter 0 0.3; opt --recompute 0 1; pick dev cpu cpu cpu-staged; F="$F --device $dev"; opt --gns 0 0 1; opt --lr-gns 0 0 1
    opt --drift-every 0 0 2; opt --clip 1 0.5 0; opt -c 0 0.1; pick nan 0 0 0 2 4; F="$F --inject-nan $nan"; opt --consistency-every 2 50
    opt --spike-z 0 0 3; opt --eps 1e-8 1e-6; opt --beta2 0.95 0.999
    if [ "$D" = 2 ]; then
        opt --grad-quant none int8; opt --error-feedback 0 1; opt --placement stages replicas auto
        opt --quant-block 256 64 100; opt --grad-cache 0 0 4KB 64KB
    fi
    pick P 2 3 4 5 6; pick P2 1 2 3 4 5 6; pick part auto uniform model; pick threads 1 2
    # drawn last, so that the draws above name the same flags as before they were added: the LR
    # schedule past its warm-up (runs of 6-12 steps under the default 20 never left it), the data
    # order and the initialisation, AdamW's beta1, DC-ASGD's lambda, the guard's patience
    opt -u 20 0 3; opt -q 0.1 0 0.5; opt --beta1 0.9 0.8; opt --seed 1337 7 4242; opt --shuffle 0 1
    opt --dc-lambda 1e5 1e3; opt --max-rollbacks 3 1
    for lim in "$M" "$L"; do [ "$P" -gt "$lim" ] && P=$lim; [ "$P2" -gt "$lim" ] && P2=$lim; done
    # from the second stream: the data (the built-in set, or sweep_shards' shards, with validation on
    # its shards), how M is given (the three flags that say it), the comm timeout (0: none), and the
    # ranks' speeds that --partition auto or model weighs for the P-stage run (RS: flags for that run)
    local data mflag init s speeds=""
    # X2 from the seed and the case's number, through xor-shifts (an LCG's outputs are affine in its
    # seed, so without them consecutive cases would draw along an arithmetic progression)
    SWEEP_CASE=$((SWEEP_CASE + 1)) X2=$(((SEED * 1000003 + SWEEP_CASE * 7919) % 2147483648))
    for s in 1 2 3; do X2=$((((X2 ^ (X2 >> 13)) * 1103515245 + 12345) % 2147483648)); done
    pick2 data builtin shards; [ "$data" = shards ] && F="$F -i $TMP/shards/s*_train.bin -j $TMP/shards/s*_val.bin"
    pick2 mflag --micro-batches --grad-accum --global-batch
    case $mflag in
        --grad-accum) F=${F/--micro-batches $M /--grad-accum $M } ;;
        --global-batch) F=${F/--micro-batches $M /--global-batch $((B * M * D)) } ;;
    esac
    pick2 s 600 0 120; F="$F --comm-timeout $s"
    for ((s = 0; s < P; s++)); do pick2 lim 1 0.5 2; speeds=$speeds${speeds:+,}$lim; done
    RS=""; [ "$part" != uniform ] && RS="--rank-speed $speeds"
    # the initial weights: -e dN, or sweep_models' file of that depth, fp32 or bf16
    pick2 init dN fp32 bf16; [ "$init" != dN ] && F=${F/#-e d$L /-e $TMP/models/d${L}_$init.bin }
    dev_other=cpu; [ "$dev" = cpu ] && dev_other=cpu-staged
    return 0
}

# sweep_numbers LOG [FROM]: what must be bitwise equal, a line a record of log.jsonl from step FROM on:
# the figures that depend neither on P nor on timing (losses, norms, LRs, val losses, the noise
# scale, the drift monitor's cosines)
sweep_numbers() {
    awk -v from="${2:-1}" 'match($0, /"step": [0-9]+/) {
        step = substr($0, RSTART + 8, RLENGTH - 8) + 0
        if (step < from) next
        out = ""; n = split($0, f, /, "|[{}]/)
        for (j = 1; j <= n; j++) if (f[j] ~ /^"?(loss|grad_norm|lr|val_loss|gns_b_simple|drift_min_cos|drift_mean_cos)"/) out = out " " f[j]
        if (out != "") print step out
    }' "$1"
}
