#!/usr/bin/env bash
# timeout: 300
# The CUDA simulator (note [cudasim], tests/cudasim): its own checks (values
# worked out by hand; each planted bug stopped with its message), then the
# GPU suite (tests/gpu/run.sh: every CUDA kernel against the CPU kernel, the
# whole model on cuda against the CPU) on the simulated GPU, so CI runs the
# CUDA backend's code without a GPU.
set -uo pipefail
B="$SHARC_BIN/sim"
[ -x "$B/cudasim_selftest" ] || { echo "no simulator build (CUDA headers missing): skipped"; exit 77; }
export SHARC_CUBLASLT_LIB="$B/libcudasim_cublaslt.so"
fail() { echo "$*"; exit 1; }
cd "$TMPDIR"

out=$("$B/cudasim_selftest" values 2>&1) || fail "cudasim_selftest values: $out"
[ "$(grep -c '^PASS' <<< "$out")" -ge 19 ] || fail "cudasim_selftest values: $out"

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
CASES

out=$(bash "$SHARC_ROOT/tests/gpu/run.sh" "$B" 2>&1); rc=$?
last=$(tail -1 <<< "$out")
[ $rc -eq 0 ] && [[ "$last" =~ ^([0-9]+)\ passed,\ 0\ failed$ ]] && [ "${BASH_REMATCH[1]}" -ge 100 ] ||
  fail "tests/gpu/run.sh on the simulator: exit $rc: $(grep -v '^PASS' <<< "$out" | tail -20)"
exit 0
