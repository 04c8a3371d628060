#!/usr/bin/python3
"""Time training steps of sharc's GPT-2 / Llama models in plain PyTorch.

The same options and main JSON fields as bench/step.c, and the same work per step:
zero the gradients, forward + backward of the mean cross-entropy over B x T
random tokens, clip_grad_norm_(1.0), one AdamW step (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on the 2-D parameters, torch's default implementation:
not fused, foreach left at its default).

The architecture is sharc's (src/model/model.c), written with nn.Linear:
  gpt2   learned positions, pre-LayerNorm (eps 1e-5), fused qkv with bias,
         GELU (tanh), biases everywhere, LM head tied to wte
  llama  RMSNorm (eps 1e-5), RoPE (rotate-half, theta 1e4) on q and k,
         grouped-query attention (kv head j serves q heads j*g..j*g+g-1),
         SwiGLU with gate and up in one (2F, C) matrix as sharc stores it,
         no biases, untied LM head
Causal attention is written out (torch 1.13 has no scaled_dot_product_attention):
one baddbmm that applies the scale and adds the -inf mask, softmax, bmm. For
grouped-query attention the q heads of a group are stacked along the rows so
k and v are never repeated.

Run it with the thread environment set before torch is imported
(bench/run.sh does): OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE,
OPENBLAS_CORETYPE=SkylakeX (bench/run.sh says why each matters).
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    """x (..., T, hd), rotate-half convention as Hugging Face and sharc."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        C, hd, gpt2 = a.dim, a.dim // a.heads, a.family == "gpt2"
        norm = (lambda: nn.LayerNorm(C, eps=a.eps)) if gpt2 else (lambda: RMSNorm(C, a.eps))
        self.ln1, self.ln2 = norm(), norm()
        self.qkv = nn.Linear(C, (a.heads + 2 * a.kv_heads) * hd, bias=gpt2)
        self.proj = nn.Linear(a.heads * hd, C, bias=gpt2)
        self.fc = nn.Linear(C, a.ffn if gpt2 else 2 * a.ffn, bias=gpt2)
        self.fc_proj = nn.Linear(a.ffn, C, bias=gpt2)

    def attention(self, x, mask, rope_cs):
        a = self.a
        B, T, _ = x.shape
        NH, NKV, hd = a.heads, a.kv_heads, a.dim // a.heads
        g = NH // NKV
        qkv = self.qkv(x)
        q = qkv[..., : NH * hd].view(B, T, NH, hd).transpose(1, 2)  # (B, NH, T, hd)
        k = qkv[..., NH * hd : (NH + NKV) * hd].view(B, T, NKV, hd).transpose(1, 2)
        v = qkv[..., (NH + NKV) * hd :].view(B, T, NKV, hd).transpose(1, 2)
        if rope_cs is not None:
            q, k = rope(q, *rope_cs), rope(k, *rope_cs)
        if a.attn == "matmul":  # the textbook formulation, for comparison
            if g > 1:
                k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
            s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            s = s.masked_fill(mask[:T] == float("-inf"), float("-inf"))
            return torch.matmul(torch.softmax(s, -1), v).transpose(1, 2).reshape(B, T, NH * hd)
        # group q heads by their kv head: rows (head-in-group, t)
        q = q.reshape(B * NKV, g * T, hd)
        k = k.reshape(B * NKV, T, hd)
        v = v.reshape(B * NKV, T, hd)
        s = torch.baddbmm(mask, q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(hd))
        y = torch.bmm(torch.softmax(s, -1), v)  # (B*NKV, g*T, hd)
        return y.view(B, NH, T, hd).transpose(1, 2).reshape(B, T, NH * hd)

    def forward(self, x, mask, rope_cs):
        x = x + self.proj(self.attention(self.ln1(x), mask, rope_cs))
        h = self.fc(self.ln2(x))
        if self.a.family == "gpt2":
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, -1)
            h = F.silu(gate) * up
        return x + self.fc_proj(h)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        gpt2 = a.family == "gpt2"
        self.wte = nn.Embedding(a.vocab, a.dim)
        self.wpe = nn.Embedding(a.max_seq, a.dim) if gpt2 else None
        self.blocks = nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.norm = nn.LayerNorm(a.dim, eps=a.eps) if gpt2 else RMSNorm(a.dim, a.eps)
        self.lm_head = None if gpt2 else nn.Linear(a.dim, a.vocab, bias=False)
        T, g, hd = a.seq, a.heads // a.kv_heads, a.dim // a.heads
        causal = torch.full((T, T), float("-inf")).triu(1)
        self.register_buffer("mask", causal.repeat(g, 1).contiguous(), persistent=False)  # (g*T, T)
        self.rope_cs = None
        if not gpt2:
            inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None]
            self.rope_cs = (ang.cos(), ang.sin())  # (T, hd/2)
        std, std_res = 0.02, 0.02 / math.sqrt(2 * a.layers)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, std_res if n.endswith("proj.weight") else std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe.weight[:T]
        for b in self.blocks:
            x = b(x, self.mask, self.rope_cs)
        x = self.norm(x)
        logits = F.linear(x, self.wte.weight if self.lm_head is None else self.lm_head.weight)
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def flops_per_token(a):
    """sharc_model_flops_per_token: 6 * N_matmul + 12 * L * C * T (PaLM)."""
    hd = a.dim // a.heads
    qkv = (a.heads + 2 * a.kv_heads) * hd
    f = a.ffn if a.family == "gpt2" else 2 * a.ffn
    block = qkv * a.dim + a.heads * hd * a.dim + f * a.dim + a.ffn * a.dim
    return 6.0 * (a.layers * block + a.vocab * a.dim) + 12.0 * a.layers * a.dim * a.seq


