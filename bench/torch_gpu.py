#!/usr/bin/env python3
"""PyTorch training steps on one GPU for bench/gpu.sh: one system, one model, several configs.

Systems (--system):
  eager    the model as written, F.scaled_dot_product_attention (flash on an H100),
           fused AdamW
  compile  the same under torch.compile: the whole model for GPT-2, each block
           for the Llama (identical blocks share one compiled graph, so 16 blocks
           cost one compile)
  fsdp2    torch.distributed.fsdp.fully_shard per block and on the root, at world
           size 1 (a file:// store, NCCL on cuda, gloo on cpu), eager;
           MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
Every system keeps fp32 master weights and AdamW moments and computes in bf16
(eager and compile under torch.autocast; fsdp2 through its policy), as sharc's
fsdp.param_dtype bf16. A step: zero the gradients, forward + backward of the
mean cross-entropy over B x T random tokens, clip_grad_norm_(1.0), AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, fused). Activation
checkpointing (--ac) wraps each block in torch.utils.checkpoint (non-reentrant).

Models (--model): gpt2 = GPT-2 124M (L12 d768 12 heads, V=50257, T=1024, learned
positions, LayerNorm, GELU tanh, biases, tied head); llama = 0.85B Llama (L16
d2048, 32 heads, 8 KV heads, SwiGLU 5632, V=32000, T=2048, RMSNorm, RoPE, no
biases, untied head). --tiny shrinks either to a toy (for checking on a CPU).

Each config (--batch B, repeated; with --ac-both each batch with and without
activation checkpointing) prints one line "RESULT {json}": tokens/s (B*T over
the median of the timed steps, each step synchronised), MFU, peak memory
(torch.cuda.max_memory_allocated since the config started, params and
optimizer state included; on a CPU ru_maxrss), the first and last step's loss, or "error" (an OOM, say) and the
next config runs. MFU = tokens/s * FLOPs per token / peak, FLOPs per token as
sharc counts them (sharc_model_flops_per_token: 6 * matmul parameters + 12 * L
* C * T), peak --peak-tflops (bench/gpu.sh passes 989.4: the H100 SXM's dense
bf16 rate on NVIDIA's datasheet, the figure MFU is conventionally quoted against).
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

MODELS = {
    "gpt2": dict(layers=12, dim=768, heads=12, kv_heads=12, ffn=3072, vocab=50257, seq=1024),
    "llama": dict(layers=16, dim=2048, heads=32, kv_heads=8, ffn=5632, vocab=32000, seq=2048),
}
TINY = {
    "gpt2": dict(layers=2, dim=64, heads=4, kv_heads=4, ffn=256, vocab=512, seq=32),
    "llama": dict(layers=2, dim=64, heads=4, kv_heads=2, ffn=176, vocab=512, seq=32),
}


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):
    """Rotate-half RoPE on x (B, H, T, hd), in fp32 (cos, sin are), back to x's dtype."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).type_as(x)


def attention(q, k, v):
    """Causal attention of q (B, H, T, hd) over k, v (B, KV, T, hd)."""
    g = q.shape[1] // k.shape[1]
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        if g > 1:
            try:
                return sdpa(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # a torch without enable_gqa
                pass
            k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        return sdpa(q, k, v, is_causal=True)
    if g > 1:  # torch without SDPA (the CPU check here): written out
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    T = q.shape[2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s.float(), -1).type_as(q) @ v


class Block(nn.Module):
    def __init__(self, c, gpt2):
        super().__init__()
        C, self.H, self.KV, self.hd, self.gpt2 = c["dim"], c["heads"], c["kv_heads"], c["dim"] // c["heads"], gpt2
        norm = (lambda: nn.LayerNorm(C)) if gpt2 else (lambda: RMSNorm(C))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(C, (self.H + 2 * self.KV) * self.hd, bias=gpt2)
        self.proj = nn.Linear(self.H * self.hd, C, bias=gpt2)
        self.fc = nn.Linear(C, c["ffn"] if gpt2 else 2 * c["ffn"], bias=gpt2)
        self.fc_proj = nn.Linear(c["ffn"], C, bias=gpt2)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        H, KV, hd = self.H, self.KV, self.hd
        q, k, v = self.qkv(self.ln1(x)).split([H * hd, KV * hd, KV * hd], -1)
        q, k, v = (t.view(B, T, -1, hd).transpose(1, 2) for t in (q, k, v))
        if not self.gpt2:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        x = x + self.proj(attention(q, k, v).transpose(1, 2).reshape(B, T, H * hd))
        h = self.fc(self.ln2(x))
        if self.gpt2:
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, -1)
            h = F.silu(gate) * up
        return x + self.fc_proj(h)


