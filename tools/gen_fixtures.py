#!/usr/bin/python3
"""Generate sharc's PyTorch reference fixtures (plain PyTorch, no other packages).

    /usr/bin/python3 tools/gen_fixtures.py tests/fixtures

Writes
  kernels.safetensors      inputs, outputs and gradients of every kernel in
                           include/sharc/kernels.h at odd sizes
  gpt2_train.safetensors   a 20-step training run of a small GPT-2 and of a
  llama_train.safetensors  small Llama written here from scratch: initial
                           weights under sharc's names, the batches, the
                           per-step losses, step-0 gradients, final weights

References are computed in float64 from float32 inputs and stored as float32,
so the C tests see the error of sharc's fp32 kernels alone.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(20261122)
F64 = torch.float64


def save_safetensors(path, tensors):
    """Our own writer: 8-byte LE header length, JSON header padded with spaces
    to a multiple of 8, tensors back to back in the order given."""
    header = {"__metadata__": {"format": "pt", "generator": "tools/gen_fixtures.py"}}
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if t.dtype in (torch.float32, torch.float64):
            t, dtype = t.to(torch.float32), "F32"
        elif t.dtype in (torch.int32, torch.int64):
            t, dtype = t.to(torch.int32), "I32"
        else:
            raise TypeError(f"{name}: {t.dtype}")
        data = t.numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def rand(*shape, scale=1.0):
    """float32 values, returned as float64 leaf tensors needing grad."""
    return (torch.randn(*shape) * scale).to(torch.float32).to(F64).requires_grad_(True)


# ----------------------------------------------------------------- kernels

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(T, hd, theta):
    # as Hugging Face computes them: inv_freq and angles in float32
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    ang = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cos(ang).to(F64), torch.sin(ang).to(F64)


def rotate_half_apply(x, cos, sin):
    """x (..., T, hd); cos/sin (T, hd/2): HF rotate-half."""
    half = x.shape[-1] // 2
    c = torch.cat([cos, cos], -1)
    s = torch.cat([sin, sin], -1)
    rot = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * c + rot * s


def split_heads(qkv, B, T, NH, NKV, hd):
    q = qkv[..., : NH * hd].reshape(B, T, NH, hd).transpose(1, 2)
    k = qkv[..., NH * hd : (NH + NKV) * hd].reshape(B, T, NKV, hd).transpose(1, 2)
    v = qkv[..., (NH + NKV) * hd :].reshape(B, T, NKV, hd).transpose(1, 2)
    return q, k, v


def causal_attention(q, k, v):
    """q (B,NH,T,hd), k/v (B,NKV,T,hd); query head h uses kv head h // (NH/NKV)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    T, hd = q.shape[2], q.shape[3]
    s = q @ k.transpose(-1, -2) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def record(out, prefix, inputs, outputs, dout):
    """Backward of sum(outputs * dout); store inputs, outputs, dout, grads."""
    for name, t in inputs.items():
        out[f"{prefix}.{name}"] = t.detach()
    out[f"{prefix}.y"] = outputs.detach()
    out[f"{prefix}.dy"] = dout
    (outputs * dout).sum().backward()
    for name, t in inputs.items():
        if t.requires_grad:
            out[f"{prefix}.d{name}"] = t.grad.detach()


