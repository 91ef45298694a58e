#!/usr/bin/env bash
# Proves the runtime API check catches what it claims to: copies include/, the document and the manifest to
# a temporary directory, breaks the copy in each of the thirteen ways the document lists (section 11), and requires
# tools/runtime_api_check.sh to fail every time. Prints PASS/FAIL per case; exits non-zero if the check
# missed any breakage (or if an unbroken copy does not pass).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d -t omega-api-negative-XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

fresh() {
    rm -rf "$tmp/case" && mkdir -p "$tmp/case"
    cp -r "$root/include" "$tmp/case/include"
    cp "$root/docs/runtime/omega_runtime_api.md" "$tmp/case/doc.md"
    cp "$root/docs/runtime/omega_runtime_api.manifest" "$tmp/case/manifest"
    cp "$root/src/lib.rs" "$tmp/case/lib.rs"
}

# break FILE PYTHON-EXPR: applies a text edit to a file of the copy; the edit must change the file.
edit() {
    python3 - "$tmp/case/$1" "$2" <<'PY'
import sys
path, code = sys.argv[1], sys.argv[2]
text = open(path).read()
import re
new = eval(code, {"text": text, "re": re})
if new == text:
    sys.exit(f"negative test: the edit did not change {path}: {code}")
open(path, "w").write(new)
PY
}

check() {
    "$root/tools/runtime_api_check.sh" --include "$tmp/case/include" --doc "$tmp/case/doc.md" \
        --manifest "$tmp/case/manifest" --lib "$tmp/case/lib.rs" >"$tmp/out" 2>&1
}

missed=0
total=0
expect_fail() {
    local name="$1" file="$2" code="$3"
    total=$((total + 1))
    fresh
    if ! edit "$file" "$code"; then
        echo "FAIL  $name (could not apply the breakage)"
        missed=$((missed + 1))
        return
    fi
    if check; then
        echo "FAIL  $name: the check passed a broken copy"
        missed=$((missed + 1))
    else
        echo "PASS  $name: $(grep -m1 'FAIL:' "$tmp/out" | sed 's/^runtime_api_check: FAIL: //' | cut -c1-110)"
    fi
}

fresh
if check; then
    echo "PASS  unbroken copy passes"
else
    echo "FAIL  unbroken copy does not pass:"; cat "$tmp/out"; exit 1
fi

expect_fail "removed function" include/omega_gpu_session.h \
    'text.replace("uint32_t omega_gpu_session_spin_us(void);\n", "")'
expect_fail "missing version macro" include/omega_runtime_api.h \
    '"\n".join(l for l in text.split("\n") if not l.startswith("#define OMEGA_RUNTIME_API_VERSION_MINOR "))'
expect_fail "changed function signature" include/omega_gpu_session.h \
    'text.replace("int omega_gpu_session_set_spin_us(uint32_t us);", "int omega_gpu_session_set_spin_us(uint64_t us);")'
expect_fail "changed struct" include/omega_gpu_session.h \
    'text.replace("    uint64_t untracked;", "    uint32_t untracked;")'
expect_fail "changed constant" include/omega_gpu_session.h \
    'text.replace("#define OMEGA_GPU_SESSION_MAX_ARGS 32", "#define OMEGA_GPU_SESSION_MAX_ARGS 64")'
expect_fail "document version line disagrees with the macro" doc.md \
    'text.replace("Omega Runtime API version: ", "Omega Runtime API version: 9", 1)'
expect_fail "API_VERSION in the crate root disagrees with the macros" lib.rs \
    're.sub(r"API_VERSION: \(u32, u32\) = \((\d+), (\d+)\)", lambda m: f"API_VERSION: (u32, u32) = ({m[1]}, {int(m[2]) + 1})", text)'
expect_fail "quoted signature no header has" doc.md \
    'text + "\n```c\nint omega_gpu_session_reset(void);\n```\n"'
expect_fail "quoted signature only inside a longer one (int32_t in uint32_t)" doc.md \
    'text + "\nThe spin window: `int32_t omega_gpu_session_spin_us(void);`\n"'
expect_fail "STABLE entry with no section" doc.md \
    'text.replace("#### omega_gpu_session_open_count\n", "")'
expect_fail "quoted struct typedef no header has (a field's type changed)" doc.md \
    'text.replace("typedef struct { uint64_t buffers; uint64_t untracked; uint64_t bytes; } OmegaGpuParkStats;", "typedef struct { uint64_t buffers; uint32_t untracked; uint64_t bytes; } OmegaGpuParkStats;")'

expect_fail "removed EXPERIMENTAL function (omega_gpu_session_recover)" include/omega_gpu_session.h \
    'text.replace("int omega_gpu_session_recover(void);\n", "")'
expect_fail "EXPERIMENTAL entry promoted to STABLE without a section (omega_gpu_session_recover)" manifest \
    'text.replace("fn omega_gpu_session_recover EXPERIMENTAL", "fn omega_gpu_session_recover STABLE")'

expect_fail "removed library function (omega_gpu_matmul_api.h)" include/omega_gpu_matmul_api.h \
    'text.replace("uint32_t omega_gpu_matmul_cta_budget(void);\n", "")'
expect_fail "library struct no longer 160 bytes (OmegaGpuMatmulInfo)" include/omega_gpu_matmul_api.h \
    'text.replace("    uint32_t reserved[14];\n} OmegaGpuMatmulInfo;", "    uint32_t reserved[13];\n} OmegaGpuMatmulInfo;")'

echo "runtime_api_negative: $((total - missed)) of $total breakages caught"
[ "$missed" -eq 0 ]
