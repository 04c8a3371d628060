#!/usr/bin/python3
"""Generate sharc's PyTorch reference fixtures (plain PyTorch, no other packages).

    /usr/bin/python3 tools/gen_fixtures.py tests/fixtures      (or: make fixtures)

Writes three safetensors files, committed so that CI never needs PyTorch:

  kernels.safetensors      inputs, outputs, upstream gradients and reference
                           gradients of every kernel of include/sharc/kernels.h
                           at odd sizes, named "<kernel>.<what>"
  gpt2_train.safetensors   20 AdamW steps of a small GPT-2 and of a small
  llama_train.safetensors  Llama, both written here from scratch: initial
                           weights under sharc's parameter names and layouts,
                           the batches, per-step losses, gradient norms and
                           learning rates, step-0 gradients ("grad.<name>") and
                           the final weights ("final.<name>"); the run's
                           configuration is in the file's __metadata__

Every random input is drawn in float32 (so sharc sees exactly the value the
reference used), and every reference is computed in float64 from it, then
stored as F32 (token ids as I32): the C tests measure the error of sharc's
fp32 arithmetic alone, against the exact result rounded once.

Kernel gradients are those of the scalar loss sum(out * dout) for a stored
random dout, so d loss / d out = dout ("<kernel>.dy").
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

SEED = 20261122
F64 = torch.float64


# ------------------------------------------------------------- safetensors

def write_safetensors(path, tensors, metadata=None):
    """Our own writer. Layout: u64 LE header length N, N bytes of JSON padded
    with spaces to a multiple of 8, then the tensors back to back in the order
    given. float tensors are stored as F32, integer ones as I32."""
    header = {"__metadata__": {"format": "pt", "generator": "tools/gen_fixtures.py"}}
    for k, v in (metadata or {}).items():
        header["__metadata__"][k] = str(v)
    chunks, offset = [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if t.is_floating_point():
            t, dtype = t.to(torch.float32), "F32"
        elif t.dtype in (torch.int32, torch.int64):
            assert t.numel() == 0 or (int(t.min()) >= -2**31 and int(t.max()) < 2**31), name
            t, dtype = t.to(torch.int32), "I32"
        else:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        raw = t.numpy().tobytes()  # little-endian on every platform torch runs on here
        assert len(raw) == t.numel() * 4
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    js = json.dumps(header, separators=(",", ":")).encode("utf-8")
    js += b" " * (-len(js) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for raw in chunks:
            f.write(raw)
    os.replace(tmp, path)
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def f32(t):
    """Round a float64 tensor to float32 values (kept as float64)."""
    return t.detach().to(torch.float32).to(F64)


class Rng:
    """float32 normals from a private generator, handed out as float64."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, *shape, std=1.0, mean=0.0, grad=False):
        """mean + std * N(0, 1), rounded to float32 (so exactly what sharc reads)."""
        t = torch.randn(*shape, generator=self.g, dtype=F64) * std + mean
        return t.to(torch.float32).to(F64).requires_grad_(grad)

    def ints(self, lo, hi, shape):
        return torch.randint(lo, hi, shape, generator=self.g)

    def uniform(self, *shape):
        return torch.rand(*shape, generator=self.g)


# ------------------------------------------------------- reference ops (fp64)

def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased, as nn.LayerNorm
    rstd = torch.rsqrt(var + eps)
    return (x - mean) * rstd * w + b, mean.squeeze(-1), rstd.squeeze(-1)


def rms_norm(x, w, eps):
    """Hugging Face LlamaRMSNorm: w * x * rsqrt(mean(x^2) + eps)."""
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * (x * rstd), rstd.squeeze(-1)


def swiglu(x):
    """x (..., 2I) = [gate | up] -> silu(gate) * up."""
    I = x.shape[-1] // 2
    gate, up = x[..., :I], x[..., I:]
    return gate * torch.sigmoid(gate) * up


