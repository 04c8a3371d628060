#!/usr/bin/env bash
# timeout: 60
# sharc export / generate --checkpoint from a checkpoint (note
# [inference-source] in src/cli/main.c; docs/ARCHITECTURE.md, "Checkpoints"):
#  - a run's checkpoint directory, its newest step directory and the run
#    directory (its model.safetensors) export byte-identical Hugging Face
#    files when the last checkpoint is the final step, and generate the same
#    text (temperature 0); a run directory without model.safetensors uses
#    its checkpoints/; a wrong `latest` is not trusted;
#  - an older step exports other weights (the step is really read);
#  - a corrupt newest checkpoint is skipped with a warning (the ckpt.resume=auto
#    rule); bad input (a corrupt chunk, a missing manifest, a checkpoint whose
#    manifest describes another model, not a checkpoint) gets one error line
#    naming it, a non-zero exit and no output directory;
#  - what a crashed export (DIR.sharc-tmp-PID) or import (FILE.tmp.PID) left
#    is gone after the next one.
set -uo pipefail
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
M="--data.path=text.txt --model.num_layers=2 --model.embed_dim=48 --model.num_heads=3 --model.max_seq_len=16
   --train.seq_len=13 --train.batch_size=2 --train.max_steps=6 --train.threads=1 --optim.warmup_steps=2 --ckpt.every=2"
die() { echo "FAIL: $*"; exit 1; }
"$S" train $M --train.out_dir=r >/dev/null 2>&1 || die "training"
[ -f r/model.safetensors ] && [ -f r/checkpoints/step-00000006/manifest.json ] || die "no final checkpoint"

export_ok() { # source out
  "$S" export --checkpoint "$1" --out "$2" >/dev/null 2>err.txt || { cat err.txt; die "export --checkpoint $1"; }
}
same_hf() { # dirA dirB
  cmp -s "$1/model.safetensors" "$2/model.safetensors" || die "$1/model.safetensors differs from $2's"
  cmp -s "$1/config.json" "$2/config.json" || die "$1/config.json differs from $2's"
}
export_ok r e_run
export_ok r/checkpoints e_ckdir
export_ok r/checkpoints/step-00000006 e_step
same_hf e_ckdir e_run
same_hf e_step e_run
export_ok r/checkpoints/step-00000004 e_4
cmp -s e_4/model.safetensors e_run/model.safetensors && die "step 4 exported the final weights"
# sharc eval reads the same sources: the checkpoint gives exactly the weights' loss
ev_w=$("$S" eval --checkpoint r --data.path text.txt --seq_len 13 --threads 1 2>/dev/null) || die "eval of the weights"
ev_c=$("$S" eval --checkpoint r/checkpoints --data.path text.txt --seq_len 13 --threads 1 2>/dev/null) || die "eval of the checkpoint"
[ "$(jq .val_loss <<< "$ev_w")" = "$(jq .val_loss <<< "$ev_c")" ] || die "eval differs: weights $ev_w, checkpoint $ev_c"
# a run directory without its final weights: its checkpoints/; a wrong latest is ignored
mkdir -p r2 && cp -r r/checkpoints r2/ && echo step-00000004 > r2/checkpoints/latest
export_ok r2 e_r2
same_hf e_r2 e_run
echo "export: checkpoint directory, step directory and run directory byte-identical"

gen() { "$S" generate --checkpoint "$1" --prompt "the quick" --tokens 40 --temperature 0 --threads 1 2>&1; }
g_run=$(gen r) || die "generate from the run: $g_run"
g_ck=$(gen r/checkpoints) || die "generate from the checkpoints: $g_ck"
[ "$g_run" = "$g_ck" ] && [ ${#g_ck} -ge 49 ] || die "generate differs: '$g_run' vs '$g_ck'"
echo "generate: the same text from the checkpoint"

# a corrupt newest checkpoint: skipped with a warning, step 4 is used
cp -r r/checkpoints cf
printf '\x55' | dd of=cf/step-00000006/shard-00000-of-00001.bin bs=1 seek=1000 conv=notrunc 2>/dev/null
"$S" export --checkpoint cf --out e_cf >/dev/null 2>err.txt || { cat err.txt; die "fallback export"; }
grep -q "checksum mismatch in bytes \[0, 836352)" err.txt && grep -q "falling back to the previous checkpoint" err.txt ||
  { cat err.txt; die "fallback warnings"; }
same_hf e_cf e_4

expect_fail() { # source expected-substring
  rm -rf bad_out
  local out rc
  out=$("$S" export --checkpoint "$1" --out bad_out 2>&1); rc=$?
  [ $rc -ne 0 ] || die "export $1 succeeded"
  [ "$(grep -c . <<< "$out")" -eq 1 ] && grep -q "error" <<< "$out" || die "export $1: not one error line: $out"
  grep -qF -- "$2" <<< "$out" || die "export $1: expected '$2' in: $out"
  [ ! -e bad_out ] || die "export $1 left bad_out behind"
  out=$("$S" generate --checkpoint "$1" --tokens 3 2>&1); rc=$?
  [ $rc -ne 0 ] && [ "$(grep -c . <<< "$out")" -eq 1 ] && grep -qF -- "$2" <<< "$out" || die "generate $1 ($rc): $out"
}
# a corrupt chunk in a step directory given directly
expect_fail cf/step-00000006 "cf/step-00000006/shard-00000-of-00001.bin': checksum mismatch in bytes [0, 836352)"
# a missing manifest
cp -r r/checkpoints/step-00000006 nomf && rm nomf/manifest.json
expect_fail nomf "ckpt 'nomf': not a checkpoint (no manifest.json"
mkdir -p cm && cp -r r/checkpoints/step-00000006 cm/step-00000006 && rm cm/step-00000006/manifest.json
expect_fail cm/step-00000006 "ckpt 'cm/step-00000006': no manifest.json"
expect_fail cm "ckpt 'cm': not a checkpoint"
# a manifest that describes another model (3 layers) than its tensors (2)
cp -r r/checkpoints/step-00000006 other
sed -i 's/"num_layers":2/"num_layers":3/; s/num_layers: 2/num_layers: 3/' other/manifest.json
expect_fail other "ckpt 'other/manifest.json': parameter 'h.2."
# the YAML and the manifest's model disagree
cp -r r/checkpoints/step-00000006 mixed
sed -i 's/num_layers: 2/num_layers: 3/' mixed/manifest.json
expect_fail mixed "ckpt 'mixed/manifest.json': model.num_layers is 2 in \"model\" but 3 in \"config\""
expect_fail nothing-here "nothing-here"
echo "bad checkpoints: one error line each"

# what crashed exports and imports left (note [stale-tmp]) goes at the next one
mkdir -p left.sharc-tmp-4242 && touch left.sharc-tmp-4242/config.json left.sharc-tmp-4242/model.safetensors.tmp.4242
export_ok r left
[ ! -e left.sharc-tmp-4242 ] || die "a crashed export's directory survived the next export"
head -c 100000 /dev/zero > imported.safetensors.tmp.4242
"$S" import --hf left --out imported.safetensors >/dev/null 2>&1 || die "import"
[ ! -e imported.safetensors.tmp.4242 ] || die "a crashed import's file survived the next import"
echo "leftovers of crashed exports and imports removed"
echo ok
