#!/usr/bin/env bash
# timeout: 120
# The house style: every tracked C, C++, header and CUDA file is as clang-format
# (.clang-format at the root, Debian's clang-format 14) leaves it. To fix a
# failure: `make format`.
set -euo pipefail
cd "$SHARC_ROOT"
command -v clang-format >/dev/null || { echo "clang-format is missing: scripts/deps.sh test installs it"; exit 1; }
if ! git rev-parse --git-dir >/dev/null 2>&1; then echo "not a git checkout: nothing to list"; exit 1; fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cpp')
[ "${#files[@]}" -gt 50 ] || { echo "only ${#files[@]} C files listed"; exit 1; }
bad=()
for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
    echo "not in the house style (run make format): ${bad[*]}"
    exit 1
fi
echo "ok: ${#files[@]} files"
