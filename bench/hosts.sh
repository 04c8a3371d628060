#!/usr/bin/env bash
# hosts.sh BUILD_DIR: sharc across hosts whose network, not their CPU, may be
# the limit (scripts/hosts.sh: network namespaces, Open MPI over TCP, each
# host's link shaped with tc tbf). Root only.
#
#   bench/hosts.sh build                       # every section
#   SECTIONS="micro overlap" RATES=250mbit bench/hosts.sh build
#
# The model: GPT-2 shape, 4 layers, width 512, 8 heads, byte vocabulary
# (12.9 M parameters, 51.5 MB fp32), 4 x 256 tokens per rank per step, one
# thread per rank: about 1.2 s per step on one idle core of the project's
# machine. Figures are medians over steps 2..STEPS of each run, then the
# median over REPEATS runs (runs of one table are interleaved, so load from
# other users spreads over all of them); the load average is printed with
# each row. Sections:
#   micro      bench/overlap between 2 hosts: an MPI_Iallgather of 16 MB per
#              rank posted before sgemms of about the same time, waited after;
#              overlap (1 = hidden, 0 = serial) with no MPI call in between,
#              MPI_Test between sgemms, and Open MPI's TCP progress thread
#              (btl_tcp_progress_thread=1), all MPI_THREAD_FUNNELED as sharc
#   overlap    2 hosts x 1 rank, FULL_SHARD: prefetch off / on, progress by
#              none / polling between kernels (sharc's default, note
#              [progress]) / the same without mpi_event_tick_rate=1 / Open
#              MPI's TCP progress thread
#   strategies 1, 2 and 4 hosts x 1 rank: FULL_SHARD, NO_SHARD and (4 hosts,
#              fsdp_size 2) HYBRID_SHARD; and 2 hosts x 2 ranks HYBRID_SHARD
#              with fsdp_size = ranks per host; tokens/s and comm wait
#   bytes      unshaped links: bytes each host sends per step, measured on its
#              link (the difference of a STEPS+2 and a STEPS run, / 2) against
#              the formulas (below) and sharc's own counters
#   reshard    the same measure for FULL_SHARD at 2 hosts x 2 ranks with
#              fsdp.reshard_after_forward true and 2 (= ranks per host)
# Environment: STEPS (4), REPEATS (2), RATES ("1gbit 250mbit"), SECTIONS.
# Writes bench/results/hosts.json and prints the tables.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
steps=${STEPS:-4}
repeats=${REPEATS:-2}
rates=${RATES:-1gbit 250mbit}
sections=${SECTIONS:-micro overlap strategies bytes reshard}
mkdir -p "$here/results"
source "$root/scripts/hosts.sh"
hosts_check || { echo "bench/hosts.sh: $HOSTS_WHY" >&2; exit 1; }
work=$(mktemp -d)
out="$work/rows.jsonl"
: > "$out"
hosts_up 4
trap 'hosts_down; rm -rf "$work"' EXIT

# random letters: byte-level text, enough windows for every step
/usr/bin/python3 -c "
import random
random.seed(1)
open('$work/text.txt', 'w').write(''.join(random.choice('abcdefghijklmnopqrstuvwxyz     \n') for _ in range(2000000)))"
model=(--data.path="$work/text.txt" --model.num_layers=4 --model.embed_dim=512 --model.num_heads=8
       --model.max_seq_len=256 --train.seq_len=256 --train.batch_size=4 --train.threads=1 --train.log_every=1000
       --optim.warmup_steps=1 --ckpt.every=0)
load() { cut -d' ' -f1 /proc/loadavg; }

# train NAME HOSTS SLOTS STEPS ENV... -- FLAGS...: one run; prints its metrics file
train() {
  local name=$1 n=$2 slots=$3 nsteps=$4; shift 4
  local envs=()
  while [ "$1" != -- ]; do envs+=(-x "$1"); shift; done
  shift
  local dir="$work/$name.$RANDOM"
  HOSTS_TIMEOUT=900 hosts_mpirun "$slots" -n $((n * slots)) "${envs[@]}" "$root/$build/sharc" train "${model[@]}" \
    --train.max_steps="$nsteps" --train.out_dir="$dir" "$@" > "$dir.log" 2>&1 ||
    { echo "run $name failed:" >&2; tail -20 "$dir.log" >&2; exit 1; }
  echo "$dir/metrics.jsonl"
}

