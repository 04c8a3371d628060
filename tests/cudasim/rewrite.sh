#!/bin/sh
# tests/cudasim/rewrite.sh IN.cu OUT.cpp: a kernel source as the CUDA
# simulator compiles it (note [cudasim]): `k<<<g, b, smem, stream>>>(args)`
# (k may name a template's instance, `k<N>`)
# becomes `cudasim_launch(k, cudasim_cfg(g, b, smem, stream), args)`; the
# rest is untouched, and #line keeps errors and backtraces on the .cu file.
set -e
{
  printf '#line 1 "%s"\n' "$1"
  sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\(<[^<>]*>\)\{0,1\}\)<<</cudasim_launch(\1, cudasim_cfg(/g' \
      -e 's/>>>()/))/g' -e 's/>>>(/), /g' "$1"
} > "$2.tmp"
mv "$2.tmp" "$2"
