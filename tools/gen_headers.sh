#!/usr/bin/env bash
# Generates the C headers in include/ from src/ffi/ with a pinned cbindgen (tools/headers.list says which
# sources make which header; cbindgen.toml holds the shared settings).
#
#   tools/gen_headers.sh            regenerate include/*.h in place
#   tools/gen_headers.sh --check    regenerate into a temporary directory and fail on any difference
#                                   (CI runs this: the committed headers must be what the code says)
#   tools/gen_headers.sh --install  only make sure the pinned cbindgen is installed
#
# cbindgen is installed with `cargo install --locked` when missing or of another version (about one minute
# on two cores). OMEGA_CBINDGEN names a binary to use instead; it must still be the pinned version, because
# another version lays the headers out differently and --check would fail on that alone.
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

cbindgen="${OMEGA_CBINDGEN:-cbindgen}"
have="$("$cbindgen" --version 2>/dev/null || true)"
if [ "$have" != "cbindgen $CBINDGEN_VERSION" ]; then
    if [ -n "${OMEGA_CBINDGEN:-}" ]; then
        echo "gen_headers: OMEGA_CBINDGEN=$OMEGA_CBINDGEN is '${have:-not runnable}', need cbindgen $CBINDGEN_VERSION" >&2
        exit 1
    fi
    echo "gen_headers: installing cbindgen $CBINDGEN_VERSION (found '${have:-none}')" >&2
    cargo install --quiet --locked cbindgen --version "$CBINDGEN_VERSION" >&2
    cbindgen="$(command -v cbindgen || echo "${CARGO_HOME:-$HOME/.cargo}/bin/cbindgen")"
fi
[ "$mode" = install ] && exit 0

exec python3 tools/gen_headers.py --cbindgen "$cbindgen" --version "$CBINDGEN_VERSION" --mode "$mode"
