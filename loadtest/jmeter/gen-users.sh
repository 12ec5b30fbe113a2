#!/usr/bin/env bash
# Prints the shoppers CSV for seckill.jmx: one "userId,ip" row per shopper, no header
# (JMeter 2.13's CSV Data Set cannot skip one).
#
#   loadtest/jmeter/gen-users.sh COUNT [USERS_PER_IP] [FIRST_USER_ID] > users.csv
#
# USERS_PER_IP (default 1) consecutive users share one address, to exercise the ip limit
# (5 per 60 s) as well as the user limit (3 per 60 s). With one user per address, user N
# gets address number N - 1 (as in loadtest/k6/seckill.js), so another FIRST_USER_ID also
# means other addresses and fresh ip quotas. Addresses come from 198.18.0.0/15,
# the range set aside for benchmarking (RFC 2544): they are only ever written into
# X-Forwarded-For, never connected to, and cannot be mistaken for a real client.
set -euo pipefail

count=${1:?usage: gen-users.sh COUNT [USERS_PER_IP] [FIRST_USER_ID]}
per_ip=${2:-1}
first=${3:-1}

[[ $count =~ ^[0-9]+$ && $per_ip =~ ^[1-9][0-9]*$ && $first =~ ^[1-9][0-9]*$ ]] \
  || { echo "gen-users.sh: COUNT, USERS_PER_IP and FIRST_USER_ID must be positive integers" >&2; exit 2; }
# 2 x 256 x 254 host addresses (last octet 1..254) fit in 198.18.0.0/15.
(( (first - 1 + count + per_ip - 1) / per_ip <= 2 * 256 * 254 )) \
  || { echo "gen-users.sh: too many addresses for 198.18.0.0/15" >&2; exit 2; }

# awk rather than a shell loop: a million rows take a second, not minutes.
awk -v n="$count" -v per="$per_ip" -v first="$first" 'BEGIN {
  for (k = 0; k < n; k++) {
    a = int((first - 1 + k) / per)
    printf "%d,198.%d.%d.%d\n", first + k, 18 + int(a / (256 * 254)), int(a / 254) % 256, a % 254 + 1
  }
}'
