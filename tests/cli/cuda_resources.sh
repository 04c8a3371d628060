#!/usr/bin/env bash
# timeout: 30
# Launch resources that a GPU checks and the CUDA simulator does not (note
# [cuda-resources]), from ptxas's report of the sm_90 build (make keeps it
# beside each object, build/src/device/cuda/X.o.ptxas): (a) every __global__
# in src/device/cuda declares __launch_bounds__ (its largest block: ptxas
# then fits its registers into the SM's 65536, and the simulator stops a
# larger launch); (b) no kernel spills registers, except the tensor-core
# attention kernels (k_fa_fwd/dq/dkv, the hot ones at 255 registers) at most
# SPILL_MAX bytes of spill stores + loads each; (c) static shared memory of
# every kernel within 48 KB (no kernel asks for dynamic shared memory, so
# none needs cudaFuncSetAttribute). Every kernel of the sources must be in
# the report. Skipped (77) on a build without nvcc.
set -uo pipefail
SPILL_MAX=64
D="$SHARC_BIN/src/device/cuda"
ls "$D"/*.o.ptxas > /dev/null 2>&1 || { echo "no ptxas reports in $D (built without nvcc): skipped"; exit 77; }
bad=0
no() { echo "FAIL: $*"; bad=1; }
for cu in "$SHARC_ROOT"/src/device/cuda/*.cu; do
  r="$D/$(basename "$cu" .cu).o.ptxas"
  [ -f "$r" ] && [ "$r" -nt "$cu" ] || no "$r: missing or older than $cu (make all)"
done

# (a)
while IFS= read -r l; do no "no __launch_bounds__: $l"; done < <(grep -n '__global__' "$SHARC_ROOT"/src/device/cuda/*.cu |
  grep -v '__launch_bounds__(')
want=$(cat "$SHARC_ROOT"/src/device/cuda/*.cu | tr '\n' ' ' | grep -oE '__launch_bounds__\([^()]*\) +k_[A-Za-z0-9_]+' |
  sed 's/.* //' | sort -u)
[ "$(wc -l <<< "$want")" -ge 50 ] || no "only $(wc -l <<< "$want") kernels with __launch_bounds__ found"

# one line per kernel instance: name registers spill-bytes smem-bytes
table=$(cat "$D"/*.o.ptxas | awk '
  /Compiling entry function/ { split($0, q, "\047"); cur = q[2] }
  /Function properties for/ { fn = $NF }
  /bytes spill stores/ { if (fn == cur) sp[cur] = $5 + $9 }
  /Used [0-9]+ registers/ && cur != "" {
    regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
    sm = 0; if (match($0, /[0-9]+ bytes smem/)) sm = substr($0, RSTART, RLENGTH) + 0
    print cur, regs, sp[cur] + 0, sm; cur = "" }' | c++filt | sed -E 's/^(void )?([A-Za-z0-9_]+(<[0-9]+>)?)\([^)]*\) /\2 /')
echo "kernel registers spill_bytes static_smem"
echo "$table"
got=$(sed -E 's/[< ].*//' <<< "$table" | sort -u)
missing=$(comm -23 <(echo "$want") <(echo "$got"))
[ -z "$missing" ] || no "kernels not in ptxas's report: $missing"

while read -r k regs spill smem; do
  [ "$smem" -le 49152 ] || no "$k: $smem bytes of static shared memory, over 48 KB"
  case "$k" in
  k_fa_*) [ "$spill" -le $SPILL_MAX ] || no "$k: $spill bytes of register spills (over $SPILL_MAX)" ;;
  *) [ "$spill" -eq 0 ] || no "$k: $spill bytes of register spills" ;;
  esac
done <<< "$table"
exit $bad