# summary NAME RATE HOSTS SLOTS METRICS...: one row (medians of steps 2.. per run, median over runs)
summary() {
  local name=$1 rate=$2 n=$3 slots=$4; shift 4
  /usr/bin/python3 - "$name" "$rate" "$n" "$slots" "$(load)" "$@" >> "$out" <<'EOF'
import json, statistics, sys
name, rate, n, slots, load = sys.argv[1:6]
med = statistics.median
runs = []
for path in sys.argv[6:]:
    m = [json.loads(l) for l in open(path) if '"loss_metrics/global_avg_loss"' in l][1:]
    g = lambda k: med(r[k] for r in m)
    runs.append({"tps": g("throughput/global(tps)"), "step_s": g("time_metrics/end_to_end(s)"),
                 "wait_s": g("time_metrics/comm_wait(s)"), "busy_s": g("time_metrics/slowest_busy(s)"),
                 "cpu_s": g("time_metrics/cpu(s)"),
                 "ag_bytes": g("comm/all_gather_bytes"), "rs_bytes": g("comm/reduce_scatter_bytes"),
                 "ar_bytes": g("comm/all_reduce_bytes")})
row = {k: med(r[k] for r in runs) for k in runs[0]}
row.update({"name": name, "rate": rate, "hosts": int(n), "ranks_per_host": int(slots), "load": float(load),
            "runs_tps": [round(r["tps"], 1) for r in runs]})
print(json.dumps(row))
EOF
  /usr/bin/python3 - "$(tail -1 "$out")" >&2 <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
print(f"  {r['name']:<34} {r['rate']:>8} {r['hosts']}x{r['ranks_per_host']}  {r['tps']:7.1f} tok/s  step {r['step_s']:.3f} s"
      f"  wait {r['wait_s']:.3f} s  busy {r['busy_s']:.3f} s  (runs {r['runs_tps']}, load {r['load']})")
EOF
}

prefetch_off=(--fsdp.forward_prefetch=false --fsdp.backward_prefetch=NONE)
prefetch_on=(--fsdp.forward_prefetch=true --fsdp.backward_prefetch=BACKWARD_PRE)

for section in $sections; do
case $section in
micro)
  echo "micro: MPI_Iallgather of 16 MB per rank behind sgemms, 2 hosts x 1 rank" >&2
  for rate in $rates; do
    hosts_shape "$rate"
    for pt in 0 1; do
      for rep in $(seq 1 "$repeats"); do
        HOSTS_TIMEOUT=300 hosts_mpirun 1 -n 2 --mca btl_tcp_progress_thread $pt "$root/$build/bench/overlap" --mb 16 \
          --level funneled | while read -r l; do
            echo "$l" | /usr/bin/python3 -c "
import json, sys
r = json.loads(sys.stdin.read())
r.update({'name': 'micro', 'rate': '$rate', 'tcp_progress_thread': $pt, 'load': $(load)})
print(json.dumps(r))" | tee -a "$out" >&2
          done
      done
    done
  done
  ;;
