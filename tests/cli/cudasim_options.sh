#!/usr/bin/env bash
# timeout: 60
# train.device: cuda with the model and data options the main cuda check
# (cudasim_train.sh) does not take, run on the CUDA simulator (build/sim/
# sharc: device memory in a guarded arena, so a host read of it aborts),
# folded into ONE 3-step run against the CPU run of the same config (note
# [cuda-train] in src/train/trainer.c):
#  - Qwen3-MoE (model.num_experts 4, top-2; layer 0 sparse, layer 1 dense
#    by mlp_only_layers) with the router's auxiliary loss and each expert its
#    own unit (fsdp.moe_experts): src/model/moe.c on the device;
#  - packed SFT rows (data.packing, 2 samples a row: each query's first
#    visible key and the positions must reach the device);
#  - the tiled MLP (fsdp.apply_tiled_mlp, 3 chunks) on the dense layer;
#  - frozen parameters (a block's attention and one expert).
# Loss and gradient norm at every step within 1e-4 relative; the final
# weights: frozen tensors bit-identical to the CPU run's (both still the
# initial ones), the rest within 1e-4 (relative norm of the difference).
# Then a dense packed run of 11 micro-batches in one step wraps the packing
# ring of 8 slots (its waits for a slot's event traced), = the CPU.
# Two micro-batches a step (train.grad_accum 2). Host waits a step (3 steps
# less 1 step, over 2; note [moe-waits] in src/model/moe.c): at most 3 = the
# sparse layer's routing indices 1 per micro-batch, the step's read of its
# sums 1; packing's positions none (note [packing] in src/model/model.c: 6
# when they were copied from pageable memory and the stream synchronized).
set -uo pipefail
source "$SHARC_ROOT/tests/cli/cudasim_lib.inc"
python3 - <<'PY'
import json, random
r = random.Random(11)
words = "and the lord said unto moses behold i will send thee a great light upon the earth".split()
with open("sft.jsonl", "w") as f:
    for i in range(40):
        q = " ".join(r.choice(words) for _ in range(r.randint(1, 2)))
        a = " ".join(r.choice(words) for _ in range(r.choice([1, 2])))
        f.write(json.dumps({"question": q, "response": a}) + "\n")
PY
FROZEN="model.layers.1.self_attn.,model.layers.0.mlp.experts.3."
X="--data.path=sft.jsonl --model.tokenizer=$SHARC_ROOT/tests/fixtures/tokenizer/small --model.vocab_size=768
   --data.input_key=question --data.output_key=response --data.input_template={}: --data.packing=true
   --model.family=llama --model.num_layers=2 --model.embed_dim=32 --model.num_heads=2 --model.num_kv_heads=1
   --model.tie_embeddings=false --model.ff_hidden_dim=48 --model.max_seq_len=16
   --model.num_experts=4 --model.num_experts_per_tok=2 --model.moe_intermediate_size=16
   --model.output_router_logits=true --model.mlp_only_layers=1 --fsdp.moe_experts=true
   --fsdp.apply_tiled_mlp=true --fsdp.tiled_num_shards=3 --model.freeze_module_prefix=$FROZEN
   --train.seq_len=16 --train.batch_size=2 --train.grad_accum=2 --train.max_steps=3 --train.threads=1 --optim.warmup_steps=2
   --ckpt.every=0"
"$CPU" train $X --train.out_dir=c > c.log 2>&1 || { cat c.log; die "cpu run"; }
CUDASIM_SYNC_STATS=1 "$SIM" train $X --train.out_dir=g --train.device=cuda > g.log 2>&1 || { tail -20 g.log; die "cuda run"; }
CUDASIM_SYNC_STATS=1 "$SIM" train $X --train.out_dir=g1 --train.device=cuda --train.max_steps=1 > g1.log 2>&1 ||
  { tail -20 g1.log; die "cuda run (1 step)"; }
