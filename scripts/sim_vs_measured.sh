#!/usr/bin/env bash
# The simulator against measurement on this machine: real-compute CPU pipelines (P = 2 and 4, d4 and
# d8, every schedule the trainer runs) with --trace; each stage's op compute times measured from the
# trace (scripts/plot_trace.py --op-times), with each link's message time measured there too, fed to the simulator (build/dev/sim_replay: the same
# schedule lists and TD-Pipe policy), and its step time and bubble printed beside the measured ones
# (the trainer's log.jsonl), with the error. Steady steps only (2..n-1). Twice: with a core per
# stage (sim_) and with the ranks sharing this host's CORES cores (shr_: plot_trace.py --cores gives
# each op's work on a core of its own, sim_replay --cores shares the cores as the run did). Not a
# test: a benchmark (4-13 minutes on 2 cores, as loaded; the d8 runs take most of it).
# usage: scripts/sim_vs_measured.sh [steps (default 8)] [binary (default ./train_tdpipe)]
#   env: DEVICE=cpu|cuda (cuda: the ranks share this machine's GPU(s), messages through host memory),
#   MODELS="d4 d8", PS="2 4", B=4, T=64, M=8 (scripts/gpu_check.sh runs d12 on one H200 this way),
#   CORES: what the ranks share (default: this host's cores; with DEVICE=cuda its GPUs, which ranks
#   sharing one time-slice); 0: a core or device per rank, and both columns agree; KEEP=FILE.tgz:
#   the runs' traces, logs and op times kept in one archive (for study where the runs cannot be redone);
#   MPI_ARGS: more mpirun options (e.g. "--mca btl_vader_single_copy_mechanism none": messages that
#   move only inside MPI calls, the one-GPU hosts' case, for a replay whose links matter)
set -u
source "$(dirname "$0")/cli.sh"; cli_help "$0" "$@"; cli_positional sim_vs_measured "$@"
cd "$(dirname "$0")/.." || exit 1
STEPS=${1:-8}
BIN=${2:-./train_tdpipe}
M=${M:-8}; B=${B:-4}; T=${T:-64}; DEVICE=${DEVICE:-cpu}; MODELS=${MODELS:-d4 d8}; PS=${PS:-2 4}
CORES=${CORES:-$([ "$DEVICE" = cuda ] && (nvidia-smi -L 2>/dev/null | grep -c '^GPU') || nproc)} # what the ranks share
REPLAY=build/dev/sim_replay
for f in "$BIN" "$REPLAY"; do [ -x "$f" ] || { echo "sim_vs_measured: $f not found (run make)" >&2; exit 1; }; done
[ "$STEPS" -ge 4 ] 2>/dev/null || { echo "sim_vs_measured: steps must be at least 4 (got $STEPS)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --mca mpi_yield_when_idle 1 ${MPI_ARGS:-}"
TMP=$(mktemp -d /tmp/sim_vs_measured.XXXXXX)
trap '[ -z "${KEEP:-}" ] || tar czf "$KEEP" --exclude="*.tdck" --exclude=model.bin -C "$TMP" . || echo "sim_vs_measured: could not write $KEEP" >&2; rm -rf "$TMP"' EXIT

echo "# sim_vs_measured: $(uname -m), $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs), $(grep -c ^processor /proc/cpuinfo) cores, $(date -u +%Y-%m-%d)"
echo "# command: $0 $STEPS $BIN"
echo "# runs: $MPI -np P $BIN --device $DEVICE --stages P --schedule S [--aew W] -e dN -b $B -t $T --micro-batches $M -x $STEPS --trace t.json (OMP_NUM_THREADS=1)"
echo "# simulated: $REPLAY over each stage's mean F, B (zbh1: BI, BW) and U compute times, each link's median message time (both ways) and where in B its input gradient left (--b-send), from the trace; steps 2..$((STEPS - 1))"
echo "#   sim_: a core per stage; shr_: the stages share $CORES cores (processor sharing; times from plot_trace.py --op-times --cores $CORES)"
echo "# measured: the step lines' ms (stage 0's update to update) and bubble (1 - busy / time), mean over the same steps"
echo "#   msg_f_ms, msg_b_ms: the message times the replay was given, activations and gradients (mean over links; 0 where no receiver waited for one: its time was hidden)"
printf "%-6s %2s %-7s %3s %10s %10s %7s %10s %7s %8s %8s %7s %8s %7s %8s %8s\n" "#model" "P" "sched" "W" "meas_ms" "sim_ms" "err_%" "shr_ms" "err_%" \
    "meas_bub" "sim_bub" "err_pt" "shr_bub" "err_pt" "msg_f_ms" "msg_b_ms"
for P in $PS; do
    for model in $MODELS; do
        for run in "gpipe 0" "1f1b 0" "zbh1 0" "tdpipe 2"; do
            set -- $run; sched=$1; W=$2
            out=$TMP/$model.$P.$sched
            if ! $MPI -np $P "$BIN" --device "$DEVICE" $([ "$DEVICE" = cuda ] && echo --comm mpi) --stages $P --schedule $sched --aew $W -e $model -b $B -t $T --micro-batches $M \
                -x "$STEPS" -v 0 -s 0 --trace "$out.json" -o "$out" > "$out.log" 2>&1; then
                echo "sim_vs_measured: $model P=$P $sched failed: $(tail -2 "$out.log")" >&2; continue
            fi
            # trace steps count from 0: steps 2..n-1 of the step lines are 1..n-2 there
            sim=()
            for cores in 0 $([ "$CORES" != 0 ] && echo "$CORES"); do # (CORES 0: the two columns are one simulation)
                python3 scripts/plot_trace.py "$out.json" --op-times --steps "1:$((STEPS - 1))" --cores "$cores" > "$out.ops$cores" || continue 2
                args=()
                for k in f b bi bw u msg_f msg_b b_send; do
                    v=$(awk -F= -v k=$k '$1 == k { print $2 }' "$out.ops$cores")
                    [ -n "$v" ] && args+=("--${k/_/-}" "$v")
                done
                "$REPLAY" --schedule $sched --stages $P --micro-batches $M --aew $W --steps "$STEPS" --cores "$cores" "${args[@]}" > "$out.sim$cores" || continue 2
                sim+=("$(awk -F= '$1 == "step_ms" { print $2 }' "$out.sim$cores")" "$(awk -F= '$1 == "bubble" { print $2 }' "$out.sim$cores")")
            done
            [ ${#sim[@]} -eq 2 ] && sim+=("${sim[@]}")
            msg=()
            for k in msg_f msg_b; do # the mean over links of what the replay was given
                msg+=("$(awk -F= -v k=$k '$1 == k { n = split($2, v, ","); for (i = 1; i <= n; i++) t += v[i]; printf "%.2f", t / n }' "$out.ops0")")
            done
            grep '^{"step"' "$out/log.jsonl" | awk -v steps="$STEPS" -v m=$model -v p=$P -v s=$sched -v w=$W -v sm="${sim[0]}" -v sb="${sim[1]}" -v hm="${sim[2]}" -v hb="${sim[3]}" -v mf="${msg[0]:--}" -v mb="${msg[1]:--}" '
                { match($0, /"step": [0-9]+/); k = substr($0, RSTART + 8, RLENGTH - 8) + 0
                  if (k < 2 || k >= steps) next
                  match($0, /"ms": [0-9.]+/); ms += substr($0, RSTART + 6, RLENGTH - 6)
                  match($0, /"bubble": [0-9.]+/); b += substr($0, RSTART + 10, RLENGTH - 10); n++ }
                END { ms /= n; b /= n
                      printf "%-6s %2d %-7s %3d %10.1f %10.1f %+7.1f %10.1f %+7.1f %7.1f%% %7.1f%% %+7.1f %7.1f%% %+7.1f %8s %8s\n", m, p, s, w, ms,
                             sm, 100 * (sm - ms) / ms, hm, 100 * (hm - ms) / ms, 100 * b, 100 * sb, 100 * (sb - b), 100 * hb, 100 * (hb - b), mf, mb }'
        done
    done
done
