#!/usr/bin/env bash
# timeout: 200
# Checkpoints across hosts (note [ckpt-node-local] in src/ckpt/ckpt.c):
#  - 2 hosts x 2 ranks, FULL_SHARD, saved to a shared directory and to a
#    node-local one (the same path, each host's own disk): each host's
#    directory holds the manifest and exactly the files its ranks wrote, and
#    together they are byte for byte the shared save;
#  - the node-local save resumes in place at the same placement (each rank
#    reads its own host's file) and, gathered into one directory, at another
#    host count (1 host x 3, 3 hosts x 1, one process) and strategy: every
#    value exactly as saved (against a gather made by the saving run), then
#    3 more steps against a one-process run of all 6 (note [parity-tolerance]);
#  - HYBRID_SHARD 2x2 writes from host 0 only (replicas write nothing): a
#    resume in place fails on every rank with the missing file named, no
#    hang; gathered, it resumes on 3 hosts.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
source "$SHARC_ROOT/scripts/hosts.sh"
hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 77; }
cd "$TMPDIR"
make_text text.txt
T="$SHARC_BIN/mpi_tests"
hosts_up 3
D=$HOSTS_DIR
run() { # SLOTS N args...
  local slots=$1 n=$2; shift 2
  local out
  if ! out=$(HOSTS_TIMEOUT=100 hosts_mpirun $slots -n $n "$T" "$@" 2>&1); then
    echo "FAILED at $n ranks, $slots per host: $*"; echo "$out" | grep -v '^ok' | head -20; exit 1
  fi
  grep '^resumed at' <<< "$out" | sed "s|\$| [$n ranks, $slots per host: $*]|" || true
}
b="train.batch_size=1"
step=step-00000003
run 2 4 ckpt_save shared ref_s.st text.txt $b train.grad_accum=3
run 2 4 ckpt_save "$HOSTS_LOCAL/ck" ref_l.st text.txt $b train.grad_accum=3
cmp ref_s.st ref_l.st
# each host holds the manifest and its own ranks' files
[ "$(cd $D/disk-node0/ck/$step && ls | tr '\n' ' ')" = "manifest.json shard-00000-of-00004.bin shard-00001-of-00004.bin " ] ||
  { echo "node0 holds: $(ls $D/disk-node0/ck/$step)"; exit 1; }
[ "$(cd $D/disk-node1/ck/$step && ls | tr '\n' ' ')" = "manifest.json shard-00002-of-00004.bin shard-00003-of-00004.bin " ] ||
  { echo "node1 holds: $(ls $D/disk-node1/ck/$step)"; exit 1; }
[ ! -e $D/disk-node2/ck ] || { echo "node2 (not in the job) got files"; exit 1; }
[ "$(cat $D/disk-node1/ck/latest)" = $step ] || { echo "node1's latest: $(cat $D/disk-node1/ck/latest)"; exit 1; }
cmp $D/disk-node0/ck/$step/manifest.json $D/disk-node1/ck/$step/manifest.json
diff <(grep -v '"config"' shared/$step/manifest.json) <(grep -v '"config"' $D/disk-node0/ck/$step/manifest.json)
for i in 0 1 2 3; do cmp shared/$step/shard-0000$i-of-00004.bin $D/disk-node$((i / 2))/ck/$step/shard-0000$i-of-00004.bin; done
# in place, same placement: every rank reads its own host's file
run 2 4 ckpt_load "$HOSTS_LOCAL/ck" ref_l.st text.txt $b train.grad_accum=3
# gathered into one directory: another host count
mkdir -p union && cp -r $D/disk-node0/ck/$step union/ && cp $D/disk-node1/ck/$step/shard-* union/$step/
run 3 3 ckpt_load union ref_l.st text.txt $b train.grad_accum=4
run 1 3 ckpt_load union ref_l.st text.txt $b train.grad_accum=4 fsdp.sharding_strategy=NO_SHARD
run 1 1 ckpt_load union/$step ref_l.st text.txt $b train.grad_accum=12
run 1 3 ckpt_load shared ref_s.st text.txt $b train.grad_accum=4 fsdp.sharding_strategy=SHARD_GRAD_OP

# HYBRID_SHARD 2x2: replicate group 0 (host 0) writes every file
rm -rf $D/disk-node*/hy
run 2 4 ckpt_save "$HOSTS_LOCAL/hy" ref_h.st text.txt $b train.grad_accum=3 fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2
[ "$(cd $D/disk-node1/hy/$step && ls | tr '\n' ' ')" = "manifest.json " ] || { echo "node1 holds: $(ls $D/disk-node1/hy/$step)"; exit 1; }
set +e
out=$(HOSTS_TIMEOUT=60 hosts_mpirun 2 -n 4 "$T" ckpt_load "$HOSTS_LOCAL/hy" ref_h.st text.txt $b train.grad_accum=3 \
      fsdp.sharding_strategy=HYBRID_SHARD fsdp.fsdp_size=2 2>&1)
rc=$?
set -e
[ $rc != 0 ] && [ $rc != 124 ] || { echo "in-place HYBRID resume: exit $rc (expected a failure, not a hang)"; exit 1; }
grep -q "hy/$step/shard-00000-of-00002.bin': cannot open shard file" <<< "$out" ||
  { echo "the missing file is not named:"; echo "$out" | head; exit 1; }
mkdir -p hunion && cp -r $D/disk-node0/hy/$step hunion/
run 1 3 ckpt_load hunion ref_h.st text.txt $b train.grad_accum=4
echo "checkpoints across hosts: shared and node-local saves, resumed in place and at other host counts"
