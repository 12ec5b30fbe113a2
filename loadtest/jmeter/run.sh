#!/usr/bin/env bash
# One bounded JMeter flash sale against a private seckill instance, then checks on what
# came back. Exits 0 when every check passes, 1 when one fails, 2 when the run could not
# be made.
#
#   loadtest/jmeter/run.sh                       # defaults below
#   SECKILL_BIN=target/release/seckill STOCK=50 THREADS=20 LOOPS=10 loadtest/jmeter/run.sh
#
# What it does, in order:
#   1. installs Debian's JMeter (`jmeter jmeter-http`) when `jmeter` is missing;
#   2. starts the private Redis and Postgres (scripts/services.sh up) and makes a fresh
#      database for this run, so the counts it checks are this run's alone;
#   3. starts the app ($SECKILL_BIN, else a release build) on a free loopback port with a
#      unique Redis key prefix, and polls GET /health/ready until a deadline;
#   4. creates an item with STOCK units through the admin API;
#   5. writes THREADS x LOOPS shoppers (userId,ip) and runs seckill.jmx in non-GUI mode;
#   6. reads the item's stock and order count back, stops the app;
#   7. checks the JTL: only expected statuses and codes, no failed assertion, one order
#      at most per user, 200s = min(STOCK, shoppers), and the server agrees.
#
# Knobs (environment):
#   STOCK [100]  THREADS [50]  LOOPS [10]   shoppers = THREADS x LOOPS, one CSV row each
#   ATTEMPTS [4]       purchase attempts per shopper (the 4th meets the user limit, 3/60 s)
#   USERS_PER_IP [1]   shoppers sharing one X-Forwarded-For address (2+ shows the ip limit)
#   RAMPUP [2]         seconds to start all threads
#   MAX_SECONDS [300]  hard bound on the JMeter run
#   APP_PORT [0]       0 = let the OS pick a free port
#   SECKILL_BIN        the app binary; unset = `cargo build --release --bin seckill`
#   JMETER [jmeter]    another JMeter (e.g. a current tarball's bin/jmeter) works too
#   OUT                results folder [test-artifacts/jmeter/<UTC time>-<pid>] (git-ignored)
#   KEEP_DB [0]        1 = keep the run's database for inspection
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PLAN="$ROOT/loadtest/jmeter/seckill.jmx"

STOCK=${STOCK:-100}
THREADS=${THREADS:-50}
LOOPS=${LOOPS:-10}
ATTEMPTS=${ATTEMPTS:-4}
USERS_PER_IP=${USERS_PER_IP:-1}
RAMPUP=${RAMPUP:-2}
MAX_SECONDS=${MAX_SECONDS:-300}
APP_PORT=${APP_PORT:-0}
JMETER=${JMETER:-jmeter}
KEEP_DB=${KEEP_DB:-0}
OUT=${OUT:-test-artifacts/jmeter/$(date -u +%Y%m%dT%H%M%SZ)-$$}
READY_DEADLINE=60   # seconds for the app to bind and report ready (migrations included)
ADMIN_TOKEN=dev-admin-token   # the local admin token; the app refuses it in production

log() { echo "run.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }

for knob in STOCK THREADS LOOPS ATTEMPTS USERS_PER_IP MAX_SECONDS; do
  [[ ${!knob} =~ ^[1-9][0-9]*$ ]] || die "$knob must be a positive integer (got '${!knob}')"
done
[[ $RAMPUP =~ ^[0-9]+$ && $APP_PORT =~ ^[0-9]+$ ]] || die "RAMPUP and APP_PORT must be integers"
BUYERS=$((THREADS * LOOPS))

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)   # JMeter resolves relative paths against the plan's folder

# as_root, apt_install, make_database, drop_database, app_binary, start_app, stop_process
. "$ROOT/scripts/lib.sh"

# --- JMeter ---------------------------------------------------------------------------

ensure_jmeter() {
  if ! command -v "$JMETER" >/dev/null; then
    [ "$JMETER" = jmeter ] || die "JMETER=$JMETER is not an executable"
    # jmeter-http is only "recommended" by jmeter, and it holds the HTTP sampler.
    apt_install jmeter jmeter-http
  fi
  # Debian's jmeter without jmeter-http loads no HTTP sampler: the plan would fail to load.
  if is_debian_jmeter && ! dpkg-query -W -f='${Status}' jmeter-http 2>/dev/null | grep -q "ok installed"; then
    apt_install jmeter-http
  fi
}

