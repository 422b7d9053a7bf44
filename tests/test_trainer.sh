#!/usr/bin/env bash
# train_tdpipe end to end on one process: convergence on the built-in data, bitwise determinism
# across thread counts, llm.c model files in and out, shards, the YAML config, and every refusal of
# bad input. Run from the repository root after `make`.
source tests/lib.sh
MS=${MS:-build/dev/data/make_shards}
Q="-s 0 -v 0"   # quiet: no samples, no validation unless a check asks
losses() { grep -o ', "loss": [^,]*' "$1/log.jsonl" | cut -d' ' -f3; }

# --- the built-in dataset: S = 200 steps, val loss within X = 0.05 nats of the entropy floor.
# 32 validation micro-batches = 16384 tokens: the standard error of the mean loss is ~0.005 nats,
# so 0.05 leaves 10 standard errors for sampling noise; a working trainer reaches ~0.02 (README).
# Below the floor by as much is no noise either: the floor (the source's exact entropy rate) is wrong.
check "built-in data: 200 steps train" $BIN -x 200 -v 200 --val-batches 32 -s 0 -o "$TMP/conv"
cp "$TMP/out" "$TMP/conv.out"
gap=$(grep -o '"val_gap": [^,}]*' "$TMP/conv/log.jsonl" | tail -1 | cut -d' ' -f2)
gap_ok() { awk -v g="$gap" 'BEGIN { exit !(g != "" && g < 0.05 && g > -0.05) }'; }
check "built-in data: val loss within 0.05 nats of the entropy floor after 200 steps, above or below (gap $gap)" gap_ok
check "start-up table prints the entropy floor" grep -q "entropy floor" "$TMP/conv.out"
check "the entropy floor is 1.75 ln 2 = 1.213008 nats" grep -q "1.213008 nats/token" "$TMP/conv.out"
check "validation lines print the gap to the floor" grep -q "gap to floor" "$TMP/conv.out"
# the start-up table's activations per micro-batch in flight: one slot's bytes, more than 0 (it printed
# 0.0 when read before the slots were allocated) and no more than the end-of-run table's slots and
# activation-gradient buffers together
act_start=$(grep -o 'activations [0-9.]* MiB per micro-batch' "$TMP/conv.out" | cut -d' ' -f2)
act_end=$(awk '/act\. slots/ { getline; print $7 }' "$TMP/conv.out")
act_ok() { awk -v a="$act_start" -v e="$act_end" 'BEGIN { exit !(a > 0 && e != "" && a <= e) }'; }
check "start-up table: activations $act_start MiB per micro-batch in flight (end-of-run table: $act_end MiB in all)" act_ok
# the end table's host peak: the rank's peak resident memory, at least the weights, gradient and AdamW
# the start-up table counts (16 bytes a parameter, all written), and under 64 GiB (a unit slip: KB as MiB)
state_mib=$(grep -o 'weights + gradient + AdamW [0-9.]* MiB' "$TMP/conv.out" | awk '{ print $(NF - 1) }')
peak_mib=$(awk '/host peak MiB/ { getline; print $NF }' "$TMP/conv.out")
peak_ok() { awk -v p="$peak_mib" -v w="$state_mib" 'BEGIN { exit !(p != "" && w > 0 && p >= w && p < 65536) }'; }
check "end table: the host peak ($peak_mib MiB) holds at least the weights, gradient and AdamW ($state_mib MiB)" peak_ok

