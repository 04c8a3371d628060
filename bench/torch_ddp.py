#!/usr/bin/python3
"""PyTorch DDP over gloo, the baseline bench/fsdp.sh compares sharc against.

    torch_ddp.py --ranks 2 [--batch 2 --seq 256 --steps 5 ...model options as torch_step.py]

Spawns --ranks processes on this machine (one thread each unless the thread
environment says otherwise; set it before starting: OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE, OPENBLAS_CORETYPE, and the
glibc malloc settings bench/run.sh gives PyTorch). Each rank trains the model
of bench/torch_step.py on its own random batch of --batch sequences: a full
step is forward, backward (DDP all-reduces the gradients in buckets during
it), clip_grad_norm_(1.0), AdamW. Prints one JSON line: global tokens/s
(median step after warm-up) and the peak resident memory per rank.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step import Model  # noqa: E402  (the same model as the single-process bench)


def worker(rank, a, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)
    model = DDP(Model(a))
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(100 + rank)
    times = []
    for _ in range(a.steps + a.warmup):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times[a.warmup:])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    out.put((rank, med, peak))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--family", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=2, help="sequences per rank")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--attn", default="baddbmm", choices=["baddbmm", "matmul"])
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--port", type=int, default=29517)
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    if not a.ffn:
        a.ffn = 4 * a.dim if a.family == "gpt2" else (8 * a.dim // 3 + 15) // 16 * 16
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, out)) for r in range(a.ranks)]
    for pr in procs:
        pr.start()
    results = sorted(out.get() for _ in procs)
    for pr in procs:
        pr.join()
    step = max(r[1] for r in results)
    print(json.dumps({"system": "pytorch-ddp-gloo", "ranks": a.ranks, "threads_per_rank": torch.get_num_threads(),
                      "batch_per_rank": a.batch, "seq": a.seq, "step_ms": round(step * 1e3, 1),
                      "tokens_per_s": round(a.ranks * a.batch * a.seq / step, 1),
                      "peak_rss_mib_per_rank": round(max(r[2] for r in results), 1)}))


if __name__ == "__main__":
    main()
