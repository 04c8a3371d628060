#!/usr/bin/env bash
# timeout: 120
# A short libFuzzer run of the tokenizer loader and encoder
# (tests/fuzz/fuzz_tokenizer.c), built with Debian's clang under
# AddressSanitizer + UBSan: any crash, sanitizer report or broken promise
# (a refused file returning a tokenizer, an id without a token, a lossy round
# trip) fails the test. Every seed of the corpus runs first, then
# FUZZ_SECONDS (default 5, to keep the suite in its budget) of fuzzing;
# `FUZZ_SECONDS=60` here, or `make fuzz FUZZ_SECONDS=N`, runs it longer.
set -euo pipefail
cd "$SHARC_ROOT"
command -v clang >/dev/null || { echo "clang is missing: scripts/deps.sh test installs clang and libclang-rt-14-dev"; exit 1; }
src="tests/fuzz/fuzz_tokenizer.c src/data/tokenizer.c src/data/encoder.c src/core/fileio.c src/core/status.c"
clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fno-omit-frame-pointer -fopenmp=libgomp \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined $src -o "$TMPDIR/fuzz_tokenizer" \
    -ljson-c -lonig -lutf8proc -lnettle -lm
mkdir -p "$TMPDIR/corpus"
"$TMPDIR/fuzz_tokenizer" -max_total_time="${FUZZ_SECONDS:-5}" -seed=1 -dict=tests/fuzz/tokenizer.dict -max_len=20000 \
    -artifact_prefix="$TMPDIR/" -print_final_stats=1 "$TMPDIR/corpus" tests/fuzz/corpus_tokenizer 2>&1 | tail -6
ls "$TMPDIR"/crash-* "$TMPDIR"/leak-* "$TMPDIR"/timeout-* 2>/dev/null && { echo "fuzzer found a failing input"; exit 1; }
echo ok
