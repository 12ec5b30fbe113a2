# shellcheck shell=bash
# scripts/check-deploy.sh: the Dockerfile's build context: every COPY source exists and
# is not excluded by .dockerignore, the sources and run-time files the image needs are
# copied, the build is offline, locked and release, it runs as a non-root USER, and
# .dockerignore keeps the heavy folders out.

check_dockerfile_context() {
  # Sources of every COPY that reads the build context (not --from=another stage).
  local src missing=() ignored=()
  while read -r src; do
    [ -e "$src" ] || missing+=("$src")
    # .dockerignore entries are paths from the context root (trailing / = folder).
    while read -r pat; do
      if [ -z "$pat" ] || [ "${pat#\#}" != "$pat" ]; then continue; fi
      pat=${pat%/}
      case "$src" in "$pat" | "$pat"/*) ignored+=("$src ($pat)") ;; esac
    done <.dockerignore
  done < <(awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' Dockerfile)
  [ ${#missing[@]} -eq 0 ] || { echo "COPY sources missing: ${missing[*]}"; return 1; }
  [ ${#ignored[@]} -eq 0 ] || { echo "COPY sources excluded by .dockerignore: ${ignored[*]}"; return 1; }
  for src in Cargo.toml Cargo.lock .sqlx migrations lua src loadtest/core/Cargo.toml loadtest/core/src loadtest/loadgen/Cargo.toml loadtest/loadgen/src; do
    grep -qE "^COPY ([^ ]+ )*$src( |$)" Dockerfile || { echo "Dockerfile does not copy $src"; return 1; }
  done
  # Files the app reads at run time (the web pages) must reach the runtime image.
  if [ -d static ]; then
    grep -qE '^COPY static ' Dockerfile || { echo "Dockerfile does not copy static/"; return 1; }
  fi
  grep -q 'SQLX_OFFLINE=true' Dockerfile
  grep -q -- '--release --locked --bin seckill' Dockerfile
  grep -qE '^USER ' Dockerfile
  for ign in target .local test-artifacts node_modules .git; do
    grep -qx "$ign/" .dockerignore || { echo ".dockerignore lacks $ign/"; return 1; }
  done
  echo "all COPY sources present and not ignored"
}
