#!/usr/bin/env bash
# scripts/reproduce_tables.sh --quick (the simulated tables only) and the shape of what it writes:
# every table in order, every row with its table's columns, the CSV files parse with the same
# columns, the calibration against Megatron-LM's Table 1 within 15% on every row; sim_cluster's
# refusals reach the user as one line and a non-zero exit.
source tests/lib.sh
PY=python3
command -v $PY >/dev/null || { echo "FAIL python3 not found"; echo "0 passed, 1 failed"; exit 1; }
R=$TMP/r
check "reproduce_tables.sh --quick runs" bash scripts/reproduce_tables.sh --quick --out "$R"
cp "$TMP/out" "$TMP/tables.txt"
check "  its header names the machine and the command" grep -q "^# command: .*reproduce_tables.sh --quick" "$TMP/tables.txt"
if $PY -c "import matplotlib" 2>/dev/null; then # (.ci/run installs it: scripts/requirements.txt)
    check "  with matplotlib, its two plots, named at the end" grep -q "^# plots: $R/throughput.png, $R/utilisation.png$" "$TMP/tables.txt"
    check "    PNG files" bash -c "for f in '$R/throughput.png' '$R/utilisation.png'; do [ \"\$(head -c 4 \"\$f\" | tail -c 3)\" = PNG ] || exit 1; done"
else
    check "  without matplotlib, it says the plots were skipped" grep -q "^# plots skipped: matplotlib is not installed" "$TMP/tables.txt"
fi
order=$(grep -o '^## table [0-9]*' "$TMP/tables.txt" | awk '{ printf "%s ", $3 }')
check "  tables 0..11 in order (got: $order)" test "$order" = "0 1 2 3 4 5 6 7 8 9 10 11 "
# every row of a table has as many ' | ' fields as the table's '#' column line
check "  every row has its table's columns" awk -F' [|] ' '
    /^## table/ { cols = 0; next }
    /^#[a-z]/ && / [|] / { cols = NF; next }
    /^#/ || /^$/ { next }
    cols && NF != cols { print "row with " NF " fields, want " cols ": " $0; bad = 1 }
    END { exit bad }' "$TMP/tables.txt"
check "  no row of the article tables lacks a verdict" awk -F' [|] ' 'NF == 8 && $1 !~ /^#/ && $8 ~ /^ *$/ { bad = 1 } END { exit bad }' "$TMP/tables.txt"
check "  the CSV files parse with their header's columns, every article table present" $PY - "$R" <<'EOF'
import csv, os, sys
out = sys.argv[1]
want = {"tables.csv": 9, "calibration.csv": 12, "seq_length.csv": 7, "throughput.csv": 8}
for name, n in want.items():
    rows = list(csv.reader(open(os.path.join(out, name))))
    assert len(rows[0]) == n, (name, rows[0])
    assert len(rows) > 1, name
    for r in rows[1:]:
        assert len(r) == n, (name, r)
tables = {r["table"] for r in csv.DictReader(open(os.path.join(out, "tables.csv")))}
need = {"util", "throughput", "bubble", "comm", "memory", "async_memory", "hidden", "convergence", "cost", "whatif"}
assert need <= tables, need - tables
# every simulated tdpipe figure the script computes is a number (a helper that broke would leave "-")
for r in csv.DictReader(open(os.path.join(out, "tables.csv"))):
    if r["table"] in ("util", "bubble", "comm", "memory", "async_memory", "hidden", "whatif") or r["row"] in ("gpt3-13b", "gpt3-175b"):
        float(r["tdpipe_sim"].lstrip("+"))
EOF
check "  the calibration: 10 rows of Megatron-LM's Table 1, each within 15%" awk -F, 'NR > 1 { n++; e = $10 < 0 ? -$10 : $10; if (e > 15) bad = 1 }
    END { exit bad || n != 10 }' "$R/calibration.csv"
check "  and most (at least 8) within 10%" awk -F, 'NR > 1 { e = $10 < 0 ? -$10 : $10; if (e <= 10) k++ } END { exit k < 8 }' "$R/calibration.csv"
check "  the 175B claim is above the physical ceiling" grep -Eq "^gpt3-175b +[|] 62 .*cannot hold: above the physical ceiling" "$TMP/tables.txt"
check "  530B does not fit on 64 A100 80 GB" grep -Eq "^mtnlg-530b .*does not fit" "$TMP/tables.txt"
refuse "reproduce_tables.sh refuses an anchors folder without the table" "megatron_sc21_table1.csv not found" \
    bash scripts/reproduce_tables.sh --quick --out "$TMP/r2" --anchors "$TMP/none"

S=build/dev/sim_cluster
check "sim_cluster --help lists every option with its default" $S --help
check "  (--global-batch, --grad-quant, --hardware)" grep -q -- "--hardware .*(default: dgx-a100)" "$TMP/out"
check "sim_cluster prints the key=value lines" $S --layers 24 --hidden 2048 --heads 16 --seq 1024 --gpus 16 --tp 2 --pp 4 --global-batch 64
cp "$TMP/out" "$TMP/kv.txt"
for k in tflops_per_gpu samples_per_s bubble mem_gib_per_gpu mfu; do
    check "  $k=" grep -Eq "^$k=[0-9.e+-]+$" "$TMP/kv.txt"