# True when $JMETER is the launcher of Debian's jmeter package (not, say, a tarball's).
is_debian_jmeter() {
  local path
  path=$(readlink -f "$(command -v "$JMETER")") || return 1
  command -v dpkg >/dev/null && dpkg -S "$path" 2>/dev/null | grep -q '^jmeter:'
}

# Debian bookworm ships JMeter 2.13 with XStream 1.4.20. Since 1.4.18 XStream refuses
# every class it was not told to allow, and 2.13 predates that: it cannot load any plan
# ("ForbiddenClassException: org.apache.jmeter.save.ScriptWrapper"), and XStream offers no
# switch to relax it from outside. JMeter itself reads its converter list from
# saveservice.properties and instantiates each class named there with the XStream mapper,
# so a one-class "converter" that converts nothing but allows org.apache.jmeter.** and
# org.apache.jorphan.** (what current JMeter allows itself) makes 2.13 work unchanged.
# Built here, into the git-ignored results tree, only for that combination.
JMETER_COMPAT=()
debian_xstream_shim() {
  is_debian_jmeter || return 0
  local xs
  xs=$(dpkg-query -W -f='${Version}' libxstream-java 2>/dev/null) || return 0
  dpkg --compare-versions "$xs" ge 1.4.18 || return 0
  local shim="$ROOT/test-artifacts/jmeter/.xstream-shim"
  if [ ! -f "$shim/classes/SeckillAllowJMeterTypes.class" ]; then
    command -v javac >/dev/null || apt_install default-jdk-headless
    log "building the XStream allow-list shim for Debian's JMeter 2.13 (xstream $xs)"
    mkdir -p "$shim/src" "$shim/classes"
    cat >"$shim/src/SeckillAllowJMeterTypes.java" <<'EOF'
import com.thoughtworks.xstream.converters.Converter;
import com.thoughtworks.xstream.converters.MarshallingContext;
import com.thoughtworks.xstream.converters.UnmarshallingContext;
import com.thoughtworks.xstream.io.HierarchicalStreamReader;
import com.thoughtworks.xstream.io.HierarchicalStreamWriter;
import com.thoughtworks.xstream.mapper.Mapper;
import com.thoughtworks.xstream.mapper.SecurityMapper;
import com.thoughtworks.xstream.security.WildcardTypePermission;

/** Registered as a converter only to reach XStream's security mapper; converts nothing. */
public final class SeckillAllowJMeterTypes implements Converter {
    public SeckillAllowJMeterTypes(Mapper mapper) {
        SecurityMapper security = (SecurityMapper) mapper.lookupMapperOfType(SecurityMapper.class);
        if (security != null) {
            security.addPermission(new WildcardTypePermission(
                new String[] {"org.apache.jmeter.**", "org.apache.jorphan.**"}));
        }
    }
    public boolean canConvert(Class type) { return false; }
    public void marshal(Object source, HierarchicalStreamWriter writer, MarshallingContext context) {
        throw new UnsupportedOperationException();
    }
    public Object unmarshal(HierarchicalStreamReader reader, UnmarshallingContext context) {
        throw new UnsupportedOperationException();
    }
}
EOF
    javac -nowarn --release 8 -cp /usr/share/java/xstream.jar -d "$shim/classes" \
      "$shim/src/SeckillAllowJMeterTypes.java" 2>&1 | grep -v '^warning' >&2 || true
    [ -f "$shim/classes/SeckillAllowJMeterTypes.class" ] || die "could not compile the XStream shim"
  fi
  # Debian's own list plus our class ("collection" = construct it with the mapper). The
  # file's last line has no newline, hence the leading one.
  { cat /usr/share/jmeter/bin/saveservice.properties; printf '\n_SeckillAllowJMeterTypes=collection\n'; } \
    >"$shim/saveservice.properties"
  # JMeter prepends its home (/usr/share/jmeter) to saveservice_properties; climbing to /
  # first turns that into our absolute path.
  JMETER_COMPAT=(-Juser.classpath="$shim/classes"
    -Jsaveservice_properties="/../../../../../../../..$shim/saveservice.properties")
}

# --- the app --------------------------------------------------------------------------

APP_PID=""
DB_NAME=""
DB_ADMIN_URL=""
cleanup() {
  stop_app
  [ "$KEEP_DB" = 1 ] || drop_database "$DB_NAME" "$DB_ADMIN_URL" || true
}
trap cleanup EXIT

