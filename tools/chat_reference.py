#!/usr/bin/env python3
"""chat_reference.py TOKENIZERS_DIR OUT_DIR [N] [SEED]: the reference for
sharc's fixed chat formats (tests/test_chat.c, note [chat-templates] in
src/data/chat.c). Writes OUT_DIR/conversations.jsonl (N seeded conversations:
with and without a system turn, 1-4 turns, Unicode, whitespace at the ends,
reasoning_content and <think> blocks, tool-response-looking user turns, a
system turn in the middle, empty contents) and OUT_DIR/renders.ref: for each
conversation, format and add_generation_prompt, the length and FNV-1a 64 of
the text that Jinja (python3-jinja2, set up as Hugging Face's
apply_chat_template sets it up) renders from the real template strings:
Qwen3's and Llama-3's tokenizer_config.json (from the npm cache of
scripts/fetch_tokenizers.sh) and the common ChatML template.
`python3 tools/chat_reference.py DIR OUT --show K FORMAT AGP` prints one."""
import json
import os
import random
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

PIECES = ["Hello", "What is 2+2?", "4", "Four.", "  padded  ", "\n\nleading newlines", "trailing newlines\n\n",
          "\u3000ideographic\u3000", "\u00a0nbsp\u00a0", "\u180emongolian\u180e", "\ufeffbom", "\t tab \t",
          "日本語のテキスト", "Ελληνικά", "مرحبا", "emoji 👍🏽", "line one\nline two", "<think>", "</think>",
          "<think>\nplan\n</think>\n\nanswer", "reasoning goes here", "\n", " ", "", "<|im_end|>", "x\u2028y",
          "\u0085next", "{{ not jinja }}", "{% raw %}", "'quote' \"double\"", "back\\slash"]


def text(r, k=None):
    n = r.randint(0, 4) if k is None else k
    return "".join(r.choice(PIECES) for _ in range(n))


def conversation(r):
    msgs = []
    if r.random() < 0.5:
        msgs.append({"role": "system", "content": text(r)})
    turns = r.randint(1, 4)
    for t in range(turns):
        u = text(r)
        if r.random() < 0.1:
            u = "<tool_response>" + text(r) + "</tool_response>"
        msgs.append({"role": "user", "content": u})
        if r.random() < 0.08:
            msgs.append({"role": "system", "content": text(r)})
        if t < turns - 1 or r.random() < 0.8:
            a = {"role": "assistant", "content": text(r)}
            x = r.random()
            if x < 0.2:
                a["content"] = "<think>\n" + text(r) + "\n</think>\n\n" + text(r)
            elif x < 0.35:
                a["reasoning_content"] = text(r)
            elif x < 0.4:
                a["reasoning_content"] = None
            elif x < 0.45:
                a["content"] = text(r) + "</think>" + text(r) + "</think>" + text(r)
            msgs.append(a)
    return msgs


def fnv64(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    return env


def templates(tokdir):
    env = environment()
    out = {"chatml": (env.from_string(CHATML), {})}
    for name in ("qwen3", "llama3"):
        with open(os.path.join(tokdir, name, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        special = {k: cfg.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        special = {k: (v["content"] if isinstance(v, dict) else v) for k, v in special.items()}
        out[name] = (env.from_string(cfg["chat_template"]), special)
    return out


def render(tmpls, fmt, msgs, agp):
    t, special = tmpls[fmt]
    return t.render(messages=msgs, add_generation_prompt=agp, **special)


def main():
    args = sys.argv[1:]
    tokdir, out = args[0], args[1]
    tmpls = templates(tokdir)
    if len(args) > 2 and args[2] == "--show":
        k, fmt, agp = int(args[3]), args[4], args[5] == "1"
        with open(os.path.join(out, "conversations.jsonl"), encoding="utf-8") as f:
            msgs = json.loads(f.read().split("\n")[k])["messages"]
        sys.stdout.write(repr(render(tmpls, fmt, msgs, agp)) + "\n")
        return
    n = int(args[2]) if len(args) > 2 else 200
    r = random.Random(int(args[3]) if len(args) > 3 else 20261123)
    convs = [conversation(r) for _ in range(n)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "conversations.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for c in convs:
            f.write(json.dumps({"messages": c}, ensure_ascii=False) + "\n")
    lines = [f"# chat renders: python3-jinja2 {jinja2.__version__}; case CONVERSATION FORMAT ADD_GENERATION_PROMPT BYTES FNV64"]
    for k, msgs in enumerate(convs):
        for fmt in ("chatml", "qwen3", "llama3"):
            for agp in (0, 1):
                b = render(tmpls, fmt, msgs, bool(agp)).encode("utf-8")
                lines.append(f"case {k} {fmt} {agp} {len(b)} {fnv64(b):016x}")
    with open(os.path.join(out, "renders.ref"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