grep -q "device: cuda" g.log || die "the cuda run's config does not say cuda"
grep -q "(2.00 samples a row)" g.log || die "packing did not put 2 samples a row: $(grep packing: g.log)"
col() { jq -r "select(.\"$2\" != null) | .\"$2\"" "$1/metrics.jsonl"; }
for k in loss_metrics/global_avg_loss grad_norm; do
  [ "$(col c $k | wc -l)" -eq 3 ] || die "the cpu run has not 3 steps of $k"
  paste <(col g $k) <(col c $k) | awk -v k=$k '{ d = $1 - $2; if (d < 0) d = -d; r = $2 < 0 ? -$2 : $2;
    if (NF != 2 || d > 1e-4 * r) { print "FAIL: " k " step " NR ": cuda " $1 ", cpu " $2; bad = 1 } } END { exit bad }' || exit 1
done
python3 - "$FROZEN" <<'PY' || exit 1
import json, struct, sys
def load(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items() if k != "__metadata__"}
c, g = load("c/model.safetensors"), load("g/model.safetensors")
frozen = tuple(sys.argv[1].split(","))
assert sorted(c) == sorted(g), "tensor names differ"
nf = 0
for k in c:
    if k.startswith(frozen):
        nf += 1
        assert c[k] == g[k], f"frozen {k} differs between the cuda and the cpu run"
    else:
        a, b = struct.unpack(f"<{len(c[k]) // 4}f", c[k]), struct.unpack(f"<{len(g[k]) // 4}f", g[k])
        d = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5; r = sum(x * x for x in a) ** 0.5
        assert d <= 1e-4 * r, f"{k}: cuda vs cpu relative difference {d / r:.3g}"
assert nf == 7, f"{nf} frozen tensors, want 7"  # q/k/v/o of layer 1's attention, expert 3's 3 matrices
print(f"final weights: {nf} frozen tensors bit-identical, {len(c) - nf} trained within 1e-4")
PY
hs() { sed -n 's/^cudasim: host syncs \([0-9]*\)$/\1/p' "$1"; }
a=$(hs g1.log) b=$(hs g.log)
[ -n "$a" ] && [ -n "$b" ] || die "no cudasim host sync counts ('$a', '$b')"
[ $((b - a)) -le 6 ] || die "$((b - a)) host synchronizations over 2 steps, expected at most 6 (3 a step)"
echo "Qwen3-MoE + packing + tiled MLP + frozen params: cuda = cpu within 1e-4 (3 steps), $(((b - a) / 2)) host waits a step"
# The packing ring wrapping (note [packing]): a dense model waits for nothing
# inside a step, so 11 micro-batches come back to slots whose copies have
# not run (the simulator runs a stream only when the host waits): the poll
# says not done and the host waits for the slot's event. Same loss and
# gradient norm as the CPU.
D="--data.path=sft.jsonl --model.tokenizer=$SHARC_ROOT/tests/fixtures/tokenizer/small --model.vocab_size=768
   --data.input_key=question --data.output_key=response --data.input_template={}: --data.packing=true
   --model.family=llama --model.num_layers=1 --model.embed_dim=32 --model.num_heads=2 --model.num_kv_heads=1
   --model.ff_hidden_dim=48 --model.max_seq_len=16 --train.seq_len=16 --train.batch_size=1 --train.grad_accum=11
   --train.max_steps=1 --train.threads=1 --ckpt.every=0"
"$CPU" train $D --train.out_dir=wc > wc.log 2>&1 || { cat wc.log; die "cpu run (ring)"; }
CUDASIM_SYNC_TRACE=1 "$SIM" train $D --train.out_dir=wg --train.device=cuda > wg.log 2>&1 || { tail -20 wg.log; die "cuda run (ring)"; }
w=$(grep -A6 '(cudaEventSynchronize+' wg.log | grep -c 'sharc_model_set_positions+')
[ "$w" -ge 1 ] || die "11 packed micro-batches never waited for a ring slot's event"
for k in loss_metrics/global_avg_loss grad_norm; do
  NEAR_N=1 near "$(col wg $k)" "$(col wc $k)" "ring $k" || exit 1
done
echo "packing ring, 11 micro-batches: $w waits for a slot, cuda = cpu within 1e-5"
exit 0
