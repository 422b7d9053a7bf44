#!/usr/bin/env python3
"""Reference GPT-2 token ids from tiktoken, built offline from local encoder.json + vocab.bpe.

Writes the tokenizer fixture that tests/test_tokenizer.c compares llmc/tokenizer.c against:
  tests/fixtures/tokenizer_text.txt   varied text (below), UTF-8
  tests/fixtures/tokenizer_ids.txt    its GPT-2 ids, <|endoftext|> allowed as the special token

  python dev/data/tiktoken_reference.py [--gpt2-dir ../shared/data/gpt2] [--out tests/fixtures]

With --unicode-tables it instead prints the C tables of llmc/tokenizer.c (the code point ranges that
tiktoken's regex engine classes as \\p{L} and \\p{N}, and the \\s code points), probed from that
engine itself so that the C pre-tokeniser agrees with it exactly.
"""
import argparse
import os
import sys

tiktoken = data_gym_to_mergeable_bpe_ranks = None  # imported in main, after the arguments: --help needs no tiktoken

# GPT-2's pre-tokenisation regex, as in openai/gpt-2 src/encoder.py
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = "<|endoftext|>"

SAMPLE = (
    "First Citizen:\n"
    "Before we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\n"
    "Contractions: don't, I'm, you're, we've, they'll, he'd, it's, 'tis, o'er, rock 'n' roll.\n"
    "SHOUTED: DON'T, I'M, YOU'RE, WE'VE, THEY'LL, HE'D, IT'S, JOHN'S, 'S 'LL 'T 'RE 'VE 'M 'D.\n"
    "Odd quotes: ''s '''ll 's's ' s 'x 'sss 'llama 'really.\n"
    "Digits: 0 7 42 007 3.14159 1,000,000 2024-05-20 12:30:45 0x1F 1e-10 -273.15 "
    "123456789012345678901234567890 v2.0.1 A1B2C3 4th 21st\n"
    "Punctuation!!! Really??? Wait... -- --- (parens) [brackets] {braces} <angles> "
    "@user #tag $5 %20 ^caret &amp; *star* _under_ +plus= |pipe| back\\slash /path/to ~tilde `tick` "
    "\"double\" 'single' ;;; ::: ,,,\n"
    "Spaces:a  b   c    d     e      f\n"
    "                                        forty spaces before this\n"
    "\tone tab\n\t\ttwo tabs\n\t \t mixed tab and space\n"
    "trailing spaces   \n"
    "trailing tab\t\n"
    "CRLF line\r\nnext line\r\n"
    "\n\n\nthree blank lines above\n"
    "space before newline \nand  \n  indented\n"
    "Accents: café naïve résumé Ångström façade Straße Œuvre søster žluťoučký kůň Łódź.\n"
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed), and precomposed é ä ñ.\n"
    "Greek: Καλημέρα κόσμε, ΑΒΓΔ αβγδ ῥυθμός.\n"
    "Cyrillic: Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.\n"
    "CJK: 你好，世界。日本語のテキストです。カタカナ ひらがな 한국어 텍스트.\n"
    "Other scripts: مرحبا بالعالم שלום עולם नमस्ते दुनिया ภาษาไทย ქართული Հայերեն.\n"
    "Numbers elsewhere: ٣٤٥ ۱۲۳ १२३ Ⅻ ⅷ ½ ¾ ² ³ ①②③ 𝟘𝟙.\n"
    "Unicode spaces: a\u00a0b c\u2003d e\u3000f g\u2009h\u202fi and a zero\u200bwidth\u200djoiner.\n"
    "Symbols: ∑ ∫ ≤ ≥ → ∞ ± × ÷ € £ ¥ © ® ™ § ¶ • … “curly” ‘quotes’ «guillemets» — – ·\n"
    "Emoji: 🙂 🚀🚀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 ❤️ ✨done✨\n"
    "Mixed: abc123def ÀÉÎõü42 Ω≈ç√∫ 1️⃣ x²+y²=z² naïve_café-2 email@example.com "
    "https://example.com/a?b=c&d=e#f\n"
    "<|endoftext|>"
    "After the special token, a new document begins.\n"
    "Not special: <|endoftext <endoftext|> <| endoftext |> <|ENDOFTEXT|>\n"
    "MENENIUS:\n"
    "Either you must\n"
    "Confess yourselves wondrous malicious,\n"
    "Or be accused of folly. I shall tell you\n"
    "A pretty tale: it may be you have heard it;\n"
    "But, since it serves my purpose, I will venture\n"
    "To stale 't a little more.   \n"
    "The end, with trailing spaces and no final newline   "
)


