#!/usr/bin/env bash
# `make test-install`: runs docs/c-api.md's build-and-link block exactly as the document has it — install,
# pkg-config, build the worked example against the shared and then the static library, run both — with
# only the block's first line (`export PREFIX=...`) pointed at a temporary directory. Then checks what the
# document claims of the result: pkg-config reports this version, the shared build runs through its
# rpath alone, and the static build does not need libomega.so.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
doc=docs/c-api.md
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"

# The fenced block after the marker comment.
block="$(awk '
    /make test-install runs the block below/ { armed = 1; next }
    armed && /^```sh/ { inside = 1; next }
    inside && /^```/ { exit }
    inside { print }
' "$doc")"
[ -n "$block" ] || { echo "test-install: no block after the marker in $doc" >&2; exit 1; }
first="$(printf '%s\n' "$block" | head -n1)"
case "$first" in
    "export PREFIX="*) ;;
    *) echo "test-install: the block in $doc must start with 'export PREFIX=...', not '$first'" >&2; exit 1 ;;
esac

tmp="$(mktemp -d -t omega-install-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
script="$tmp/commands.sh"
{
    echo "export PREFIX=$tmp/prefix"
    printf '%s\n' "$block" | tail -n +2
} >"$script"

# The document's commands, in a shell that knows nothing of this checkout's environment: no library or
# pkg-config search path the block does not set itself.
env -u LD_LIBRARY_PATH -u PKG_CONFIG_PATH -u MAKEFLAGS -u MFLAGS -u MAKELEVEL bash -euo pipefail "$script"

export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
for module in omega omega-static; do
    have="$(pkg-config --modversion "$module")"
    [ "$have" = "$version" ] || { echo "test-install: pkg-config says $module $have, Cargo.toml $version" >&2; exit 1; }
done
if readelf -d build-c/hello-static | grep -q 'libomega\.so'; then
    echo "test-install: build-c/hello-static needs libomega.so: it was not linked statically" >&2
    exit 1
fi
readelf -d build-c/hello-shared | grep -q 'libomega\.so' ||
    { echo "test-install: build-c/hello-shared does not use libomega.so" >&2; exit 1; }
echo "test-install: docs/c-api.md's commands ran against $tmp/prefix (omega $version, shared and static)"