stop_app() {
  [ -n "$APP_PID" ] || return 0
  stop_process "$APP_PID"   # scripts/lib.sh
  APP_PID=""
}

# A database of its own per run (scripts/lib.sh says why); without psql, the one in
# DATABASE_URL as it is, and no order count check.
use_database() {
  if ! command -v psql >/dev/null; then
    log "psql not found: using DATABASE_URL as it is (no order count check)"
    APP_DB_URL=$DATABASE_URL
    return
  fi
  make_database seckill_lt || die "could not create the run's database"
  APP_DB_URL=$DB_URL
}

create_item() {
  # The sale opened a minute ago (allowed) and lasts an hour: the run sees an open sale.
  local body status
  body=$(printf '{"name":"jmeter run %s","priceCents":100,"stock":%d,"startsAt":"%s","endsAt":"%s"}' \
    "$$" "$STOCK" "$(date -u -d '-60 sec' +%FT%TZ)" "$(date -u -d '+1 hour' +%FT%TZ)")
  status=$(curl -sS -o "$OUT/item.json" -w '%{http_code}' --max-time 10 "$APP_URL/admin/api/items" \
    -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' -d "$body")
  [ "$status" = 201 ] || die "creating the item answered $status: $(cat "$OUT/item.json")"
  ITEM_ID=$(sed -n 's/.*"id":\([0-9]*\).*/\1/p' "$OUT/item.json")
  [ -n "$ITEM_ID" ] || die "no id in $(cat "$OUT/item.json")"
  log "item $ITEM_ID with $STOCK units"
}

# remainingStock of our item from GET /api/items (one object per item; no jq needed).
remaining_stock() {
  curl -fsS --max-time 10 "$APP_URL/api/items" | sed 's/},{/}\n{/g' \
    | grep -E "\"id\":$ITEM_ID[,}]" | sed -n 's/.*"remainingStock":\([0-9]*\).*/\1/p'
}

# --- the run --------------------------------------------------------------------------

ensure_jmeter
debian_xstream_shim
# Separate steps: a failure inside $(...) must stop the script, which it would not as
# part of another command's arguments.
SERVICES_ENV=$(scripts/services.sh up) || die "scripts/services.sh up failed"
eval "$SERVICES_ENV"
use_database
APP_BIN=$(app_binary release)
PREFIX="lt-$(date -u +%s)-$$"
log "redis prefix $PREFIX, database ${DB_NAME:-from DATABASE_URL}"
# JSON logs, one object a line, for reading back from the results folder.
start_app "$APP_BIN" "$APP_PORT" "$OUT/app.log" \
  SECKILL_ADMIN_TOKEN="$ADMIN_TOKEN" SECKILL_REDIS_KEY_PREFIX="$PREFIX" \
  SECKILL_LOG_FORMAT=json SECKILL_LOG_LEVEL="${SECKILL_LOG_LEVEL:-info}" \
  REDIS_URL="$REDIS_URL" DATABASE_URL="$APP_DB_URL"
create_item

loadtest/jmeter/gen-users.sh "$BUYERS" "$USERS_PER_IP" >"$OUT/users.csv"

JMETER_CMD=("$JMETER" -n -t "$PLAN"
  -Jhost=127.0.0.1 -Jport="$APP_PORT" -JitemId="$ITEM_ID"
  -Jthreads="$THREADS" -Jrampup="$RAMPUP" -Jloops="$LOOPS" -Jattempts="$ATTEMPTS"
  -Jcsv="$OUT/users.csv" -JmaxSeconds="$MAX_SECONDS" -Jerrors="$OUT/errors.xml"
  # The results file: tab-separated (no field of ours holds a tab, so plain awk can read
  # it), with a header, and the shopper and answer variables as extra columns. The
  # assertion failure message stays out: it spans lines; errors.xml has it.
  -Jjmeter.save.saveservice.output_format=csv
  -Jjmeter.save.saveservice.print_field_names=true
  '-Jjmeter.save.saveservice.default_delimiter=\t'
  -Jjmeter.save.saveservice.assertion_results_failure_message=false
  -Jsample_variables=userId,ip,code,dimension
  "${JMETER_COMPAT[@]}"
  -l "$OUT/results.jtl" -j "$OUT/jmeter.log")
printf '%q ' "${JMETER_CMD[@]}" >"$OUT/jmeter-command.txt"
log "running JMeter: $BUYERS shoppers x $ATTEMPTS attempts, $THREADS threads (command in $OUT/jmeter-command.txt)"
# The plan bounds itself (loops, maxSeconds); timeout is the belt to those braces.
jmeter_rc=0
timeout --kill-after=30 $((MAX_SECONDS + 60)) "${JMETER_CMD[@]}" >"$OUT/jmeter.out" 2>&1 || jmeter_rc=$?
grep -E '^summary =' "$OUT/jmeter.out" >&2 || true
[ "$jmeter_rc" -eq 0 ] || { tail -n 20 "$OUT/jmeter.out" >&2; die "JMeter exited with $jmeter_rc (see $OUT/jmeter.log)"; }
[ -s "$OUT/results.jtl" ] || { tail -n 20 "$OUT/jmeter.out" >&2; die "JMeter wrote no results (see $OUT/jmeter.log)"; }

REMAINING=$(remaining_stock || true)
ORDERS=""
[ -z "$DB_NAME" ] || ORDERS=$(psql "$APP_DB_URL" -Atc "SELECT count(*) FROM orders WHERE item_id = $ITEM_ID" 2>/dev/null || true)
stop_app

# --- the checks -----------------------------------------------------------------------

# One pass over the JTL: counts as "key value" lines. Columns are found by header name
# (JMeter quotes the names of sample variables), so the save settings may add columns.
awk -F'\t' '
  NR == 1 { for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); col[h] = i }; next }
  {
    # Values become keys of "key value" lines: anything but a plain word is squeezed to "_"
    # (JMeter reports a refused connection as "Non HTTP response code: ...").
    label = $col["label"]; status = key($col["responseCode"])
    if ($col["success"] != "true") failed[label]++
    t0 = $col["timeStamp"]; t1 = t0 + $col["elapsed"]
    if (first == "" || t0 < first) first = t0
    if (t1 > last) last = t1
    if (label == "POST /api/session") { sessions++; next }
    if (label != "POST /seckill") { other_label++; next }
    seckill++
    st[status]++
    if (status == 200) { ok_by_user[$col["userId"]]++ }
    else if (status == 409) c409[key($col["code"])]++
    else if (status == 429) c429[key($col["dimension"])]++
  }
  function key(s) { gsub(/[^A-Za-z0-9_.-]+/, "_", s); return s == "" ? "EMPTY" : s }
  END {
    printf "sessions %d\nseckill %d\nother_label %d\n", sessions, seckill, other_label
    printf "failed_session %d\nfailed_seckill %d\n", failed["POST /api/session"], failed["POST /seckill"]
    printf "wall_ms %d\n", last - first
    for (s in st) printf "status_%s %d\n", s, st[s]
    for (c in c409) printf "409_%s %d\n", c, c409[c]
    for (d in c429) printf "429_%s %d\n", d, c429[d]
    for (u in ok_by_user) { users_ok++; if (ok_by_user[u] > 1) users_twice++ }
    printf "users_ok %d\nusers_twice %d\n", users_ok, users_twice
  }' "$OUT/results.jtl" >"$OUT/counts.txt"

