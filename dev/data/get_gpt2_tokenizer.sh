#!/usr/bin/env bash
# Puts GPT-2's tokenizer files (encoder.json, vocab.bpe) into data/gpt2/ under the repository root:
# from GPT2_DIR, else ../shared/data/gpt2, else those already there, else downloaded from OpenAI's
# public copy. Used by prepare_tinyshakespeare.sh and the tests.
# usage: dev/data/get_gpt2_tokenizer.sh [GPT2_DIR]
set -euo pipefail
source "$(dirname "$0")/../../scripts/cli.sh"; cli_help "$0" "$@"; cli_positional get_gpt2_tokenizer "$@"
GPT2_URL=https://openaipublic.blob.core.windows.net/gpt-2/models/124M
die() { echo "get_gpt2_tokenizer: $*" >&2; exit 1; }
SRC=${1:-}
if [ -n "$SRC" ]; then
    [ -d "$SRC" ] || die "$SRC: not a folder"
    case "$SRC" in /*) ;; *) SRC="$PWD/$SRC" ;; esac
fi
cd "$(dirname "$0")/../.."
mkdir -p data/gpt2
for f in encoder.json vocab.bpe; do
    if [ -n "$SRC" ]; then
        [ -f "$SRC/$f" ] || die "$SRC/$f: not found"
        install -m 644 "$SRC/$f" "data/gpt2/$f"
    elif [ -f "../shared/data/gpt2/$f" ]; then
        install -m 644 "../shared/data/gpt2/$f" "data/gpt2/$f"
    elif [ ! -f "data/gpt2/$f" ]; then
        echo "downloading $GPT2_URL/$f" >&2
        if command -v curl >/dev/null; then curl -fsSL "$GPT2_URL/$f" -o "data/gpt2/$f.part" || die "download of $GPT2_URL/$f failed (give GPT2_DIR)"
        elif command -v wget >/dev/null; then wget -q -O "data/gpt2/$f.part" "$GPT2_URL/$f" || die "download of $GPT2_URL/$f failed (give GPT2_DIR)"
        else die "need curl or wget to download $GPT2_URL/$f (or give GPT2_DIR)"; fi
        mv "data/gpt2/$f.part" "data/gpt2/$f"
    fi
done
