# shellcheck shell=bash
# scripts/check-deploy.sh: the tools the checks need (promtool, prometheus, amtool,
# docker-compose, nginx, jq, curl, PyYAML), installed from Debian when missing, with a
# guard that keeps the packages' daemons from starting.

# --- service start-up guard for apt ---------------------------------------------------
# Debian's packages start their daemons on install (nginx on :80, prometheus on :9090,
# prometheus-alertmanager on :9093 and its cluster port :9094).
# A policy-rc.d that exits 101 tells invoke-rc.d "not now". An existing one is put back
# exactly as it was. Which of the two it was is kept in a file: the install runs in a
# check's subshell, and the exit trap must be able to undo it even if that was killed.
POLICY_RC_STATE_FILE="$TMP/policy-rc.state"   # created | replaced (absent: untouched)
install_policy_rc() {
  if [ -e "$POLICY_RC" ]; then
    as_root cp -p "$POLICY_RC" "$TMP/policy-rc.d.orig"
    echo replaced >"$POLICY_RC_STATE_FILE"
  else
    echo created >"$POLICY_RC_STATE_FILE"
  fi
  printf '#!/bin/sh\n# temporary: scripts/check-deploy.sh installs packages\nexit 101\n' >"$TMP/policy-rc.d"
  as_root install -m 0755 "$TMP/policy-rc.d" "$POLICY_RC"
}
restore_policy_rc() {
  [ -f "$POLICY_RC_STATE_FILE" ] || return 0
  case "$(cat "$POLICY_RC_STATE_FILE")" in
    created) as_root rm -f "$POLICY_RC" || true ;;
    replaced) as_root cp -p "$TMP/policy-rc.d.orig" "$POLICY_RC" || true ;;
  esac
  rm -f "$POLICY_RC_STATE_FILE"
}

check_packages() {
  local missing=()
  command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
  # amtool and the Alertmanager itself (alerting.sh, live.sh).
  command -v amtool >/dev/null && command -v prometheus-alertmanager >/dev/null || missing+=(prometheus-alertmanager)
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  command -v nginx >/dev/null || missing+=(nginx-light)
  command -v jq >/dev/null || missing+=(jq)
  command -v curl >/dev/null || missing+=(curl)
  [ -x "$PY" ] || missing+=(python3)
  $PY -c 'import yaml' 2>/dev/null || missing+=(python3-yaml)
  if [ ${#missing[@]} -eq 0 ]; then echo "promtool, prometheus, amtool, docker-compose, nginx, jq, curl present"; return 0; fi
  echo "installing: ${missing[*]}"
  install_policy_rc
  local rc=0
  as_root timeout 300 flock "$APT_LOCK" env DEBIAN_FRONTEND=noninteractive apt-get update -qq || rc=$?
  if [ $rc -eq 0 ]; then
    as_root timeout 600 flock "$APT_LOCK" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" || {
      # nginx-light is gone from newer Debian releases: fall back to nginx.
      local alt=("${missing[@]/nginx-light/nginx}")
      as_root timeout 600 flock "$APT_LOCK" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${alt[@]}" || rc=$?
    }
  fi
  restore_policy_rc
  [ $rc -eq 0 ]
  command -v promtool && command -v prometheus && command -v amtool && command -v prometheus-alertmanager && command -v docker-compose && command -v nginx
  echo "installed: ${missing[*]}"
}
