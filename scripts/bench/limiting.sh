# shellcheck shell=bash
# scripts/bench.sh, scenario 15: the limiting algorithms on one trace. The `trace` binary
# (loadtest/trace/src/main.rs) generates a trace from TRACE_SEED, replays it
# through each algorithm's script in the private Redis (REDIS_URL) on the trace's own
# clock and holds every decision against the sliding-window log's; then memory per key
# and Redis CPU per call. Its Markdown goes between the markers of docs/limiting.md
# (added at the end when missing, the file created when missing), under a line naming
# the run's date, the machine and the seed; the rest of the file is kept. No app
# instance, no Postgres: Redis only, a few minutes.

LIMITING_DOC=docs/limiting.md
LIMITING_BEGIN='<!-- trace-table:begin -->'
LIMITING_END='<!-- trace-table:end -->'

scenario_limiting() {
  want limiting || return 0
  local trace=target/release/trace section="$OUT/limiting.section.md"
  # BENCH_BUILD=0 skips the workspace build; this binary alone is cheap to build.
  if [ ! -x "$trace" ]; then
    log "limiting: building the trace binary"
    cargo build --release --locked -p trace >&2
  fi
  log "limiting: one trace through every algorithm, seed $TRACE_SEED (a few minutes)"
  "$trace" --redis-url "$REDIS_URL" --seed "$TRACE_SEED" --markdown "$OUT/limiting.md" >/dev/null \
    || die "limiting: the trace run failed"
  {
    echo "$LIMITING_BEGIN"
    echo "<!-- Written by scripts/bench/limiting.sh (make bench; BENCH_ONLY=limiting for this part"
    echo "alone): what lies between these markers is replaced by the next run. -->"
    echo
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores ($(cpu_model)), Redis" \
      "$(redis_version) (the private one of scripts/services.sh, shared with whatever else" \
      "ran meanwhile), seed $TRACE_SEED."
    echo
    cat "$OUT/limiting.md"
    echo "$LIMITING_END"
  } >"$section"
  splice_section "$LIMITING_DOC" "$section"
  log "limiting: the table is in $LIMITING_DOC (and $OUT/limiting.md)"
}

cpu_model() {
  sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1
}

redis_version() {
  redis-cli -u "$REDIS_URL" INFO server | tr -d '\r' | sed -n 's/^redis_version://p'
}

# splice_section FILE SECTION: FILE with the lines from the begin marker to the first end
# marker after it replaced by SECTION (which holds both markers); SECTION appended when
# FILE has neither (FILE created when missing); a begin marker alone stops the bench.
splice_section() {
  local file=$1 section=$2 begin end
  touch "$file"
  begin=$(grep -nF -m 1 -- "$LIMITING_BEGIN" "$file" | cut -d: -f1)
  end=""
  if [ -n "$begin" ]; then
    end=$(awk -v from="$begin" -v marker="$LIMITING_END" 'NR > from && index($0, marker) { print NR; exit }' "$file")
  fi
  if [ -n "$end" ]; then
    { head -n "$((begin - 1))" "$file"; cat "$section"; tail -n "+$((end + 1))" "$file"; } >"$file.new"
  elif [ -n "$begin" ]; then
    # Appending would leave a begin marker whose next run replaces the text after it.
    die "limiting: $file has $LIMITING_BEGIN on line $begin but no $LIMITING_END after it"
  else
    { cat "$file"; [ ! -s "$file" ] || echo; cat "$section"; } >"$file.new"
  fi
  mv "$file.new" "$file"
}
