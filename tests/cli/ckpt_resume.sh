#!/usr/bin/env bash
# timeout: 180
# Checkpoints in one process (docs/ARCHITECTURE.md, "Checkpoints"):
#  - a run killed at every stage of a save (SHARC_CKPT_KILL_AT) keeps a
#    loadable checkpoint, and auto resume then ends bit for bit where an
#    uninterrupted run ends (shard files: parameters and both moments;
#    final weights), for GPT-2 (tied embeddings) and Llama (untied), with no
#    leftover of any kind and every step exactly once in metrics.jsonl;
#  - ckpt.async writes the same files as a synchronous save;
#  - auto resume skips a newest checkpoint that fails its checksum;
#  - bad checkpoints: one line naming the file and the problem, non-zero
#    exit, nothing on disk changed.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=2"
LLAMA="--model.family=llama --model.num_kv_heads=1 --model.tie_embeddings=false --model.ff_hidden_dim=70"
die() { echo "FAIL: $*"; exit 1; }
data_md5() { # tensor bytes of a safetensors file (its header holds the run's config)
  local hl; hl=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((hl + 9)) "$1" | md5sum
}
same_ckpt() { # dirA dirB: identical shard files and manifests (but for the config text)
  local f
  for f in "$1"/shard-*.bin; do cmp -s "$f" "$2/$(basename "$f")" || die "$f differs from $2"; done
  diff <(grep -v '"config"' "$1/manifest.json") <(grep -v '"config"' "$2/manifest.json") >/dev/null || die "$1/manifest.json differs"
}

# references: uninterrupted runs
"$S" train $M --train.out_dir=ref >/dev/null 2>&1 || die "reference run"
"$S" train $M $LLAMA --train.out_dir=refl >/dev/null 2>&1 || die "llama reference run"
[ -d ref/checkpoints/step-00000004 ] && [ -d ref/checkpoints/step-00000006 ] && [ ! -e ref/checkpoints/step-00000002 ] || die "keep=2"
[ "$(cat ref/checkpoints/latest)" = step-00000006 ] || die "latest"
"$S" ckpt inspect ref/checkpoints > inspect.txt || die "inspect"
grep -q "step 6 (AdamW step 6)" inspect.txt && grep -q "written by 1 ranks, FULL_SHARD" inspect.txt &&
  grep -q '"num_layers":2' inspect.txt && grep -q "wte.weight  *\[256, 48\]" inspect.txt &&
  grep -q "every checksum verified" inspect.txt || { cat inspect.txt; die "inspect output"; }

# a kill at every stage of the save of step 4
for stage in after-shards before-manifest after-manifest before-rename after-rename before-latest after-latest during-prune; do
  rm -rf k
  SHARC_CKPT_KILL_AT=$stage SHARC_CKPT_KILL_STEP=4 "$S" train $M --train.out_dir=k --ckpt.keep=1 >/dev/null 2>&1
  rc=$?; [ $rc -eq 86 ] || die "$stage: exit $rc, expected the hook's 86"
  # what is published is loadable: the newest and whatever latest names
  "$S" ckpt inspect k/checkpoints >/dev/null || die "$stage: no loadable checkpoint left"
  "$S" ckpt inspect "k/checkpoints/$(cat k/checkpoints/latest)" >/dev/null || die "$stage: latest is not loadable"
  case $stage in after-shards|before-manifest|after-manifest|before-rename) want=2 ;; *) want=4 ;; esac
  out=$("$S" train $M --train.out_dir=k --ckpt.keep=1 --ckpt.resume=auto 2>&1) || die "$stage: resume: $out"
  grep -q "resumed from k/checkpoints/step-0000000$want at step $want" <<< "$out" || die "$stage: $out"
  same_ckpt k/checkpoints/step-00000006 ref/checkpoints/step-00000006
  [ "$(data_md5 k/model.safetensors)" = "$(data_md5 ref/model.safetensors)" ] || die "$stage: final weights differ"
  [ "$(ls k/checkpoints)" = "$(printf 'latest\nstep-00000006')" ] || die "$stage: leftovers: $(ls k/checkpoints)"
  [ "$(cd k && find . -not -path './checkpoints/step-00000006/*' | sort | tr '\n' ' ')" = \
    ". ./checkpoints ./checkpoints/latest ./checkpoints/step-00000006 ./config.yaml ./metrics.jsonl ./model.safetensors " ] ||
    die "$stage: leftovers: $(cd k && find . | sort | tr '\n' ' ')"
  [ "$(jq -r .step k/metrics.jsonl | tr '\n' ' ')" = "1 2 3 4 5 6 " ] || die "$stage: metrics steps $(jq -r .step k/metrics.jsonl)"