# --- determinism: the same flags give bitwise the same losses with 1 and 2 threads
# (9 significant digits identify a float32 uniquely, so equal text means equal bits)
OMP_NUM_THREADS=1 $BIN -x 15 $Q -o "$TMP/t1" >/dev/null 2>&1
OMP_NUM_THREADS=2 $BIN -x 15 $Q -o "$TMP/t2" >/dev/null 2>&1
OMP_NUM_THREADS=3 $BIN -x 15 $Q -o "$TMP/t3" >/dev/null 2>&1
# 3 threads too: a count that divides none of the even sizes; and the models (the 15th update is in no loss)
same_losses() { [ -s "$TMP/t1/log.jsonl" ] && for t in 2 3; do diff <(losses "$TMP/t1") <(losses "$TMP/t$t") && cmp "$TMP/t1/model.bin" "$TMP/t$t/model.bin" || return 1; done; }
check "losses and model bitwise equal with OMP_NUM_THREADS=1, 2 and 3" same_losses
check "log.jsonl has one object per step with step and loss" test "$(grep -c '^{"step": [0-9]*, "loss": ' "$TMP/t1/log.jsonl")" -eq 15
# more OpenMP threads than cores, which OMP_NUM_THREADS asked for: a note (their spinning slows steps
# many times over, README), and none where the cores hold the threads or the trainer chose them
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # (nproc answers OMP_NUM_THREADS where it is set)
over=$((cores + 1))
check "OMP_NUM_THREADS=$over on $cores core(s) trains" env OMP_NUM_THREADS=$over $BIN -x 1 $Q -o "$TMP/over"
check "  with a note naming OMP_NUM_THREADS and the threads a rank" grep -q "^note: OMP_NUM_THREADS=$over: $over threads a rank, 1 rank(s) on this host of" "$TMP/err"
check "OMP_NUM_THREADS=1 trains" env OMP_NUM_THREADS=1 $BIN -x 1 $Q -o "$TMP/one"
check "  with no such note" bash -c "! grep -q 'note: OMP_NUM_THREADS' '$TMP/err'"
check "OMP_NUM_THREADS unset trains" env -u OMP_NUM_THREADS $BIN -x 1 $Q -o "$TMP/unset"
check "  with no such note (the trainer chose as many threads as cores)" bash -c "! grep -q 'note: OMP_NUM_THREADS' '$TMP/err'"
OMP_NUM_THREADS=2 $BIN -x 15 $Q --grad-accum 2 -b 4 -o "$TMP/ga" >/dev/null 2>&1
check "gradient accumulation runs (M = 2)" test "$(losses "$TMP/ga" | wc -l)" -eq 15

# --- samples: temperature and greedy, decoded as text
check "samples print" $BIN -x 4 -s 4 -v 0 -g 16 -o "$TMP/s"
check "a temperature sample and a greedy sample" test "$(grep -c '^sample (' "$TMP/out")" -eq 2
# an untrained byte-level model samples any byte: this seed's 64 tokens hold control bytes (0x04, a bell,
# ...), which reach the terminal escaped (\xNN), never raw
check "samples of 64 tokens from a model 4 steps old" $BIN -x 4 -s 4 -v 0 -g 64 -o "$TMP/s64"
check "  carry no raw control byte, and say the ones they had as \\xNN" bash -c "
    grep -a '^sample (' '$TMP/out' > '$TMP/s64.txt' && ! LC_ALL=C grep -qaP '[\\x00-\\x08\\x0b-\\x1f\\x7f]' '$TMP/s64.txt' &&
    grep -q '\\\\x[01][0-9a-f]' '$TMP/s64.txt'"

# --- llm.c model files: export at the end, import with -e, refusals
check "model.bin exported in llm.c format" test "$(od -A n -t d4 -N 8 "$TMP/t1/model.bin" | xargs)" = "20240326 3"
check "-e FILE continues from an exported model" $BIN -e "$TMP/t1/model.bin" -x 2 $Q -o "$TMP/e"
first_after=$(losses "$TMP/e" | head -1); last_before=$(losses "$TMP/t1" | tail -1)
lower_ok() { awk -v a="$first_after" -v b="$last_before" 'BEGIN { exit !(a < b + 0.05) }'; }
check "the imported model starts trained (loss $first_after vs $last_before)" lower_ok
cp "$TMP/t1/model.bin" "$TMP/bad_magic.bin"; printf '\x01\x02\x03\x04' | dd of="$TMP/bad_magic.bin" conv=notrunc 2>/dev/null
refuse "model file with a wrong magic" "bad_magic.bin: not an llm.c model file" $BIN -e "$TMP/bad_magic.bin" -x 1 $Q -o "$TMP/r"
head -c 5000 "$TMP/t1/model.bin" > "$TMP/trunc.bin"
refuse "truncated model file" "trunc.bin: .*truncated" $BIN -e "$TMP/trunc.bin" -x 1 $Q -o "$TMP/r"
refuse "missing model file" "nope.bin: cannot open" $BIN -e "$TMP/nope.bin" -x 1 $Q -o "$TMP/r"
cp "$TMP/t1/model.bin" "$TMP/v9.bin"; printf '\x09\x00\x00\x00' | dd of="$TMP/v9.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
refuse "model file of an unknown version" "v9.bin: model file version 9 not supported" $BIN -e "$TMP/v9.bin" -x 1 $Q -o "$TMP/r"
cp "$TMP/t1/model.bin" "$TMP/nanw.bin"; printf '\x00\x00\xc0\x7f' | dd of="$TMP/nanw.bin" bs=1 seek=$(( $(stat -c %s "$TMP/nanw.bin") - 4 )) conv=notrunc 2>/dev/null
refuse "model file with a NaN weight (lnfb's last): refused at load, by name" "nanw.bin: parameter [0-9]+ \\(lnfb\\[[0-9]+\\]\\) is nan: the model's weights are not finite" \
    $BIN -e "$TMP/nanw.bin" -x 1 $Q -o "$TMP/r"
