#!/usr/bin/env python3
"""openrlhf_reference.py TOKENIZERS_DIR OUT.ref: the reference for sharc's SFT
data (tests/test_sft.c). For each case of CASES (a tokenizer, a JSONL file of
tests/fixtures/sft and OpenRLHF-style options) it writes every kept sample's
ids and per-token trained flags (flag j = the token the position before
predicts is trained, i.e. OpenRLHF's loss_mask[j - 1]):

- mask openrlhf: a transcription of OpenRLHF's SFTDataset (preprocess_data,
  process_data, __getitem__, get_loss_mask at the commit RESEARCH.md 2.x
  read): string slicing full[len(prompt):], the prompt tokenized alone,
  rstrip("\\n") + " " + eos, truncation with the last id forced to EOS,
  loss_mask[prompt_len - 1:-1] (multiturn: loss_mask[start - 1:end]).
- mask ranges: sharc's rule (note [sft-mask]) implemented independently:
  the response spans found by parsing the rendered text at the format's
  markers, a token trained iff its bytes overlap one, token bytes from the
  tokenizer.json vocabulary, normalised (NFC) offsets from unicodedata.

Templates are rendered with python3-jinja2 from the real template strings
(tools/chat_reference.py); ids come from Hugging Face's JS tokenizers
(node tools/tokenizer_reference.mjs --encode-json)."""
import json
import os
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_reference  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures", "sft")
DEFAULT_TEMPLATE = "User: {}\nAssistant: "

# name, tokenizer, file, options
CASES = []
for tok in ("qwen3", "gpt2"):
    for mask in ("openrlhf", "ranges"):
        CASES.append((f"plain-{tok}-{mask}", tok, "plain.jsonl",
                      dict(input_key="question", output_key="response", template=None,
                           input_template=DEFAULT_TEMPLATE, max_len=48, multiturn=False, mask=mask)))
for mask in ("openrlhf", "ranges"):
    CASES.append((f"plain-notemplate-qwen3-{mask}", "qwen3", "plain.jsonl",
                  dict(input_key="question", output_key="response", template=None, input_template="",
                       max_len=48, multiturn=False, mask=mask)))
    CASES.append((f"pair-qwen3-{mask}", "qwen3", "chat_pair.jsonl",
                  dict(input_key="input", output_key="output", template="qwen3", input_template="", max_len=40,
                       multiturn=False, mask=mask)))
    for tok in ("qwen3", "llama3"):
        for multi in (False, True):
            CASES.append((f"messages-{tok}-{'multi' if multi else 'last'}-{mask}", tok, "messages.jsonl",
                          dict(input_key="messages", output_key="", template=tok, input_template="", max_len=56,
                               multiturn=multi, mask=mask)))