def kernel_fixtures():
    out = {}
    # matmul: y = x w^T + b
    x, w, b = rand(13, 7), rand(5, 7, scale=0.5), rand(5, scale=0.5)
    y = x @ w.T + b
    record(out, "matmul", {"x": x, "w": w, "b": b}, y, rand(13, 5).detach())

    # layernorm
    x, w, b = rand(13, 37), rand(37), rand(37)
    with torch.no_grad():
        x += 0.3
    y = F.layer_norm(x, (37,), w, b, 1e-5)
    record(out, "layernorm", {"x": x, "w": w, "b": b}, y, rand(13, 37).detach())

    # rmsnorm (HF LlamaRMSNorm)
    x, w = rand(13, 37), rand(37)
    record(out, "rmsnorm", {"x": x, "w": w}, rms_norm(x, w, 1e-5), rand(13, 37).detach())

    # gelu, tanh form
    x = rand(101, scale=2.0)
    record(out, "gelu", {"x": x}, gelu_tanh(x), rand(101).detach())

    # swiglu: x = [gate | up]
    x = rand(11, 18, scale=1.5)
    y = F.silu(x[:, :9]) * x[:, 9:]
    record(out, "swiglu", {"x": x}, y, rand(11, 9).detach())

    # embedding with positions
    B, T, V, C = 3, 5, 11, 7
    tok = torch.tensor([(i * 7) % 5 for i in range(B * T)], dtype=torch.int64)
    wte, wpe = rand(V, C), rand(T, C)
    y = wte[tok].reshape(B, T, C) + wpe[None]
    out["embedding.tokens"] = tok.to(torch.int32)
    record(out, "embedding", {"wte": wte, "wpe": wpe}, y.reshape(B * T, C), rand(B * T, C).detach())

    # rope on packed qkv
    B, T, NH, NKV, hd = 2, 7, 3, 1, 6
    qkv = rand(B, T, (NH + 2 * NKV) * hd)
    cos, sin = rope_tables(T, hd, 10000.0)
    q, k, v = qkv[..., : NH * hd], qkv[..., NH * hd : (NH + NKV) * hd], qkv[..., (NH + NKV) * hd :]
    qr = rotate_half_apply(q.reshape(B, T, NH, hd).transpose(1, 2), cos, sin).transpose(1, 2).reshape(B, T, NH * hd)
    kr = rotate_half_apply(k.reshape(B, T, NKV, hd).transpose(1, 2), cos, sin).transpose(1, 2).reshape(B, T, NKV * hd)
    y = torch.cat([qr, kr, v], -1)
    record(out, "rope", {"qkv": qkv}, y, rand(*y.shape).detach())

    # attention, two shapes (the second crosses 64-row query blocks)
    for name, (B, T, NH, NKV, hd) in {"attention": (2, 13, 4, 2, 6), "attention_long": (1, 150, 2, 1, 8)}.items():
        qkv = rand(B, T, (NH + 2 * NKV) * hd)
        q, k, v = split_heads(qkv, B, T, NH, NKV, hd)
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, NH * hd)
        record(out, name, {"qkv": qkv}, y, rand(*y.shape).detach())

    # cross-entropy: 13 rows over 37 classes, row 4 masked, loss = scale * sum
    logits = rand(13, 37, scale=2.0)
    tgt = torch.tensor([(i * 11) % 37 for i in range(13)], dtype=torch.int64)
    tgt[4] = -1
    losses = F.cross_entropy(logits, tgt, ignore_index=-1, reduction="none")
    scale = 1.0 / 12.0
    (losses.sum() * scale).backward()
    out["xent.logits"] = logits.detach()
    out["xent.targets"] = tgt.to(torch.int32)
    out["xent.losses"] = losses.detach()
    out["xent.dlogits"] = logits.grad.detach()
    return out


# ------------------------------------------------------------------- models

class Cfg:
    def __init__(self, family):
        self.family = family
        self.L, self.C, self.NH, self.V, self.maxT, self.T = 2, 48, 3, 37, 16, 13
        self.NKV = 3 if family == "gpt2" else 1
        self.F = 192 if family == "gpt2" else 70
        self.hd = self.C // self.NH
        self.eps = 1e-5
        self.theta = 10000.0
        self.B, self.A, self.steps = 2, 2, 20


def init_params(cfg):
    """Parameters under sharc's names and nn.Linear (out, in) layouts, float64."""
    std, std_res = 0.02, 0.02 / math.sqrt(2 * cfg.L)
    C, V, hd = cfg.C, cfg.V, cfg.hd
    qkv = (cfg.NH + 2 * cfg.NKV) * hd
    p = {}

    def normal(name, *shape, s=std):
        p[name] = (torch.randn(*shape) * s).to(torch.float32).to(F64)

    def const(name, n, v):
        p[name] = torch.full((n,), float(v), dtype=F64) + (0.1 * torch.randn(n)).to(torch.float32).to(F64)

    if cfg.family == "gpt2":
        normal("wte.weight", V, C)
        normal("wpe.weight", cfg.maxT, C)
        for l in range(cfg.L):
            h = f"h.{l}."
            const(h + "ln_1.weight", C, 1)
            const(h + "ln_1.bias", C, 0)
            normal(h + "attn.c_attn.weight", qkv, C)
            const(h + "attn.c_attn.bias", qkv, 0)
            normal(h + "attn.c_proj.weight", C, C, s=std_res)
            const(h + "attn.c_proj.bias", C, 0)
            const(h + "ln_2.weight", C, 1)
            const(h + "ln_2.bias", C, 0)
            normal(h + "mlp.c_fc.weight", cfg.F, C)
            const(h + "mlp.c_fc.bias", cfg.F, 0)
            normal(h + "mlp.c_proj.weight", C, cfg.F, s=std_res)
            const(h + "mlp.c_proj.bias", C, 0)
        const("ln_f.weight", C, 1)
        const("ln_f.bias", C, 0)
    else:
        normal("model.embed_tokens.weight", V, C)
        for l in range(cfg.L):
            h = f"model.layers.{l}."
            const(h + "input_layernorm.weight", C, 1)
            normal(h + "self_attn.q_proj.weight", cfg.NH * hd, C)
            normal(h + "self_attn.k_proj.weight", cfg.NKV * hd, C)
            normal(h + "self_attn.v_proj.weight", cfg.NKV * hd, C)
            normal(h + "self_attn.o_proj.weight", C, cfg.NH * hd, s=std_res)
            const(h + "post_attention_layernorm.weight", C, 1)
            normal(h + "mlp.gate_proj.weight", cfg.F, C)
            normal(h + "mlp.up_proj.weight", cfg.F, C)
            normal(h + "mlp.down_proj.weight", C, cfg.F, s=std_res)
        const("model.norm.weight", C, 1)
        normal("lm_head.weight", V, C)
    for t in p.values():
        t.requires_grad_(True)
    return p


