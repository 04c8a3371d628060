#!/usr/bin/env bash
# timeout: 300
# The CUDA simulator (note [cudasim], tests/cudasim): its own checks (values
# worked out by hand; each planted bug stopped with its message), then the
# GPU suite (tests/gpu/run.sh: every CUDA kernel against the CPU kernel, the
# whole model on cuda against the CPU) on the simulated GPU, so CI runs the
# CUDA backend's code without a GPU; and the kernel groups with shared
# memory or warp exchanges again in reverse thread order, bit for bit the
# forward run (races inside a block, note [cudasim]).
set -uo pipefail
B="$SHARC_BIN/sim"
[ -x "$B/cudasim_selftest" ] || { echo "no simulator build (CUDA headers missing): skipped"; exit 77; }
export SHARC_CUBLASLT_LIB="$B/libcudasim_cublaslt.so"
fail() { echo "$*"; exit 1; }
cd "$TMPDIR"

out=$("$B/cudasim_selftest" values 2>&1) || fail "cudasim_selftest values: $out"
[ "$(grep -c '^PASS' <<< "$out")" -ge 19 ] || fail "cudasim_selftest values: $out"

# the order knob (CUDASIM_ORDER): a missing barrier is right by luck in
# forward order and caught in reverse and shuffle order
for o in forward reverse shuffle:1; do
  out=$(CUDASIM_ORDER=$o "$B/cudasim_selftest" order 2>&1) || fail "cudasim_selftest order ($o): $out"
  [ "$(grep -c '^PASS' <<< "$out")" -eq 2 ] || fail "cudasim_selftest order ($o): $out"
  want=wrong; [ $o = forward ] && want=right
  grep -qx "without a barrier: $want" <<< "$out" || fail "CUDASIM_ORDER=$o: the missing barrier is not $want: $out"
done

# races inside a block: the kernel groups with shared memory, barriers or
# warp exchanges give the same results, bit for bit (the digest of every
# copy back), with threads and blocks resumed in reverse order as in forward
for g in elem norms qknorm attention kvcache xent moe attn16 vocab; do
  for o in forward reverse; do
    [ "$(jobs -rp | wc -l)" -lt 2 ] || wait -n
    CUDASIM_ORDER=$o CUDASIM_DIGEST=1 OMP_NUM_THREADS=1 "$B/gpu_kernels" $g > "order-$g-$o.log" 2>&1 &
  done
done
wait
for g in elem norms qknorm attention kvcache xent moe attn16 vocab; do
  grep -q '^PASS' "order-$g-forward.log" && grep -q '^cudasim: d2h' "order-$g-forward.log" ||
    fail "gpu_kernels $g: no checks or digests: $(tail -5 "order-$g-forward.log")"
  cmp -s "order-$g-forward.log" "order-$g-reverse.log" ||
    fail "gpu_kernels $g differs in reverse thread order (a race in a block): $(diff "order-$g-forward.log" "order-$g-reverse.log" | head -8)"
done

# each planted bug: stopped (abort), with the simulator's message
while IFS='|' read -r case want; do
  out=$("$B/cudasim_selftest" "$case" 2>&1); rc=$?
  [ $rc -ne 0 ] || fail "$case: not stopped (exit 0): $out"
  grep -qF -- "$want" <<< "$out" || fail "$case: exit $rc without '$want': $out"
done <<'CASES'
host_reads_device|host code touched device memory
host_func_reads_device|host code touched device memory
host_pointer_argument|pointer argument 1
out_of_bounds|0 bytes past the end of a 256-byte allocation
split_barrier|threads wait at two different __syncthreads
shuffle_with_exited_lane|which has exited
double_free|freed twice
use_after_free|no live allocation
wmma_divergent|wmma::load_matrix_sync with other arguments
wmma_misaligned|not 256-bit aligned
over_launch_bounds|more threads per block than the kernel's __launch_bounds__
misaligned_argument|not aligned to the 8 bytes of its type
CASES

out=$(bash "$SHARC_ROOT/tests/gpu/run.sh" "$B" 2>&1); rc=$?
last=$(tail -1 <<< "$out")
[ $rc -eq 0 ] && [[ "$last" =~ ^([0-9]+)\ passed,\ 0\ failed$ ]] && [ "${BASH_REMATCH[1]}" -ge 100 ] ||
  fail "tests/gpu/run.sh on the simulator: exit $rc: $(grep -v '^PASS' <<< "$out" | tail -20)"
exit 0
