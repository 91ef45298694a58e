#!/usr/bin/env bash
# The runtime API check (docs/runtime/omega_runtime_api.md, section 11): the manifest against the headers,
# a compiled probe and the document. No GPU needed; needs python3 and a C compiler (CC, default cc).
#
#   tools/runtime_api_check.sh                 check include/, the document and the manifest
#   tools/runtime_api_check.sh --bless         refresh the manifest's numbers from the headers (on purpose;
#                                              review the diff, then decide MINOR or MAJOR)
#   tools/runtime_api_check.sh --include DIR --doc FILE --manifest FILE --lib FILE   check other copies
#                                              (the negative test uses this; --lib is the crate root
#                                              holding API_VERSION)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mode=check
include="$root/include"
doc="$root/docs/runtime/omega_runtime_api.md"
manifest="$root/docs/runtime/omega_runtime_api.manifest"
lib="$root/src/lib.rs"
while [ $# -gt 0 ]; do
    case "$1" in
        --bless) mode=bless ;;
        --include) include="$2"; shift ;;
        --doc) doc="$2"; shift ;;
        --manifest) manifest="$2"; shift ;;
        --lib) lib="$2"; shift ;;
        *) echo "usage: $0 [--bless] [--include DIR] [--doc FILE] [--manifest FILE] [--lib FILE]" >&2; exit 2 ;;
    esac
    shift
done
exec python3 "$root/tools/runtime_api.py" "$mode" --include "$include" --doc "$doc" --manifest "$manifest" --lib "$lib"
