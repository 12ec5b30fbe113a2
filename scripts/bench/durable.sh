# shellcheck shell=bash
# scripts/bench.sh, scenario 11: what durability costs. orders_open_1000 against a
# Postgres cluster the bench starts itself with fsync=on and synchronous_commit=on
# (stopped and removed right after, also on failure), with the time of a synchronous
# write on its disk before and after; pg_durability prints a server's settings for the
# tables.

# The durable Postgres cluster: its own data folder, port and settings, run the way
# scripts/services.sh runs the private one (as the `postgres` user when we are root:
# pg_bin, pg_user and as_pg come from scripts/lib.sh).
DURABLE_DIR=""
start_durable_pg() {
  local bin dir
  bin=$(pg_bin)
  [ -n "$bin" ] || die "no Postgres server binaries (scripts/services.sh installs them)"
  ensure_port_free "$DURABLE_PG_PORT"
  dir="$PWD/$OUT/pg-durable"
  # The data folder must be reachable by the Postgres user (as pg_dir in scripts/services/single.sh).
  if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$PWD/$OUT"; then
    dir="/var/tmp/seckill-bench-$(echo "$PWD" | md5sum | cut -c1-12)/pg-durable"
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  DURABLE_DIR=$dir
  [ "$(id -u)" -ne 0 ] || chown -R postgres: "$dir"
  chmod 700 "$dir"
  # --no-sync skips initdb's own flush only (open_orders flushes before it measures);
  # the server itself runs with fsync on.
  as_pg "$bin/initdb" -D "$dir" -U "$(pg_user)" --auth=trust -E UTF8 --no-sync >/dev/null
  as_pg "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $DURABLE_PG_PORT -k $dir -c max_connections=200 -c fsync=on -c synchronous_commit=on" >&2 \
    || { tail -n 20 "$dir/server.log" >&2; die "the durable postgres did not start"; }
}
stop_durable_pg() {
  [ -n "$DURABLE_DIR" ] || return 0
  if [ -f "$DURABLE_DIR/postmaster.pid" ]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$DURABLE_DIR" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$DURABLE_DIR"
  DURABLE_DIR=""
}

# pg_durability URL: the server's durability settings, as the table prints them.
pg_durability() {
  psql "$1" -At -c 'SHOW fsync' -c 'SHOW synchronous_commit' | paste -sd' ' \
    | awk '{ print "fsync=" $1 ", synchronous_commit=" $2 }'
}

# sync_write_us DIR: µs per synchronous 8 kB write (O_DSYNC, as a WAL flush) in DIR, the
# mean of 500: what a commit waits for on this disk, to read the durable figures by.
sync_write_us() {
  local file="$1/sync-write.test" secs
  secs=$(LC_ALL=C dd if=/dev/zero of="$file" bs=8k count=500 oflag=dsync 2>&1 \
    | sed -nE 's/.* copied, ([0-9.e+-]+) s,.*/\1/p')
  rm -f "$file"
  awk -v s="${secs:-0}" 'BEGIN { printf "%.0f", s * 1e6 / 500 }'
}

# 11. What durability costs: orders_open_1000 against a Postgres cluster of our own with
# fsync=on and synchronous_commit=on, stopped and removed right after.
scenario_orders_durable() {
  want orders_open_durable || return 0
  local sync_before
  log "orders_open_durable: starting a durable Postgres cluster on port $DURABLE_PG_PORT"
  start_durable_pg
  DB_BASE="postgres://$(pg_user)@127.0.0.1:$DURABLE_PG_PORT"
  sync_before=$(sync_write_us "$DURABLE_DIR")
  open_orders orders_open_durable 1 1000 10
  # The disk is shared: a synchronous write's time before and after the run tells a
  # figure that other processes' writes (a build, another database) stretched.
  pg_durability "$DB_BASE/postgres" >"$OUT/pg.durable.txt"
  echo "$sync_before $(sync_write_us "$DURABLE_DIR")" >"$OUT/pg.durable.sync.txt"
  DB_BASE=$DB_BASE_URL
  stop_durable_pg
}
