#!/usr/bin/env bash
# Install the Ascend Panel agent on this host (openEuler, Kylin, Ubuntu, ... anything with systemd and
# Python >= 3.11). The panel shows the one-line command that runs this script: it downloads the script,
# checks it against a pinned sha256 and runs it with the join token on stdin (never on a command line):
#
#   curl -fsSL http://PANEL/nodes/agent/install.sh -o /tmp/ascend-panel-install.sh \
#     && echo 'SHA256  /tmp/ascend-panel-install.sh' | sha256sum -c --quiet - \
#     && printf '%s\n' TOKEN | sudo bash /tmp/ascend-panel-install.sh --panel http://PANEL --node NAME \
#          --package-sha256 PACKAGE_SHA256
#
# It downloads the agent package and checks its sha256, creates the venv /opt/ascend-panel/venv and installs
# the package, trades the join token (once) at the panel for this node's credential and its own broker user,
# writes them to /etc/ascend-panel/agent.env (mode 600), installs the systemd unit and starts it. Running it
# again without a token upgrades in place and keeps the credential.
#
# Environment: ASCEND_PANEL_JOIN_TOKEN gives the token instead of stdin; DESTDIR stages every file under
# another root (for packaging and tests); SYSTEMD_OFFLINE=1 skips systemctl (no daemon-reload, enable, start).
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: printf '%s\n' TOKEN | install-agent.sh --panel URL --node NAME [options]

  --panel URL            the panel's address, e.g. https://panel.example (required)
  --node NAME            this node's name in the panel: letters, digits, - and _ (required)
  --package-sha256 HEX   the agent package's sha256 as the panel pinned it; the install stops on a mismatch
  --broker URL           the broker address, when this host reaches it under another name than the panel says
  --package SRC     agent package (URL or file); default PANEL/nodes/agent/ascend-panel.tar.gz
  --unit SRC        systemd unit (URL or file); default PANEL/nodes/agent/ascend-panel-agent.service
  --python PATH     interpreter for the venv (Python >= 3.11); default python3.11, then python3
  --index-url URL   a pip index (internal mirror) for the agent's dependencies
  -h, --help        this text
USAGE
}

fail() {
    echo "install-agent: $*" >&2
    exit 2
}

panel="" node="" broker="" package_sha256="" package="" unit="" python="" index_url=""
while [ $# -gt 0 ]; do
    case "$1" in
        --token) fail "the join token is read from stdin (or ASCEND_PANEL_JOIN_TOKEN), never from the command line, where ps shows it" ;;
        --panel | --node | --broker | --package-sha256 | --package | --unit | --python | --index-url)
            [ $# -ge 2 ] || fail "$1 needs a value"
            case "$1" in
                --panel) panel="$2" ;;
                --node) node="$2" ;;
                --broker) broker="$2" ;;
                --package-sha256) package_sha256="$2" ;;
                --package) package="$2" ;;
                --unit) unit="$2" ;;
                --python) python="$2" ;;
                --index-url) index_url="$2" ;;
            esac
            shift 2
            ;;
        -h | --help)
            usage
            exit 0
            ;;
        *) fail "unknown option $1 (see --help)" ;;
    esac
done