done
echo "killed at 8 stages: resumed bit-exact"

# llama (untied): stop after step 2's save, resume
SHARC_CKPT_KILL_AT=after-latest SHARC_CKPT_KILL_STEP=2 "$S" train $M $LLAMA --train.out_dir=l >/dev/null 2>&1
"$S" train $M $LLAMA --train.out_dir=l --ckpt.resume=auto >/dev/null 2>&1 || die "llama resume"
same_ckpt l/checkpoints/step-00000006 refl/checkpoints/step-00000006
[ "$(data_md5 l/model.safetensors)" = "$(data_md5 refl/model.safetensors)" ] || die "llama final weights differ"

# ckpt.async: the same files
"$S" train $M --train.out_dir=as --ckpt.async=true >/dev/null 2>&1 || die "async run"
same_ckpt as/checkpoints/step-00000004 ref/checkpoints/step-00000004
same_ckpt as/checkpoints/step-00000006 ref/checkpoints/step-00000006
echo "async: same files"

# auto resume falls back past a newest checkpoint that fails its checksum
cp -r ref fb
printf '\x55' | dd of=fb/checkpoints/step-00000006/shard-00000-of-00001.bin bs=1 seek=1000 conv=notrunc 2>/dev/null
out=$("$S" train $M --train.out_dir=fb --ckpt.resume=auto 2>&1) || die "fallback: $out"
grep -q "checksum mismatch in bytes \[0, 836352)" <<< "$out" && grep -q "falling back to the previous checkpoint" <<< "$out" &&
  grep -q "resumed from fb/checkpoints/step-00000004 at step 4" <<< "$out" || die "fallback: $out"
same_ckpt fb/checkpoints/step-00000006 ref/checkpoints/step-00000006
echo "fallback past a corrupt checkpoint"

# bad checkpoints
expect_fail() { # dir expected-substring extra-args...
  local dir=$1 want=$2; shift 2
  local before; before=$(cd "$dir" && md5sum * | md5sum)
  local err; err=$("$S" train $M --train.out_dir=bad_out --ckpt.resume="$dir" "$@" 2>&1 >/dev/null); local rc=$?
  [ $rc -ne 0 ] || die "expected failure for $dir"
  grep -qF -- "$want" <<< "$err" || die "message for $dir was: $err; expected: $want"
  [ "$(wc -l <<< "$err")" -eq 1 ] || die "expected one line, got: $err"
  [ "$(cd "$dir" && md5sum * | md5sum)" = "$before" ] || die "$dir changed"
  [ ! -e bad_out ] || die "a failed resume wrote bad_out"
}
mk() { rm -rf "$1"; cp -r ref/checkpoints/step-00000006 "$1"; }
F=shard-00000-of-00001.bin
mk t1; truncate -s -100 t1/$F
expect_fail t1 "ckpt 't1/$F': 836252 bytes, the manifest says 836352 (truncated or replaced)"
mk t2; printf '\x01' | dd of=t2/$F bs=1 seek=500000 conv=notrunc 2>/dev/null
expect_fail t2 "ckpt 't2/$F': checksum mismatch in bytes [0, 836352)"
mk t3
expect_fail t3 "ckpt 't3/manifest.json': model.num_layers is 2 in the checkpoint, 3 in this run" --model.num_layers=3
expect_fail t3 "model.vocab_size is 256 in the checkpoint, 300 in this run" --model.vocab_size=300
expect_fail t3 "model.tie_embeddings is true in the checkpoint, false in this run" --model.tie_embeddings=false
mk t4; rm t4/$F
expect_fail t4 "ckpt 't4/$F': cannot open shard file: No such file or directory"
mk t5; sed -i 's/"format_version":1/"format_version":99/; s/"format_version": *1,/"format_version": 99,/' t5/manifest.json
expect_fail t5 "ckpt 't5/manifest.json': format_version 99; this sharc reads version 1"
mk t6; truncate -s 300 t6/manifest.json
expect_fail t6 "ckpt 't6/manifest.json': not valid JSON"
mk t7; sed -i 's/"crc32":[0-9]*/"crc32":"x"/' t7/manifest.json
expect_fail t7 "ckpt 't7/manifest.json': \"crc32\" is missing or not an integer"
mkdir -p e0; touch e0/x
expect_fail e0 "ckpt.resume: 'e0' holds no checkpoint"
err=$("$S" ckpt inspect t2 2>&1) && die "inspect of a corrupt checkpoint succeeded"
grep -q "checksum mismatch" <<< "$err" || die "inspect: $err"
echo ok