refuse "-o '' (an empty path)" "train_tdpipe: -o '': an empty path" $BIN -x 1 $Q -o ''
refuse "-e dN with a bad depth" "depth must be 1..48" $BIN -e d0 -x 1 $Q -o "$TMP/r"
mkdir -p "$TMP/adir"; mkfifo "$TMP/afifo"
refuse "a directory as -e" "adir: is a directory, not a model file" $BIN -e "$TMP/adir" -x 1 $Q -o "$TMP/r"
refuse "a FIFO as -e: refused, not waited on" "afifo: is a FIFO, not a model file" $BIN -e "$TMP/afifo" -x 1 $Q -o "$TMP/r"

# --- shards: train on llm.c token shards (byte tokenizer), refusals of bad ones
printf 'It was the best of times, it was the worst of times, it was the age of wisdom.\n%.0s' {1..200} > "$TMP/text.txt"
"$MS" --tokenizer bytes --val-fraction 0.1 -o "$TMP/sh" "$TMP/text.txt" >/dev/null
check "train on byte shards with -i and -j" $BIN -i "$TMP/sh_train.bin" -j "$TMP/sh_val.bin" -x 3 -v 3 -s 3 -g 8 -o "$TMP/shards"
check "validation on the shards prints" grep -q "^val loss" "$TMP/out"
cp "$TMP/sh_train.bin" "$TMP/bad.bin"; printf '\x00\x00\x00\x00' | dd of="$TMP/bad.bin" conv=notrunc 2>/dev/null
refuse "-j without -i (the built-in data would ignore it)" "^train_tdpipe: -j .*sh_val.bin: validation shards need training shards \\(-i\\)" \
    $BIN -j "$TMP/sh_val.bin" -x 1 $Q -o "$TMP/r"
# the same byte tokens marked GPT-2 (header[3] = 1): tokens < V pass, so only the id tells the two apart
cp "$TMP/sh_val.bin" "$TMP/gpt2_val.bin"; printf '\x01' | dd of="$TMP/gpt2_val.bin" bs=1 seek=12 conv=notrunc 2>/dev/null
refuse "-j shards of another tokenizer than -i's" "gpt2_val.bin: its tokenizer \\(id 1\\) differs from the training shards' .*id 2" \
    $BIN -i "$TMP/sh_train.bin" -j "$TMP/gpt2_val.bin" -x 1 $Q -o "$TMP/r"
check "GPT-2 shards with -s 0 and no tokenizer files" $BIN -i "$TMP/gpt2_val.bin" --tokenizer-dir "$TMP/no_tokenizer" -x 1 $Q -o "$TMP/r"
check "  say nothing of the tokenizer (no sample needs it)" bash -c "! grep -q tokenizer '$TMP/err'"
refuse "shard with a wrong magic" "^train_tdpipe: -i [^ ]*/bad.bin: bad magic" $BIN -i "$TMP/bad.bin" -x 1 $Q -o "$TMP/r"
check "  naming the file once (one file, not a glob: -i X: X: ... before)" bash -c "! grep -q 'bad.bin: .*bad.bin:' '$TMP/err'"
refuse "shard glob that matches nothing" "nothing_here" $BIN -i "$TMP/nothing_here_*.bin" -x 1 $Q -o "$TMP/r"
refuse "a directory as -i" "adir: is a directory, not a token shard" $BIN -i "$TMP/adir" -x 1 $Q -o "$TMP/r"
refuse "a FIFO as -i" "afifo: is a FIFO, not a token shard" $BIN -i "$TMP/afifo" -x 1 $Q -o "$TMP/r"