declare -A N=()
while read -r key value; do N[$key]=$value; done <"$OUT/counts.txt"
n() { echo "${N[$1]:-0}"; }

# Latency percentiles of /seckill (nearest rank).
read -r P50 P95 P99 PMAX < <(awk -F'\t' '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["label"] == "POST /seckill" { print $col["elapsed"] }' "$OUT/results.jtl" | sort -n |
  awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "- - - -"; exit }
    split("50 95 99", p, " ")
    for (i = 1; i <= 3; i++) { r = int((p[i] * NR + 99) / 100); printf "%d ", v[r] }
    print v[NR] }')

EXPECTED_OK=$(( BUYERS < STOCK ? BUYERS : STOCK ))
OK=$(n status_200)
WALL_MS=$(n wall_ms)
TOTAL=$(( $(n sessions) + $(n seckill) ))
RPS=$(awk -v n="$TOTAL" -v ms="$WALL_MS" 'BEGIN { printf "%.0f", (ms > 0 ? n * 1000 / ms : 0) }')

FAILURES=()
check() {   # check "description" command...; the command's output is printed as detail
  local what=$1 detail rc=0; shift
  detail=$("$@") || rc=$?
  if [ $rc -eq 0 ]; then printf '  ok    %s\n' "$what"; else printf '  FAIL  %s\n' "$what"; FAILURES+=("$what"); fi
  [ -z "$detail" ] || printf '%s\n' "$detail"
}
only_keys() {   # only_keys PREFIX allowed...: every counted key with PREFIX is in the list
  local prefix=$1 key; shift
  for key in "${!N[@]}"; do
    [[ $key == "$prefix"* ]] || continue
    [[ " $* " == *" ${key#"$prefix"} "* ]] || { printf '        unexpected %s (%s)\n' "$key" "${N[$key]}"; return 1; }
  done
}