def rope_tables(T, hd, theta):
    """cos, sin (T, hd/2): angle(t, i) = t * theta^(-2i/hd), exact in float64."""
    i = torch.arange(hd // 2, dtype=F64)
    inv_freq = theta ** (-2.0 * i / hd)
    ang = torch.arange(T, dtype=F64)[:, None] * inv_freq[None, :]
    return torch.cos(ang), torch.sin(ang)


def rotate_half(x, cos, sin):
    """HF convention on x (B, T, H, hd): element i pairs with i + hd/2."""
    half = x.shape[-1] // 2
    c = torch.cat([cos, cos], -1)[None, :, None, :]
    s = torch.cat([sin, sin], -1)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return x * c + torch.cat([-x2, x1], -1) * s


def causal_attention(q, k, v):
    """q (B, T, NH, hd), k/v (B, T, NKV, hd) -> out (B, T, NH*hd), lse (B, NH, T).
    Query head h reads key/value head h // (NH / NKV); scale 1/sqrt(hd)."""
    B, T, NH, hd = q.shape
    group = NH // k.shape[2]
    kv_of = torch.arange(NH) // group
    qh = q.permute(0, 2, 1, 3)               # B, NH, T, hd
    kh = k.permute(0, 2, 1, 3)[:, kv_of]     # B, NH, T, hd
    vh = v.permute(0, 2, 1, 3)[:, kv_of]
    s = qh @ kh.transpose(-1, -2) / math.sqrt(hd)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None])
    out = (p @ vh).permute(0, 2, 1, 3).reshape(B, T, NH * hd)
    return out, lse


def split_qkv(qkv, NH, NKV, hd):
    """Packed per token [NH q heads | NKV k heads | NKV v heads]."""
    B, T, _ = qkv.shape
    q = qkv[..., : NH * hd].reshape(B, T, NH, hd)
    k = qkv[..., NH * hd: (NH + NKV) * hd].reshape(B, T, NKV, hd)
    v = qkv[..., (NH + NKV) * hd:].reshape(B, T, NKV, hd)
    return q, k, v


def xent_rows(logits, targets):
    """Per-row losses logsumexp(logits) - logits[target]; 0 where target < 0."""
    valid = targets >= 0
    safe = torch.where(valid, targets, torch.zeros_like(targets))
    l = torch.logsumexp(logits, -1) - logits.gather(-1, safe[..., None]).squeeze(-1)
    return torch.where(valid, l, torch.zeros_like(l))


# ------------------------------------------------------------------ kernels

def backprop(out, dy, inputs, prefix, store):
    """Backward of sum(out * dy); store dy and d<name> for inputs needing grad."""
    (out * dy).sum().backward()
    store[f"{prefix}.dy"] = dy
    for name, t in inputs.items():
        store[f"{prefix}.d{name}"] = t.grad.detach().clone()


