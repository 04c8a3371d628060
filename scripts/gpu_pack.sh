#!/usr/bin/env bash
# gpu_pack.sh [BUILD_DIR] [OUT]: builds sharc here (Debian, nvcc found) and
# packs what the GPU test machine needs to run tests/gpu/run.sh, bench/gpu.sh
# and multi-rank runs, into OUT (default BUILD_DIR/sharc-gpu.tar.gz). That
# machine (Ubuntu, newer glibc, CUDA 13 driver and toolkit) has no Open MPI,
# OpenBLAS, oneDNN, libyaml or json-c, so every shared library `ldd` lists for
# the binaries travels with them (the C++ runtime, zlib and udev only as a
# fallback), plus the ones sharc dlopens (OpenBLAS's OpenMP build; oneDNN with
# PACK_ONEDNN=1) and their own dependencies; glibc's own libraries stay behind
# (the newer glibc there runs binaries built against this older one).
# cuBLASLt (540 MB) is not packed: sharc loads libcublasLt.so.13 from
# LD_LIBRARY_PATH or /usr/local/cuda/lib64 (SHARC_CUBLASLT_LIB names another);
# PACK_CUBLASLT=1 packs it too. The CUDA runtime is linked in statically.
# NCCL (libnccl.so.2, ~200 MB, barely compressible) is not packed either:
# tests/gpu/run.sh finds the target's (SHARC_NCCL_LIB, the loader's path,
# /usr/local/cuda/lib64, or PyTorch's nvidia-nccl wheel); PACK_NCCL=1 packs
# CUDA_HOME/lib64's into lib/. The PyTorch fixtures
# (tests/fixtures/*_train.safetensors) travel for run.sh.
# Open MPI's whole tree travels too (note [gpu-pack-mpi] below): orterun,
# orted and ompi_info, every MCA component with its libraries, the help
# files and parameter files, and PMIx's components and help files.
# Unpacked: sharc-gpu/bin/{sharc,gpu_kernels,...} are wrappers that set
# LD_LIBRARY_PATH, SHARC_BLAS_LIB and Open MPI's relocation variables;
# sharc-gpu/mpirun (also bin/mpirun) is Open MPI's mpirun with
# --allow-run-as-root --oversubscribe; sharc-gpu/run-gpu-tests.sh runs the
# GPU suite and sharc-gpu/bench-gpu.sh the GPU bench (bench/gpu.sh).
# SKIP_BUILD=1 packs what BUILD_DIR holds; PACK_STAGE names the staging folder
# (default BUILD_DIR/gpu-pack, emptied first).
set -euo pipefail
build=${1:-build}
out=${2:-$build/sharc-gpu.tar.gz}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "${SKIP_BUILD:-0}" = 1 ] || nice make -j"$(nproc)" BUILD="$build"
[ -x "$build/gpu_kernels" ] || { echo "gpu_pack: $build/gpu_kernels was not built (is nvcc under CUDA_HOME?)"; exit 1; }

stage=${PACK_STAGE:-$build/gpu-pack}
rm -rf "$stage"
mkdir -p "$stage/sharc-gpu/bin" "$stage/sharc-gpu/libexec" "$stage/sharc-gpu/lib" "$stage/sharc-gpu/tests/gpu" \
  "$stage/sharc-gpu/tests/fixtures" "$stage/sharc-gpu/bench"
p=$stage/sharc-gpu
bins=(sharc gpu_kernels gpu_model sharc_tests)
for b in "${bins[@]}"; do cp "$build/$b" "$p/libexec/"; done
cp tests/gpu/run.sh "$p/tests/gpu/"
cp tests/fixtures/gpt2_train.safetensors tests/fixtures/llama_train.safetensors "$p/tests/fixtures/"
cp bench/gpu.sh bench/torch_gpu.py "$p/bench/"