overlap)
  echo "overlap: 2 hosts x 1 rank, FULL_SHARD" >&2
  # poll: sharc's default (MPI_Test between kernels, Open MPI's event loop polled on each);
  # poll-no-tick: the same with Open MPI's default event tick; thread: Open MPI's TCP progress thread
  variants=(off:none on:none on:poll on:poll-no-tick on:thread)
  for rate in $rates; do
    hosts_shape "$rate"
    declare -A files=()
    for rep in $(seq 1 "$repeats"); do
      for v in "${variants[@]}"; do
        pf=${v%:*} pg=${v#*:}
        if [ "$pf" = on ]; then p=("${prefetch_on[@]}"); else p=("${prefetch_off[@]}"); fi
        sp=poll tick=1 pt=0
        case $pg in none) sp=none ;; thread) sp=none pt=1 ;; poll-no-tick) tick=-1 ;; esac
        files[$v]+=" $(train "ov_${pf}_$pg" 2 1 "$steps" SHARC_PROGRESS=$sp OMPI_MCA_btl_tcp_progress_thread=$pt \
                       OMPI_MCA_mpi_event_tick_rate=$tick -- "${p[@]}")"
      done
    done
    for v in "${variants[@]}"; do
      # shellcheck disable=SC2086
      summary "prefetch ${v%:*}, progress ${v#*:}" "$rate" 2 1 ${files[$v]}
    done
    unset files
  done
  ;;
strategies)
  echo "strategies: tokens/s and comm wait (prefetch and progress at their defaults)" >&2
  for rate in $rates; do
    hosts_shape "$rate"
    declare -A files=()
    configs=("1 1 FULL_SHARD" "2 1 FULL_SHARD" "2 1 NO_SHARD" "2 2 HYBRID_SHARD" "4 1 FULL_SHARD" "4 1 NO_SHARD"
             "4 1 HYBRID_SHARD")
    for rep in $(seq 1 "$repeats"); do
      for c in "${configs[@]}"; do
        read -r n slots s <<< "$c"
        extra=()
        [ "$s" = HYBRID_SHARD ] && extra=(--fsdp.fsdp_size=2)
        files[$c]+=" $(train "st_$n$slots$s" "$n" "$slots" "$steps" -- --fsdp.sharding_strategy="$s" "${extra[@]}")"
      done
    done
    for c in "${configs[@]}"; do
      read -r n slots s <<< "$c"
      # shellcheck disable=SC2086
      summary "$s" "$rate" "$n" "$slots" ${files[$c]}
    done
    unset files
  done
  ;;
bytes)
  echo "bytes: what each host sends per step, unshaped" >&2
  hosts_shape off
  for c in "2 1 FULL_SHARD" "2 1 NO_SHARD" "2 2 HYBRID_SHARD" "4 1 FULL_SHARD" "4 1 NO_SHARD" "4 1 HYBRID_SHARD"; do
    read -r n slots s <<< "$c"
    extra=()
    [ "$s" = HYBRID_SHARD ] && extra=(--fsdp.fsdp_size=2)
    sent=()
    for k in "$steps" $((steps + 2)); do
      before=(); after=()
      for h in $(seq 0 $((n - 1))); do before+=("$(hosts_bytes node$h | cut -d' ' -f1)"); done
      m=$(train "by_$n$slots$s" "$n" "$slots" "$k" -- --fsdp.sharding_strategy="$s" "${extra[@]}")
      for h in $(seq 0 $((n - 1))); do after+=("$(hosts_bytes node$h | cut -d' ' -f1)"); done
      tot=0
      for h in $(seq 0 $((n - 1))); do tot=$((tot + ${after[$h]} - ${before[$h]})); done
      sent+=("$tot")
    done
    /usr/bin/python3 - "$s" "$n" "$slots" "${sent[0]}" "${sent[1]}" "$m" "$(load)" >> "$out" <<'EOF'
import json, sys
s, n, slots, a, b, path, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], float(sys.argv[7])
m = [json.loads(l) for l in open(path) if '"loss_metrics/global_avg_loss"' in l][-1]
P = 12872704        # parameters (printed by sharc at start)
Pr = 2 * 256 * 512  # the embed unit (wte, wpe): a root unit, gathered once per step
B = 4               # bytes per fp32 element
N = n * slots
# Note: bytes a HOST sends per step (ring/direct algorithms; padding ignored).
if s == "FULL_SHARD":      # shard group = every rank, one rank per host
    S, R = N, 1
elif s == "NO_SHARD":
    S, R = 1, N
else:                      # HYBRID_SHARD, fsdp_size 2
    S, R = 2, N // 2
