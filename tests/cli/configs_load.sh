#!/usr/bin/env bash
# timeout: 60
# Every example config under configs/ loads and validates.
set -euo pipefail
for f in "$SHARC_ROOT"/configs/*.yaml; do
  "$SHARC_BIN/sharc" config --config "$f" > /dev/null || { echo "config $f failed"; exit 1; }
done
"$SHARC_BIN/sharc" config --config "$SHARC_ROOT/configs/llama-small.yaml" | grep -q "family: llama"
