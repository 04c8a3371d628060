#!/usr/bin/env bash
# timeout: 90
# SHARC_PROFILE=1's table (note [prof] in docs/ARCHITECTURE.md), on the CPU
# (host clock) and on the CUDA simulator (device events; skipped parts when
# the simulator is not built), for a tiny GPT-2 and a tiny Llama, 3 steps (the
# first left out):
#  - the report parses: a "# sharc profile: 2 step(s)" line, a ceilings line,
#    11 columns per region row, "(outside regions)" and "(step)" rows;
#  - the matmul regions' FLOPs per step (fwd/bwd.matmul.*, head.*) add up to
#    6 x (the model's matmul weights) x (tokens per step), computed here from
#    the shape: each weight matrix does 2 FLOPs per token forward and 4
#    backward (dx and dw), the LM head included, so the sum must match to the
#    table's 6 printed digits; attention's FLOPs are the causal half of
#    4 B NH T^2 hd per layer forward, 2.5x that backward;
#  - each fwd.matmul.* region is called once per layer per step;
#  - every region's exclusive and inclusive time >= 0, and the regions'
#    exclusive times add up to no more than the step ("(outside regions)"
#    >= 0): the device events on the model's stream bracket them, as the host
#    clock does on the CPU;
#  - on the CPU the fused head region (head.lm_xent) nests the CPU kernel's
#    own regions: its inclusive time = its exclusive time + theirs.
set -uo pipefail
source "$SHARC_ROOT/tests/cli/timeout_lib.inc" # inner timeouts follow --timeout-scale
cd "$TMPDIR" || exit 1
die() { echo "FAIL: $*"; exit 1; }
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13))"; done > text.txt
B=2 T=16 L=2 C=32 NH=2 V=256
M="--data.path=text.txt --model.num_layers=$L --model.embed_dim=$C --model.num_heads=$NH --model.max_seq_len=$T
   --train.seq_len=$T --train.batch_size=$B --train.max_steps=3 --train.threads=1"
LLAMA="--model.family=llama --model.num_kv_heads=1 --model.tie_embeddings=false --model.ff_hidden_dim=48"

# matmul weights: GPT-2 qkv 3C^2, out C^2, fc and proj 4C^2 each; the tied head V C
P_gpt2=$((L * 12 * C * C + V * C))
# Llama (hd 16, 1 KV head, SwiGLU 48): qkv C (NH + 2) hd, out C^2, gate+up C 96, down 48 C; the untied head V C
P_llama=$((L * (C * (NH + 2) * (C / NH) + C * C + C * 96 + 48 * C) + V * C))

check() { # name file P: the checks above on one report
  local name=$1 f=$2 P=$3 hd=$((C / NH))
  sed -n '/^# sharc profile/,/^(step)/p' "$f" > "$name.tab"
  grep -q '^# sharc profile: 2 step(s)' "$name.tab" || die "$name: no report of 2 steps: $(tail -5 "$f")"
  grep -q '^# ceilings: matmul ' "$name.tab" || die "$name: no ceilings line"
  awk -v name="$name" -v want=$((6 * P * B * T)) -v L=$L -v att=$((B * NH * T * T * hd * L)) '
    function bad(m) { print "FAIL: " name ": " m; err = 1 }
    /^#/ || /^region/ { next }
    $1 == "(outside" { if ($3 < -0.0015) bad("regions add up to more than the step: outside " $3 " ms"); out = 1; next }
    $1 == "(step)" { next }
    {
      if (NF != 11) bad("row with " NF " columns: " $0)
      if ($2 < -0.0015 || $4 < 0) bad("negative time: " $0)
      self[$1] = $2; incl[$1] = $4; calls[$1] = $5; gf[$1] = $6; rows++
      if ($1 ~ /^(fwd|bwd)\.matmul\./ || $1 ~ /^head\./) mm += $6 * 1e9
    }
    END {
      if (rows < 10) bad("only " rows " region rows")
      if (!out) bad("no (outside regions) row")
      d = mm - want; if (d < 0) d = -d
      if (d > 1e-5 * want) bad(sprintf("matmul FLOPs per step %.0f, want 6 x weights x tokens = %.0f", mm, want))
      for (r in calls) if (r ~ /^fwd\.matmul\./ && calls[r] != L) bad(r " called " calls[r] " times per step, want " L)
      fa = gf["fwd.attention"] * 1e9; ba = gf["bwd.attention"] * 1e9; d = fa - 2 * att; if (d < 0) d = -d
      if (d > 1e-5 * 2 * att) bad(sprintf("fwd.attention %.0f FLOPs, want %.0f", fa, 2 * att))
      d = ba - 5 * att; if (d < 0) d = -d
      if (d > 1e-5 * 5 * att) bad(sprintf("bwd.attention %.0f FLOPs, want %.0f", ba, 5 * att))
      if (name ~ /^cpu/) {
        kids = self["head.logits"] + self["head.xent"] + self["head.dx"] + self["head.dw"]
        d = incl["head.lm_xent"] - self["head.lm_xent"] - kids; if (d < 0) d = -d
        if (!("head.logits" in self) || d > 0.005)
          bad("head.lm_xent: inclusive " incl["head.lm_xent"] " != exclusive " self["head.lm_xent"] " + nested " kids)
      }
      exit err
    }' "$name.tab" || exit 1
  grep -q '^(outside regions)' "$name.tab" || die "$name: no (outside regions) row"
  echo "ok: $name: $(grep -c . "$name.tab") lines"
}

for fam in gpt2 llama; do
  X="" P=$P_gpt2
  [ $fam = llama ] && X="$LLAMA" P=$P_llama
  SHARC_PROFILE=1 timeout 60 "$SHARC_BIN/sharc" train $M $X --train.out_dir=c$fam > c$fam.log 2> c$fam.err ||
    { cat c$fam.err; die "$fam: cpu run"; }
  grep -q "vocab_size: $V" c$fam.log || die "$fam: vocabulary is not $V: $(grep vocab c$fam.log)"
  check cpu-$fam c$fam.err $P
  grep -q 'times from the host clock' c$fam.err || die "$fam: the cpu report does not say host clock"
done

SIM="$SHARC_BIN/sim/sharc"
[ -x "$SIM" ] || { echo "no $SIM: the simulator's half skipped"; exit 0; }
export SHARC_CUBLASLT_LIB="$SHARC_BIN/sim/libcudasim_cublaslt.so"
for fam in gpt2 llama; do
  X="" P=$P_gpt2
  [ $fam = llama ] && X="$LLAMA" P=$P_llama
  SHARC_PROFILE=1 timeout 60 "$SIM" train $M $X --train.device=cuda --train.out_dir=g$fam > g$fam.log 2> g$fam.err ||
    { tail -20 g$fam.err; die "$fam: cuda run"; }
  check sim-$fam g$fam.err $P
  grep -q 'times from device events' g$fam.err || die "$fam: the cuda report is not timed by device events"
  grep -q '^# ceilings: .*GB/s (cuda: 5120-bit bus' g$fam.err || die "$fam: no device bandwidth ceiling"
  grep -q '^warning: profile:' g$fam.err && die "$fam: $(grep 'warning: profile:' g$fam.err)"
done
echo ok
