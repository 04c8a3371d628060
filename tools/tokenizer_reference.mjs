// tokenizer_reference.mjs: the reference ids for sharc's tokenizer tests,
// from Hugging Face's JavaScript tokenizers (@huggingface/tokenizers, whose
// Split regexes are translated to reproduce Oniguruma, the engine of the
// Rust crate). Run by `make tokenizer-fixtures`:
//
//   node tools/tokenizer_reference.mjs JS_DIST TOKENIZER_DIR NAME [--whole NAME FILE]...
//        [--lines NAME FILE]... [--jsonl NAME FILE]... > tests/fixtures/tokenizer/NAME.ref
//
// or, for tools/openrlhf_reference.py:
//   node tools/tokenizer_reference.mjs JS_DIST TOKENIZER_DIR NAME --encode-json FILE
// prints the ids of each string of the JSON list in FILE, as a JSON list.
//
// --whole encodes the file as one text (digests per block of 65536 ids),
// --lines each line without its '\n', --jsonl each record's "text" (one
// digest per record). add_special_tokens is false throughout. A GPT-2
// ByteLevel(use_regex) pre-tokenizer is given to the library as the
// equivalent Split(GPT-2 regex, Isolated) + ByteLevel(use_regex: false),
// because its built-in ByteLevel regex is a native JavaScript one, which
// counts U+FEFF as whitespace where Oniguruma does not.
//
// Digest of ids: FNV-1a 64 over each id as 4 little-endian bytes; sha256
// over the same bytes. The C test (tests/test_tokenizer.c) computes both.
import fs from "fs";
import crypto from "crypto";

const GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const BLOCK = 65536;

function fnv64(ids, from, to) {
  let h = 0xcbf29ce484222325n;
  const p = 0x100000001b3n, mask = 0xffffffffffffffffn;
  for (let i = from; i < to; i++) {
    let v = ids[i] >>> 0;
    for (let b = 0; b < 4; b++) {
      h = ((h ^ BigInt(v & 255)) * p) & mask;
      v >>>= 8;
    }
  }
  return h.toString(16).padStart(16, "0");
}

function idBytes(ids) {
  const buf = Buffer.alloc(ids.length * 4);
  ids.forEach((v, i) => buf.writeUInt32LE(v >>> 0, i * 4));
  return buf;
}

const sha256 = (b) => crypto.createHash("sha256").update(b).digest("hex");

const [jsDist, dir, name, ...rest] = process.argv.slice(2);
const { Tokenizer } = await import(jsDist);
const jsonBytes = fs.readFileSync(`${dir}/tokenizer.json`);
const tj = JSON.parse(jsonBytes.toString("utf8"));
const tc = fs.existsSync(`${dir}/tokenizer_config.json`) ? JSON.parse(fs.readFileSync(`${dir}/tokenizer_config.json`, "utf8")) : {};
const pt = tj.pre_tokenizer;
if (pt && pt.type === "ByteLevel" && pt.use_regex !== false) {
  tj.pre_tokenizer = {
    type: "Sequence",
    pretokenizers: [
      { type: "Split", pattern: { Regex: GPT2_REGEX }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
}
const tok = new Tokenizer(tj, tc);
const enc = (s) => tok.encode(s, { add_special_tokens: false }).ids;

if (rest[0] === "--encode-json") {
  const texts = JSON.parse(fs.readFileSync(rest[1], "utf8"));
  process.stdout.write(JSON.stringify(texts.map(enc)) + "\n");
  process.exit(0);
}

const out = [];
out.push(`# reference ids: @huggingface/tokenizers (dist sha256 ${sha256(fs.readFileSync(jsDist))}), add_special_tokens false`);
out.push(`tokenizer ${name} sha256 ${sha256(jsonBytes)}`);
for (let i = 0; i < rest.length; i += 3) {
  const [mode, cname, file] = rest.slice(i, i + 3);
  const bytes = fs.readFileSync(file);
  const text = bytes.toString("utf8");
  if (mode === "--whole") {
    const ids = enc(text);
    out.push(`corpus ${cname} whole bytes ${bytes.length} sha256 ${sha256(bytes)} ids ${ids.length} sha256 ${sha256(idBytes(ids))}`);
    for (let b = 0; b * BLOCK < ids.length; b++) {
      const to = Math.min(ids.length, (b + 1) * BLOCK);
      out.push(`block ${b} ${to - b * BLOCK} ${fnv64(ids, b * BLOCK, to)}`);
    }
  } else {
    let recs;
    if (mode === "--lines") {
      recs = text.split("\n");
      if (recs.length && recs[recs.length - 1] === "") recs.pop();
    } else if (mode === "--jsonl") {
      recs = text.split("\n").filter((l) => l.length).map((l) => JSON.parse(l).text);
    } else {
      throw new Error(`unknown mode ${mode}`);
    }
    out.push(`corpus ${cname} ${mode.slice(2)} bytes ${bytes.length} sha256 ${sha256(bytes)} records ${recs.length}`);
    recs.forEach((r, k) => {
      const ids = enc(r);
      out.push(`rec ${k} ${ids.length} ${fnv64(ids, 0, ids.length)}`);
    });
  }
}
process.stdout.write(out.join("\n") + "\n");