done
check "sim_cluster --placement auto" $S --layers 24 --hidden 2048 --heads 16 --seq 1024 --gpus 32 --tp 2 --pp 4 --global-batch 64 --placement auto
check "  names its choice and both layouts' bytes between nodes" grep -Eq "^placement=(stages|replicas) placement_auto_mb_between_nodes=stages:[0-9.e+]+,replicas:[0-9.e+]+$" "$TMP/out"
check "  a node a TP group (tp 8): a tie, stages first" bash -c "$S --layers 24 --hidden 2048 --heads 16 --seq 1024 --gpus 32 --tp 8 --pp 4 --global-batch 64 --placement auto | grep -q '^placement=stages '"
check "sim_cluster --early-dx auto: 1 with --schedule tdpipe (its executor sends after BI), 0 with 1f1b (Megatron-LM)" bash -c "
    $S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --schedule tdpipe --aew 6 | grep -q ' early_dx=1\$' &&
    $S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --schedule 1f1b | grep -q ' early_dx=0\$'"
check "  1f1b with --early-dx 1: faster than with 0 (each input gradient leaves sooner)" bash -c "
    a=\$($S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --schedule 1f1b --early-dx 0 | sed -n 's/^step_s=//p')
    b=\$($S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --schedule 1f1b --early-dx 1 | sed -n 's/^step_s=//p')
    awk -v a=\$a -v b=\$b 'BEGIN { exit !(b < a) }'"
refuse "sim_cluster: a bad --early-dx" "--early-dx 2: expected auto, 0 or 1" $S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --early-dx 2
refuse "sim_cluster: an unknown --placement" "--placement nodes: expected replicas, stages or auto" \
    $S --layers 24 --hidden 2048 --heads 16 --gpus 16 --tp 2 --pp 4 --global-batch 64 --placement nodes
refuse "sim_cluster: gpus not tp x pp x a whole D" "--gpus 10 is not a multiple of --tp 2 x --pp 4" \
    $S --layers 24 --hidden 2048 --heads 16 --gpus 10 --tp 2 --pp 4 --global-batch 64
refuse "sim_cluster: tp not dividing the heads" "does not divide the model's 16 heads" \
    $S --layers 24 --hidden 2048 --heads 16 --gpus 24 --tp 3 --pp 1 --global-batch 64
refuse "sim_cluster: a model over the GPU's memory" "GiB per GPU.*the GPU has" $S --model gpt3-175b --gpus 8 --tp 8 --pp 1 --global-batch 8
refuse "sim_cluster: a missing required flag" "--gpus is required" $S --layers 24 --hidden 2048 --heads 16 --tp 2 --global-batch 64
refuse "sim_cluster: an unknown option" "unknown option --stages" $S --stages 4
refuse "sim_cluster: --chunks 0 with a schedule that does not read it" "--chunks 0: expected an integer from 1 to 1000" \
    $S --model gpt3-13b --gpus 64 --tp 8 --pp 4 --global-batch 512 --schedule 1f1b --chunks 0
refuse "sim_cluster: a malformed number" "--pp four: expected an integer" $S --model gpt3-13b --gpus 8 --pp four --global-batch 8
# found by an audit: a NaN jitter hung it, products of huge values wrapped to 0 (SIGFPE), switches took any value
SMALL="--layers 16 --hidden 768 --heads 12 --gpus 8 --pp 8 --global-batch 8"
refuse "sim_cluster: --jitter nan (it hung in the Gamma sampler)" "--jitter nan: expected a number from 0 to 10" timeout 20 $S $SMALL --jitter nan
refuse "sim_cluster: --jitter inf" "--jitter inf: expected a number from 0 to 10" timeout 20 $S $SMALL --jitter inf
refuse "sim_cluster: --pp 2^30 (tp x pp wrapped to 0)" "--pp 1073741824: expected an integer from 1 to 1000" $S $SMALL --pp 1073741824
refuse "sim_cluster: D x b past the global batch (it wrapped to 0)" "--global-batch 8 is less than data-parallel 65536 x --micro-batch 65536" \
    $S --layers 16 --hidden 768 --heads 12 --gpus 65536 --global-batch 8 --micro-batch 65536
refuse "sim_cluster: a simulation too large to hold" "would be 1e\\+09 ops per stage to simulate, more than 2e6" $S $SMALL --global-batch 1000000 --steps 1000
refuse "sim_cluster: --recompute 2" "--recompute 2: expected an integer from 0 to 1" $S $SMALL --recompute 2
refuse "sim_cluster: --stage-speed with inf" "--stage-speed 1,1,1,1,1,1,1,inf: expected 8 speeds in \\(0, 1e6\\]" $S $SMALL --stage-speed 1,1,1,1,1,1,1,inf
refuse "sim_cluster: M below P, in its own flags' words" "--global-batch 4 gives M = 4 micro-batches per replica .* fewer than --pp 8" $S ${SMALL/--global-batch 8/--global-batch 4}
# flags the audit's mutants of sim_cluster.c showed untested
refuse "sim_cluster: --dropout 2 (a switch)" "--dropout 2: expected an integer from 0 to 1" $S $SMALL --dropout 2
refuse "sim_cluster: a global batch D x b does not divide" "--global-batch 10 is not a multiple of data-parallel 2 x --micro-batch 4 = 8" \
    $S --layers 16 --hidden 768 --heads 12 --gpus 16 --pp 8 --global-batch 10 --micro-batch 4
# --nic-bw in GB/s: tp 8 x pp 2 on 16 GPUs puts each stage on a node of its own, so the 2 b T C = 4194304-byte
# message leaves 1/8 from each TP rank over its NIC, then an NVLink all-gather:
# 4194304 / 8 / (12e9 x 8 NICs / 8 GPUs) + 1 us + 7/8 x 4194304 / 216.5e9 + 7 x 2 us = 0.07564 ms
check "sim_cluster --nic-bw 12: a cross-node message by hand, 0.07564 ms" bash -c "
    $S --layers 16 --hidden 1024 --heads 16 --gpus 16 --tp 8 --pp 2 --global-batch 8 --nic-bw 12 | grep -q ' msg_ms=0.07564 '"
finish
