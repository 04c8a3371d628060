#!/usr/bin/env bash
# timeout: 120
# torchrun-style environments (note [torchrun-env] in src/comm/launch.c):
#  - WORLD_SIZE > 1 without an MPI launcher (what `torchrun --nproc_per_node=2
#    sharc train` gives each process) is refused, exit 2, with a message
#    naming the variables and the mpirun / srun / sharc launch commands, and
#    nothing written; WORLD_SIZE=1 trains alone;
#  - under mpirun the variables may be set, but must equal MPI's: a wrong
#    WORLD_SIZE or a RANK that is not the MPI rank fails every rank (exit 2,
#    no hang); consistent ones train.
set -euo pipefail
source "$SHARC_ROOT/tests/cli/mpi_lib.inc"
S="$SHARC_BIN/sharc"
cd "$TMPDIR"
make_text text.txt
args=(--data.path=text.txt --model.num_layers=1 --model.embed_dim=32 --model.num_heads=2 --model.max_seq_len=16
      --train.seq_len=16 --train.batch_size=2 --train.max_steps=2 --train.threads=1)
expect_refused() { # NAME PATTERN... (the command's output is in NAME.err)
  local name=$1; shift
  for p in "$@"; do grep -q -- "$p" $name.err || { echo "$name: message lacks '$p':"; cat $name.err; exit 1; }; done
}
set +e
WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 timeout 60 "$S" train "${args[@]}" \
    --train.out_dir=tr > tr.out 2> tr.err
rc=$?
set -e
[ $rc = 2 ] || { echo "torchrun-style launch: exit $rc, expected 2"; cat tr.err; exit 1; }
expect_refused tr "WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500" "no MPI launcher" \
    "mpirun -n 2 --hostfile" "srun -n 2" "sharc launch -n 2"
[ $(wc -l < tr.err) = 1 ] || { echo "expected one line:"; cat tr.err; exit 1; }
[ ! -e tr ] || { echo "a refused launch wrote tr/"; exit 1; }
WORLD_SIZE=abc timeout 60 "$S" train "${args[@]}" --train.out_dir=bad 2> bad.err && { echo "WORLD_SIZE=abc accepted"; exit 1; }
expect_refused bad "WORLD_SIZE='abc' is not an integer"
WORLD_SIZE=1 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 timeout 60 "$S" train "${args[@]}" \
    --train.out_dir=one > one.out 2> one.err
[ -f one/model.safetensors ] || { echo "WORLD_SIZE=1 did not train"; cat one.err; exit 1; }

# under mpirun: inconsistent values fail every rank with the reason
set +e
WORLD_SIZE=4 mpi 2 -x WORLD_SIZE "$S" train "${args[@]}" --train.out_dir=m4 > m4.out 2> m4.err
rc=$?
set -e
[ $rc = 2 ] || { echo "WORLD_SIZE=4 under 2 MPI ranks: exit $rc, expected 2"; cat m4.err; exit 1; }
for r in 0 1; do expect_refused m4 "\[rank $r\] error: launch: WORLD_SIZE=4 but MPI started 2 ranks"; done
set +e
mpi 2 -x WORLD_SIZE=2 bash -c 'RANK=$((1 - OMPI_COMM_WORLD_RANK)) exec "$0" "$@"' "$S" train "${args[@]}" \
    --train.out_dir=swap > swap.out 2> swap.err
rc=$?
set -e
[ $rc = 2 ] || { echo "swapped RANK: exit $rc, expected 2"; cat swap.err; exit 1; }
expect_refused swap "\[rank 0\] error: launch: RANK=1 but this is MPI rank 0 of 2" \
    "\[rank 1\] error: launch: RANK=0 but this is MPI rank 1 of 2"
[ ! -e m4 ] && [ ! -e swap ] || { echo "a refused launch wrote files"; exit 1; }
# consistent values (a cluster script exporting them from the launcher's own) train
mpi 2 -x WORLD_SIZE=2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 bash -c 'RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"' \
    "$S" train "${args[@]}" --train.out_dir=ok > ok.out 2> ok.err
[ -f ok/model.safetensors ] || { echo "consistent WORLD_SIZE/RANK did not train"; cat ok.err; exit 1; }
echo "torchrun-style environments: refused without MPI, checked against MPI under it"