def kernel_fixtures():
    r = Rng(SEED)
    s = {}

    # matmul: y(N, OC) = x(N, IC) @ w(OC, IC)^T + b
    N, IC, OC = 13, 7, 5
    x, w, b = r.normal(N, IC, grad=True), r.normal(OC, IC, std=0.5, grad=True), r.normal(OC, std=0.5, grad=True)
    y = x @ w.T + b
    s.update({"matmul.x": x, "matmul.w": w, "matmul.b": b, "matmul.y": y})
    backprop(y, r.normal(N, OC), {"x": x, "w": w, "b": b}, "matmul", s)

    # layernorm, N=13, C=37, eps 1e-5. Rows of non-zero mean and standard
    # deviations from 0.05 to 2, so that eps matters in the narrow rows (there
    # eps 1e-6 instead of 1e-5 changes the output by ~1e-3 relative)
    N, C = 13, 37
    row_std = 0.05 * 40.0 ** (torch.arange(N, dtype=F64) / (N - 1))[:, None]
    x = f32(r.normal(N, C) * row_std + 0.7 * row_std).requires_grad_(True)
    w, b = r.normal(C, std=0.3, mean=1.0, grad=True), r.normal(C, std=0.3, grad=True)
    y, mean, rstd = layer_norm(x, w, b, 1e-5)
    s.update({"layernorm.x": x, "layernorm.w": w, "layernorm.b": b, "layernorm.y": y,
              "layernorm.mean": mean, "layernorm.rstd": rstd})
    backprop(y, r.normal(N, C), {"x": x, "w": w, "b": b}, "layernorm", s)
    s["layernorm.dres"] = r.normal(N, C)  # residual gradient: dx = dres + ...

    # rmsnorm (HF LlamaRMSNorm), same sizes
    x = f32(r.normal(N, C) * row_std + 0.4 * row_std).requires_grad_(True)
    w = r.normal(C, std=0.3, mean=1.0, grad=True)
    y, rstd = rms_norm(x, w, 1e-5)
    s.update({"rmsnorm.x": x, "rmsnorm.w": w, "rmsnorm.y": y, "rmsnorm.rstd": rstd})
    backprop(y, r.normal(N, C), {"x": x, "w": w}, "rmsnorm", s)
    s["rmsnorm.dres"] = r.normal(N, C)

    # gelu, tanh form, n=101: random values plus 0 and the far tails
    x = r.normal(101, std=2.0)
    x[:6] = torch.tensor([0.0, -9.5, 9.5, -3.0, 3.0, 1e-3], dtype=torch.float32).to(F64)
    x.requires_grad_(True)
    y = gelu_tanh(x)
    s.update({"gelu.x": x, "gelu.y": y})
    backprop(y, r.normal(101), {"x": x}, "gelu", s)

    # swiglu: x (N=11, 2I=18) = [gate | up]
    x = r.normal(11, 18, std=1.5, grad=True)
    y = swiglu(x)
    s.update({"swiglu.x": x, "swiglu.y": y})
    backprop(y, r.normal(11, 9), {"x": x}, "swiglu", s)

    # residual add
    a, b2 = r.normal(101), r.normal(101)
    s.update({"add.a": a, "add.b": b2, "add.y": a + b2})

    # embedding with learned positions: B=3, T=5, V=11, C=7; repeated tokens
    # (15 ids over 11 rows) and unused rows (whose gradient must stay 0)
    B, T, V, C = 3, 5, 11, 7
    tok = torch.tensor([[3, 7, 3, 0, 10], [7, 7, 1, 3, 4], [0, 10, 2, 3, 7]], dtype=torch.int64)
    wte, wpe = r.normal(V, C, grad=True), r.normal(T, C, grad=True)
    y = wte[tok] + wpe[None]
    s.update({"embedding.tokens": tok.to(torch.int32), "embedding.wte": wte, "embedding.wpe": wpe,
              "embedding.y": y, "embedding.y_nopos": wte[tok].detach()})
    backprop(y, r.normal(B, T, C), {"wte": wte, "wpe": wpe}, "embedding", s)

    # rope on packed qkv: B=2, T=7, NH=3, NKV=1, hd=6, theta 10000
    B, T, NH, NKV, hd = 2, 7, 3, 1, 6
    qkv = r.normal(B, T, (NH + 2 * NKV) * hd, grad=True)
    cos, sin = rope_tables(T, hd, 10000.0)
    q, k, v = split_qkv(qkv, NH, NKV, hd)
    y = torch.cat([rotate_half(q, cos, sin).reshape(B, T, -1), rotate_half(k, cos, sin).reshape(B, T, -1),
                   v.reshape(B, T, -1)], -1)
    s.update({"rope.qkv": qkv, "rope.cos": cos, "rope.sin": sin, "rope.y": y})
    backprop(y, r.normal(*y.shape), {"qkv": qkv}, "rope", s)

    # causal GQA attention; the second case crosses 64-row query blocks
    for name, (B, T, NH, NKV, hd) in (("attention", (2, 13, 4, 2, 6)), ("attention_long", (1, 150, 2, 1, 8))):
        qkv = r.normal(B, T, (NH + 2 * NKV) * hd, grad=True)
        y, lse = causal_attention(*split_qkv(qkv, NH, NKV, hd))
        s.update({f"{name}.qkv": qkv, f"{name}.y": y, f"{name}.lse": lse})
        backprop(y, r.normal(*y.shape), {"qkv": qkv}, name, s)

    # cross-entropy: N=13 rows over V=37, row 4 masked; loss = (1/12) * sum
    N, V = 13, 37
    logits = r.normal(N, V, std=2.0, grad=True)
    tgt = r.ints(0, V, (N,))
    tgt[4] = -1
    losses = xent_rows(logits, tgt)
    (losses.sum() / 12.0).backward()
    s.update({"xent.logits": logits, "xent.targets": tgt.to(torch.int32), "xent.losses": losses,
              "xent.loss_sum": losses.sum().reshape(1), "xent.dlogits": logits.grad})

    # fused LM head + cross-entropy: N=29, C=11, V=37, row 3 masked, scale 1/28
    N, C, V = 29, 11, 37
    x, w = r.normal(N, C, grad=True), r.normal(V, C, std=0.5, grad=True)
    tgt = r.ints(0, V, (N,))
    tgt[3] = -1
    losses = xent_rows(x @ w.T, tgt)
    (losses.sum() / 28.0).backward()
    s.update({"lmhead.x": x, "lmhead.w": w, "lmhead.targets": tgt.to(torch.int32),
              "lmhead.loss_sum": losses.sum().reshape(1), "lmhead.dx": x.grad, "lmhead.dw": w.grad})
    return s


# ------------------------------------------------------------------- models