class Tokenizer:
    """ids from the JS reference (one node run per batch); token bytes from the file."""

    def __init__(self, tokdir, name):
        self.dir = os.path.join(tokdir, name)
        self.js = os.path.join(tokdir, "js", "tokenizers.mjs")
        self.name = name
        with open(os.path.join(self.dir, "tokenizer.json"), encoding="utf-8") as f:
            tj = json.load(f)
        with open(os.path.join(self.dir, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        byte_of = {}
        n = 0
        for b in range(256):
            if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174:
                byte_of[chr(b)] = b
            else:
                byte_of[chr(256 + n)] = b
                n += 1
        self.bytes_of = {}
        for s, i in tj["model"]["vocab"].items():
            self.bytes_of[i] = bytes(byte_of[c] for c in s) if all(c in byte_of for c in s) else s.encode()
        self.added = sorted((a["content"] for a in tj["added_tokens"]), key=len, reverse=True)
        for a in tj["added_tokens"]:
            self.bytes_of[a["id"]] = a["content"].encode()
        self.nfc = (tj.get("normalizer") or {}).get("type") == "NFC"
        eos = cfg["eos_token"]
        self.eos = eos["content"] if isinstance(eos, dict) else eos
        self.cache = {}

    def encode_all(self, texts):
        todo = sorted(set(t for t in texts if t not in self.cache))
        if not todo:
            return
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
            json.dump(todo, f, ensure_ascii=False)
        out = subprocess.run(["node", os.path.join(HERE, "tokenizer_reference.mjs"), self.js, self.dir, self.name,
                              "--encode-json", f.name], check=True, capture_output=True, text=True).stdout
        os.unlink(f.name)
        for t, ids in zip(todo, json.loads(out)):
            self.cache[t] = ids

    def __call__(self, text):
        return self.cache[text]

    def normalized_len(self, text):
        """bytes of the text after the added-token split and NFC of the pieces between"""
        if not self.nfc:
            return len(text.encode())
        total, i, start = 0, 0, 0
        while i <= len(text):
            hit = next((a for a in self.added if text.startswith(a, i)), None) if i < len(text) else None
            if hit is None and i < len(text):
                i += 1
                continue
            total += len(unicodedata.normalize("NFC", text[start:i]).encode())
            if hit is None:
                break
            total += len(hit.encode())
            i += len(hit)
            start = i
        return total


def preprocess(rec, o, render):
    """OpenRLHF's preprocess_data"""
    ik, ok = o["input_key"], o["output_key"]
    if o["template"]:
        if ok:
            pm, rm = rec[ik], rec[ok]
            if isinstance(pm, str) and isinstance(rm, str):
                pm = [{"role": "user", "content": pm}]
                rm = [{"role": "assistant", "content": rm}]
            prompt = render(pm, True)
            return prompt, render(pm + rm, False)[len(prompt):]
        prompt = render(rec[ik][:-1], True)
        return prompt, render(rec[ik], False)[len(prompt):]
    prompt = rec[ik]
    if o["input_template"]:
        prompt = o["input_template"].format(prompt)
    return prompt, rec[ok] if ok else ""


def openrlhf_strings(rec, o, render, eos):
    prompt, response = preprocess(rec, o, render)
    text = (prompt + response).rstrip("\n")
    if not text.endswith(eos):
        text += " " + eos
    turns = []
    if o["multiturn"]:
        msgs = rec[o["input_key"]]
        for idx, m in enumerate(msgs):
            if m["role"] == "assistant":
                p = render(msgs[:idx], True)
                turns.append((p, render(msgs[:idx + 1], False)[len(p):]))
    return prompt, response, text, turns


def openrlhf_sample(strings, o, tok, eos_id):
    prompt, response, text, turns = strings
    L_max = o["max_len"]
    prompt_ids_len = len(tok(prompt)[:L_max])
    if not prompt or not response:
        return "empty"
    if prompt_ids_len >= L_max - 2:
        return "long"
    ids = tok(text)[:L_max]
    ids[-1] = eos_id
    loss_mask = [0] * len(ids)
    if not o["multiturn"]:
        loss_mask[prompt_ids_len - 1:-1] = [1] * len(loss_mask[prompt_ids_len - 1:-1])
    else:
        for p, r in turns:
            start = len(tok(p)[:L_max])
            end = start + len(tok(r)[:L_max]) - 1
            loss_mask[start - 1:end] = [1] * len(loss_mask[start - 1:end])
    return ids, [0] + loss_mask[:-1]


def response_spans(text, fmt, n_msgs, trained_msgs):
    """(start, end, trained) segments of a rendering, found at the format's markers"""
    segs = []
    if fmt == "llama3":
        starts = [i for i in range(len(text)) if text.startswith("<|start_header_id|>", i)]
        head_end = "<|end_header_id|>\n\n"
    else:
        starts = [i for i in range(len(text)) if text.startswith("<|im_start|>", i)]
        head_end = "\n"
    starts = starts[:n_msgs]  # the llama3 trailing assistant header is the extra block
    bounds = starts + [len(text) if fmt != "llama3" else text.rfind("<|start_header_id|>")]
    pos = 0
    for k, s in enumerate(starts):
        e = bounds[k + 1]
        block = text[s:e]
        role = block[len("<|start_header_id|>"):block.index("<|end_header_id|>")] if fmt == "llama3" else \
            block[len("<|im_start|>"):block.index("\n")]
        if role == "assistant":
            h = s + block.index(head_end) + len(head_end)
            segs.append((pos, h, False))
            segs.append((h, e, k in trained_msgs))
            pos = e
    segs.append((pos, bounds[-1], False))
    return [x for x in segs if x[1] > x[0]], text[:bounds[-1]]


def ranges_strings(rec, o, render, eos):
    ik, ok = o["input_key"], o["output_key"]
    if not o["template"]:
        p = o["input_template"].format(rec[ik]) if o["input_template"] else rec[ik]
        segs, text = [(0, len(p), False), (len(p), len(p) + len(rec[ok]), True)], p + rec[ok]
    else:
        if ok:
            pm, rm = rec[ik], rec[ok]
            if isinstance(pm, str):
                pm, rm = [{"role": "user", "content": pm}], [{"role": "assistant", "content": rm}]
            msgs, first = pm + rm, len(pm)
        else:
            msgs, first = rec[ik], len(rec[ik]) - 1
        # message index -> rendered block index: qwen3 renders a first system message in its header block too
        trained = {k for k, m in enumerate(msgs) if m["role"] == "assistant" and (o["multiturn"] or k >= first)}
        segs, text = response_spans(render(msgs, False), o["template"], len(msgs), trained)
    segs = [s for s in segs if s[1] > s[0]]
    first_trained = min((s for s in segs if s[2]), default=None)
    if first_trained is None or first_trained[0] == 0 or not text[first_trained[0]:first_trained[1]]:
        return None
    text = text.rstrip("\n")
    segs = [(a, min(b, len(text)), t) for a, b, t in segs if a < len(text)]
    if not text.endswith(eos):
        segs.append((len(text), len(text) + len(eos), True))
        text += eos
    return text, segs


def ranges_sample(strings, o, tok, eos_id):
    if strings is None:
        return "empty"
    text, segs = strings
    ids = tok(text)
    nb = [(tok.normalized_len(text[:a]), tok.normalized_len(text[:b]), t) for a, b, t in segs]
    flags, at = [], 0
    for i in ids:
        lo, hi = at, at + len(tok.bytes_of[i])
        flags.append(int(any(t and a < hi and b > lo for a, b, t in nb)))
        at = hi
    assert at == tok.normalized_len(text), (at, tok.normalized_len(text))
    first = next((j for j, f in enumerate(flags) if f), None)
    if first is None or first == 0:
        return "empty"
    if first >= o["max_len"] - 2:
        return "long"
    ids, flags = ids[:o["max_len"]], flags[:o["max_len"]]
    ids[-1] = eos_id
    flags[0] = 0
    return ids, flags


def main():
    tokdir, out = sys.argv[1], sys.argv[2]
    tmpls = chat_reference.templates(tokdir)
    toks = {}
    lines = ["# SFT reference: tools/openrlhf_reference.py (OpenRLHF's SFTDataset rules / sharc's ranges rule); "
             "s K ID:FLAG ..."]
    for name, tokname, fname, o in CASES:
        tok = toks.setdefault(tokname, Tokenizer(tokdir, tokname))
        fmt = o["template"]
        render = (lambda m, agp, fmt=fmt: chat_reference.render(tmpls, fmt, m, agp)) if fmt else None
        with open(os.path.join(FIX, fname), encoding="utf-8") as f:
            recs = [json.loads(line) for line in f if line.strip()]
        make = openrlhf_strings if o["mask"] == "openrlhf" else ranges_strings
        strings = [make(r, o, render, tok.eos) for r in recs]
        need = []
        for s in strings:
            if s is None:
                continue
            if o["mask"] == "openrlhf":
                need += [s[0], s[2]] + [x for t in s[3] for x in t]
            else:
                need.append(s[0])
        tok.encode_all(need + [tok.eos])
        eos_id = tok(tok.eos)[0]
        done = [(openrlhf_sample if o["mask"] == "openrlhf" else ranges_sample)(s, o, tok, eos_id) for s in strings]
        kept = [d for d in done if not isinstance(d, str)]
        opts = " ".join(f"{k} {json.dumps(v)}" for k, v in o.items())
        lines.append(f"case {name} tokenizer {tokname} file {fname} records {len(recs)} samples {len(kept)} "
                     f"dropped_empty {done.count('empty')} dropped_long {done.count('long')} {opts}")
        for k, (ids, flags) in enumerate(kept):
            lines.append(f"s {k} " + " ".join(f"{i}:{f}" for i, f in zip(ids, flags)))
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