[ -n "$panel" ] || fail "--panel is required: the panel's URL, e.g. http://panel.example:8000"
[ -n "$node" ] || fail "--node is required: this node's name in the panel"
[[ "$panel" =~ ^https?://[^[:space:]\"\'\\]+$ ]] || fail "--panel must be an http:// or https:// URL, got '$panel'"
[[ "$node" =~ ^[A-Za-z0-9_-]{1,63}$ ]] || fail "--node must be 1-63 letters, digits, - or _, got '$node'"
[[ -z "$broker" || "$broker" =~ ^(redis|rediss|amqp|amqps)://[^[:space:]\"\'\\]+$ ]] ||
    fail "--broker must be a redis://, rediss:// or amqp:// URL"
[[ -z "$package_sha256" || "$package_sha256" =~ ^[0-9a-f]{64}$ ]] || fail "--package-sha256 must be 64 hex digits"
token="${ASCEND_PANEL_JOIN_TOKEN:-}"
# stdin holds the token unless it is a terminal, or the script itself (`bash -s`, where BASH_SOURCE is empty).
if [ -z "$token" ] && [ ! -t 0 ] && [ -n "${BASH_SOURCE[0]:-}" ]; then
    IFS= read -r token || true
fi
[[ -z "$token" || "$token" =~ ^[A-Za-z0-9_-]+$ ]] || fail "stdin did not give a join token as the panel shows it"
panel="${panel%/}"
package="${package:-$panel/nodes/agent/ascend-panel.tar.gz}"
unit="${unit:-$panel/nodes/agent/ascend-panel-agent.service}"

if [ -z "$python" ]; then
    python="$(command -v python3.11 || command -v python3 || true)"
    [ -n "$python" ] || fail "no python3 found: install Python 3.11 (openEuler: dnf install python3.11) or pass --python"
fi
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    fail "$python is older than Python 3.11: install python3.11 (openEuler: dnf install python3.11) and pass --python"

root="${DESTDIR:-}"
etc_dir="$root/etc/ascend-panel"
app_dir="$root/opt/ascend-panel"
unit_dir="$root/etc/systemd/system"
venv="$app_dir/venv"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

fetch() { # fetch SRC DEST: a URL with curl, anything else as a local file
    case "$1" in
        http://* | https://*) curl -fsSL --retry 3 -o "$2" "$1" || fail "cannot download $1: check that this host reaches the panel" ;;
        *) cp -- "$1" "$2" || fail "cannot read $1" ;;
    esac
}

echo "==> Downloading the agent package and unit"
case "$package" in
    *.whl) package_file="$work/$(basename "$package")" ;;
    *) package_file="$work/ascend-panel.tar.gz" ;;
esac
fetch "$package" "$package_file"
fetch "$unit" "$work/ascend-panel-agent.service"

if [ -n "$package_sha256" ]; then
    echo "$package_sha256  $package_file" | sha256sum -c --quiet - ||
        fail "the agent package does not match the sha256 the panel pinned: not installing it (download it again, or ask the panel for a new command)"
fi

mkdir -p "$etc_dir" "$app_dir" "$unit_dir"
echo "==> Creating the venv $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip_args=(--disable-pip-version-check --quiet)
if [ -n "$index_url" ]; then pip_args+=(--index-url "$index_url"); fi
echo "==> Installing the agent"
"$venv/bin/python" -m pip install "${pip_args[@]}" --upgrade "$package_file" ||
    fail "pip could not install the agent; if this host has no internet, pass --index-url with your internal mirror"
# What the agent imports when it starts, tasks included: a missing dependency fails here, not in a unit that
# restarts forever.
(cd / && "$venv/bin/python" -c 'import workers.agent, workers.tasks') ||
    fail "the agent package was installed but does not import"

umask 077 # the files below hold the node's credential and the broker URL (maybe with a password)
env_file="$etc_dir/agent.env"
if [ -n "$token" ]; then
    echo "==> Joining the panel as $node"
    ASCEND_PANEL_JOIN_TOKEN="$token" "$venv/bin/python" -c '
import json, os, sys
json.dump({"node": sys.argv[1], "token": os.environ["ASCEND_PANEL_JOIN_TOKEN"]}, open(sys.argv[2], "w"))
' "$node" "$work/join.json"
    status="$(curl -sS --retry 3 -o "$work/joined.json" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary @"$work/join.json" "$panel/nodes/agent/join/")" ||
        fail "cannot reach $panel/nodes/agent/join/: check that this host reaches the panel"
    [ "$status" = "200" ] || fail "the panel refused to join: $(cat "$work/joined.json")"
    # The broker's CA, when the panel gave one (amqps://): pinned here, the agent trusts no other for it.
    "$venv/bin/python" -c '
import json, sys
answer = json.load(open(sys.argv[1]))
print(answer["agent_key"]); print(sys.argv[2] or answer["broker_url"])
if answer.get("broker_ca_pem"):
    open(sys.argv[3], "w").write(answer["broker_ca_pem"])
' "$work/joined.json" "$broker" "$etc_dir/broker-ca.pem.new" > "$work/credential"
    { read -r agent_key; read -r broker; } < "$work/credential"
    # The answer decides: a CA kept from an earlier join would make the agent refuse a broker that a public CA
    # (or plain amqp://) now serves.
    if [ -f "$etc_dir/broker-ca.pem.new" ]; then
        mv -f "$etc_dir/broker-ca.pem.new" "$etc_dir/broker-ca.pem"
    else
        rm -f "$etc_dir/broker-ca.pem"
    fi
elif [ -f "$env_file" ] && grep -q '^ASCEND_PANEL_AGENT_KEY=' "$env_file"; then
    echo "==> No join token: keeping this node's credential from $env_file"
    agent_key="$(sed -n 's/^ASCEND_PANEL_AGENT_KEY=//p' "$env_file")"
    [ -n "$broker" ] || broker="$(sed -n 's/^CELERY_BROKER_URL=//p' "$env_file")"
else
    fail "this host has no credential yet: pipe the join token the panel shows into this script"
fi

echo "==> Writing $env_file"
{
    echo "# Written by install-agent.sh; read by the ascend-panel-agent systemd unit. Keep it mode 600."
    echo "ASCEND_PANEL_NODE_NAME=$node"
    echo "ASCEND_PANEL_URL=$panel"
    echo "CELERY_BROKER_URL=$broker"
    echo "ASCEND_PANEL_AGENT_KEY=$agent_key"
    if [ -f "$etc_dir/broker-ca.pem" ]; then echo "ASCEND_PANEL_BROKER_CA_FILE=/etc/ascend-panel/broker-ca.pem"; fi
} > "$env_file.new"
mv -f "$env_file.new" "$env_file"
umask 022

echo "==> Installing the systemd unit"
install -m 0644 "$work/ascend-panel-agent.service" "$unit_dir/ascend-panel-agent.service"

if [ "${SYSTEMD_OFFLINE:-0}" = "1" ]; then
    echo "==> SYSTEMD_OFFLINE=1: not starting the unit"
else
    systemctl daemon-reload
    systemctl enable ascend-panel-agent.service
    systemctl restart ascend-panel-agent.service
    echo "==> ascend-panel-agent is running; node $node appears in the panel after its first heartbeat"
fi
