# shellcheck shell=bash
# scripts/bench.sh, scenarios 7, 9 and 10: orders. Orders per second on one item in the
# closed model (every request a new order); then the open model (orders-open.sh): 1000
# orders/s for 10 s with api at 2000/s, and the highest rate that keeps p99 under 10 ms
# on one instance and on two.

# 7. Orders per second on one item, every request a successful purchase.
scenario_orders_closed() {
  want orders || return 0
  local item
  start_instances 1 "$OUT/three.toml"
  item=$(create_item 1000000)
  loadgen orders 1 --item "$item" --users $((USERS * 5)) --ips $((USERS * 5)) --first-user 1000000 \
    --requests $((USERS * 5))
  stop_instances
}

scenarios_orders_open() {
  # 9. Orders, open model (issue 13): 1000 new orders/s for 10 s, api at 2000/s.
  if want orders_open_1000; then
    open_orders orders_open_1000 1 1000 10
  fi

  # 10. The highest open-model order rate with p99 under 10 ms, on one instance and on two
  # (loadgen alternates between them). Its ceiling is "POST /seckill, 3 dimensions" above.
  if want orders_max_open; then
    max_open orders_max_open 1
  fi
  if want orders_max_open_2x; then
    max_open orders_max_open_2x 2
  fi
}
