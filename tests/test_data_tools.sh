#!/usr/bin/env bash
# dev/data/make_shards end to end: shards from text with both tokenizers (headers, counts, the exact
# tokens), the validation split from the start, llm.c's blank-line documents, and refusals.
# Run from the repository root after `make`.
source tests/lib.sh
MS=${MS:-build/dev/data/make_shards}
GPT2=data/gpt2 # filled by dev/data/get_gpt2_tokenizer.sh (GPT2_DIR, ../shared, or a download)
FIX=tests/fixtures

header() { od -A n -t d4 -N 16 -v "$1" | xargs; }         # magic version count tokenizer
tokens() { od -A n -t u2 -j 1024 -v "$1" | xargs -n1; }    # one token per line
size_ok() { [ "$(stat -c %s "$1")" -eq $((1024 + 2 * $(header "$1" | cut -d' ' -f3))) ]; }
bytes_sizes_ok() { size_ok "$TMP/b_val.bin" && size_ok "$TMP/b_train.bin"; }
bytes_tokens_ok() { diff <(tokens "$TMP/b_val.bin"; tokens "$TMP/b_train.bin") <(od -A n -t u1 -v "$TMP/in.txt" | xargs -n1); }
gpt2_tokens_ok() { diff <(tokens "$TMP/g_val.bin"; tokens "$TMP/g_train.bin") <(echo 50256; xargs -n1 < "$FIX/tokenizer_ids.txt"); }
val_tokens_ok() { "$MS" --gpt2-dir "$GPT2" --val-tokens 2 -o "$TMP/v" "$TMP/docs.txt" && [ "$(header "$TMP/v_val.bin")" = "20240520 1 2 1" ]; }

check "make_shards is built" test -x "$MS"
help_ok() { "$MS" --help | grep -q -- --val-fraction; }
check "--help exits 0 and lists the flags" help_ok

# --- bytes: the tokens are the file's bytes, val = the first round(0.25 n) of them
printf 'To be, or not to be:\n\tthat is the question.  Caf\xc3\xa9 \xe2\x82\xac\n' > "$TMP/in.txt"
n=$(stat -c %s "$TMP/in.txt")
check "bytes tokenizer runs" "$MS" --tokenizer bytes --val-fraction 0.25 -o "$TMP/b" "$TMP/in.txt"
nval=$(( (n + 2) / 4 ))  # round(0.25 n)
check "bytes val header: magic, version 1, $nval tokens, tokenizer 2" \
    test "$(header "$TMP/b_val.bin")" = "20240520 1 $nval 2"
check "bytes train header: $((n - nval)) tokens" test "$(header "$TMP/b_train.bin")" = "20240520 1 $((n - nval)) 2"
check "bytes shard sizes agree with their counts" bytes_sizes_ok
check "bytes: val then train tokens are the input's bytes, in order" bytes_tokens_ok

# --- gpt2 on the tokenizer fixture: an EOT to start the document, then tiktoken's ids
if bash dev/data/get_gpt2_tokenizer.sh ${GPT2_DIR:-} 2>"$TMP/gpt2.err"; then
    check "gpt2 tokenizer runs" "$MS" --gpt2-dir "$GPT2" --allow-special -o "$TMP/g" "$FIX/tokenizer_text.txt"
    total=$(( $(xargs -n1 < "$FIX/tokenizer_ids.txt" | wc -l) + 1 ))
    gval=$(( (total + 5) / 10 ))  # round(0.1 total), total = 1170
    check "gpt2 headers: tokenizer 1, $gval + $((total - gval)) tokens" \
        test "$(header "$TMP/g_val.bin") $(header "$TMP/g_train.bin")" = "20240520 1 $gval 1 20240520 1 $((total - gval)) 1"
    check "gpt2 tokens are EOT then the fixture's tiktoken ids" gpt2_tokens_ok

    # llm.c's tinyshakespeare.py documents: [EOT] "a\n\n" [EOT] "b\n\n" [EOT] "\nc"
    printf 'a\n\nb\n\n\nc' > "$TMP/docs.txt"
    check "--eot-at-blank-lines with --val-fraction 0" \
        "$MS" --gpt2-dir "$GPT2" --eot-at-blank-lines --val-fraction 0 -o "$TMP/d" "$TMP/docs.txt"
    check "--val-fraction 0 writes no validation shard" test ! -e "$TMP/d_val.bin"
    check "documents split after each blank line, as llm.c does" \
        test "$(tokens "$TMP/d_train.bin" | xargs)" = "50256 64 628 50256 65 628 50256 198 66"
    check "--val-tokens 2 takes exactly the first 2 tokens" val_tokens_ok
else
    fail "GPT-2's tokenizer files: $(tail -1 "$TMP/gpt2.err") (GPT2_DIR=folder, ../shared/data/gpt2, or a network)"
fi

# --- refusals
refuse "missing input" "nope.txt: cannot open" "$MS" --tokenizer bytes -o "$TMP/x" "$TMP/nope.txt"
refuse "an empty -o" "-o '': the prefix needs a file-name part" "$MS" --tokenizer bytes -o "" "$TMP/in.txt"
refuse "an -o that is a folder" "-o '$TMP/': the prefix needs a file-name part" "$MS" --tokenizer bytes -o "$TMP/" "$TMP/in.txt"
refuse "unknown flag" "--frobnicate: unknown option" "$MS" --frobnicate -o "$TMP/x" "$TMP/in.txt"
refuse "unknown tokenizer" "expected gpt2 or bytes" "$MS" --tokenizer wordpiece -o "$TMP/x" "$TMP/in.txt"
refuse "missing GPT-2 vocabulary" "/nowhere/encoder.json: cannot open" "$MS" --gpt2-dir /nowhere -o "$TMP/x" "$TMP/in.txt"
refuse "val fraction out of range" "expected a number in \[0, 1\)" "$MS" --val-fraction 1.5 -o "$TMP/x" "$TMP/in.txt"
refuse "no output prefix" "need -o PREFIX" "$MS" "$TMP/in.txt"
refuse "validation takes everything" "leave none for training" "$MS" --tokenizer bytes --val-tokens 1000 -o "$TMP/x" "$TMP/in.txt"
refuse "EOT options with the byte tokenizer" "need --tokenizer gpt2" "$MS" --tokenizer bytes --eot-at-blank-lines -o "$TMP/x" "$TMP/in.txt"
refuse "output folder missing" "no/such/dir/x_val.bin.tmp: cannot create" "$MS" --tokenizer bytes -o "$TMP/no/such/dir/x" "$TMP/in.txt"
finish