echo
echo "JMeter flash sale: item $ITEM_ID, stock $STOCK, $BUYERS shoppers ($THREADS threads x $LOOPS loops), $ATTEMPTS attempts each, $USERS_PER_IP per IP"
echo
printf '  %-38s %10s\n' "requests (session + seckill)" "$TOTAL"
printf '  %-38s %10s\n' "wall time, s" "$(awk -v ms="$WALL_MS" 'BEGIN { printf "%.1f", ms / 1000 }')"
printf '  %-38s %10s\n' "throughput, req/s" "$RPS"
printf '  %-38s %10s\n' "POST /api/session" "$(n sessions)"
printf '  %-38s %10s\n' "POST /seckill" "$(n seckill)"
printf '  %-38s %10s\n' "  200 order" "$OK"
for key in $(printf '%s\n' "${!N[@]}" | grep -E '^(409|429)_' | sort); do
  label=${key/_/ }; [[ $key == 429_* ]] && label="429 RATE_LIMITED ${key#429_}"
  printf '  %-38s %10s\n' "  $label" "${N[$key]}"
done
for key in $(printf '%s\n' "${!N[@]}" | grep -E '^status_' | grep -vE '^status_(200|409|429)$' | sort); do
  printf '  %-38s %10s\n' "  ${key#status_} (unexpected)" "${N[$key]}"
done
printf '  %-38s %10s\n' "/seckill latency p50/p95/p99/max, ms" "$P50/$P95/$P99/$PMAX"
printf '  %-38s %10s\n' "server: remaining stock" "${REMAINING:-?}"
printf '  %-38s %10s\n' "server: orders in Postgres" "${ORDERS:-n/a}"
echo

check "every shopper logged in and tried $ATTEMPTS times ($BUYERS sessions, $((BUYERS * ATTEMPTS)) purchases)" \
  test "$(n sessions)" -eq "$BUYERS" -a "$(n seckill)" -eq $((BUYERS * ATTEMPTS)) -a "$(n other_label)" -eq 0
check "no failed assertion (session $(n failed_session), seckill $(n failed_seckill))" \
  test "$(n failed_session)" -eq 0 -a "$(n failed_seckill)" -eq 0
check "/seckill statuses are 200, 409 and 429 only" only_keys status_ 200 409 429
check "409 codes are SOLD_OUT or ALREADY_PURCHASED" only_keys 409_ SOLD_OUT ALREADY_PURCHASED
check "429 dimensions are api, user or ip" only_keys 429_ api user ip
check "200s = min(stock, shoppers) = $EXPECTED_OK (got $OK)" test "$OK" -eq "$EXPECTED_OK"
check "no shopper bought twice ($(n users_ok) buyers)" test "$(n users_twice)" -eq 0 -a "$(n users_ok)" -eq "$OK"
check "server's remaining stock = stock - 200s ($STOCK - $OK)" test "${REMAINING:--1}" -eq $((STOCK - OK))
if [ -n "$ORDERS" ]; then
  check "Postgres holds one order per 200 ($ORDERS)" test "$ORDERS" -eq "$OK"
fi
echo
echo "results: $OUT (results.jtl, errors.xml, jmeter.log, app.log)"

if [ ${#FAILURES[@]} -gt 0 ]; then
  if [ "$OK" -lt "$EXPECTED_OK" ] && [ "$(n 429_api)" -gt 0 ]; then
    echo "note: $(n 429_api) purchases met the api limit (1000/s); shoppers it turned away may explain missing 200s"
  fi
  if grep -q '<failureMessage>' "$OUT/errors.xml" 2>/dev/null; then
    echo "first assertion failures (errors.xml):"
    grep -o '<failureMessage>[^<]*' "$OUT/errors.xml" | head -n 3 | sed 's/<failureMessage>/  /' || true
  fi
  echo "FAILED: ${#FAILURES[@]} check(s)"
  exit 1
fi
echo "PASSED"