# glibc and the loader: the target's own. The base system's C++ runtime,
# zlib and udev go to lib/fallback, used only where the target lacks them
# (its newer ones must win: cuBLASLt, loaded from the target, needs its libstdc++).
skip='^(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|ld-linux-x86-64|linux-vdso)\.so'
fallback='^(libstdc\+\+|libgcc_s|libz|libudev)\.so'
mkdir -p "$p/lib/fallback"
copy_deps() { # FILE...: each file's ldd list into lib/ (or lib/fallback)
  ldd "$@" 2>/dev/null | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    base=$(basename "$lib")
    [[ $base =~ $skip ]] && continue
    dir=$p/lib
    [[ $base =~ $fallback ]] && dir=$p/lib/fallback
    [ -e "$dir/$base" ] || cp -L "$lib" "$dir/$base"
  done
}
copy_deps "$p"/libexec/*
# dlopen'ed: OpenBLAS (OpenMP build) as libopenblas.so.0, oneDNN when present
ma=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
blas=/usr/lib/$ma/openblas-openmp/libopenblas.so.0
[ -e "$blas" ] || { echo "gpu_pack: $blas missing (apt-get install libopenblas0-openmp)"; exit 1; }
cp -L "$blas" "$p/lib/libopenblas.so.0"
extra=("$blas")
# oneDNN only on request (PACK_ONEDNN=1): large, and the CPU reference of the GPU tests needs only OpenBLAS
if [ "${PACK_ONEDNN:-0}" = 1 ]; then cp -L "/usr/lib/$ma/libdnnl.so.2" "$p/lib/" && extra+=("/usr/lib/$ma/libdnnl.so.2"); fi
copy_deps "${extra[@]}"
if [ "${PACK_NCCL:-0}" = 1 ]; then
  nccl=${CUDA_HOME:-/usr/local/cuda}/lib64/libnccl.so.2
  [ -e "$nccl" ] || { echo "gpu_pack: $nccl missing (PACK_NCCL=1: NCCL for SHARC_COMM=nccl)"; exit 1; }
  cp -L "$nccl" "$p/lib/"
fi
if [ "${PACK_CUBLASLT:-0}" = 1 ]; then cp -L "${CUDA_HOME:-/usr/local/cuda}/lib64/libcublasLt.so.13" "$p/lib/"; fi

# Note [gpu-pack-mpi]: Open MPI's tree, relocated. Open MPI 4.1 finds its MCA
# components, help files and parameter file through its install directories,
# which OPAL_<DIR> variables override one by one (OPAL_PREFIX alone is not
# enough on Debian: its sysconfdir is the absolute /etc/openmpi). Its PMIx
# (Debian's libpmix2, external) has install directories of its own, read the
# same way from PMIX_<DIR>, and a parameter file that names its component
# folder by absolute path, so PMIX_MCA_mca_base_component_path overrides it.
# Packed under sharc-gpu/openmpi: bin/ (orterun, orted: a singleton MPI_Init
# starts one; ompi_info), lib/openmpi3/ (every component; their libraries go
# to sharc-gpu/lib with the rest), share/openmpi/ (help files), etc/ (the
# parameter file and default hostfile); pmix/lib/pmix/, pmix/share/pmix/.
# sharc-gpu/openmpi/env.sh sets all of it, PATH and LD_LIBRARY_PATH.
command -v ompi_info > /dev/null || { echo "gpu_pack: ompi_info missing (apt-get install openmpi-bin)"; exit 1; }
ompi_path() { ompi_info --parsable --path "$1" | awk -F: -v k="$1" '$2 == k {print $3; exit}'; }
o=$p/openmpi
mkdir -p "$o/bin" "$o/lib/openmpi3" "$o/share/openmpi" "$o/etc" "$o/pmix/lib/pmix" "$o/pmix/share/pmix"
ompi_bindir=$(ompi_path bindir)
for b in orterun orted ompi_info; do
  [ -x "$ompi_bindir/$b" ] || { echo "gpu_pack: $ompi_bindir/$b missing (Open MPI's binaries)"; exit 1; }
  cp -L "$ompi_bindir/$b" "$o/bin/"
done
cp -L "$(ompi_path pkglibdir)"/*.so "$o/lib/openmpi3/"
cp -rL "$(ompi_path pkgdatadir)"/. "$o/share/openmpi/"
cp -L "$(ompi_path sysconfdir)"/* "$o/etc/"
pmix_lib=$(ldd "$o/lib/openmpi3/mca_pmix_ext3x.so" 2>/dev/null | awk '/libpmix\.so/ {print $3}')
[ -n "$pmix_lib" ] || { echo "gpu_pack: no libpmix behind Open MPI's mca_pmix_ext3x.so (apt-get install libpmix2)"; exit 1; }
pmix_root=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")") # Debian: /usr/lib/<multiarch>/pmix2
if [ ! -d "$pmix_root/lib/pmix" ] || [ ! -d "$pmix_root/share/pmix" ]; then
  echo "gpu_pack: PMIx's components or help files not under $pmix_root"; exit 1
fi
cp -L "$pmix_root"/lib/pmix/*.so "$o/pmix/lib/pmix/"
cp -L "$pmix_root"/share/pmix/* "$o/pmix/share/pmix/"
grep -v '^mca_base_component_path' "$pmix_root/share/pmix-mca-params.conf" > "$o/pmix/share/pmix-mca-params.conf"
# their libraries (the Java binding's JVM is not found, and not wanted)
copy_deps "$o"/bin/* "$o"/lib/openmpi3/*.so "$o"/pmix/lib/pmix/*.so
cat > "$o/env.sh" <<'ENV'
# sourced by sharc-gpu's wrappers (made by scripts/gpu_pack.sh, note
# [gpu-pack-mpi]): Open MPI and PMIx relocated to this folder, their binaries
# on PATH, the packed libraries on LD_LIBRARY_PATH
o=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
here=$(dirname "$o")
export OPAL_PREFIX="$o" OPAL_EXEC_PREFIX="$o" OPAL_BINDIR="$o/bin" OPAL_LIBDIR="$here/lib" \
  OPAL_PKGLIBDIR="$o/lib/openmpi3" OPAL_DATAROOTDIR="$o/share" OPAL_DATADIR="$o/share" \
  OPAL_PKGDATADIR="$o/share/openmpi" OPAL_SYSCONFDIR="$o/etc"
export PMIX_PREFIX="$o/pmix" PMIX_EXEC_PREFIX="$o/pmix" PMIX_LIBDIR="$o/pmix/lib" \
  PMIX_PKGLIBDIR="$o/pmix/lib/pmix" PMIX_DATAROOTDIR="$o/pmix/share" PMIX_DATADIR="$o/pmix/share" \
  PMIX_PKGDATADIR="$o/pmix/share/pmix" PMIX_SYSCONFDIR="$o/pmix/share" \
  PMIX_MCA_mca_base_component_path="$o/pmix/lib/pmix"
libs="$here/lib"
for f in "$here"/lib/fallback/*; do # the target's own, unless it has none
  ldconfig -p 2> /dev/null | grep -qF "$(basename "$f") " || { libs="$libs:$here/lib/fallback"; break; }
done
case ":${LD_LIBRARY_PATH:-}:" in
  *":$libs:"*) ;;
  *) export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64" ;;
esac
case ":$PATH:" in
  *":$here/bin:"*) ;;
  *) export PATH="$here/bin:$o/bin:$PATH" ;;
esac
export SHARC_BLAS_LIB="${SHARC_BLAS_LIB:-$here/lib/libopenblas.so.0}"
ENV

for b in "${bins[@]}"; do
  cat > "$p/bin/$b" <<WRAP
#!/usr/bin/env bash
# wrapper made by scripts/gpu_pack.sh: the packed libraries and Open MPI, then the real binary
here=\$(cd "\$(dirname "\$0")/.." && pwd)
source "\$here/openmpi/env.sh"
exec "\$here/libexec/$b" "\$@"
WRAP
  chmod +x "$p/bin/$b"
done
cat > "$p/bin/mpirun" <<'WRAP'
#!/usr/bin/env bash
# wrapper made by scripts/gpu_pack.sh: the packed Open MPI's mpirun (orterun),
# allowed to run as root (the GPU machine's user) and more ranks than cores
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/openmpi/env.sh"
exec "$here/openmpi/bin/orterun" --allow-run-as-root --oversubscribe "$@"
WRAP
cat > "$p/mpirun" <<'WRAP'
#!/usr/bin/env bash
# the packed mpirun (bin/mpirun)
exec "$(dirname "$0")/bin/mpirun" "$@"
WRAP
chmod +x "$p/bin/mpirun" "$p/mpirun"
cat > "$p/run-gpu-tests.sh" <<'RUN'
#!/usr/bin/env bash
# the GPU suite with the packed binaries: prints "N passed, N failed"; the
# packed Open MPI first on PATH (its mpirun runs the 2-rank check)
here=$(cd "$(dirname "$0")" && pwd)
source "$here/openmpi/env.sh"
exec "$here/tests/gpu/run.sh" "$here/bin"
RUN
cat > "$p/bench-gpu.sh" <<'RUN'
#!/usr/bin/env bash
# the GPU bench (bench/gpu.sh) with the packed binaries: a table, and JSON under $OUT when set
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/bench/gpu.sh" "$here/bin" "$@"
RUN
chmod +x "$p/run-gpu-tests.sh" "$p/bench-gpu.sh"
git -C "$root" rev-parse HEAD > "$p/COMMIT" 2>/dev/null || true
tar -C "$stage" -czf "$out" sharc-gpu
echo "gpu_pack: $out ($(du -h "$out" | cut -f1)): $(find "$p/lib" -name '*.so*' | wc -l) libraries, $(find "$o/lib/openmpi3" -name '*.so' | wc -l) Open MPI components; unpack, then sharc-gpu/run-gpu-tests.sh, sharc-gpu/bench-gpu.sh, sharc-gpu/mpirun"
