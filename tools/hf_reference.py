#!/usr/bin/python3
"""hf_reference.py: logits of Hugging Face model directories computed by a
plain PyTorch implementation (no transformers, no safetensors package), the
reference for tests/test_hf.c.

Reads DIR/config.json and DIR/model.safetensors (or the shards named by
model.safetensors.index.json), parsed here with json and struct. GPT-2 follows
GPT2LMHeadModel: Conv1D weights are (in, out) and compute x @ W + b, tanh
GELU, tied lm_head. Llama follows LlamaForCausalLM: RMSNorm, rotate_half RoPE,
grouped-query attention, SwiGLU. Everything is computed in float64.

usage: hf_reference.py OUT.safetensors gpt2=DIR llama=DIR
writes, for each family F: F.tokens (I32, T) and F.logits (F32, T x V), the
logits of every position for fixed tokens.
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


def attention(q, k, v):
    """q (nH, T, d), k/v (nH, T, d): causal softmax attention."""
    T, d = q.shape[1], q.shape[2]
    s = q @ k.transpose(1, 2) / math.sqrt(d)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
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


def llama(cfg, w, tok):
    C, nH = cfg["hidden_size"], cfg["num_attention_heads"]
    nKV = cfg.get("num_key_value_heads", nH)
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    d, T = C // nH, len(tok)
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), -1)
    cos, sin = emb.cos(), emb.sin()
    rope = lambda t: t * cos + rotate_half(t) * sin  # t: (heads, T, d)
    x = w["model.embed_tokens.weight"][tok]
    for l in range(cfg["num_hidden_layers"]):
        g = lambda n: w["model.layers.%d.%s" % (l, n)]
        h = rms_norm(x, g("input_layernorm.weight"), eps)
        q = (h @ g("self_attn.q_proj.weight").T).reshape(T, nH, d).transpose(0, 1)
        k = (h @ g("self_attn.k_proj.weight").T).reshape(T, nKV, d).transpose(0, 1)
        v = (h @ g("self_attn.v_proj.weight").T).reshape(T, nKV, d).transpose(0, 1)
        q, k = rope(q), rope(k)
        k = k.repeat_interleave(nH // nKV, 0)  # head i uses KV head i // (nH / nKV)
        v = v.repeat_interleave(nH // nKV, 0)
        y = attention(q, k, v).transpose(0, 1).reshape(T, C)
        x = x + y @ g("self_attn.o_proj.weight").T
        h = rms_norm(x, g("post_attention_layernorm.weight"), eps)
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


def main():
    out, tensors = sys.argv[1], {}
    for arg in sys.argv[2:]:
        fam, d = arg.split("=", 1)
        cfg, w = read_dir(d)
        V, T = cfg["vocab_size"], cfg.get("n_positions", cfg.get("max_position_embeddings"))
        gen = torch.Generator().manual_seed(1234 if fam == "gpt2" else 5678)
        tok = torch.randint(0, V, (T,), generator=gen)
        logits = (gpt2 if fam == "gpt2" else llama)(cfg, w, tok)
        tensors[fam + ".tokens"] = tok.to(torch.int32)
        tensors[fam + ".logits"] = logits.to(torch.float32)
        print("%s: %d tokens, logits %s, |max| %.3f" % (fam, T, tuple(logits.shape), logits.abs().max().item()))
    write_safetensors(out, tensors)


if __name__ == "__main__":
    main()
