#!/usr/bin/python3
"""hf_reference.py: logits and gradients of Hugging Face model directories
computed by a plain PyTorch implementation (no transformers, no safetensors
package), the reference for tests/test_hf.c.

Reads DIR/config.json and DIR/model.safetensors (or the shards named by
model.safetensors.index.json), parsed here with json and struct. GPT-2 follows
GPT2LMHeadModel: Conv1D weights are (in, out) and compute x @ W + b, tanh
GELU, tied lm_head. The Llama family follows LlamaForCausalLM and its
relatives, written from their config keys: RMSNorm, rotate_half RoPE
(Llama-3 rope_scaling when the config has it), grouped-query attention,
SwiGLU, head_dim when given; Qwen2's q/k/v biases, Qwen3's per-head
q_norm/k_norm before RoPE, Qwen3-MoE's sparse layers (softmax router, top-k, renormalised
when norm_topk_prob, SwiGLU experts), Mistral's sliding window (a query sees itself and
the W-1 keys before it). Everything is computed in float64.

usage: hf_reference.py OUT.safetensors NAME=DIR ...
writes, for each NAME: NAME.tokens (I32, T) and NAME.logits (F32, T x V), the
logits of every position for fixed tokens; for the Llama family also
NAME.targets (I32, T) and NAME.grad.<tensor> (F32), the gradients of the
mean cross-entropy of the targets (from float64 autograd).
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dt, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        buf = bytearray(data[b:end])
        count = (end - b) // size
        if e["dtype"] == "BF16":
            t = torch.frombuffer(buf, dtype=torch.int16, count=count).to(torch.int32) << 16
            t = t.view(torch.float32)
        else:
            t = torch.frombuffer(buf, dtype=dt, count=count) if count else torch.zeros(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).to(torch.float64)
    return out


def read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        w = {}
        for fn in files:
            w.update(read_safetensors(os.path.join(d, fn)))
    else:
        w = read_safetensors(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f), w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def attention(q, k, v, window=0):
    """q (nH, T, d), k/v (nH, T, d): causal softmax attention (keys i-W < j <= i with a window W)."""
    T, d = q.shape[1], q.shape[2]
    s = q @ k.transpose(1, 2) / math.sqrt(d)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    if window:
        mask = mask | torch.tril(torch.ones(T, T, dtype=torch.bool), -window)
    s = s.masked_fill(mask, float("-inf"))
    return torch.softmax(s, -1) @ v


def gpt2(cfg, w, tok):
    p = "transformer." if "transformer.wte.weight" in w else ""
    C, nH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T = len(tok)
    x = w[p + "wte.weight"][tok] + w[p + "wpe.weight"][torch.arange(T)]
    for l in range(cfg["n_layer"]):
        g = lambda n: w["%sh.%d.%s" % (p, l, n)]
        h = layer_norm(x, g("ln_1.weight"), g("ln_1.bias"), eps)
        qkv = h @ g("attn.c_attn.weight") + g("attn.c_attn.bias")  # Conv1D: (in, out)
        q, k, v = qkv.split(C, -1)
        heads = lambda t: t.reshape(T, nH, C // nH).transpose(0, 1)
        y = attention(heads(q), heads(k), heads(v)).transpose(0, 1).reshape(T, C)
        x = x + y @ g("attn.c_proj.weight") + g("attn.c_proj.bias")
        h = layer_norm(x, g("ln_2.weight"), g("ln_2.bias"), eps)
        a = h @ g("mlp.c_fc.weight") + g("mlp.c_fc.bias")
        a = 0.5 * a * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * a ** 3)))  # gelu_new
        x = x + a @ g("mlp.c_proj.weight") + g("mlp.c_proj.bias")
    x = layer_norm(x, w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
    head = w["lm_head.weight"] if not cfg.get("tie_word_embeddings", True) else w[p + "wte.weight"]
    return x @ head.T


def rms_norm(x, wt, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * wt


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def rope_inv_freq(cfg, d):
    """theta^(-2i/d), with Llama-3 scaling (modeling_rope_utils' llama3 rule) when configured."""
    rp = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    if rp.get("rope_type", rp.get("type")) == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        orig = rp["original_max_position_embeddings"]
        out = []
        for x in inv.tolist():
            wl = 2 * math.pi / x
            if wl < orig / hi:
                out.append(x)
            elif wl > orig / lo:
                out.append(x / f)
            else:
                s = (orig / wl - lo) / (hi - lo)
                out.append((1 - s) * x / f + s * x)
        inv = torch.tensor(out, dtype=torch.float64)
    return inv


def sparse_moe(cfg, g, h):
    """Qwen3MoeSparseMoeBlock: softmax over all experts, top-k, renormalised
    when norm_topk_prob, each token the weighted sum of its experts' SwiGLU."""
    k = cfg["num_experts_per_tok"]
    p = torch.softmax(h @ g("mlp.gate.weight").T, -1)
    wts, idx = torch.topk(p, k, -1)
    if cfg.get("norm_topk_prob", False):
        wts = wts / wts.sum(-1, keepdim=True)
    y = torch.zeros_like(h)
    for e in range(cfg["num_experts"]):
        rows, slot = (idx == e).nonzero(as_tuple=True)
        if len(rows) == 0:
            continue
        ex = lambda n: g("mlp.experts.%d.%s" % (e, n))
        he = h[rows]
        out = (torch.nn.functional.silu(he @ ex("gate_proj.weight").T) * (he @ ex("up_proj.weight").T)) @ ex(
            "down_proj.weight"
        ).T
        y = y.index_add(0, rows, out * wts[rows, slot, None])
    return y


def llama(cfg, w, tok):
    C, nH = cfg["hidden_size"], cfg["num_attention_heads"]
    nKV = cfg.get("num_key_value_heads", nH)
    eps = cfg.get("rms_norm_eps", 1e-6)
    d, T = cfg.get("head_dim") or C // nH, len(tok)
    window = cfg.get("sliding_window") or 0
    if cfg["model_type"] in ("qwen2", "qwen3") and not cfg.get("use_sliding_window"):
        window = 0
    inv = rope_inv_freq(cfg, d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos(), emb.sin()
    rope = lambda t: t * cos + rotate_half(t) * sin  # t: (heads, T, d)
    x = w["model.embed_tokens.weight"][tok]
    for l in range(cfg["num_hidden_layers"]):
        g = lambda n: w["model.layers.%d.%s" % (l, n)]
        b = lambda n: w.get("model.layers.%d.%s" % (l, n), 0.0)  # Qwen2's q/k/v biases
        h = rms_norm(x, g("input_layernorm.weight"), eps)
        q = (h @ g("self_attn.q_proj.weight").T + b("self_attn.q_proj.bias")).reshape(T, nH, d)
        k = (h @ g("self_attn.k_proj.weight").T + b("self_attn.k_proj.bias")).reshape(T, nKV, d)
        v = (h @ g("self_attn.v_proj.weight").T + b("self_attn.v_proj.bias")).reshape(T, nKV, d)
        if "model.layers.%d.self_attn.q_norm.weight" % l in w:  # Qwen3: per head, before RoPE
            q = rms_norm(q, g("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, g("self_attn.k_norm.weight"), eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(nH // nKV, 0)  # head i uses KV head i // (nH / nKV)
        v = v.repeat_interleave(nH // nKV, 0)
        y = attention(q, k, v, window).transpose(0, 1).reshape(T, nH * d)
        x = x + y @ g("self_attn.o_proj.weight").T
        h = rms_norm(x, g("post_attention_layernorm.weight"), eps)
        if "model.layers.%d.mlp.gate.weight" % l in w:  # Qwen3-MoE: a sparse layer
            x = x + sparse_moe(cfg, g, h)
            continue
        gate, up = h @ g("mlp.gate_proj.weight").T, h @ g("mlp.up_proj.weight").T
        x = x + (torch.nn.functional.silu(gate) * up) @ g("mlp.down_proj.weight").T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return x @ head.T


def write_safetensors(path, tensors):
    header, blobs, pos = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        dt = {torch.float32: "F32", torch.int32: "I32"}[t.dtype]
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


SEEDS = {"gpt2": 1234, "llama": 5678, "qwen2": 91, "qwen3": 92, "llama31": 93, "mistral": 94, "qwen3_moe": 95}


def main():
    out, tensors = sys.argv[1], {}
    for arg in sys.argv[2:]:
        fam, d = arg.split("=", 1)
        cfg, w = read_dir(d)
        V, T = cfg["vocab_size"], cfg.get("n_positions", cfg.get("max_position_embeddings"))
        gen = torch.Generator().manual_seed(SEEDS[fam])
        tok = torch.randint(0, V, (T,), generator=gen)
        tensors[fam + ".tokens"] = tok.to(torch.int32)
        if fam == "gpt2":
            logits = gpt2(cfg, w, tok)
        else:
            for t in w.values():
                t.requires_grad_(True)
            logits = llama(cfg, w, tok)
            tgt = torch.randint(0, V, (T,), generator=gen)
            loss = torch.nn.functional.cross_entropy(logits, tgt)  # the mean over the T targets
            loss.backward()
            tensors[fam + ".targets"] = tgt.to(torch.int32)
            for name, t in sorted(w.items()):
                g = t.grad if t.grad is not None else torch.zeros_like(t)  # an expert no token reached
                tensors["%s.grad.%s" % (fam, name)] = g.to(torch.float32)
            logits = logits.detach()
        tensors[fam + ".logits"] = logits.to(torch.float32)
        print("%s: %d tokens, logits %s, |max| %.3f" % (fam, T, tuple(logits.shape), logits.abs().max().item()))
    write_safetensors(out, tensors)


if __name__ == "__main__":
    main()