# --- flags: each bad value names the flag; --help lists every flag with its default
refuse "-b 0 is out of range" "^train_tdpipe: -b: 0 is out of range" $BIN -b 0
refuse "-l abc is not a number" "^train_tdpipe: -l: 'abc' is not a valid number" $BIN -l abc
refuse "-x with a blank before the number (as after it)" "^train_tdpipe: -x: ' 3' is not a valid integer" $BIN -x " 3"
refuse "-x with a blank after the number" "^train_tdpipe: -x: '3 ' is not a valid integer" $BIN -x "3 "
refuse "--eps 0 (0/0 where a gradient is 0) is out of range" "^train_tdpipe: --eps: 0 is out of range \\[1e-30, 1\\]" $BIN --eps 0
refuse "--clip -1 is out of range" "^train_tdpipe: --clip: -1 is out of range" $BIN --clip -1
refuse "--micro-batches and --grad-accum given two values" \
    "^train_tdpipe: --micro-batches 2 and --grad-accum 4 are one setting given two values; give one$" $BIN --micro-batches 2 --grad-accum 4 -x 1 $Q -o "$TMP/ga24"
check "  no output folder" test ! -e "$TMP/ga24"
check "--micro-batches and --grad-accum given the same value" $BIN --micro-batches 2 --grad-accum 2 -x 1 $Q -o "$TMP/ga22"
check "  M = 2 in the start-up table" grep -q "^| batch .*, M 2, D 1:" "$TMP/out"
check "--global-batch 32 at -b 8: M = 4" $BIN --global-batch 32 -b 8 -x 1 $Q -o "$TMP/gb"
check "  in the start-up table" grep -q "^| batch .*B 8, T 64, M 4, D 1:" "$TMP/out"
refuse "--global-batch not a multiple of -b x D" "^train_tdpipe: --global-batch 30: not a multiple of -b 8 x 1 replica\\(s\\) = 8" \
    $BIN --global-batch 30 -b 8 -x 1 $Q -o "$TMP/gb30"
refuse "--global-batch and --micro-batches that disagree" \
    "^train_tdpipe: --global-batch 32 with -b 8 and 1 replica\\(s\\) makes M = 4 micro-batches a step, but --micro-batches says 2; give one of the two$" \
    $BIN --global-batch 32 -b 8 --micro-batches 2 -x 1 $Q -o "$TMP/gb32"
printf 'pipeline: {micro_batch: 2}\n' > "$TMP/mb2.yaml"
check "--global-batch 32 (flag) over the config file's micro_batch 2: the flag wins, M = 4" $BIN --config "$TMP/mb2.yaml" --global-batch 32 -b 8 -x 1 $Q -o "$TMP/gbf"
check "  in the start-up table" grep -q "^| batch .*B 8, T 64, M 4, D 1:" "$TMP/out"
printf 'pipeline: {global_batch: 32}\n' > "$TMP/gb32.yaml"
check "--micro-batches 2 (flag) over the config file's global_batch 32: M = 2" $BIN --config "$TMP/gb32.yaml" --micro-batches 2 -b 8 -x 1 $Q -o "$TMP/mbf"
check "  in the start-up table, and a note says so" bash -c "grep -q '^| batch .*B 8, T 64, M 2, D 1:' '$TMP/out' &&
    grep -q 'note: --micro-batches 2 (on the command line) overrides the config file.s global_batch 32' '$TMP/err'"
printf 'pipeline: {global_batch: 32, micro_batch: 2}\n' > "$TMP/gbmb.yaml"
refuse "the config file's global_batch and micro_batch that disagree" "but --micro-batches says 2" $BIN --config "$TMP/gbmb.yaml" -b 8 -x 1 $Q -o "$TMP/gbmb"
check "--global-batch and --micro-batches that agree" $BIN --global-batch 32 -b 8 --micro-batches 4 -x 1 $Q -o "$TMP/gb4"
check "--global-batch's settings printed" $BIN --global-batch 32 -b 8 -x 1 $Q -o "$TMP/gbp" --print-config
cp "$TMP/out" "$TMP/gb.yaml"
check "  read back with another -b: M follows from the global batch (the printed file names no M of its own)" \
    $BIN --config "$TMP/gb.yaml" -b 4 -x 1 $Q -o "$TMP/gbp"