class Config:
    """The run both the reference and tests/test_torch_parity.c use (the C test
    reads these values from the file's __metadata__)."""

    def __init__(self, family):
        self.family = family
        self.num_layers, self.embed_dim, self.num_heads = 2, 48, 3
        self.num_kv_heads = 3 if family == "gpt2" else 1
        self.ff_hidden_dim = 192 if family == "gpt2" else 70
        self.vocab_size, self.max_seq_len, self.seq_len = 37, 16, 13
        self.batch, self.grad_accum, self.steps = 2, 2, 20
        self.norm_eps, self.rope_theta = 1e-5, 10000.0
        self.lr, self.warmup_steps, self.min_lr_ratio = 1e-2, 3, 0.1
        self.beta1, self.beta2, self.adam_eps, self.weight_decay = 0.9, 0.95, 1e-8, 0.1
        self.max_grad_norm = 1.0
        self.init_std = 0.02

    def metadata(self):
        return {k: v for k, v in vars(self).items()}


def init_params(cfg, r):
    """float64 leaves under sharc's names, nn.Linear (out, in) layouts, in
    model.c's order. Matrices and embeddings N(0, 0.02^2) (0.02/sqrt(2L) for
    the residual projections); norm weights 1 and biases 0, each plus a small
    N(0, 0.1^2) so that a kernel ignoring them cannot match."""
    C, V, L = cfg.embed_dim, cfg.vocab_size, cfg.num_layers
    hd = C // cfg.num_heads
    std, std_res = cfg.init_std, cfg.init_std / math.sqrt(2 * L)
    p = {}

    def mat(name, rows, cols, sd=std):
        p[name] = r.normal(rows, cols, std=sd)

    def vec(name, n, base):
        p[name] = r.normal(n, std=0.1, mean=base)

    if cfg.family == "gpt2":
        F_ = cfg.ff_hidden_dim
        qkv = 3 * C
        mat("wte.weight", V, C)
        mat("wpe.weight", cfg.max_seq_len, C)
        for l in range(L):
            h = f"h.{l}."
            vec(h + "ln_1.weight", C, 1.0)
            vec(h + "ln_1.bias", C, 0.0)
            mat(h + "attn.c_attn.weight", qkv, C)
            vec(h + "attn.c_attn.bias", qkv, 0.0)
            mat(h + "attn.c_proj.weight", C, C, std_res)
            vec(h + "attn.c_proj.bias", C, 0.0)
            vec(h + "ln_2.weight", C, 1.0)
            vec(h + "ln_2.bias", C, 0.0)
            mat(h + "mlp.c_fc.weight", F_, C)
            vec(h + "mlp.c_fc.bias", F_, 0.0)
            mat(h + "mlp.c_proj.weight", C, F_, std_res)
            vec(h + "mlp.c_proj.bias", C, 0.0)
        vec("ln_f.weight", C, 1.0)
        vec("ln_f.bias", C, 0.0)
    else:
        I, NH, NKV = cfg.ff_hidden_dim, cfg.num_heads, cfg.num_kv_heads
        mat("model.embed_tokens.weight", V, C)
        for l in range(L):
            h = f"model.layers.{l}."
            vec(h + "input_layernorm.weight", C, 1.0)
            mat(h + "self_attn.q_proj.weight", NH * hd, C)
            mat(h + "self_attn.k_proj.weight", NKV * hd, C)
            mat(h + "self_attn.v_proj.weight", NKV * hd, C)
            mat(h + "self_attn.o_proj.weight", C, NH * hd, std_res)
            vec(h + "post_attention_layernorm.weight", C, 1.0)
            mat(h + "mlp.gate_proj.weight", I, C)
            mat(h + "mlp.up_proj.weight", I, C)
            mat(h + "mlp.down_proj.weight", C, I, std_res)
        vec("model.norm.weight", C, 1.0)
        mat("lm_head.weight", V, C)
    for t in p.values():
        t.requires_grad_(True)
    return p


