#!/usr/bin/env bash
# `make fuzz`: the parser fuzz targets of fuzz/ (cargo-fuzz, libFuzzer), each for a bounded
# time; not part of `make test`.
#
# Builds on the stable toolchain: libFuzzer's coverage instrumentation without a sanitizer
# (`--sanitizer none`, as every sanitizer needs nightly), optimised with debug assertions
# and overflow checks on. A crash is then a panic: a broken invariant of
# tests/api/parsers/checks.rs (the property tests' own checks, which the targets include)
# or an overflow, slice or unwrap in a parser. Installs cargo-fuzz into .local/cargo-fuzz
# (git-ignored) when missing.
#
# Each target starts from the corpus its earlier runs grew (fuzz/corpus/<target>,
# git-ignored) with the tokens of fuzz/parsers.dict, runs FUZZ_SECONDS, and the run fails
# if any target crashed; the crashing input is kept in fuzz/artifacts/<target>/ and
# `cargo fuzz run --sanitizer none <target> <input>` replays it. Prints a table per
# target: runs, execs/s, coverage (edges, features), corpus size, ok or FAILED.
#   FUZZ_SECONDS=300 make fuzz            longer (default 30 per target)
#   FUZZ_TARGETS="json_body" make fuzz    some targets only (default: all)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${FUZZ_SECONDS:-30}
root=$PWD/.local/cargo-fuzz
if ! "$root/bin/cargo-fuzz" --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$root"
fi
export PATH="$root/bin:$PATH"

started=$SECONDS
cargo fuzz build --sanitizer none
echo "fuzz: built in $((SECONDS - started)) s"

targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=()
for target in $targets; do
  mkdir -p "fuzz/corpus/$target"
  echo "fuzz: $target for $seconds s"
  if ! cargo fuzz run --sanitizer none "$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -dict=fuzz/parsers.dict -print_final_stats=1 \
    >"$logs/$target" 2>&1; then
    failed+=("$target")
    tail -n 40 "$logs/$target"
  fi
done

# libFuzzer's last status line (`#N DONE cov: C ft: F corp: K/…`) and final stats.
printf '\n%-16s %10s %8s %6s %7s %6s  %s\n' target runs exec/s cov ft corpus result
for target in $targets; do
  log=$logs/$target
  status=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  field() { sed -nE "s/.* $1: ([0-9]+).*/\1/p" <<<"$status"; }
  stat() { sed -nE "s/^stat::$1: *([0-9]+)/\1/p" "$log" | tail -n 1; }
  result=ok
  [[ " ${failed[*]} " == *" $target "* ]] && result=FAILED
  printf '%-16s %10s %8s %6s %7s %6s  %s\n' "$target" "$(stat number_of_executed_units)" \
    "$(stat average_exec_per_sec)" "$(field cov)" "$(field ft)" "$(field corp)" "$result"
done
echo "fuzz: $((SECONDS - started)) s in all"

if ((${#failed[@]})); then
  echo "fuzz: failed: ${failed[*]} (a crash's input is in fuzz/artifacts/<target>/)" >&2
  exit 1
fi
