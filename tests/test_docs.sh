#!/usr/bin/env bash
# The docs against the code: every function or type named in backticks in doc/reading_guide.md and
# README.md (a snake_case name of 5+ characters) is defined or used in the code, and every file they
# name exists (a bare file name: some file of the tree by that name). Names of other projects' code
# and of files that are gone on purpose are listed below, each with why.
source tests/lib.sh
code_dirs="llmc tdpipe dev scripts tests train_tdpipe.cu test_gpt2.cu Makefile .ci"
# named in README but not ours: AVX-512 intrinsics of a build not kept;
# llm.c's trainers and the script that downloads its starter pack (gpt2_124M.bin); a Megatron-LM script;
# vec_math.c's names before it was one file ("was expf_vec.c ...")
not_ours="_mm512_fmadd_ps _mm512_sqrt_ps train_gpt2.c train_gpt2.py dev/download_starter_pack.sh examples/sc21/run_table_1.sh expf_vec.c tanhf_vec.c"
tracked=$(git ls-files 2>/dev/null || find . -type f)

names_missing() { # the backticked snake_case names of $1 that the code never mentions
    grep -oE '`[a-z_][a-z0-9_]*(\(\))?`' "$1" | tr -d '`()' | sort -u | while read -r id; do
        [ ${#id} -ge 5 ] && [[ $id == *_* ]] || continue
        [[ " $not_ours " == *" $id "* ]] && continue
        grep -rqw --exclude=test_docs.sh -e "$id" $code_dirs 2>/dev/null || echo "$id"
    done
}
paths_missing() { # the backticked file paths of $1 that name no file of the tree
    grep -oE '`[A-Za-z0-9_./-]+\.(c|h|cu|cuh|sh|py|md|csv|yaml)`' "$1" | tr -d '`' | sort -u | while read -r f; do
        [[ " $not_ours " == *" $f "* || $f == ../* ]] && continue # ../: outside the repository (../shared)
        if [[ $f == */* ]]; then [ -e "$f" ] || echo "$f"
        else echo "$tracked" | grep -q "\(^\|/\)$f$" || echo "$f"; fi
    done
}
for doc in doc/reading_guide.md README.md; do
    check "$doc: every function it names is in the code" test -z "$(names_missing "$doc" | tee "$TMP/names" | tr '\n' ' ')"
    [ -s "$TMP/names" ] && echo "     not in the code: $(tr '\n' ' ' < "$TMP/names")"
    check "$doc: every file it names exists" test -z "$(paths_missing "$doc" | tee "$TMP/paths" | tr '\n' ' ')"
    [ -s "$TMP/paths" ] && echo "     no such file: $(tr '\n' ' ' < "$TMP/paths")"
done
# a planted stale name fails the check
sed 's/`run_data_init`/`data_init_gone`/' doc/reading_guide.md > "$TMP/guide.md"
check "a name the code lacks is found" test "$(names_missing "$TMP/guide.md")" = data_init_gone
finish
