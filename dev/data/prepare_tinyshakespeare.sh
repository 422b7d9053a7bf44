#!/usr/bin/env bash
# Builds Tiny Shakespeare's token shards:
#   data/tinyshakespeare/input.txt                 the text they were made from (a copy of TEXT_FILE or
#                                                  of ../shared's, or the download)
#   data/tinyshakespeare/ts_{val,train}.bin        GPT-2 tokens, exactly llm.c's tinyshakespeare.py
#                                                  (a document per blank line, first 32768 tokens = val)
#   data/tinyshakespeare_bytes/ts_{val,train}.bin  with --bytes: byte tokens (V = 256), first 10 % = val
# (the byte shards live in their own folder so that a glob like ts_*.bin never mixes tokenizers).
#
# usage: dev/data/prepare_tinyshakespeare.sh [--bytes | --text-only] [TEXT_FILE [GPT2_DIR]]
# The text comes from TEXT_FILE, else ../shared/data/tinyshakespeare.txt, else the input.txt already
# there, else it is downloaded; encoder.json and vocab.bpe from GPT2_DIR, else ../shared/data/gpt2,
# else downloaded; both are copied to data/gpt2/. --text-only puts the text in place and stops (no
# build, no shards: what tests/run_all.sh asks for). Run from anywhere: outputs go under the
# repository root.
set -euo pipefail

TEXT_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt

die() { echo "prepare_tinyshakespeare: $*" >&2; exit 1; }
usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

fetch() { # URL FILE
    echo "downloading $1"
    trap 'rm -f "$2.part"' EXIT
    if command -v curl >/dev/null; then curl -fsSL --connect-timeout 30 "$1" -o "$2.part" || die "download of $1 failed (give TEXT_FILE)"
    elif command -v wget >/dev/null; then wget -q -T 30 -O "$2.part" "$1" || die "download of $1 failed (give TEXT_FILE)"
    else die "need curl or wget to download $1 (or give TEXT_FILE)"; fi
    mv "$2.part" "$2"
    trap - EXIT
}

BYTES=0; TEXT_ONLY=0; TEXT=""; GPT2_SRC=""
for a in "$@"; do
    case "$a" in
        --bytes) BYTES=1 ;;
        --text-only) TEXT_ONLY=1 ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $a (see --help)" ;;
        *) if [ -z "$TEXT" ]; then TEXT=$a
           elif [ -z "$GPT2_SRC" ]; then GPT2_SRC=$a
           else die "too many arguments (see --help)"; fi ;;
    esac
done

# arguments are relative to where we were called from; everything else to the repository root
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
if [ -n "$TEXT" ]; then
    [ -f "$TEXT" ] || die "$TEXT: not found"
    TEXT=$(absolute "$TEXT")
fi
if [ -n "$GPT2_SRC" ]; then GPT2_SRC=$(absolute "$GPT2_SRC"); fi
cd "$(dirname "$0")/../.."

mkdir -p data/tinyshakespeare
# the text, kept as data/tinyshakespeare/input.txt beside the shards made from it (tests/test_tokenizer
# reads it there when neither TINYSHAKESPEARE nor ../shared gives it)
if [ -z "$TEXT" ] && [ -f ../shared/data/tinyshakespeare.txt ]; then TEXT=../shared/data/tinyshakespeare.txt; fi
if [ -n "$TEXT" ]; then
    [ "$TEXT" -ef data/tinyshakespeare/input.txt ] || install -m 644 "$TEXT" data/tinyshakespeare/input.txt
else
    TEXT=data/tinyshakespeare/input.txt
    [ -f "$TEXT" ] || fetch "$TEXT_URL" "$TEXT"
fi
echo "text: $TEXT"
if [ "$TEXT_ONLY" = 1 ]; then exit 0; fi

make build/dev/data/make_shards
MS=build/dev/data/make_shards

bash dev/data/get_gpt2_tokenizer.sh $GPT2_SRC || exit 1

"$MS" --tokenizer gpt2 --gpt2-dir data/gpt2 --eot-at-blank-lines --val-tokens 32768 -o data/tinyshakespeare/ts "$TEXT"
if [ "$BYTES" = 1 ]; then
    mkdir -p data/tinyshakespeare_bytes
    "$MS" --tokenizer bytes --val-fraction 0.1 -o data/tinyshakespeare_bytes/ts "$TEXT"
fi