check "  M = 8 in the start-up table" grep -q "^| batch .*B 4, T 64, M 8, D 1:" "$TMP/out"
refuse "--recompute 1 with synthetic compute" "^train_tdpipe: --recompute 1: synthetic compute has no activations to recompute$" \
    $BIN --recompute 1 --synthetic-compute -x 1 $Q -o "$TMP/rcs"
refuse "--inject-nan past -x" "^train_tdpipe: --inject-nan 4: past the run's last step \\(-x 3\\), so nothing would be injected$" $BIN -x 3 --inject-nan 4 $Q -o "$TMP/nan4"
check "--print-schedule of a run whose --inject-diverge needs two ranks (it runs on one process for any grid)" \
    $BIN -e d4 --stages 2 --micro-batches 2 -x 2 --inject-diverge 2 --print-schedule
refuse "an unknown flag" "unknown flag '--frobnicate'" $BIN --frobnicate 1
refuse "a flag without its value" "-x needs a value" $BIN -x
refuse "-t beyond the model's maxT" "-t 2048 exceeds the model's maximum sequence length 1024" $BIN -t 2048 -x 1 $Q -o "$TMP/r"
refuse "--device of an unknown kind" "--device tpu: expected auto, cpu or cuda" $BIN --device tpu
refuse "-o under a regular file" "cannot create the folder: Not a directory" $BIN -x 1 $Q -o "$TMP/text.txt/out"
refuse "a switch given a value" "'1' after --synthetic-compute: the flag is a switch and takes no value" $BIN --synthetic-compute 1
refuse "a flag where a value belongs (-o -v made a folder named -v)" "-o needs a value, but the flag -v follows it" $BIN -x 1 -o -v 0
check "  no such folder" test ! -e ./-v
refuse "--comm-timeout under a second" "--comm-timeout 0.001: a wait of under a second would end healthy runs" $BIN --comm-timeout 0.001
refuse "--rank-speed inf" "--rank-speed inf: expected 1 positive number up to 1e\\+06 \\(one per stage\\)$" $BIN --rank-speed inf -x 1 $Q -o "$TMP/r"
refuse "--matmul on the CPU" "^train_tdpipe: --matmul cublaslt: only the CUDA backend has a choice of matmul$" \
    $BIN --device cpu --matmul cublaslt -x 1 $Q -o "$TMP/mmc"
refuse "--config naming no file" "^train_tdpipe: --config $TMP/none.yaml: cannot open YAML config: No such file or directory$" \
    $BIN --config "$TMP/none.yaml" -x 1 $Q -o "$TMP/cfn"
check "  neither made its -o" test ! -e "$TMP/mmc" -a ! -e "$TMP/cfn"
# model files of an odd vocabulary: V 64 (the built-in data's bytes go past it), V 70000 (past uint16)
vocab_model() { python3 - "$@" <<'PY'
import struct, sys
path, V, Vp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
maxT, L, NH, C = 16, 1, 2, 32
n = Vp*C + maxT*C + 2*L*C + 3*L*C*C + 3*L*C + L*C*C + L*C + 2*L*C + 4*L*C*C + 4*L*C + 4*L*C*C + L*C + 2*C
with open(path, 'wb') as f:
    f.write(struct.pack('<256i', *([20240326, 3, maxT, V, L, NH, C, Vp] + [0] * 248)))
    f.write(struct.pack('<%df' % n, *[((i * 7919) % 1000 - 500) * 1e-5 for i in range(n)]))
PY
}
vocab_model "$TMP/v64.bin" 64 64; vocab_model "$TMP/v70k.bin" 70000 70016
refuse "a V 64 model on the built-in data (bytes up to 122)" "the built-in dataset's tokens are bytes up to 122, but the model's vocabulary is V = 64" \
    $BIN -e "$TMP/v64.bin" -x 1 $Q -b 2 -t 16 -o "$TMP/r"
