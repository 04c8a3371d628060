#!/usr/bin/env bash
# timeout: 10
# The runner's --timeout-scale reaches the scripts (SHARC_TIMEOUT_SCALE) and
# tests/cli/timeout_lib.inc scales their inner `timeout N` by it: a stand-in
# timeout(1) first in PATH prints the arguments it is given.
set -uo pipefail
cd "$TMPDIR" || exit 1
source "$SHARC_ROOT/tests/cli/timeout_lib.inc"
fail() { echo "FAIL: $*"; exit 1; }
[[ "${SHARC_TIMEOUT_SCALE:-}" =~ ^[0-9.e+-]+$ ]] || fail "the runner exported SHARC_TIMEOUT_SCALE='${SHARC_TIMEOUT_SCALE:-}'"
mkdir -p fake && printf '#!/bin/sh\necho "$@"\n' > fake/timeout && chmod +x fake/timeout
PATH="$PWD/fake:$PATH"
check() { # scale args... expected
  local got
  got=$(SHARC_TIMEOUT_SCALE=$1 timeout "${@:2:$#-2}")
  [ "$got" = "${!#}" ] || fail "scale $1: timeout ${*:2:$#-2} -> '$got', expected '${!#}'"
}
check 1 60 cmd a "60 cmd a"
check 4 60 mpirun -n 2 "240 mpirun -n 2"
check 2.5 3 x "8 x"      # rounded up
check 0.01 5 x "1 x"     # never below a second
check 4 -k 1 2 x "-k 1 2 x" # options pass unchanged
check 4 10s x "10s x"    # as do suffixed durations
got=$(unset SHARC_TIMEOUT_SCALE; timeout 7 y)
[ "$got" = "7 y" ] || fail "unset scale: '$got'"
echo "PASS inner timeouts follow --timeout-scale"
