#!/usr/bin/env bash
# The fuzz target over the C layer (docs/testing.md, "Fuzzing the C layer").
#
#   fuzz/run.sh [SECONDS]   build, replay fuzz/corpus and fuzz/regressions, then fuzz for SECONDS (default 60)
#                           from fuzz/corpus; new inputs go to target/fuzz/corpus, findings to
#                           target/fuzz/artifacts/ (the run fails on the first one)
#   fuzz/run.sh --replay    build and replay fuzz/corpus and fuzz/regressions only
#   fuzz/run.sh --merge     fold target/fuzz/corpus into fuzz/corpus, keeping only inputs that add coverage
#
# The library is built for it with SanitizerCoverage (stable rustc: `-C passes=sancov-module`), overflow
# checks and debug assertions, into target/fuzz; the harness with clang's `-fsanitize=fuzzer,address`.
# Needs clang and its runtime (Debian: clang-14 libclang-rt-14-dev; mk/ci-deps.sh installs them).
# FUZZ_JOBS, FUZZ_FLAGS add libFuzzer options; CLANG picks the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=fuzz
seconds=60
case "${1:-}" in
--replay) mode=replay ;;
--merge) mode=merge ;;
'') ;;
*) seconds=$1 ;;
esac

CLANG=${CLANG:-$(command -v clang-14 || command -v clang || true)}
if [ -z "$CLANG" ]; then
    echo "fuzz/run.sh: no clang found (apt-get install clang-14 libclang-rt-14-dev, or set CLANG)" >&2
    exit 1
fi
out=target/fuzz
triple=$(rustc -vV | sed -n 's/^host: //p')
flags=(-Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=3
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers=yes)
# --target keeps the flags off build scripts and proc macros; no nvidia backend: `nvidia` is refused by
# name everywhere, and nothing touches a GPU.
RUSTFLAGS="${flags[*]}" cargo build --quiet --release -p omega --lib --no-default-features \
    --target "$triple" --target-dir "$out"
cflags=(-g -O1 -std=c11 -Wall -Wextra -Werror -Iinclude -Ifuzz)
"$CLANG" "${cflags[@]}" -fsanitize=address -c fuzz/counters.c -o "$out/counters.o"
"$CLANG" "${cflags[@]}" -fsanitize=fuzzer,address -DOMEGA_FUZZ_LIBFUZZER fuzz/harness.c "$out/counters.o" \
    "$out/$triple/release/libomega.a" -lpthread -ldl -lm -lrt -lutil -o "$out/omega_fuzz"

export OMEGA_PLATFORM=sim
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:handle_abort=1}
bin=$out/omega_fuzz
common=(-timeout=30 -rss_limit_mb=4096 -max_len=4096 -print_final_stats=1 -artifact_prefix="$out/artifacts/")
mkdir -p "$out/artifacts" "$out/corpus"

replay() {
    local files=(fuzz/corpus/* fuzz/regressions/*)
    local inputs=()
    for f in "${files[@]}"; do [ -f "$f" ] && [ "${f##*/}" != README.md ] && inputs+=("$f"); done
    echo "fuzz: replaying ${#inputs[@]} inputs of fuzz/corpus and fuzz/regressions"
    "$bin" "${common[@]}" -runs=1 "${inputs[@]}" 2>&1 | tail -n 3
}

case $mode in
replay) replay ;;
merge)
    "$bin" "${common[@]}" -merge=1 fuzz/corpus "$out/corpus"
    ;;
fuzz)
    replay
    echo "fuzz: ${seconds}s from fuzz/corpus (new inputs in $out/corpus, findings in $out/artifacts/)"
    # shellcheck disable=SC2086
    "$bin" "${common[@]}" -max_total_time="$seconds" ${FUZZ_FLAGS:-} "$out/corpus" fuzz/corpus
    ;;
esac
