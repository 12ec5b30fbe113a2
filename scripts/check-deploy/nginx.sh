# shellcheck shell=bash
# scripts/check-deploy.sh: nginx -t on the shipped nginx.conf, rendered to run here
# (upstreams and listen on loopback, pid, logs and temp paths in the temp folder), as
# shipped and with its commented real-IP block enabled.

# nginx -t on a copy of the shipped config, made runnable here: upstream hosts ->
# loopback, listen -> a free loopback port, pid/log/temp paths -> the temp folder.
render_nginx() {
  local out=$1 enable_realip=$2 dir port
  dir=$(dirname "$out")
  mkdir -p "$dir/logs"
  port=$(free_port)
  sed -e 's/server app1:8080/server 127.0.0.1:8080/' \
      -e 's/server app2:8080/server 127.0.0.1:8081/' \
      -e "s#^\( *\)listen 80;#\1listen 127.0.0.1:$port;#" \
      -e "s#^pid .*;#pid $dir/nginx.pid;#" \
      -e "s#^error_log .*;#error_log $dir/logs/error.log warn;#" \
      -e "s#^\( *\)access_log .*;#\1access_log $dir/logs/access.log;\n\1client_body_temp_path $dir/body;\n\1proxy_temp_path $dir/proxy;#" \
      deploy/nginx/nginx.conf >"$out"
  if [ "$enable_realip" = yes ]; then
    sed -i -e 's/^\( *\)# \(set_real_ip_from .*;\).*/\1\2/' \
           -e 's/^\( *\)# \(real_ip_header .*;\)/\1\2/' \
           -e 's/^\( *\)# \(real_ip_recursive .*;\)/\1\2/' "$out"
    grep -q '^ *set_real_ip_from' "$out" || { echo "no set_real_ip_from block to enable"; return 1; }
  fi
  # The rendering must have hit every line it rewrites (else the shipped file changed
  # shape and this check would test something else).
  if grep -nE 'server app[12]:|listen 80;|^pid /tmp/nginx\.pid;|/dev/std(out|err)' "$out"; then
    echo "rendering missed the line(s) above"; return 1
  fi
}

check_nginx() {
  local dir=$TMP/nginx
  render_nginx "$dir/nginx.conf" no
  nginx -t -q -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" 2>&1 || { cat "$dir/logs/error.log" 2>/dev/null; return 1; }
  # shellcheck disable=SC2016 # nginx variables, matched literally
  grep -q 'proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;' "$dir/nginx.conf"
  # shellcheck disable=SC2016 # as above
  grep -q 'proxy_set_header X-Real-IP \$remote_addr;' "$dir/nginx.conf"
  nginx -v 2>&1
}

check_nginx_realip() {
  local dir=$TMP/nginx-realip
  local build_info
  build_info=$(nginx -V 2>&1)
  if ! grep -q 'http_realip_module' <<<"$build_info"; then
    echo "this nginx lacks the realip module"; return 1
  fi
  render_nginx "$dir/nginx.conf" yes
  nginx -t -q -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" 2>&1
  echo "the commented set_real_ip_from block is valid when uncommented"
}

# nginx -t on deploy/nginx/gate.conf (the NGINX gate, docs/edge.md), rendered to run
# here as render_nginx does, its secret filled in; tests/api/nginx_gate.rs runs it.
check_nginx_gate() {
  local dir=$TMP/nginx-gate port
  mkdir -p "$dir/logs"
  port=$(free_port)
  sed -e 's/server upstream:8000;/server 127.0.0.1:8000;/' \
      -e 's/server app1:8090/server 127.0.0.1:8090/' \
      -e 's/server app2:8090/server 127.0.0.1:8091/' \
      -e 's/"\${SECKILL_GATE_SECRET}"/"a-gate-secret-for-nginx-t"/' \
      -e "s#^\( *\)listen 80;#\1listen 127.0.0.1:$port;#" \
      -e "s#^pid .*;#pid $dir/nginx.pid;#" \
      -e "s#^error_log .*;#error_log $dir/logs/error.log warn;#" \
      -e "s#^\( *\)access_log .*;#\1access_log $dir/logs/access.log;\n\1client_body_temp_path $dir/body;\n\1proxy_temp_path $dir/proxy;#" \
      deploy/nginx/gate.conf >"$dir/nginx.conf"
  if grep -nE 'server (upstream|app[12]):|listen 80;|^pid /tmp/nginx-gate\.pid;|/dev/std(out|err)|"\$\{SECKILL_GATE_SECRET\}"' "$dir/nginx.conf"; then
    echo "rendering missed the line(s) above"; return 1
  fi
  nginx -t -q -e "$dir/logs/error.log" -p "$dir" -c "$dir/nginx.conf" 2>&1 || { cat "$dir/logs/error.log" 2>/dev/null; return 1; }
  # shellcheck disable=SC2016 # nginx directives, matched literally
  grep -q 'auth_request /_gate;' "$dir/nginx.conf"
  echo "gate.conf is valid"
}
