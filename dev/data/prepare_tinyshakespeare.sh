#!/usr/bin/env bash
# Builds Tiny Shakespeare's token shards:
#   data/tinyshakespeare/ts_{val,train}.bin        GPT-2 tokens, exactly llm.c's tinyshakespeare.py
#                                                  (a document per blank line, first 32768 tokens = val)
#   data/tinyshakespeare_bytes/ts_{val,train}.bin  with --bytes: byte tokens (V = 256), first 10 % = val
# (the byte shards live in their own folder so that a glob like ts_*.bin never mixes tokenizers).
#
# usage: dev/data/prepare_tinyshakespeare.sh [--bytes] [TEXT_FILE [GPT2_DIR]]
# The text comes from TEXT_FILE, else ../shared/data/tinyshakespeare.txt, else it is downloaded;
# encoder.json and vocab.bpe from GPT2_DIR, else ../shared/data/gpt2, else downloaded; both are
# copied to data/gpt2/. Run from anywhere: outputs go under the repository root.
set -euo pipefail

TEXT_URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt

die() { echo "prepare_tinyshakespeare: $*" >&2; exit 1; }
usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }

fetch() { # URL FILE
    echo "downloading $1"
    if command -v curl >/dev/null; then curl -fsSL "$1" -o "$2.part" || die "download of $1 failed"
    elif command -v wget >/dev/null; then wget -q -O "$2.part" "$1" || die "download of $1 failed"
    else die "need curl or wget to download $1"; fi
    mv "$2.part" "$2"
}

BYTES=0; TEXT=""; GPT2_SRC=""
for a in "$@"; do
    case "$a" in
        --bytes) BYTES=1 ;;
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

make build/dev/data/make_shards
MS=build/dev/data/make_shards
mkdir -p data/tinyshakespeare

if [ -z "$TEXT" ] && [ -f ../shared/data/tinyshakespeare.txt ]; then
    TEXT=../shared/data/tinyshakespeare.txt
elif [ -z "$TEXT" ]; then
    TEXT=data/tinyshakespeare/input.txt
    [ -f "$TEXT" ] || fetch "$TEXT_URL" "$TEXT"
fi

bash dev/data/get_gpt2_tokenizer.sh $GPT2_SRC || exit 1

echo "text: $TEXT"
"$MS" --tokenizer gpt2 --gpt2-dir data/gpt2 --eot-at-blank-lines --val-tokens 32768 -o data/tinyshakespeare/ts "$TEXT"
if [ "$BYTES" = 1 ]; then
    mkdir -p data/tinyshakespeare_bytes
    "$MS" --tokenizer bytes --val-fraction 0.1 -o data/tinyshakespeare_bytes/ts "$TEXT"
fi
