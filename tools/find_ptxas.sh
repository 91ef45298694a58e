#!/usr/bin/env bash
# Prints the path of the ptxas Omega assembles kernels/*.ptx with, or says on stderr why there is none
# and exits 1. The one lookup every user of ptxas shares: build.rs, tools/gpu/build.sh and
# hal/tests/fixtures/build.sh call it. In order:
#
#   1. $OMEGA_PTXAS, when set: the only candidate.
#   2. ptxas on PATH.
#   3. $CUDA_HOME/bin/ptxas (CUDA_HOME defaults to /usr/local/cuda).
#   4. The nvidia-cuda-nvcc pip wheel, whichever Python installed it: every interpreter that may have
#      (`$OMEGA_PYTHON`, then each python3 and python3.N on PATH, then /usr/bin and /usr/local/bin) is
#      asked where the `nvidia` package is, and nvidia/cu13/bin/ptxas (CUDA 13 wheels) or
#      nvidia/cuda_nvcc/bin/ptxas (CUDA 12 wheels) is looked for there; then the same two paths in the
#      usual site-packages directories (~/.local, pyenv's versions, /usr/local, /usr), for a Python that is
#      no longer on PATH.
#
# A candidate counts only if `ptxas --version` succeeds.
set -uo pipefail
how="set OMEGA_PTXAS, put ptxas on PATH, install CUDA in /usr/local/cuda, or \`python3 -m pip install nvidia-cuda-nvcc==13.0.88\`"

runs() { [ -f "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

if [ -n "${OMEGA_PTXAS:-}" ]; then
    if runs "$OMEGA_PTXAS"; then echo "$OMEGA_PTXAS"; exit 0; fi
    echo "ptxas not found: OMEGA_PTXAS=$OMEGA_PTXAS does not run; $how" >&2
    exit 1
fi

if p="$(command -v ptxas 2>/dev/null)" && runs "$p"; then echo "$p"; exit 0; fi
cuda="${CUDA_HOME:-/usr/local/cuda}/bin/ptxas"
if runs "$cuda"; then echo "$cuda"; exit 0; fi

# Every Python interpreter that may have installed the wheel, each real file once.
interpreters=()
[ -n "${OMEGA_PYTHON:-}" ] && interpreters+=("$OMEGA_PYTHON")
IFS=: read -r -a path_dirs <<<"${PATH:-}"
for dir in "${path_dirs[@]}" /usr/bin /usr/local/bin; do
    for py in "$dir"/python3 "$dir"/python3.[0-9] "$dir"/python3.[0-9][0-9]; do
        [ -x "$py" ] && interpreters+=("$py")
    done
done
seen=" "
for py in "${interpreters[@]}"; do
    real="$(readlink -f "$py" 2>/dev/null || echo "$py")"
    # pyenv's shims are one script for every version: key them by name, not by the script they resolve to.
    case "$py" in */shims/*) real="$py" ;; esac
    case "$seen" in *" $real "*) continue ;; esac
    seen="$seen$real "
    dirs="$("$py" -c 'import nvidia
for p in nvidia.__path__: print(p)' 2>/dev/null)" || continue
    while IFS= read -r d; do
        [ -n "$d" ] || continue
        for c in "$d/cu13/bin/ptxas" "$d/cuda_nvcc/bin/ptxas"; do
            if runs "$c"; then echo "$c"; exit 0; fi
        done
    done <<<"$dirs"
done

# An interpreter no longer on PATH (a pyenv version, `pip install --user` of another Python) leaves the
# wheel in a site-packages directory of its own: look in the usual ones.
for site in "${HOME:-/nonexistent}"/.local/lib/python3*/site-packages \
    "${PYENV_ROOT:-${HOME:-/nonexistent}/.pyenv}"/versions/*/lib/python3*/site-packages \
    /usr/local/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    for c in "$site/nvidia/cu13/bin/ptxas" "$site/nvidia/cuda_nvcc/bin/ptxas"; do
        if runs "$c"; then echo "$c"; exit 0; fi
    done
done

echo "ptxas not found: $how" >&2
exit 1
