# shellcheck shell=bash
# scripts/check-deploy.sh: the alerting side, read without running it: the Alertmanager
# configuration deploy/alertmanager/configure.sh generates at container start, in every
# variant (no settings, a webhook, e-mail, both) through `amtool check-config` and
# amtool's own routing; amtool failing on a broken one; the e-mail templates rendered by
# amtool; and every alert rule's runbook link pointing at its section of deploy/README.md.

# am_configure [VAR=VALUE...]: configure.sh's output with only these settings (a
# developer's own ALERTMANAGER_* cannot change the result).
am_configure() {
  env -u ALERTMANAGER_WEBHOOK_URL -u ALERTMANAGER_EMAIL_TO -u ALERTMANAGER_EMAIL_FROM \
    -u ALERTMANAGER_SMARTHOST -u ALERTMANAGER_SMTP_USERNAME -u ALERTMANAGER_SMTP_PASSWORD \
    -u ALERTMANAGER_SMTP_REQUIRE_TLS "$@" sh deploy/alertmanager/configure.sh
}

# Dummy settings (the .invalid domain never resolves).
AM_WEBHOOK=(ALERTMANAGER_WEBHOOK_URL=https://hooks.example.invalid/seckill)
AM_EMAIL=("ALERTMANAGER_EMAIL_TO=ops@example.invalid,oncall@example.invalid"
  ALERTMANAGER_EMAIL_FROM=seckill@example.invalid ALERTMANAGER_SMARTHOST=smtp.example.invalid:587
  ALERTMANAGER_SMTP_USERNAME=seckill "ALERTMANAGER_SMTP_PASSWORD=it's a secret")

# am_routes CONFIG RECEIVERS LABELS...: amtool's routing sends an alert with LABELS to
# RECEIVERS (comma-separated, in order).
am_routes() {
  local config=$1 want=$2 got
  shift 2
  got=$(amtool config routes test --config.file="$config" "$@" 2>/dev/null)
  [ "$got" = "$want" ] || { echo "$(basename "$config"): $* goes to '$got', not '$want'"; return 1; }
}

# am_refuses NAME [VAR=VALUE...]: configure.sh exits non-zero with these settings, its
# message naming NAME.
am_refuses() {
  local name=$1 out
  shift
  if out=$(am_configure "$@" 2>&1); then echo "configure.sh accepted: $*"; return 1; fi
  grep -q "$name" <<<"$out" || { echo "configure.sh's refusal does not name $name: $out"; return 1; }
}

check_amtool_configs() {
  local dir=$TMP/alertmanager v
  mkdir -p "$dir"
  am_configure >"$dir/none.yml"
  am_configure "${AM_WEBHOOK[@]}" >"$dir/webhook.yml"
  am_configure "${AM_EMAIL[@]}" >"$dir/email.yml"
  am_configure "${AM_WEBHOOK[@]}" "${AM_EMAIL[@]}" >"$dir/both.yml"
  for v in none webhook email both; do
    amtool check-config "$dir/$v.yml" >"$dir/$v.out" 2>&1 || { cat "$dir/$v.out"; echo "amtool refuses the $v configuration"; return 1; }
  done
  # Critical and warning alerts reach the webhook and the e-mail, info ones the e-mail
  # only; without settings, nobody.
  for v in critical warning info; do am_routes "$dir/none.yml" nobody alertname=SeckillX severity=$v; done
  am_routes "$dir/webhook.yml" webhook alertname=SeckillX severity=critical
  am_routes "$dir/webhook.yml" nobody alertname=SeckillX severity=info
  am_routes "$dir/email.yml" email alertname=SeckillX severity=warning
  am_routes "$dir/email.yml" email alertname=SeckillX severity=info
  am_routes "$dir/both.yml" webhook,email alertname=SeckillX severity=critical
  am_routes "$dir/both.yml" webhook,email alertname=SeckillX severity=warning
  am_routes "$dir/both.yml" email alertname=SeckillX severity=info
  # Every severity the rules use is one of those three.
  local unknown
  unknown=$($PY -c 'import yaml; print(" ".join(sorted({r["labels"]["severity"] for g in yaml.safe_load(open("deploy/prometheus/alerts.yml"))["groups"] for r in g["rules"]} - {"critical", "warning", "info"})))')
  [ -z "$unknown" ] || { echo "alerts.yml uses severities the routes do not know: $unknown"; return 1; }
  # amtool fails on a broken configuration: the e-mail receiver without its smarthost.
  grep -q 'smarthost:' "$dir/email.yml"
  sed '/smarthost:/d' "$dir/email.yml" >"$dir/broken.yml"
  if amtool check-config "$dir/broken.yml" >"$dir/broken.out" 2>&1; then
    echo "amtool accepted an e-mail receiver without a smarthost"; return 1
  fi
  grep -q 'smarthost' "$dir/broken.out" || { cat "$dir/broken.out"; return 1; }
  # configure.sh refuses what it cannot write, naming the setting, before printing.
  am_refuses ALERTMANAGER_SMARTHOST ALERTMANAGER_EMAIL_TO=ops@example.invalid ALERTMANAGER_EMAIL_FROM=a@example.invalid
  am_refuses ALERTMANAGER_EMAIL_FROM ALERTMANAGER_EMAIL_TO=ops@example.invalid ALERTMANAGER_SMARTHOST=smtp.example.invalid:25
  am_refuses ALERTMANAGER_WEBHOOK_URL ALERTMANAGER_WEBHOOK_URL=hooks.example.invalid
  am_refuses ALERTMANAGER_SMTP_REQUIRE_TLS "${AM_EMAIL[@]}" ALERTMANAGER_SMTP_REQUIRE_TLS=yes
  am_refuses ALERTMANAGER_WEBHOOK_URL "ALERTMANAGER_WEBHOOK_URL=https://hooks.example.invalid/
x"
  echo "none, webhook, e-mail, both valid and routed; a smarthost-less e-mail fails ($(amtool --version 2>&1 | awk 'NR == 1 { print $1, $3 }' | tr -d ,))"
}

# The e-mail's subject, text and HTML, rendered by amtool on one firing alert: each names
# the alert and its severity, the bodies its summary and runbook.
check_amtool_templates() {
  local dir=$TMP/alertmanager t out
  mkdir -p "$dir"
  cat >"$dir/data.json" <<'JSON'
{"receiver": "email", "status": "firing", "externalURL": "http://127.0.0.1:9093",
 "groupLabels": {"alertname": "SeckillHistoryFoldStalled"},
 "commonLabels": {"alertname": "SeckillHistoryFoldStalled", "severity": "warning"},
 "commonAnnotations": {},
 "alerts": [{"status": "firing",
   "labels": {"alertname": "SeckillHistoryFoldStalled", "severity": "warning"},
   "annotations": {"summary": "The history fold has stalled: the backlog grows and nothing is folded",
     "description": "For over 5 minutes the backlog has grown.",
     "runbook_url": "deploy/README.md#seckillhistoryfoldstalled-warning"},
   "startsAt": "2026-12-04T18:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
   "generatorURL": "http://prometheus:9090/graph"}]}
JSON
  for t in subject text html; do
    out=$(amtool template render --template.glob='deploy/alertmanager/templates/*.tmpl' \
      --template.type="$([ $t = html ] && echo html || echo text)" \
      --template.text="{{ template \"seckill.$t\" . }}" --template.data="$dir/data.json")
    grep -q 'SeckillHistoryFoldStalled (warning)' <<<"$out" || { echo "seckill.$t lacks the alert's name and severity: $out"; return 1; }
    [ $t = subject ] && { echo "subject: $out"; continue; }
    grep -q 'The history fold has stalled' <<<"$out" || { echo "seckill.$t lacks the summary: $out"; return 1; }
    grep -q 'deploy/README.md#seckillhistoryfoldstalled-warning' <<<"$out" || { echo "seckill.$t lacks the runbook: $out"; return 1; }
  done
}

# Every rule's runbook_url is deploy/README.md#<its heading's anchor>, and the heading
# `### <alert> (<severity>)` is there: a runbook for each alert, at its severity.
check_alert_runbooks() {
  $PY - <<'EOF'
import re, yaml
rules = [r for g in yaml.safe_load(open("deploy/prometheus/alerts.yml"))["groups"] for r in g["rules"] if "alert" in r]
readme = open("deploy/README.md").read()
headings = set(re.findall(r"^### (\w+ \(\w+\))$", readme, re.M))
def anchor(heading):
    # GitHub's: lower case, punctuation dropped, spaces to hyphens.
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
bad = []
for r in rules:
    heading = f"{r['alert']} ({r['labels']['severity']})"
    want = "deploy/README.md#" + anchor(heading)
    if r["annotations"].get("runbook_url") != want:
        bad.append(f"{r['alert']}: runbook_url {r['annotations'].get('runbook_url')!r}, want {want!r}")
    if heading not in headings:
        bad.append(f"{r['alert']}: deploy/README.md has no '### {heading}'")
assert not bad, "\n".join(bad)
print(f"{len(rules)} rules, each with its runbook section in deploy/README.md")
EOF
}