refuse "a V 70000 model" "the model's vocabulary V = 70000: tokens are uint16" $BIN -e "$TMP/v70k.bin" -x 1 $Q -b 2 -t 16 -o "$TMP/r"
# a V 50257 model on byte shards samples ids the byte tokenizer has no bytes for: each decoded to
# nothing, so the sample lost those tokens unseen (a NULL source to memcpy, for UBSan)
vocab_model "$TMP/v50k.bin" 50257 50304
check "a V 50257 model sampling on byte shards" $BIN -e "$TMP/v50k.bin" -i "$TMP/sh_train.bin" -x 1 -v 0 -s 1 -g 8 -b 2 -t 16 -o "$TMP/r"
cp "$TMP/out" "$TMP/v50k.out"
check "  says the tokenizer is smaller than the model's vocabulary" grep -q "note: samples print token ids: the byte tokenizer has 256 tokens, fewer than the model's vocabulary V = 50257" "$TMP/err"
check "  and prints every sampled token, as ids" test "$(grep -cE '^sample \([a-z 1]+\): ([0-9]+ ){8}$' "$TMP/v50k.out")" -eq 2
check "-i with -v and no -j" $BIN -i "$TMP/sh_train.bin" -x 2 -v 1 -s 0 -o "$TMP/noval"
check "  says that no validation runs" grep -q "note: -v 1: no validation shards (-j), so no validation runs" "$TMP/err"
check "-g 2000 at -t 16" $BIN -x 1 -v 0 -s 1 -g 2000 -t 16 -o "$TMP/g2000"
check "  says a sample is at most -t tokens" grep -q "note: -g 2000: samples are at most -t 16 tokens long" "$TMP/err"
help_all() { $BIN --help > "$TMP/help" && for f in -i -j -e -o -b -t -l -u -q -c -x -v -s -g -n -y --clip --seed --grad-accum --keep --config; do grep -q -- "$f" "$TMP/help" || return 1; done; }
check "--help lists every flag" help_all
check "--help shows defaults" grep -q "(default: 3e-3)" "$TMP/help"

# --- YAML config: the article's pipeline section and the others; flags override; unknown keys refused
cat > "$TMP/cfg.yaml" <<YAML
pipeline:
  micro_batch: 2
model:
  batch: 4
  seq_len: 32
optimizer:
  lr: 0.002
  steps: 3
logging:
  val_every: 0
  sample_every: 0
YAML
check "--config applies the file" $BIN --config "$TMP/cfg.yaml" -o "$TMP/y"
check "--config: batch and micro-batches from the file" grep -q "B 4, T 32, M 2" "$TMP/out"
check "--config: steps from the file (3 log lines)" test "$(losses "$TMP/y" | wc -l)" -eq 3
check "a flag overrides the file" $BIN --config "$TMP/cfg.yaml" -x 2 -o "$TMP/y2"
check "--config: -x 2 won over steps: 3" test "$(losses "$TMP/y2" | wc -l)" -eq 2
# yaml_refused NAME TEXT REGEX: a config holding TEXT is refused with "NAME.yaml:REGEX"
yaml_refused() { printf "$2" > "$TMP/$1.yaml"; refuse "config: $1" "$1.yaml:$3" $BIN --config "$TMP/$1.yaml"; }
yaml_refused unknown 'optimizer:\n  lr: 0.1\n  momentum: 0.9\n' "3: unknown key 'optimizer.momentum'"
yaml_refused badval 'optimizer:\n  lr: fast\n' "2: optimizer.lr: 'fast' is not a valid number"
yaml_refused broken 'optimizer: [1, 2\n' ".*YAML error"
yaml_refused dupkey 'model:\n  batch: 2\n  batch: 4\n' "3: key 'model.batch' appears twice \\(first at line 2\\)"
yaml_refused dupsec 'model: {batch: 2}\nlogging: {val_every: 1}\nmodel: {seq_len: 8}\n' "3: section 'model' appears twice"
yaml_refused twodocs 'model: {batch: 2}\n---\nmodel: {batch: 4}\n' "2: a second YAML document"
refuse "missing config file" "missing.yaml: cannot open" $BIN --config "$TMP/missing.yaml"
# --print-config: the settings as a file that --config reads back to the same settings (a string with a
# quote, a backslash, a tab and a DEL; a float with few digits, one that needs all 9, whole ones; a 19-digit seed; a switch; a window per stage)
PC=(-e d4 -b 2 -t 16 -x 3 -v 0 -s 0 -l 3e-4 --beta1 0.104274996 --seed 9000000000000000001 --synthetic-compute --aew 2,1 --stages 2 --jitter 0.3
    --dc-lambda 123456792)