def blas_core():
    """The kernel set of the OpenBLAS that torch loaded, asked from the library."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "openblas" in path and path.endswith(".so") or "libopenblas" in path:
            try:
                f = ctypes.CDLL(path).openblas_get_corename
                f.restype = ctypes.c_char_p
                return f().decode(), path
            except (OSError, AttributeError):
                pass
    return "unknown", ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", default="gpt2", choices=["gpt2", "llama"])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps first (torch's allocator and caches settle after the 2nd)")
    p.add_argument("--threads", type=int, default=0, help="only checked: set the env vars before start")
    p.add_argument("--attn", default="baddbmm", choices=["baddbmm", "matmul"],
                   help="causal attention: one baddbmm with scale and additive mask (default), or "
                        "matmul + masked_fill with k, v repeated for grouped-query attention")
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    if not a.ffn:
        a.ffn = 4 * a.dim if a.family == "gpt2" else (8 * a.dim // 3 + 15) // 16 * 16
    if a.threads and a.threads != torch.get_num_threads():
        raise SystemExit(f"torch_step: torch runs {torch.get_num_threads()} threads, asked for {a.threads}: "
                         "set OMP_NUM_THREADS and OPENBLAS_NUM_THREADS before starting")

    torch.manual_seed(0)
    model = Model(a)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1)
    phases = {k: [] for k in ("step", "zero_grad", "forward", "backward", "clip", "optim")}
    losses = []
    for s in range(a.warmup + a.steps):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        loss = model(idx, tgt)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        t4 = time.perf_counter()
        opt.step()
        t5 = time.perf_counter()
        losses.append(loss.item())
        if s >= a.warmup:
            for k, dt in zip(phases, (t5 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                phases[k].append(dt)
    med = {k: statistics.median(v) for k, v in phases.items()}
    step = phases["step"]
    tps = a.batch * a.seq / med["step"]
    fpt = flops_per_token(a)
    core, lib = blas_core()
    out = {
        "system": "pytorch", "family": a.family, "params": sum(q.numel() for q in model.parameters()),
        "layers": a.layers, "dim": a.dim, "heads": a.heads, "kv_heads": a.kv_heads, "ffn": a.ffn,
        "vocab": a.vocab, "batch": a.batch, "seq": a.seq, "steps": a.steps, "warmup": a.warmup, "attn": a.attn,
        "threads": torch.get_num_threads(), "blas_core": core, "blas_library": lib,
        "torch": torch.__version__,
        "env": {k: os.environ.get(k, "") for k in ("OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS",
                                                    "OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY")},
        "step_ms": round(med["step"] * 1e3, 1), "step_ms_min": round(min(step) * 1e3, 1),
        "step_ms_mean": round(statistics.mean(step) * 1e3, 1),
        "tokens_per_s": round(tps, 1), "flops_per_token": fpt, "gflops_per_s": round(fpt * tps * 1e-9, 1),
        "zero_grad_ms": round(med["zero_grad"] * 1e3, 2), "forward_ms": round(med["forward"] * 1e3, 1),
        "backward_ms": round(med["backward"] * 1e3, 1), "clip_ms": round(med["clip"] * 1e3, 2),
        "optim_ms": round(med["optim"] * 1e3, 2),
        "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
