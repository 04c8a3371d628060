#!/bin/sh
# tests/cudasim/rewrite.sh IN.cu OUT.cpp: a kernel source as the CUDA
# simulator compiles it (note [cudasim]): `k<<<g, b, smem, stream>>>(args)`
# (k may name a template's instance, `k<N>`)
# becomes `cudasim_launch(k, cudasim_cfg(g, b, smem, stream), args)`; a
# kernel's `__launch_bounds__(N)` is removed from its declaration and
# becomes `cudasim_bounds(N);` at the top of its body (the simulator stops
# a launch of more threads per block than N, which a GPU refuses); a
# one-line `__shared__ T a[N], b[M];` declaration is followed by
# `cudasim_shared(a); cudasim_shared(b);` (poisoned once per block); the
# rest is untouched, and #line keeps errors and backtraces on the .cu file.
set -e
{
  printf '#line 1 "%s"\n' "$1"
  sed -e 's/\([A-Za-z_][A-Za-z0-9_]*\(<[^<>]*>\)\{0,1\}\)<<</cudasim_launch(\1, cudasim_cfg(/g' \
      -e 's/>>>()/))/g' -e 's/>>>(/), /g' "$1" |
    awk '{
      if (match($0, /__launch_bounds__\([^()]*\)/)) {
        bound = substr($0, RSTART + 18, RLENGTH - 19)
        $0 = substr($0, 1, RSTART - 1) substr($0, RSTART + RLENGTH)
      }
      if (bound != "" && (i = index($0, "{")) > 0) {
        $0 = substr($0, 1, i) " cudasim_bounds(" bound ");" substr($0, i + 1)
        bound = ""
      }
      if ((i = index($0, "__shared__")) > 0 && $0 !~ /extern/ && (j = index($0, ";")) > i) {
        decl = substr($0, i + 10, j - i - 10)
        gsub(/__align__\([^()]*\)/, "", decl)
        gsub(/\[[^]]*\]/, "", decl)
        n = split(decl, part, ",")
        calls = ""
        for (k = 1; k <= n; k++) {
          w = split(part[k], word, " ")
          calls = calls " cudasim_shared(" word[w] ");"
        }
        $0 = substr($0, 1, j) calls substr($0, j + 1)
      } else if (i > 0 && $0 !~ /extern/ && $0 !~ /^[ \t]*(\/\*|\*|\/\/)/) {
        print FILENAME ":" NR ": a __shared__ declaration on more than one line (the simulator poisons one-line ones only)" > "/dev/stderr"
        exit 1
      }
      print
    }'
} > "$2.tmp"
mv "$2.tmp" "$2"
