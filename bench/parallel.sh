#!/usr/bin/env bash
# parallel.sh BUILD_DIR: tensor (mesh.tp) and Ulysses sequence (mesh.sp)
# parallelism against plain FSDP at the same world size, in one run: a Llama
# (L layers, C wide, NH heads, NKV key/value heads, vocabulary V) on
# sequences of T tokens, one sequence per data stream per micro-batch, RANKS
# ranks (4) as FSDP 4 and FSDP 2 x TP 2 (each with activation checkpointing
# off and on), SP 2, SP 4 and TP 2 x SP 2 (note [tp-sp]: the comm bytes are
# the all-reduce plus the all-to-all bytes, each formula below with T/sp
# tokens and NH/tp, NKV/tp heads).
#
#   bench/parallel.sh build                  # the table
#   LONG=1 bench/parallel.sh build           # and the long-context run
#
# Per configuration, rank 0's peak bytes per category of the accounted
# allocator (log.debug, step 2) in MiB, activations also as a ratio to FSDP,
# and the bytes of step 2 that rank 0 counted (comm stats) beside note
# [tp]'s and note [ulysses]'s formulas:
#   tp: all-reduce bytes above FSDP's (its scalars: loss, tokens, norm) =
#       (L x (4, or 5 with activation checkpointing) + 2) x B T C x 4 bytes
#       + 3 B T x 4 (the vocabulary-parallel embedding, head input gradient
#       and row statistics of note [tp-vocab]);
#   sp: all-to-all bytes = L x 2 x B (T/sp) hd (2 NH + 2 max(NKV, sp)) x 4.
# FSDP keeps T tokens and the whole width per rank; tp keeps T tokens and
# 1/tp of the heads and MLP; sp keeps T/sp tokens and every head.
#
# LONG=1 (root, a writable memory cgroup): the model with L_LONG layers (2)
# at T_LONG tokens (8192), every rank in its own memory cgroup of BUDGET MiB
# (256): sp = 1 is killed by the kernel (the planner's activations alone
# exceed the budget), sp = 4 trains 2 steps; the planner's activation bytes
# at sp = 1 and the measured peaks at sp = 4 are printed beside it.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
ranks=${RANKS:-4}
T=${T:-1024}
L=${L:-4} C=${C:-256} NH=${NH:-8} NKV=${NKV:-4} V=${V:-512}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_base_warn_component_unused=0
for i in $(seq 1 4000); do echo "the quick brown fox jumps over the lazy dog $((i % 97))"; done > "$work/text.txt"
model="--model.family=llama --model.num_layers=$L --model.embed_dim=$C --model.num_heads=$NH --model.num_kv_heads=$NKV --model.vocab_size=$V"
train() { # name T extra-args...
  local name=$1 t=$2; shift 2
  timeout 900 mpirun --oversubscribe --bind-to none -n "$ranks" "$@" "$build/sharc" train --data.path="$work/text.txt" \
    --train.out_dir="$work/$name" --train.max_steps=2 --train.seq_len=$t --train.batch_size=1 --train.threads=1 \
    $model --log.debug=true --train.timeout=0 $EXTRA > "$work/log.$name" 2>&1
}
EXTRA=
printf "%-10s %8s %8s %8s %9s %9s %7s %9s %14s %14s %6s\n" mesh params grads optim gathered act "vs fsdp" total \
  "comm bytes" formula equal
for cfg in "fsdp" "fsdp-ac --fsdp.activation_checkpointing=true" "tp2 --mesh.tp=2" "tp2-ac --mesh.tp=2 --fsdp.activation_checkpointing=true" \
           "sp2 --mesh.sp=2" "sp4 --mesh.sp=4" "tp2sp2 --mesh.tp=2 --mesh.sp=2"; do
  set -- $cfg
  name=$1; shift
  EXTRA="$*" train "$name" $T || { tail -20 "$work/log.$name"; exit 1; }
done
/usr/bin/python3 - "$work" $T $L $C $NH $NKV <<'PY'
import json, sys
work, (T, L, C, NH, NKV) = sys.argv[1], map(int, sys.argv[2:7])
def last(name):
    return [json.loads(l) for l in open("%s/%s/debug/rank-0.log" % (work, name))][-1]
