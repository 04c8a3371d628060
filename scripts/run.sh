#!/usr/bin/env bash
# run.sh BUILD_DIR: the main job behind `make run`. Trains the built-in
# default model (a small byte-level GPT) on the King James Bible from
# Debian's bible-kjv package, saves the final weights, then samples text.
set -euo pipefail
build=${1:-build}
mkdir -p data
if [ ! -s data/kjv.txt ]; then
  echo "sharc: writing data/kjv.txt from the bible-kjv package"
  bible -f 'Gen1:1-Rev22:21' > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
fi
# two ranks (one per core of the reference machine) through `sharc launch`,
# which adds the mpirun flags this machine needs; 8 sequences per rank keep
# the global batch of the one-process default (16). RANKS=1 for one process.
# The demo starts over in runs/kjv each time (--train.overwrite_output_dir:
# a run into a directory holding another run's outputs is otherwise refused).
ranks=${RANKS:-2}
if [ "$ranks" -gt 1 ]; then
  "$build/sharc" launch -n "$ranks" "$build/sharc" train --train.overwrite_output_dir=true \
    --train.batch_size=$((16 / ranks)) "${@:2}"
else
  "$build/sharc" train --train.overwrite_output_dir=true "${@:2}"
fi
echo "--- sample from runs/kjv/model.safetensors ---"
"$build/sharc" generate --checkpoint runs/kjv --prompt "And God said" --tokens 300
