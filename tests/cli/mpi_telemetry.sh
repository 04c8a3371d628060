#!/usr/bin/env bash
# timeout: 120
# Telemetry: the metrics line of a 2-rank run carries the aggregates of the
# ranks' own debug lines (sums, maxima, the slowest rank), the collective
# bytes the strategy's theory gives, MFU against the given peak; plain lines
# when stdout is not a terminal, a progress bar with ETA when it is.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
make_text text.txt
L=2; C=64
common=(--model.num_layers=$L --model.embed_dim=$C --model.num_heads=4 --model.max_seq_len=32
        --data.path=text.txt --train.seq_len=32 --train.batch_size=2 --train.max_steps=3
        --train.log_every=1 --log.debug=true --log.peak_tflops=0.1 --train.threads=1)

# SHARC_COMM_SHM=0: MPI collectives, whose bytes follow the theory below; with
# shared memory FULL_SHARD reads parameters in place (note [shared-params] in
# src/fsdp/shm.c): no all-gather bytes, the rest unchanged
for run in FULL_SHARD:0 NO_SHARD:0 FULL_SHARD:1; do
  strat=${run%:*} shm=${run#*:}
  SHARC_COMM_SHM=$shm mpi 2 "$S" train "${common[@]}" --fsdp.sharding_strategy=$strat --train.out_dir=run_${strat}$shm > out_${strat}$shm.txt 2> err_${strat}$shm.txt
  P=$(sed -n 's/.*gpt2, \([0-9]*\) parameters.*/\1/p' err_${strat}$shm.txt)
  # bytes each rank hands to the collectives per step (src/comm/comm.c counts the send buffer):
  #   FULL_SHARD: forward all-gathers every unit's shard (P/2 x 4 bytes), backward gathers
  #   the blocks' shards again (root units stay gathered); reduce-scatter hands in every full
  #   gradient (P x 4); all-reduce: the valid-target count (8) and [grad sumsq, loss] (16).
  #   NO_SHARD: one all-reduce of every gradient (P x 4) plus the same 24 bytes.
  Pb=$((L * (12 * C * C + 13 * C)))
  if [ $strat = FULL_SHARD ]; then ag=$(((P + Pb) * 4 / 2)); rs=$((P * 4)); ar=24
  else ag=0; rs=0; ar=$((P * 4 + 24)); fi
  if [ $shm = 1 ]; then ag=0; fi
  echo "$strat: P=$P expect all_gather $ag reduce_scatter $rs all_reduce $ar per rank"
  jq -n -e --arg host "$(hostname)" --slurpfile m run_${strat}$shm/metrics.jsonl --slurpfile r0 run_${strat}$shm/debug/rank-0.log \
        --slurpfile r1 run_${strat}$shm/debug/rank-1.log --argjson ag $ag --argjson rs $rs --argjson ar $ar '
    def close(a; b; tol): ((a - b) | fabs) <= tol * ([(a | fabs), (b | fabs), 1e-12] | max);
    def busy(x): x["time_metrics/end_to_end(s)"] - x["time_metrics/comm_wait(s)"];
    [ range(0; $m | length) as $i | $m[$i] as $g | [$r0[$i], $r1[$i]] as $r |
      { step: $g.step,
        checks: {
          steps_match: ($r[0].step == $g.step and $r[1].step == $g.step),
          avg_loss: close($g["loss_metrics/global_avg_loss"]; ($r[0].loss + $r[1].loss) / 2; 1e-5),
          max_loss: close($g["loss_metrics/global_max_loss"]; ([$r[].loss] | max); 1e-5),
          end_to_end_max: close($g["time_metrics/end_to_end(s)"]; ([$r[]["time_metrics/end_to_end(s)"]] | max); 1e-5),
          # busy times from lines printed to 1e-6 s: each is within 2e-6 of the exact one
          slowest_rank: (busy($r[$g["time_metrics/slowest_rank"]]) >= ([$r[] | busy(.)] | max) - 4e-6),
          slowest_host: ($g["time_metrics/slowest_host"] == $r[$g["time_metrics/slowest_rank"]].host and
                         ([$r[].host] | all(. == $host))),
          slowest_busy: ((($g["time_metrics/slowest_busy(s)"] - ([$r[] | busy(.)] | max)) | fabs) <= 4e-6),
          slowest_ratio: (((([$r[] | busy(.)] | max) / ([$r[] | busy(.)] | min) - $g["time_metrics/slowest_ratio"]) | fabs)
                          <= 1e-4 + $g["time_metrics/slowest_ratio"] * 4e-6 * (1 / ([$r[] | busy(.)] | min) + 1 / ([$r[] | busy(.)] | max))),
          tps_global: close($g["throughput/global(tps)"]; $g.tokens / $g["time_metrics/end_to_end(s)"]; 2e-3),
          tps_per_device: close($g["throughput(tps)"]; $g["throughput/global(tps)"] / 2; 2e-3),
          tps_rank_sum: close($g["throughput/rank_sum(tps)"]; ($r[0]["throughput(tps)"] + $r[1]["throughput(tps)"]); 2e-3),
          global_le_sum: ($g["throughput/global(tps)"] <= $g["throughput/rank_sum(tps)"] * 1.002),
          cpu_max: close($g["time_metrics/cpu(s)"]; ([$r[]["time_metrics/cpu(s)"]] | max); 1e-5),
          tps_cpu: close($g["throughput/cpu(tps)"]; $g.tokens / $g["time_metrics/cpu(s)"]; 2e-3),
          cpu_le_wall: ([$r[] | .["time_metrics/cpu(s)"] <= .["time_metrics/end_to_end(s)"] + 1e-3] | all),
          mfu: close($g["mfu(%)"]; 100 * $g.tflops * 1e12 / (2 * 0.1e12); 1e-4),
          mem_max: close($g["memory/max_active(GiB)"]; ([$r[]["memory/max_active(GiB)"]] | max); 1e-5),
          mem_ge_each: ([$r[] | $g["memory/max_active(GiB)"] >= .["memory/max_active(GiB)"]] | all),
          ag_bytes: ($g["comm/all_gather_bytes"] == $ag and ([$r[]["comm/all_gather_bytes"]] | all(. == $ag))),
          rs_bytes: ($g["comm/reduce_scatter_bytes"] == $rs and ([$r[]["comm/reduce_scatter_bytes"]] | all(. == $rs))),
          ar_bytes: ($g["comm/all_reduce_bytes"] == $ar and ([$r[]["comm/all_reduce_bytes"]] | all(. == $ar))),
          total_bytes: ($g["comm/total_bytes"] == 2 * ($ag + $rs + $ar)),
          fwd_bwd_max: close($g["time_metrics/forward_backward(s)"]; ([$r[]["time_metrics/forward_backward(s)"]] | max); 1e-5),
          fwd_bwd_split: ([$r[] | .["time_metrics/forward(s)"] + .["time_metrics/backward(s)"] <= .["time_metrics/forward_backward(s)"] + 2e-6] | all)
        } } ] as $rows
    | ($rows | map(.checks | to_entries | map(select(.value | not) | .key)) | flatten) as $bad
    | if ($bad | length) == 0 then true else ($rows | tostring | stderr) | false end' > /dev/null \
    || { echo "$strat: telemetry checks failed"; head -c 3000 run_${strat}$shm/metrics.jsonl; exit 1; }
  # not a terminal: plain lines, one per step (log_every 1), no carriage returns
  [ "$(grep -c '^step ' out_${strat}$shm.txt)" -eq 3 ] || { cat out_${strat}$shm.txt; exit 1; }
  ! grep -q $'\r' out_${strat}$shm.txt
done

# a terminal (script(1) gives the command a pseudo-terminal): a bar with ETA, rewritten in place
script -qec "$S train ${common[*]} --train.out_dir=run_tty --log.debug=false" /dev/null > tty.txt 2>&1
grep -q 'ETA' tty.txt && grep -q $'\r\\[' tty.txt || { cat -v tty.txt; exit 1; }
! grep -q '^step ' tty.txt
echo "telemetry ok"
