#!/usr/bin/env bash
# find_cuda_tool.sh ptxas|nvcc
#
# Prints the path of the CUDA tool Omega builds its GPU code with (ptxas for kernels/*.ptx, nvcc for
# kernels/cuda/*.cu), or says on stderr why there is none and exits 1. The one lookup every user of those
# tools shares: build.rs, tools/gpu/build.sh and hal/tests/fixtures/build.sh call it (through
# tools/find_ptxas.sh and tools/find_nvcc.sh). In order, for TOOL and its variable OMEGA_<TOOL>
# (OMEGA_PTXAS, OMEGA_NVCC):
#
#   1. $OMEGA_<TOOL>, when set: the only candidate.
#   2. TOOL on PATH.
#   3. $CUDA_HOME/bin/TOOL (CUDA_HOME defaults to /usr/local/cuda).
#   4. The nvidia-cuda-nvcc pip wheel, whichever Python installed it: every interpreter that may have
#      (`$OMEGA_PYTHON`, then each python3 and python3.N on PATH, then /usr/bin and /usr/local/bin) is
#      asked where the `nvidia` package is, and nvidia/cu13/bin/TOOL (CUDA 13 wheels) or
#      nvidia/cuda_nvcc/bin/TOOL (CUDA 12 wheels) is looked for there; then the same two paths in the
#      usual site-packages directories (~/.local, pyenv's versions, /usr/local, /usr), for a Python that is
#      no longer on PATH.
#
# A candidate counts only if `TOOL --version` succeeds.
set -uo pipefail

tool="${1:-}"
case "$tool" in
    ptxas)
        var=OMEGA_PTXAS
        how="set OMEGA_PTXAS, put ptxas on PATH, install CUDA in /usr/local/cuda, or \`python3 -m pip install nvidia-cuda-nvcc==13.0.88\`"
        ;;
    nvcc)
        # nvcc's own wheel leaves its siblings unpinned, and newer ones break it: the whole pinned set.
        var=OMEGA_NVCC
        how="set OMEGA_NVCC, put nvcc on PATH, install CUDA in /usr/local/cuda, or \`python3 -m pip install nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85\`"
        ;;
    *)
        echo "usage: $0 ptxas|nvcc" >&2
        exit 2
        ;;
esac

runs() { [ -f "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

explicit="${!var:-}"
if [ -n "$explicit" ]; then
    if runs "$explicit"; then echo "$explicit"; exit 0; fi
    echo "$tool not found: $var=$explicit does not run; $how" >&2
    exit 1
fi

if p="$(command -v "$tool" 2>/dev/null)" && runs "$p"; then echo "$p"; exit 0; fi
cuda="${CUDA_HOME:-/usr/local/cuda}/bin/$tool"
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
        for c in "$d/cu13/bin/$tool" "$d/cuda_nvcc/bin/$tool"; do
            if runs "$c"; then echo "$c"; exit 0; fi
        done
    done <<<"$dirs"
done

# An interpreter no longer on PATH (a pyenv version, `pip install --user` of another Python) leaves the
# wheel in a site-packages directory of its own: look in the usual ones.
for site in "${HOME:-/nonexistent}"/.local/lib/python3*/site-packages \
    "${PYENV_ROOT:-${HOME:-/nonexistent}/.pyenv}"/versions/*/lib/python3*/site-packages \
    /usr/local/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    for c in "$site/nvidia/cu13/bin/$tool" "$site/nvidia/cuda_nvcc/bin/$tool"; do
        if runs "$c"; then echo "$c"; exit 0; fi
    done
done

echo "$tool not found: $how" >&2
exit 1