class Model(nn.Module):
    def __init__(self, c, gpt2):
        super().__init__()
        self.gpt2, self.ac = gpt2, False
        C, V, T = c["dim"], c["vocab"], c["seq"]
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C) if gpt2 else None
        self.blocks = nn.ModuleList([Block(c, gpt2) for _ in range(c["layers"])])
        self.norm = nn.LayerNorm(C) if gpt2 else RMSNorm(C)
        self.head = None if gpt2 else nn.Linear(C, V, bias=False)
        hd = C // c["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        std_res = 0.02 / math.sqrt(2 * c["layers"])
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std_res if n.endswith("proj.weight") else 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[:T]
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = checkpoint(b, x, cos, sin, use_reentrant=False) if self.ac else b(x, cos, sin)
        logits = F.linear(self.norm(x), self.wte.weight if self.head is None else self.head.weight)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def flops_per_token(c, gpt2):
    """sharc_model_flops_per_token: 6 * matmul parameters + 12 * L * C * T."""
    hd = c["dim"] // c["heads"]
    f = c["ffn"] if gpt2 else 2 * c["ffn"]
    block = (c["heads"] + 2 * c["kv_heads"]) * hd * c["dim"] + c["heads"] * hd * c["dim"] + f * c["dim"] + c["ffn"] * c["dim"]
    return 6.0 * (c["layers"] * block + c["vocab"] * c["dim"]) + 12.0 * c["layers"] * c["dim"] * c["seq"]


def setup(a, dev):
    """The model and optimizer of one system; raises RuntimeError("unavailable: ...") when torch lacks it."""
    c = (TINY if a.tiny else MODELS)[a.model]
    gpt2 = a.model == "gpt2"
    torch.manual_seed(0)
    model = Model(c, gpt2).to(dev)
    if a.system == "compile":
        if not hasattr(torch, "compile"):
            raise RuntimeError(f"unavailable: torch {torch.__version__} has no torch.compile")
        if gpt2:
            model = torch.compile(model, dynamic=False)
        else:
            for i, b in enumerate(model.blocks):
                model.blocks[i] = torch.compile(b, dynamic=False)
    elif a.system == "fsdp2":
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except Exception:  # ImportError; an old torch under a newer Python fails otherwise
            try:
                from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
            except Exception as e:
                raise RuntimeError(f"unavailable: torch {torch.__version__} has no FSDP2 fully_shard "
                                   f"({type(e).__name__})")
        import torch.distributed as dist
        store = os.path.join(tempfile.mkdtemp(prefix="torch_gpu_"), "store")  # a fresh file:// store
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method=f"file://{store}",
                                rank=0, world_size=1)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for b in model.blocks:
            fully_shard(b, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **kw)
    return c, gpt2, model, opt


def peak_gib(dev):
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_config(a, dev, c, gpt2, model, opt, B, ac):
    inner = getattr(model, "_orig_mod", model)
    inner.ac = ac
    T, V = c["seq"], c["vocab"]
    gen = torch.Generator(device="cpu").manual_seed(2 * B + ac)  # fresh tokens per config
    data = torch.randint(0, V, (B, T + 1), generator=gen).to(dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    autocast = a.system != "fsdp2"  # fsdp2 computes in bf16 through its policy
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    times, loss, first = [], None, None
    t_warm = time.perf_counter()
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            t_warm = time.perf_counter() - t_warm
        t0 = time.perf_counter()
        loss = step()
        if first is None:
            first = loss.detach().clone()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    loss, first = float(loss), float(first)
    if not math.isfinite(loss):
        raise RuntimeError(f"loss is {loss}")
    med = statistics.median(times)
    tps = B * T / med
    return {"tokens_per_s": tps, "mfu": tps * flops_per_token(c, gpt2) / (a.peak_tflops * 1e12),
            "peak_gib": peak_gib(dev), "step_ms": med * 1e3, "warmup_s": t_warm, "loss": loss, "loss_first": first,
            "steps": a.steps}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--system", required=True, choices=["eager", "compile", "fsdp2"])
    p.add_argument("--model", required=True, choices=["gpt2", "llama"])
    p.add_argument("--batch", type=int, action="append", required=True, help="micro-batch; repeat for several")
    p.add_argument("--ac", action="store_true", help="activation checkpointing per block")
    p.add_argument("--ac-both", action="store_true", help="each batch without, then with, checkpointing")
    p.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="a toy model of the same family (a check on a CPU)")
    p.add_argument("--peak-tflops", type=float, default=989.4, help="the device's bf16 dense peak, for MFU")
    a = p.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpu: --device cuda but torch sees no GPU (torch.cuda.is_available() is False)")
    base = {"system": a.system, "model": a.model, "torch": torch.__version__, "device": a.device,
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "peak_tflops": a.peak_tflops}
    configs = [(B, ac) for B in a.batch for ac in ([False, True] if a.ac_both else [a.ac])]
    try:
        c, gpt2, model, opt = setup(a, dev)
    except RuntimeError as e:
        for B, ac in configs:
            print("RESULT " + json.dumps({**base, "batch": B, "ac": ac, "error": str(e)}), flush=True)
        return
    base["seq"] = c["seq"]
    base["params"] = sum(q.numel() for q in model.parameters())
    for B, ac in configs:
        r = {**base, "batch": B, "ac": ac}
        try:
            r.update(run_config(a, dev, c, gpt2, model, opt, B, ac))
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            r["error"] = ("out of memory: " if "out of memory" in str(e) else "") + str(e).splitlines()[0][:200]
            opt.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        print("RESULT " + json.dumps(r), flush=True)
    if a.system == "fsdp2":
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
