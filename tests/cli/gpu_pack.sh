#!/usr/bin/env bash
# timeout: 120
# scripts/gpu_pack.sh's tarball runs where no Open MPI, OpenBLAS, libyaml or
# json-c is installed (the GPU machine): packed from this build, unpacked in
# a temp folder, then in a mount namespace where every file of the system's
# Open MPI, PMIx, OpenBLAS, libyaml and json-c packages, and the system copy
# of every library the tarball carries, reads as /dev/null (so a missing
# piece fails to load instead of coming from the system), under `env -i`, the
# packed sharc-gpu/mpirun runs a 2-rank `sharc train` of a tiny model. Its
# weights must equal, byte for byte, those of the same run with this build
# and the system's mpirun (OpenBLAS for every product, as the tarball has no
# oneDNN), and its log must show 2 ranks. A 1-process run of the packed sharc
# (MPI singleton) must train too. The tarball holds the GPU suite
# (run-gpu-tests.sh, tests/gpu/run.sh and the PyTorch fixtures it reads).
# Skipped without a CUDA build (nvcc) or
# without mount namespaces (unshare -m).
set -uo pipefail
source "$SHARC_ROOT/tests/cli/timeout_lib.inc" # inner timeouts follow --timeout-scale
cd "$TMPDIR" || exit 1
fail() { echo "$*"; exit 1; }
bin=$(cd "$SHARC_BIN" && pwd)
[ -x "$bin/gpu_kernels" ] || { echo "no CUDA build ($bin/gpu_kernels: nvcc not found at build time)"; exit 77; }
unshare -m true 2> /dev/null || { echo "unshare -m is not allowed here: the system's Open MPI cannot be hidden"; exit 77; }
ma=$(gcc -print-multiarch 2> /dev/null || echo x86_64-linux-gnu)

out=$(SKIP_BUILD=1 PACK_STAGE="$TMPDIR/stage" "$SHARC_ROOT/scripts/gpu_pack.sh" "$bin" "$TMPDIR/p.tar.gz" 2>&1) || fail "gpu_pack.sh: $out"
echo "$out"
rm -rf "$TMPDIR/stage"
mkdir un || exit 1
tar -C un -xzf p.tar.gz || fail "cannot unpack p.tar.gz"
p=$TMPDIR/un/sharc-gpu
for f in mpirun bin/mpirun bin/sharc openmpi/bin/orterun openmpi/bin/orted openmpi/env.sh \
  openmpi/lib/openmpi3/mca_pml_ob1.so openmpi/share/openmpi/help-mpi-runtime.txt \
  openmpi/etc/openmpi-mca-params.conf openmpi/pmix/lib/pmix bench-gpu.sh bench/gpu.sh bench/torch_gpu.py \
  run-gpu-tests.sh tests/gpu/run.sh tests/fixtures/gpt2_train.safetensors tests/fixtures/llama_train.safetensors; do
  [ -e "$p/$f" ] || fail "sharc-gpu/$f is not in the tarball"
done

printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..200} > t.txt
args=(train --data.path=../t.txt --train.out_dir=run --train.max_steps=3 --model.num_layers=1 --model.embed_dim=32
  --model.num_heads=2 --model.num_kv_heads=2 --model.ff_hidden_dim=64 --train.seq_len=16 --train.batch_size=2)
mkdir ref packed single
# the reference: this build, the system's Open MPI
(cd ref && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SHARC_GEMM=openblas \
  SHARC_BLAS_LIB="/usr/lib/$ma/openblas-openmp/libopenblas.so.0" \
  timeout 60 mpirun --oversubscribe --bind-to none -n 2 "$bin/sharc" "${args[@]}" > log 2>&1) || fail "reference run: $(tail -5 ref/log)"

cat > hidden.sh << 'EOF'
# runs inside `unshare -m`: the system's copies hidden, then the packed runs
set -u
p=$1 ma=$2; shift 2
empty=$(mktemp -d)
for d in "/usr/lib/$ma/openmpi" "/usr/lib/$ma/pmix2" /usr/share/openmpi /etc/openmpi; do
  [ -d "$d" ] && { mount --bind "$empty" "$d" || exit 3; }
done
n=0
hide() { local f; f=$(readlink -f "$1"); [ -f "$f" ] || return 0; mount --bind /dev/null "$f" || exit 3; n=$((n + 1)); }
while read -r f; do
  case $f in /usr/share/doc/* | /usr/share/man/*) continue ;; esac
  hide "$f"
done < <(dpkg -L openmpi-bin libopenmpi3 libpmix2 libopenblas0-openmp libopenblas0-pthread libyaml-0-2 libjson-c5 2> /dev/null)
for f in "$p"/lib/*.so*; do hide "/usr/lib/$ma/$(basename "$f")"; done
echo "hidden: $n files"
if /usr/bin/mpirun --version > /dev/null 2>&1; then echo "the system's mpirun still runs"; exit 3; fi
(cd packed && env -i PATH=/usr/bin HOME="$HOME" timeout 60 "$p/mpirun" --bind-to none -n 2 "$p/bin/sharc" "$@" > log 2>&1) || { echo "packed 2-rank run failed:"; tail -20 packed/log; exit 1; }
(cd single && env -i PATH=/usr/bin HOME="$HOME" timeout 60 "$p/bin/sharc" "$@" > log 2>&1) || { echo "packed 1-process run failed:"; tail -20 single/log; exit 1; }
EOF
out=$(timeout 90 unshare -m --propagation private bash hidden.sh "$p" "$ma" "${args[@]}" 2>&1) || fail "$out"
echo "$out"
grep -q '^hidden: [1-9][0-9]* files' <<< "$out" || fail "nothing was hidden: $out"
grep -q '"world_size": 2' packed/run/metrics.jsonl || fail "the packed run did not see 2 ranks: $(tail -3 packed/log)"
cmp ref/run/model.safetensors packed/run/model.safetensors || fail "packed 2-rank weights differ from the system Open MPI's"
[ -s single/run/model.safetensors ] || fail "the packed 1-process run wrote no weights"
grep -q '"world_size": 1' single/run/metrics.jsonl || fail "the packed 1-process run: $(tail -3 single/log)"
echo "ok: packed mpirun, 2 ranks, weights identical to the system Open MPI's run"