def gpt2_encoding(gpt2_dir, pat_str):
    ranks = data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(gpt2_dir, "vocab.bpe"),
        encoder_json_file=os.path.join(gpt2_dir, "encoder.json"),
    )
    return tiktoken.Encoding(name="gpt2_local", pat_str=pat_str, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256}, explicit_n_vocab=50257)


def write_fixture(gpt2_dir, out_dir):
    enc = gpt2_encoding(gpt2_dir, GPT2_PAT)
    ids = enc.encode(SAMPLE, allowed_special={EOT})
    # tiktoken's own, rewritten form of the GPT-2 pattern must agree with the original
    from tiktoken_ext.openai_public import r50k_pat_str
    assert gpt2_encoding(gpt2_dir, r50k_pat_str).encode(SAMPLE, allowed_special={EOT}) == ids
    assert enc.decode(ids) == SAMPLE and ids.count(50256) == 1
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer_text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(SAMPLE)
    with open(os.path.join(out_dir, "tokenizer_ids.txt"), "w") as f:
        for i in range(0, len(ids), 16):
            f.write(" ".join(str(t) for t in ids[i:i + 16]) + "\n")
    print(f"{len(SAMPLE.encode('utf-8'))} bytes -> {len(ids)} ids in {out_dir}/tokenizer_{{text,ids}}.txt")


def probe(pattern):
    """Code points that tiktoken's regex engine matches with pattern (a single-character class)."""
    # tiktoken encodes only the regex's matches and drops the text between them, so with one-byte
    # ranks the output is exactly the UTF-8 of the matching characters.
    enc = tiktoken.Encoding(name="probe", pat_str=pattern, mergeable_ranks={bytes([b]): b for b in range(256)},
                            special_tokens={})
    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    return sorted(set(map(ord, bytes(enc.encode_ordinary(text)).decode("utf-8"))))


def ranges(cps):
    out = []
    for c in cps:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def print_unicode_tables():
    for name, pattern in (("letter", r"\p{L}"), ("number", r"\p{N}")):
        rs = [r for r in ranges(probe(pattern)) if r[0] >= 0x80]  # ASCII is handled by hand
        print(f"static const uint32_t {name}_ranges[][2] = {{ // {len(rs)} ranges")
        for i in range(0, len(rs), 6):
            print("    " + " ".join(f"{{0x{a:X}, 0x{b:X}}}," for a, b in rs[i:i + 6]))
        print("};")
    print("// \\s: " + " ".join(f"U+{c:04X}" for c in probe(r"\s")))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpt2-dir", default="../shared/data/gpt2", help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--out", default="tests/fixtures", help="folder for the fixture files")
    ap.add_argument("--unicode-tables", action="store_true", help="print the C classification tables instead")
    args = ap.parse_args()
    global tiktoken, data_gym_to_mergeable_bpe_ranks
    try:
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    except ImportError:
        raise SystemExit("tiktoken_reference: needs tiktoken (pip install -r dev/data/requirements.txt)")
    if args.unicode_tables:
        print_unicode_tables()
        return 0
    for f in ("encoder.json", "vocab.bpe"):
        if not os.path.exists(os.path.join(args.gpt2_dir, f)):
            sys.exit(f"{os.path.join(args.gpt2_dir, f)}: not found (give --gpt2-dir)")
    write_fixture(args.gpt2_dir, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