gathers = (S - 1) / S * B * (P + (P - Pr)) if S > 1 else 0   # forward all units, backward all but the root
rs = (S - 1) / S * B * P if S > 1 else 0                      # reduce-scatter: all-to-all of slices
ar = 2 * (R - 1) / R * B * P / S if R > 1 else 0              # replicate all-reduce of the shard (ring)
per_rank_wire = (gathers + rs) * (0 if slots == S else 1) + ar  # shard group inside a host: no wire bytes
per_host = per_rank_wire * slots
measured = (b - a) / 2 / n
counted = (m["comm/all_gather_bytes"] + m["comm/reduce_scatter_bytes"] + m["comm/all_reduce_bytes"])
print(json.dumps({"name": "bytes", "strategy": s, "hosts": n, "ranks_per_host": slots, "sent_per_host_per_step": measured,
                  "formula": per_host, "ratio": measured / per_host if per_host else None,
                  "sharc_counted_per_rank": counted, "load": load}))
EOF
    /usr/bin/python3 - "$(tail -1 "$out")" >&2 <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
f = r["formula"]
ratio = f" ({r['ratio']:.3f}x)" if r["ratio"] else ""
print(f"  {r['strategy']:<14} {r['hosts']}x{r['ranks_per_host']}: {r['sent_per_host_per_step'] / 1e6:8.2f} MB sent per host per step,"
      f" formula {f / 1e6:8.2f} MB{ratio}; sharc counted {r['sharc_counted_per_rank'] / 1e6:.2f} MB handed to collectives per rank")
EOF
  done
  ;;
reshard)
  # fsdp.reshard_after_forward = ranks per host (note [post-forward]): 2 hosts x
  # 2 ranks, FULL_SHARD over all 4, fp32 all-gathers over MPI (a group across
  # hosts): backward re-gathers inside each host, so the bytes a host sends
  # drop by about the backward all-gathers' share
  echo "reshard: bytes each host sends per step, FULL_SHARD 2 hosts x 2 ranks, unshaped" >&2
  hosts_shape off
  for r in true 2; do
    sent=()
    for k in "$steps" $((steps + 2)); do
      before=(); after=()
      for h in 0 1; do before+=("$(hosts_bytes node$h | cut -d' ' -f1)"); done
      m=$(train "rs_$r" 2 2 "$k" -- --fsdp.sharding_strategy=FULL_SHARD --fsdp.reshard_after_forward=$r)
      for h in 0 1; do after+=("$(hosts_bytes node$h | cut -d' ' -f1)"); done
      sent+=($(( (${after[0]} - ${before[0]}) + (${after[1]} - ${before[1]}) )))
    done
    /usr/bin/python3 - "$r" "${sent[0]}" "${sent[1]}" "$m" "$(load)" >> "$out" <<'EOF'
import json, sys
r, a, b, path, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
m = [json.loads(l) for l in open(path) if '"loss_metrics/global_avg_loss"' in l][-1]
print(json.dumps({"name": "reshard", "reshard_after_forward": r, "hosts": 2, "ranks_per_host": 2,
                  "sent_per_host_per_step": (b - a) / 2 / 2, "loss": m["loss_metrics/global_avg_loss"],
                  "sharc_all_gather_bytes_per_rank": m["comm/all_gather_bytes"], "load": load}))
EOF
    /usr/bin/python3 - "$(tail -1 "$out")" >&2 <<'EOF'
import json, sys
r = json.loads(sys.argv[1])
print(f"  reshard_after_forward={r['reshard_after_forward']:<5} {r['sent_per_host_per_step'] / 1e6:8.2f} MB sent per host per step"
      f" (loss {r['loss']:.6f}; all-gather bytes handed in per rank {r['sharc_all_gather_bytes_per_rank'] / 1e6:.2f} MB)")
EOF
  done
  ;;
*) echo "bench/hosts.sh: unknown section '$section' (micro overlap strategies bytes reshard)" >&2; exit 2 ;;
esac
done
cp "$out" "$here/results/hosts.jsonl"
echo "rows in bench/results/hosts.jsonl" >&2
