#!/usr/bin/env python3
"""tokenizer_corpus.py OUT.jsonl [N] [SEED]: a seeded corpus of awkward
texts for the tokenizer tests ({"text": ...} per line): contractions in
mixed case, every kind of Unicode whitespace, digit runs in several scripts,
combining marks, emoji sequences, special-token strings whole and broken,
and random code points from every plane (valid UTF-8 only: no surrogates).
The committed tests/tokenizer/fuzz.jsonl is its output with the defaults."""
import json
import random
import sys

WORDS = ["the", "The", "THE", "hello", "world", "über", "naïve", "façade", "Москва", "язык", "中文", "日本語",
         "한국어", "ภาษา", "हिन्दी", "العربية", "עברית", "Ελληνικά", "şehir", "küçük", "điều", "klíč", "раніше",
         "cafe\u0301", "A\u030angstro\u0308m", "ǅemal", "ﬁne", "Ω", "K", "ß", "ΐ"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'ſ", "'K",
                "’s", "'x", "''", "'"]
SPACES = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", " \n", "\n ", "\u0085", "\u00a0", "\u1680", "\u2000",
          "\u2003", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\ufeff",
          "\u200b", "\x0b", "\x0c", "\x1c", "\x1f"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃",
          "ⅠⅡⅢⅣ", "①②③", "𝟘𝟙𝟚"]
PUNCT = list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"") + ["...", "—", "–", "«", "»", "¿", "¡", "。", "、", "！", "？"]
MARKS = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323", "\u0327", "\u0651", "\u093c",
         "\u094d", "\u0e31", "\u20dd", "\ufe0f", "\u200d"]
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧", "🏳️‍🌈", "🇫🇷", "❤️", "🤖", "🧑🏿‍🚀", "☺", "🔥🔥"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|begin_of_text|>",
           "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
           "<|reserved_special_token_0|>", "<tool_call>", "<|fim_prefix|>", "<|endoftext", "|endoftext|>",
           "<|im_start", "<<|im_end|>>", "<|<|eot_id|>|>"]


def random_char(r):
    plane = r.choice([0, 0, 0, 0, 1, 2, 14, 15])
    while True:
        cp = plane * 0x10000 + r.randrange(0x10000)
        if not (0xD800 <= cp <= 0xDFFF):
            return chr(cp)


def fragment(r):
    k = r.randrange(12)
    if k == 0:
        return r.choice(WORDS) + r.choice(CONTRACTIONS)
    if k == 1:
        return r.choice(SPACES) * r.randint(1, 3)
    if k == 2:
        d = r.choice(DIGITS)
        return "".join(r.choice(d) for _ in range(r.randint(1, 9)))
    if k == 3:
        return "".join(r.choice(PUNCT) for _ in range(r.randint(1, 4)))
    if k == 4:
        return r.choice(WORDS) + "".join(r.choice(MARKS) for _ in range(r.randint(1, 3)))
    if k == 5:
        return r.choice(EMOJI)
    if k == 6:
        return r.choice(SPECIAL)
    if k == 7:
        return "".join(random_char(r) for _ in range(r.randint(1, 4)))
    if k == 8:
        return "\x00" if r.random() < 0.2 else chr(r.randrange(1, 32))
    return r.choice(WORDS)


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 20261123)
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        for _ in range(n):
            text = "".join(fragment(r) for _ in range(r.randint(0, 24)))
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
