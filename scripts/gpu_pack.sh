#!/usr/bin/env bash
# gpu_pack.sh [BUILD_DIR] [OUT]: builds sharc here (Debian, nvcc found) and
# packs what the GPU test machine needs to run tests/gpu/run.sh, into OUT
# (default BUILD_DIR/sharc-gpu.tar.gz). That machine (Ubuntu, newer glibc,
# CUDA 13 driver and toolkit) has no Open MPI, OpenBLAS, oneDNN, libyaml or
# json-c, so every shared library `ldd` lists for the binaries travels with
# them (the C++ runtime, zlib and udev only as a fallback), plus the ones sharc dlopens (OpenBLAS's OpenMP build; oneDNN with
# PACK_ONEDNN=1) and their own dependencies; glibc's own libraries stay behind
# (the newer glibc there runs binaries built against this older one).
# cuBLASLt (540 MB) is not packed: sharc loads libcublasLt.so.13 from
# LD_LIBRARY_PATH or /usr/local/cuda/lib64 (SHARC_CUBLASLT_LIB names another);
# PACK_CUBLASLT=1 packs it too. The CUDA runtime is linked in statically.
# Unpacked: sharc-gpu/bin/{sharc,gpu_kernels} are wrappers that set
# LD_LIBRARY_PATH and SHARC_BLAS_LIB; sharc-gpu/run-gpu-tests.sh runs the suite.
# Not yet packed: Open MPI's tree for mpirun (multi-rank GPU runs, later work).
set -euo pipefail
build=${1:-build}
out=${2:-$build/sharc-gpu.tar.gz}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "${SKIP_BUILD:-0}" = 1 ] || nice make -j"$(nproc)" BUILD="$build"
[ -x "$build/gpu_kernels" ] || { echo "gpu_pack: $build/gpu_kernels was not built (is nvcc under CUDA_HOME?)"; exit 1; }

stage=$build/gpu-pack
rm -rf "$stage"
mkdir -p "$stage/sharc-gpu/bin" "$stage/sharc-gpu/libexec" "$stage/sharc-gpu/lib" "$stage/sharc-gpu/tests/gpu"
p=$stage/sharc-gpu
bins=(sharc gpu_kernels gpu_model sharc_tests)
for b in "${bins[@]}"; do cp "$build/$b" "$p/libexec/"; done
cp tests/gpu/run.sh "$p/tests/gpu/"

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
if [ "${PACK_CUBLASLT:-0}" = 1 ]; then cp -L "${CUDA_HOME:-/usr/local/cuda}/lib64/libcublasLt.so.13" "$p/lib/"; fi

for b in "${bins[@]}"; do
  cat > "$p/bin/$b" <<WRAP
#!/usr/bin/env bash
# wrapper made by scripts/gpu_pack.sh: the packed libraries, then the real binary
here=\$(cd "\$(dirname "\$0")/.." && pwd)
libs="\$here/lib"
for f in "\$here"/lib/fallback/*; do # the target's own, unless it has none
  ldconfig -p 2>/dev/null | grep -qF "\$(basename "\$f") " || { libs="\$libs:\$here/lib/fallback"; break; }
done
export LD_LIBRARY_PATH="\$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}:/usr/local/cuda/lib64"
export SHARC_BLAS_LIB="\${SHARC_BLAS_LIB:-\$here/lib/libopenblas.so.0}"
exec "\$here/libexec/$b" "\$@"
WRAP
  chmod +x "$p/bin/$b"
done
cat > "$p/run-gpu-tests.sh" <<'RUN'
#!/usr/bin/env bash
# the GPU suite with the packed binaries: prints "N passed, N failed"
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/tests/gpu/run.sh" "$here/bin"
RUN
chmod +x "$p/run-gpu-tests.sh"
git -C "$root" rev-parse HEAD > "$p/COMMIT" 2>/dev/null || true
tar -C "$stage" -czf "$out" sharc-gpu
echo "gpu_pack: $out ($(du -h "$out" | cut -f1)): $(ls "$p/lib" | wc -l) libraries; unpack, then sharc-gpu/run-gpu-tests.sh"
