#!/usr/bin/env bash
# timeout: 90
# bench/gpu.sh and bench/torch_gpu.py, checked without a GPU so that a typo
# does not cost GPU time: torch_gpu.py compiles; bench/gpu.sh TINY=1 (toy
# models on the CPU, 2 steps) gives a row per config and system where
#   - sharc with train.device cuda is reported "refused: <its one-line error>"
#     (no GPU here) and the bench goes on;
#   - sharc on the CPU and PyTorch eager train: a positive tokens/s and a
#     first-step loss within 0.3 of ln(512), the cross-entropy of a
#     near-uniform prediction over the toy vocabulary (random tokens, small
#     weights, fresh tokens for each config), a finite last loss;
#   - torch.compile and FSDP2 run, or say "unavailable" where this torch
#     (1.13) lacks them;
#   - the largest Llama section (`sharc plan` against MEM_GIB, default 0.004
#     GiB in TINY) finds a larger toy with fsdp.cpu_offload than without,
#     both planned within the memory, and both train (tokens/s > 0);
#   - the profiled sharc run per model prints its table (SHARC_PROFILE=1,
#     note [prof]) and leaves it in $OUT/profile_<model>.txt, and its
#     timeline (note [trace]) in $OUT/trace_<model>.json, which parses;
# and the JSON under $OUT holds every row. Without a python that imports
# torch, the PyTorch rows are not checked (the sharc rows still are).
set -uo pipefail
source "$SHARC_ROOT/tests/cli/timeout_lib.inc" # inner timeouts follow --timeout-scale
cd "$TMPDIR" || exit 1
fail() { echo "$*"; exit 1; }
b="$SHARC_ROOT/bench"
py=""
for c in "${PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$c" ] && "$c" -c 'import torch' 2> /dev/null && { py=$c; break; }
done
python3 -m py_compile "$b/torch_gpu.py" || fail "bench/torch_gpu.py does not compile"
bash -n "$b/gpu.sh" || fail "bench/gpu.sh has a syntax error"

check() { # JSON SYSTEM... : every row of those systems ran or is explained
  "${py:-python3}" - "$@" << 'PY'
import json, math, sys
path, systems = sys.argv[1], sys.argv[2:]
rows = json.load(open(path))
want = {(m, b, ac) for m, b, ac in [("gpt2", 2, False), ("gpt2", 3, False), ("llama", 2, False), ("llama", 2, True)]}
for s in systems:
    got = {(r["model"], r["batch"], r["ac"]) for r in rows if r["system"] == s}
    assert got == want, f"{s}: configs {sorted(got)}, want {sorted(want)}"
for r in rows:
    s = r["system"]
    if s in ("eager", "sharc-cpu") or (s == "sharc" and "error" not in r) or (s in ("compile", "fsdp2") and "error" not in r):
        assert "tokens_per_s" in r and r["tokens_per_s"] > 0, f"{s} did not train: {r}"
        assert abs(r["loss_first"] - math.log(512)) < 0.3, \
            f"{s}: first loss {r['loss_first']}, want ln(512) = {math.log(512):.3f} +- 0.3: {r}"
        assert math.isfinite(r["loss"]), r
        assert r["mfu"] > 0 and r["peak_gib"] >= 0, r
    elif s == "sharc":
        assert r["error"].startswith("refused: ") and "train.device: cuda: " in r["error"], f"sharc row: {r}"
    else:
        assert r["error"].startswith("unavailable: "), f"{s}: {r}"
print(f"ok: {len(rows)} rows")
PY
}
# sharc asked for cuda: refused, and the torch systems go on
if [ -n "$py" ]; then
  out=$(OUT="$TMPDIR/a" TINY=1 SHARC_DEVICE=cuda PYTHON="$py" timeout 60 "$b/gpu.sh" "$SHARC_BIN" 2>&1) || fail "gpu.sh: $out"
  echo "$out" | tail -n1
  check a/gpu_bench.json sharc eager compile fsdp2 || fail "$out"
  grep -q '^llama .* eager ' a/gpu_bench.txt || fail "no table: $(cat a/gpu_bench.txt)"
fi
# sharc on the CPU: its metrics read into the table
out=$(OUT="$TMPDIR/c" TINY=1 SYSTEMS=sharc PYTHON="${py:-python3}" timeout 60 "$b/gpu.sh" "$SHARC_BIN" 2>&1) || fail "gpu.sh: $out"
sed -i 's/"system": "sharc"/"system": "sharc-cpu"/' c/gpu_bench.json
check c/gpu_bench.json sharc-cpu || fail "$out"
# the largest Llama (TINY: toys against 0.004 GiB): the plan's search finds a
# larger member with offload than without, each within the memory, and both train
"${py:-python3}" - c/largest_llama.json << 'PY' || fail "largest llama: $(cat c/largest_llama.json 2>&1)"
import json, sys
r = {x["offload"]: x for x in json.load(open(sys.argv[1]))}
assert set(r) == {False, True}, r
for x in r.values():
    assert x["j"] >= 1 and 0 < x["planned_gib"] <= x["mem_gib"] and x.get("tokens_per_s", 0) > 0, x
assert r[True]["j"] > r[False]["j"] and r[True]["params"] > r[False]["params"], r
PY
grep -q '^largest llama, offload on : j=' <<< "$out" || fail "gpu.sh did not print the largest llama: $out"
# the profiled run per model (note [prof]): its table in the output and in $OUT
for m in gpt2 llama; do
  grep -q '^# sharc profile: 2 step(s)' c/profile_$m.txt && grep -q '^fwd.matmul.fc ' c/profile_$m.txt ||
    fail "no profile of $m: $(cat c/profile_$m.txt)"
  grep -q "^profile: sharc $m B=2" <<< "$out" || fail "gpu.sh did not print the $m profile: $out"
  # its timeline (note [trace]): parses, steps 2 and 3, compute and host tracks
  python3 - c/trace_$m.json << 'PY' || fail "no usable trace of $m in \$OUT"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = sorted(e["name"] for e in ev if e.get("cat") == "step")
tids = {e["tid"] for e in ev if e.get("ph") == "X"}
assert steps == ["step 2", "step 3"] and {0, 2} <= tids, (steps, tids)
PY
done
echo "ok"
