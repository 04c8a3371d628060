#!/usr/bin/python3
"""Time training steps of the same GPT-2 / Llama models in plain PyTorch.

Run by bench/run.sh with the thread environment set before torch is
imported (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, OMP_WAIT_POLICY=PASSIVE,
OPENBLAS_CORETYPE=SkylakeX: PyTorch at its best on this machine, see
MEASUREMENTS.md). Same options and JSON fields as bench/step.c.
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        C, hd = a.dim, a.dim // a.heads
        qkv = (a.heads + 2 * a.kv_heads) * hd
        bias = a.family == "gpt2"
        if bias:
            self.n1, self.n2 = nn.LayerNorm(C), nn.LayerNorm(C)
        else:
            self.n1, self.n2 = RMSNorm(C), RMSNorm(C)
        self.qkv = nn.Linear(C, qkv, bias=bias)
        self.o = nn.Linear(C, C, bias=bias)
        self.up = nn.Linear(C, a.ffn * (1 if bias else 2), bias=bias)
        self.down = nn.Linear(a.ffn, C, bias=bias)

    def forward(self, x, rope):
        a = self.a
        B, T, C = x.shape
        hd = C // a.heads
        h = self.qkv(self.n1(x))
        q = h[..., : a.heads * hd].view(B, T, a.heads, hd).transpose(1, 2)
        k = h[..., a.heads * hd : (a.heads + a.kv_heads) * hd].view(B, T, a.kv_heads, hd).transpose(1, 2)
        v = h[..., (a.heads + a.kv_heads) * hd :].view(B, T, a.kv_heads, hd).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if a.kv_heads != a.heads:
            g = a.heads // a.kv_heads
            k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        s = s.masked_fill(self.mask[:T, :T], float("-inf"))
        y = torch.matmul(torch.softmax(s, -1), v).transpose(1, 2).reshape(B, T, C)
        x = x + self.o(y)
        m = self.up(self.n2(x))
        if a.family == "gpt2":
            m = F.gelu(m, approximate="tanh")
        else:
            gate, up = m.chunk(2, -1)
            m = F.silu(gate) * up
        return x + self.down(m)


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.wte = nn.Embedding(a.vocab, a.dim)
        self.wpe = nn.Embedding(a.max_seq, a.dim) if a.family == "gpt2" else None
        self.blocks = nn.ModuleList([Block(a) for _ in range(a.layers)])
        mask = torch.ones(a.seq, a.seq, dtype=torch.bool).triu(1)
        for b in self.blocks:
            b.mask = mask
        self.norm = nn.LayerNorm(a.dim) if a.family == "gpt2" else RMSNorm(a.dim)
        self.head = None if a.family == "gpt2" else nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(a.seq).float()[:, None] * inv[None]
        self.rope = None if a.family == "gpt2" else (torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1))

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.rope)
        x = self.norm(x)
        logits = x @ self.wte.weight.T if self.head is None else self.head(x)
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--family", default="gpt2")
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
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    a.ffn = a.ffn or (4 * a.dim)
    torch.manual_seed(0)
    model = Model(a)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    times = []
    warmup = 2
    for s in range(a.steps + warmup):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq))
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times[warmup:])
    print(json.dumps({"family": a.family, "params": sum(q.numel() for q in model.parameters()),
                      "batch": a.batch, "seq": a.seq, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
                      "step_ms": round(med * 1e3, 1), "tokens_per_s": round(a.batch * a.seq / med, 1)}))


if __name__ == "__main__":
    main()