def gpt2_losses(cfg, p, tokens, targets):
    B, T = tokens.shape
    C, NH, eps = cfg.embed_dim, cfg.num_heads, cfg.norm_eps
    hd = C // NH
    x = p["wte.weight"][tokens] + p["wpe.weight"][:T][None]
    for l in range(cfg.num_layers):
        h = f"h.{l}."
        a, _, _ = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps)
        qkv = a @ p[h + "attn.c_attn.weight"].T + p[h + "attn.c_attn.bias"]
        att, _ = causal_attention(*split_qkv(qkv, NH, NH, hd))
        x = x + att @ p[h + "attn.c_proj.weight"].T + p[h + "attn.c_proj.bias"]
        m, _, _ = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps)
        m = gelu_tanh(m @ p[h + "mlp.c_fc.weight"].T + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"].T + p[h + "mlp.c_proj.bias"]
    x, _, _ = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    logits = x @ p["wte.weight"].T  # tied head
    return xent_rows(logits, targets)


def llama_losses(cfg, p, tokens, targets):
    B, T = tokens.shape
    C, NH, NKV, eps = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.norm_eps
    hd = C // NH
    cos, sin = rope_tables(T, hd, cfg.rope_theta)
    x = p["model.embed_tokens.weight"][tokens]
    for l in range(cfg.num_layers):
        h = f"model.layers.{l}.self_attn."
        a, _ = rms_norm(x, p[f"model.layers.{l}.input_layernorm.weight"], eps)
        q = (a @ p[h + "q_proj.weight"].T).reshape(B, T, NH, hd)
        k = (a @ p[h + "k_proj.weight"].T).reshape(B, T, NKV, hd)
        v = (a @ p[h + "v_proj.weight"].T).reshape(B, T, NKV, hd)
        att, _ = causal_attention(rotate_half(q, cos, sin), rotate_half(k, cos, sin), v)
        x = x + att @ p[h + "o_proj.weight"].T
        h = f"model.layers.{l}."
        m, _ = rms_norm(x, p[h + "post_attention_layernorm.weight"], eps)
        gate_up = torch.cat([m @ p[h + "mlp.gate_proj.weight"].T, m @ p[h + "mlp.up_proj.weight"].T], -1)
        x = x + swiglu(gate_up) @ p[h + "mlp.down_proj.weight"].T
    x, _ = rms_norm(x, p["model.norm.weight"], eps)
    logits = x @ p["lm_head.weight"].T  # untied
    return xent_rows(logits, targets)


def lr_at(cfg, step):
    """sharc_lr_at (src/optim/adamw.c) for the cosine schedule, decay_steps 0."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = cfg.steps - cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / span) if span > 0 else 1.0
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_fixture(family, seed):
    cfg = Config(family)
    r = Rng(seed)
    p = init_params(cfg, r)
    forward = gpt2_losses if family == "gpt2" else llama_losses
    store = {name: t.detach().clone() for name, t in p.items()}

    S, A, B, T, V = cfg.steps, cfg.grad_accum, cfg.batch, cfg.seq_len, cfg.vocab_size
    # learnable sequences (progressions mod V with stride 1 or 2), so the loss falls
    start = r.ints(0, V, (S, A, B, 1))
    stride = r.ints(1, 3, (S, A, B, 1))
    seq = (start + stride * torch.arange(T + 1)) % V
    tokens, targets = seq[..., :T].clone(), seq[..., 1:].clone()
    # about 10% masked targets, and at least one in every step
    targets[r.uniform(S, A, B, T) < 0.1] = -1
    targets[torch.arange(S), torch.arange(S) % A, 0, torch.arange(S) % T] = -1

    decay = [t for t in p.values() if t.dim() >= 2]  # embeddings and matrices
    no_decay = [t for t in p.values() if t.dim() < 2]  # norms and biases
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps)
    losses, norms, lrs = [], [], []
    for step in range(S):
        lr = lr_at(cfg, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        valid = int((targets[step] >= 0).sum())
        total = 0.0
        for mb in range(A):
            l = forward(cfg, p, tokens[step, mb], targets[step, mb])
            (l.sum() / valid).backward()
            total += float(l.sum())
        losses.append(total / valid)
        if step == 0:
            for name, t in p.items():
                store["grad." + name] = t.grad.detach().clone()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(p.values()), max_norm=cfg.max_grad_norm)))
        lrs.append(lr)
        opt.step()

    store["tokens"] = tokens.to(torch.int32)
    store["targets"] = targets.to(torch.int32)
    store["losses"] = torch.tensor(losses, dtype=F64)
    store["grad_norm"] = torch.tensor(norms, dtype=F64)
    store["lr"] = torch.tensor(lrs, dtype=F64)
    for name, t in p.items():
        store["final." + name] = t.detach().clone()
    print(f"{family}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, grad norm {norms[0]:.3f} -> {norms[-1]:.3f}")
    return store, cfg.metadata()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(SEED)  # nothing below uses the global generator; set for safety
    torch.set_num_threads(1)  # float64 results independent of the thread count
    write_safetensors(os.path.join(outdir, "kernels.safetensors"), kernel_fixtures())
    for k, family in enumerate(("gpt2", "llama")):
        store, meta = train_fixture(family, SEED + 1 + k)
        write_safetensors(os.path.join(outdir, f"{family}_train.safetensors"), store, meta)


if __name__ == "__main__":
    main()
