#!/usr/bin/env bash
# Generates the C headers in include/ from src/ffi/ with a pinned cbindgen (tools/headers.list says which
# sources make which header; cbindgen.toml holds the shared settings).
#
#   tools/gen_headers.sh            regenerate include/*.h in place
#   tools/gen_headers.sh --check    regenerate into a temporary directory and fail on any difference
#                                   (CI runs this: the committed headers must be what the code says)
#   tools/gen_headers.sh --install  only make sure the pinned cbindgen is there
#
# The pinned cbindgen is looked for in .tools/bin (this checkout's own tool directory, git-ignored;
# OMEGA_TOOLS_DIR names another), then on PATH. When neither has that version it is installed into the
# tool directory with `cargo install --locked --root` (about one minute on two cores; it says so, and
# writes nothing outside that directory).
# OMEGA_CBINDGEN names a binary to use instead; it must still be the pinned version, because another
# version lays the headers out differently and --check would fail on that alone.
set -euo pipefail
CBINDGEN_VERSION=0.29.4
cd "$(dirname "$0")/.."

mode=write
case "${1:-}" in
    --check) mode=check ;;
    --install) mode=install ;;
    "") ;;
    *) echo "usage: $0 [--check|--install]" >&2; exit 2 ;;
esac

tools="${OMEGA_TOOLS_DIR:-.tools}"
pinned() { [ -n "$1" ] && [ "$("$1" --version 2>/dev/null)" = "cbindgen $CBINDGEN_VERSION" ]; }

if [ -n "${OMEGA_CBINDGEN:-}" ]; then
    if ! pinned "$OMEGA_CBINDGEN"; then
        have="$("$OMEGA_CBINDGEN" --version 2>/dev/null || true)"
        echo "gen_headers: OMEGA_CBINDGEN=$OMEGA_CBINDGEN is '${have:-not runnable}', need cbindgen $CBINDGEN_VERSION" >&2
        exit 1
    fi
    cbindgen="$OMEGA_CBINDGEN"
elif pinned "$tools/bin/cbindgen"; then
    cbindgen="$tools/bin/cbindgen"
elif pinned "$(command -v cbindgen 2>/dev/null || true)"; then
    cbindgen="$(command -v cbindgen)"
else
    echo "gen_headers: cbindgen $CBINDGEN_VERSION is neither in $tools/bin nor on PATH; installing it into" \
        "$tools (cargo install --locked --root $tools, about a minute; nothing outside it)" >&2
    cargo install --quiet --locked --root "$tools" cbindgen --version "$CBINDGEN_VERSION" >&2
    cbindgen="$tools/bin/cbindgen"
fi
[ "$mode" = install ] && exit 0

exec python3 tools/gen_headers.py --cbindgen "$cbindgen" --version "$CBINDGEN_VERSION" --mode "$mode"
