#!/bin/sh
# The Alertmanager's configuration, written from the settings when its container starts
# (docker-compose.yml's `alertmanager` service runs this, then the Alertmanager on what it
# printed). Alertmanager reads no environment variables, and refuses an e-mail receiver
# without a smarthost, so a receiver is written only when its settings are given: with
# none, alerts show at 127.0.0.1:9093 and nobody is notified.
#
# Usage: configure.sh > alertmanager.yml
#
# Settings, all optional (deploy/README.md, "Alertmanager"):
#   ALERTMANAGER_WEBHOOK_URL        http(s) URL: critical and warning alerts are POSTed there
#                                   (Alertmanager's webhook JSON, annotations included)
#   ALERTMANAGER_EMAIL_TO           comma-separated addresses: every alert, info too, is
#                                   mailed there; then these two are required:
#   ALERTMANAGER_EMAIL_FROM         the sender's address
#   ALERTMANAGER_SMARTHOST          the SMTP server, host:port
#   ALERTMANAGER_SMTP_USERNAME      login (optional), and its
#   ALERTMANAGER_SMTP_PASSWORD      password
#   ALERTMANAGER_SMTP_REQUIRE_TLS   true (default) or false: STARTTLS required
#
# A setting given wrong (an e-mail without its smarthost, a URL that is not http(s), a
# line break) stops here with a message naming it, and the container with it.
# POSIX sh: it runs in the Alertmanager image's busybox and in scripts/check-deploy.sh.
set -eu

die() {
  echo "alertmanager configure.sh: $*" >&2
  exit 1
}

# quote VALUE: VALUE as a YAML single-quoted scalar (only ' is special there; line
# breaks are refused below, before anything is printed).
quote() {
  printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"
}

# The templates beside this script (/etc/alertmanager/templates in the container).
templates=$(cd "$(dirname "$0")" && pwd)/templates

value=
for name in ALERTMANAGER_WEBHOOK_URL ALERTMANAGER_EMAIL_TO ALERTMANAGER_EMAIL_FROM ALERTMANAGER_SMARTHOST \
  ALERTMANAGER_SMTP_USERNAME ALERTMANAGER_SMTP_PASSWORD; do
  eval "value=\${$name:-}"
  case $value in *'
'*) die "$name holds a line break" ;; esac
done

webhook=${ALERTMANAGER_WEBHOOK_URL:-}
email_to=${ALERTMANAGER_EMAIL_TO:-}
case $webhook in
  '' | http://?* | https://?*) ;;
  *) die "ALERTMANAGER_WEBHOOK_URL must be an http:// or https:// URL" ;;
esac
if [ -n "$email_to" ]; then
  [ -n "${ALERTMANAGER_EMAIL_FROM:-}" ] || die "ALERTMANAGER_EMAIL_TO is set: set ALERTMANAGER_EMAIL_FROM too"
  [ -n "${ALERTMANAGER_SMARTHOST:-}" ] || die "ALERTMANAGER_EMAIL_TO is set: set ALERTMANAGER_SMARTHOST (host:port) too"
  case $ALERTMANAGER_SMARTHOST in
    ?*:[0-9]*) ;;
    *) die "ALERTMANAGER_SMARTHOST must be host:port" ;;
  esac
  if [ -n "${ALERTMANAGER_SMTP_PASSWORD:-}" ] && [ -z "${ALERTMANAGER_SMTP_USERNAME:-}" ]; then
    die "ALERTMANAGER_SMTP_PASSWORD is set: set ALERTMANAGER_SMTP_USERNAME too"
  fi
  case ${ALERTMANAGER_SMTP_REQUIRE_TLS:-true} in
    true | false) ;;
    *) die "ALERTMANAGER_SMTP_REQUIRE_TLS must be true or false" ;;
  esac
fi

cat <<YAML
# Written by deploy/alertmanager/configure.sh from the ALERTMANAGER_* settings.
templates:
  - $(quote "$templates/*.tmpl")

# One notification per alert name (a rule firing for several policies or items comes as
# one), 30 s after its first alert, then every 5 minutes while it changes, and again
# every 4 hours while it fires. The root receiver notifies nobody: each receiver below
# is a route of its own, \`continue\` letting an alert reach both.
route:
  receiver: nobody
  group_by: [alertname]
  group_wait: 30s
  group_interval: 5m
  repeat_interval: 4h
YAML
if [ -n "$webhook$email_to" ]; then
  echo "  routes:"
fi
if [ -n "$webhook" ]; then
  cat <<YAML
    # Critical and warning alerts to the webhook (a chat, a pager); info ones only mailed.
    - receiver: webhook
      matchers: ['severity=~"critical|warning"']
      continue: true
YAML
fi
if [ -n "$email_to" ]; then
  cat <<YAML
    # Every alert by e-mail.
    - receiver: email
      continue: true
YAML
fi

cat <<YAML

receivers:
  - name: nobody
YAML
if [ -n "$webhook" ]; then
  cat <<YAML
  - name: webhook
    webhook_configs:
      - url: $(quote "$webhook")
        send_resolved: true
YAML
fi
if [ -n "$email_to" ]; then
  cat <<YAML
  - name: email
    email_configs:
      - to: $(quote "$email_to")
        from: $(quote "$ALERTMANAGER_EMAIL_FROM")
        smarthost: $(quote "$ALERTMANAGER_SMARTHOST")
        require_tls: ${ALERTMANAGER_SMTP_REQUIRE_TLS:-true}
        send_resolved: true
        # deploy/alertmanager/templates/seckill.tmpl
        headers:
          Subject: '{{ template "seckill.subject" . }}'
        text: '{{ template "seckill.text" . }}'
        html: '{{ template "seckill.html" . }}'
YAML
  if [ -n "${ALERTMANAGER_SMTP_USERNAME:-}" ]; then
    echo "        auth_username: $(quote "$ALERTMANAGER_SMTP_USERNAME")"
    echo "        auth_password: $(quote "${ALERTMANAGER_SMTP_PASSWORD:-}")"
  fi
fi