def forward_losses(cfg, p, inp, tgt):
    """Per-position losses (B*T) of a micro-batch; masked targets (-1) give 0."""
    B, T = inp.shape
    C, NH, NKV, hd = cfg.C, cfg.NH, cfg.NKV, cfg.hd
    if cfg.family == "gpt2":
        x = p["wte.weight"][inp] + p["wpe.weight"][:T][None]
        for l in range(cfg.L):
            h = f"h.{l}."
            a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], cfg.eps)
            qkv = a @ p[h + "attn.c_attn.weight"].T + p[h + "attn.c_attn.bias"]
            q, k, v = split_heads(qkv, B, T, NH, NKV, hd)
            att = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
            x = x + att @ p[h + "attn.c_proj.weight"].T + p[h + "attn.c_proj.bias"]
            m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], cfg.eps)
            m = gelu_tanh(m @ p[h + "mlp.c_fc.weight"].T + p[h + "mlp.c_fc.bias"])
            x = x + m @ p[h + "mlp.c_proj.weight"].T + p[h + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], cfg.eps)
        logits = x @ p["wte.weight"].T
    else:
        cos, sin = rope_tables(T, hd, cfg.theta)
        x = p["model.embed_tokens.weight"][inp]
        for l in range(cfg.L):
            h = f"model.layers.{l}."
            a = rms_norm(x, p[h + "input_layernorm.weight"], cfg.eps)
            q = (a @ p[h + "self_attn.q_proj.weight"].T).reshape(B, T, NH, hd).transpose(1, 2)
            k = (a @ p[h + "self_attn.k_proj.weight"].T).reshape(B, T, NKV, hd).transpose(1, 2)
            v = (a @ p[h + "self_attn.v_proj.weight"].T).reshape(B, T, NKV, hd).transpose(1, 2)
            q, k = rotate_half_apply(q, cos, sin), rotate_half_apply(k, cos, sin)
            att = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
            x = x + att @ p[h + "self_attn.o_proj.weight"].T
            m = rms_norm(x, p[h + "post_attention_layernorm.weight"], cfg.eps)
            g = m @ p[h + "mlp.gate_proj.weight"].T
            u = m @ p[h + "mlp.up_proj.weight"].T
            x = x + (F.silu(g) * u) @ p[h + "mlp.down_proj.weight"].T
        x = rms_norm(x, p["model.norm.weight"], cfg.eps)
        logits = x @ p["lm_head.weight"].T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1), ignore_index=-1, reduction="none")


def lr_at(step, max_steps, lr=1e-2, warmup=3, min_ratio=0.1):
    """sharc_lr_at: linear warmup, then cosine to min_ratio * lr."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (max_steps - warmup))
    floor = lr * min_ratio
    return floor + (lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_fixture(family):
    cfg = Cfg(family)
    p = init_params(cfg)
    out = {name: t.detach().clone() for name, t in p.items()}
    S, A, B, T = cfg.steps, cfg.A, cfg.B, cfg.T
    # learnable sequences (arithmetic progressions mod V) so the loss falls
    start = torch.randint(0, cfg.V, (S, A, B, 1))
    stride = torch.randint(1, 3, (S, A, B, 1))
    seqs = (start + stride * torch.arange(T + 1)) % cfg.V
    inputs = seqs[..., :T].clone()
    targets = seqs[..., 1:].clone()
    # a few masked targets in every step
    mask = torch.rand(S, A, B, T) < 0.1
    targets[mask] = -1
    decay = [t for t in p.values() if t.dim() >= 2]
    no_decay = [t for t in p.values() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-2, betas=(0.9, 0.95), eps=1e-6)
    losses = []
    for s in range(S):
        for g in opt.param_groups:
            g["lr"] = lr_at(s, S)
        opt.zero_grad(set_to_none=False)
        valid = int((targets[s] >= 0).sum())
        total = 0.0
        for m in range(A):
            l = forward_losses(cfg, p, inputs[s, m], targets[s, m])
            (l.sum() / valid).backward()
            total += float(l.sum())
        losses.append(total / valid)
        if s == 0:
            for name, t in p.items():
                out["grad." + name] = t.grad.detach().clone()
        torch.nn.utils.clip_grad_norm_(list(p.values()), max_norm=1.0)
        opt.step()
    out["tokens"] = inputs.to(torch.int32)
    out["targets"] = targets.to(torch.int32)
    out["losses"] = torch.tensor(losses, dtype=F64)
    for name, t in p.items():
        out["final." + name] = t.detach().clone()
    print(f"{family}: losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures"
    os.makedirs(outdir, exist_ok=True)
    save_safetensors(os.path.join(outdir, "kernels.safetensors"), kernel_fixtures())
    for family in ("gpt2", "llama"):
        save_safetensors(os.path.join(outdir, f"{family}_train.safetensors"), train_fixture(family))


if __name__ == "__main__":
    main()
