#!/usr/bin/env python3
"""small_tokenizer.py TEXT OUT_DIR [MERGES]: learn a small byte-level BPE
(GPT-2's byte alphabet and pre-tokenizer, MERGES merges, default 500) from
TEXT and write it as a Hugging Face tokenizer.json plus a
tokenizer_config.json with ChatML tokens and template. The result is
tests/fixtures/tokenizer/small (learned from the KJV text): a tokenizer the
SFT and training tests can use without the npm files, with a vocabulary
small enough for tiny models."""
import collections
import json
import os
import re
import sys

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# ASCII stand-in for GPT-2's pattern, used only to count words for learning
WORDS = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def byte_alphabet():
    out, n = {}, 0
    for b in range(256):
        if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def main():
    text_path, out = sys.argv[1], sys.argv[2]
    n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    alpha = byte_alphabet()
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    counts = collections.Counter(WORDS.findall(text))
    words = {tuple(alpha[b] for b in w.encode("utf-8")): c for w, c in counts.items()}
    vocab = {alpha[b]: b for b in range(256)}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
        new = {}
        for w, c in words.items():
            i, r = 0, []
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    r.append(a + b)
                    i += 2
                else:
                    r.append(w[i])
                    i += 1
            new[tuple(r)] = new.get(tuple(r), 0) + c
        words = new
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(special)]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
           "pre_tokenizer": bl, "post_processor": bl, "decoder": bl,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": merges}}
    cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHATML}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=0)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
