#!/usr/bin/env bash
# Installs Debian's nginx when it is missing, without letting its daemon start (the
# package starts one on :80): tests/api/nginx_gate.rs runs a real nginx of its own and
# calls this first; scripts/test.sh calls it before the suite. The same guard
# scripts/check-deploy.sh uses (a policy-rc.d that says "not now", put back after).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "install-nginx: $*" >&2; }
die() { log "error: $*"; exit 2; }
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then exit 0; fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/seckill-install-nginx.XXXXXX")
POLICY_RC=/usr/sbin/policy-rc.d
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
# shellcheck source=scripts/check-deploy/packages.sh
. "$ROOT/scripts/check-deploy/packages.sh"
trap 'restore_policy_rc; rm -rf "$TMP"' EXIT
install_policy_rc
# nginx-light is gone from newer Debian releases: fall back to nginx.
apt_install nginx-light || apt_install nginx
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || die "nginx is still missing"