check "--print-config prints the settings" $BIN "${PC[@]}" -o "$TMP/pc \"q\" \\ $(printf '\t')x$(printf '\177')" --print-config
cp "$TMP/out" "$TMP/pc1.yaml"
check "  as YAML that --config reads back to the same settings" $BIN --config "$TMP/pc1.yaml" --print-config
check "  (printed again: the same file)" diff "$TMP/pc1.yaml" "$TMP/out"
pc_values() { grep -qx '  lr: 0.0003' "$TMP/pc1.yaml" && grep -qx '  beta1: 0.104274996' "$TMP/pc1.yaml" && grep -qx '  seed: 9000000000000000001' "$TMP/pc1.yaml" &&
    grep -qx '  out_dir: "[^"]*pc \\"q\\" \\\\ \\x09x\\x7f"' "$TMP/pc1.yaml" && grep -qx '  synthetic_compute: true' "$TMP/pc1.yaml" &&
    grep -qx '  comm_timeout: 600' "$TMP/pc1.yaml" && grep -qx '  dc_lambda: 123456792' "$TMP/pc1.yaml"; }
check "  floats in their fewest digits (9 where 8 do not read back; whole ones as 600, not 6e+02), the seed exact, the out folder escaped, the switch true" pc_values
pc_keys() { test "$(grep -cE '^  [a-z0-9_]+: ' "$TMP/pc1.yaml")" -eq $(($($BIN --help | grep -cE '^ +(-[a-z], )?--[a-z]') - 7)); }
check "  every flag has its key but --help, --grad-accum, --config, --print-config, --print-schedule, --inject-nan and --inject-diverge" pc_keys
check "a run's settings printed" $BIN -x 4 -v 0 -s 0 -b 4 -t 16 -o "$TMP/pcr1" --print-config
cp "$TMP/out" "$TMP/pcr.yaml"
check "  the run from the flags" $BIN -x 4 -v 0 -s 0 -b 4 -t 16 -o "$TMP/pcr1"
check "  the run from the printed file" $BIN --config "$TMP/pcr.yaml" -o "$TMP/pcr2"
check "  the same losses, bitwise" diff <(losses "$TMP/pcr1") <(losses "$TMP/pcr2")
refuse "a directory as --config" "adir: is a directory, not a YAML config" $BIN --config "$TMP/adir"

# -l's default suits the small models: at GPT-2 124M's width the start-up says so, and not once -l is
# given (said while the flags are read, so --print-schedule shows it without building the model)
lr_note() { $BIN -e d12 --print-schedule "$@" 2>&1 >/dev/null | grep -c "is high for a model of width C 768"; }
check "the default lr at C 768: a note names it and the rates 124M trains at" test "$(lr_note)" = 1
check "-l 3e-4 at C 768: no note" test "$(lr_note -l 3e-4)" = 0
# README's Flags section is --help's text, whole: a flag added or reworded without it shows here
# a step of more than 2^31 tokens: the start-up table counts them in 64 bits (it printed -397934592 for
# M 1000000). The run is stopped by two signals once the line is out (a step this long would not end)
big_step() {
    $BIN --synthetic-compute -e d1 -b 8 -t 1024 --micro-batches 300000 -x 1 -v 0 -s 0 -o "$TMP/bigtok" >"$TMP/bigtok.out" 2>&1 &
    local pid=$! i
    for i in $(seq 600); do grep -q "tokens per step" "$TMP/bigtok.out" && break; sleep 0.1; done
    kill -TERM $pid; sleep 0.5; kill -TERM $pid 2>/dev/null; wait $pid
    grep -q "B 8, T 1024, M 300000, D 1: 2457600000 tokens per step" "$TMP/bigtok.out"
}
check "a step of 2,457,600,000 tokens is counted as that many" big_step
readme_help() { awk '/^`.\/train_tdpipe --help`:/ { f = 1; next } f && /^```$/ { if (++c == 2) exit; next } f && c == 1' README.md; }
check "README's flag list is ./train_tdpipe --help" diff <(readme_help) <($BIN --help)
finish