mib = lambda d, k: d["memory/%s_peak(GiB)" % k] * 1024
base = last("fsdp")
hd = C // NH
for name, tp, sp, ac in [("fsdp", 1, 1, 0), ("fsdp-ac", 1, 1, 1), ("tp2", 2, 1, 0), ("tp2-ac", 2, 1, 1), ("sp2", 1, 2, 0),
                         ("sp4", 1, 4, 0), ("tp2sp2", 2, 2, 0)]:
    d = last(name)
    Tl = T // sp  # note [tp-sp]: each dimension's formula on the other's local sizes
    ar = d["comm/all_reduce_bytes"] - base["comm/all_reduce_bytes"]
    ar_f = (L * (5 if ac else 4) + 2) * Tl * C * 4 + 3 * Tl * 4  # note [tp-vocab]: V % tp == 0
    a2a, a2a_f = d["comm/all_to_all_bytes"], L * 2 * Tl * hd * (2 * NH // tp + 2 * max(NKV // tp, sp)) * 4
    if tp > 1 and sp > 1:  # both: the sums, equal only when each is
        got, formula = (ar + a2a, ar_f + a2a_f) if (ar, a2a) == (ar_f, a2a_f) else (ar + a2a, -1)
    elif tp > 1:
        got, formula = ar, ar_f
    elif sp > 1:
        got, formula = a2a, a2a_f
    else:
        got = formula = 0
    print("%-10s %8.2f %8.2f %8.2f %9.2f %9.2f %7.3f %9.2f %14d %14d %6s" % (
        name, mib(d, "params"), mib(d, "grads"), mib(d, "optim"), mib(d, "gathered"), mib(d, "activations"),
        d["memory/activations_peak(GiB)"] / base["memory/activations_peak(GiB)"], d["memory/max_active(GiB)"] * 1024,
        got, formula, "yes" if got == formula else "NO"))
PY
[ "${LONG:-0}" = 1 ] || exit 0

# ------------------------------------------------ long context on a budget
TL=${T_LONG:-8192} budget=${BUDGET:-256}
model="--model.family=llama --model.num_layers=${L_LONG:-2} --model.embed_dim=$C --model.num_heads=$NH --model.num_kv_heads=$NKV --model.vocab_size=$V"
[ "$(id -u)" = 0 ] || { echo "LONG=1 needs root (memory cgroups)"; exit 1; }
cgroot=
if [ -f /sys/fs/cgroup/memory/cgroup.procs ]; then cgroot=/sys/fs/cgroup/memory; limit=memory.limit_in_bytes
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then cgroot=/sys/fs/cgroup; limit=memory.max
else echo "LONG=1 needs a writable memory cgroup"; exit 1; fi
cgs=()
for r in $(seq 0 $((ranks - 1))); do
  cg=$cgroot/sharc-bench-$$-$r
  mkdir "$cg" && echo $((budget << 20)) > "$cg/$limit"
  cgs+=("$cg")
done
cleanup() {
  for cg in "${cgs[@]}"; do
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    rmdir "$cg" 2>/dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT
cat > "$work/rank.sh" <<EOS
#!/bin/sh
echo \$\$ > "$cgroot/sharc-bench-$$-\$OMPI_COMM_WORLD_RANK/cgroup.procs"
exec "\$@"
EOS
chmod +x "$work/rank.sh"
plan1=$("$build/sharc" plan --ranks "$ranks" $model --train.seq_len=$TL --train.batch_size=1 --train.threads=1 |
        awk '$1 == "activations" { print $2 * 1024 }')
echo
echo "long context: T = $TL, every rank in a memory cgroup of $budget MiB; planned activations at sp 1: $plan1 MiB per rank"
for sp in 1 4; do
  rc=0
  EXTRA="--mesh.sp=$sp" train "long$sp" $TL "$work/rank.sh" || rc=$?
  if [ $rc = 0 ]; then
    /usr/bin/python3 - "$work/long$sp/debug/rank-0.log" $sp <<'PY'
import json, sys
d = [json.loads(l) for l in open(sys.argv[1])][-1]
print("sp %s: trained %d steps, loss %.4f; rank 0 activations %.1f MiB, accounted total %.1f MiB" % (
    sys.argv[2], d["step"], d["loss"], d["memory/activations_peak(GiB)"] * 1024, d["memory/max_active(GiB)"] * 1024))
PY
  else
    echo "sp $sp: did not fit (exit $rc): $(grep -m1 -o 'exited on signal [0-9]*' "$work/log.long$sp" || tail -1 "$work/log.long$sp")"
  fi
done
