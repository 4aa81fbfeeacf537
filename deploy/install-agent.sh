#!/usr/bin/env bash
# Install the Ascend Panel agent on this host (openEuler, Kylin, Ubuntu, ... anything with systemd and
# Python >= 3.11). The panel shows the one-line command that runs this script:
#
#   curl -fsSL http://PANEL/nodes/agent/install.sh | sudo bash -s -- \
#       --panel http://PANEL --node NAME --token TOKEN --broker redis://BROKER:6379/0
#
# It writes /etc/ascend-panel/agent.env, creates the venv /opt/ascend-panel/venv, installs the agent
# package the panel serves, installs the systemd unit and starts it. Running it again upgrades in place.
#
# Environment: DESTDIR stages every file under another root (for packaging and tests);
# SYSTEMD_OFFLINE=1 skips systemctl (no daemon-reload, enable or start).
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: install-agent.sh --panel URL --node NAME --broker URL [options]

  --panel URL       the panel's address, e.g. http://panel.example:8000 (required)
  --node NAME       this node's name in the panel: letters, digits, - and _ (required)
  --broker URL      the Celery broker the panel uses, e.g. redis://panel.example:6379/0 (required)
  --token TOKEN     the join token the panel showed; registers the node on the agent's first heartbeat
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

panel="" node="" broker="" token="" package="" unit="" python="" index_url=""
while [ $# -gt 0 ]; do
    case "$1" in
        --panel | --node | --broker | --token | --package | --unit | --python | --index-url)
            [ $# -ge 2 ] || fail "$1 needs a value"
            case "$1" in
                --panel) panel="$2" ;;
                --node) node="$2" ;;
                --broker) broker="$2" ;;
                --token) token="$2" ;;
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
[ -n "$broker" ] || fail "--broker is required: the broker URL the panel uses, e.g. redis://panel.example:6379/0"
[[ "$panel" =~ ^https?://[^[:space:]\"\'\\]+$ ]] || fail "--panel must be an http:// or https:// URL, got '$panel'"
[[ "$node" =~ ^[A-Za-z0-9_-]{1,63}$ ]] || fail "--node must be 1-63 letters, digits, - or _, got '$node'"
[[ "$broker" =~ ^(redis|rediss|amqp|amqps)://[^[:space:]\"\'\\]+$ ]] ||
    fail "--broker must be a redis://, rediss:// or amqp:// URL, got '$broker'"
[[ -z "$token" || "$token" =~ ^[A-Za-z0-9_-]+$ ]] || fail "--token is not a join token as the panel shows it"
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

echo "==> Writing $etc_dir/agent.env"
mkdir -p "$etc_dir" "$app_dir" "$unit_dir"
umask 077 # the file holds the broker URL (maybe with a password) and the join token
{
    echo "# Written by install-agent.sh; read by the ascend-panel-agent systemd unit."
    echo "ASCEND_PANEL_NODE_NAME=$node"
    echo "ASCEND_PANEL_URL=$panel"
    echo "CELERY_BROKER_URL=$broker"
    if [ -n "$token" ]; then echo "ASCEND_PANEL_JOIN_TOKEN=$token"; fi
} > "$etc_dir/agent.env.new"
mv -f "$etc_dir/agent.env.new" "$etc_dir/agent.env"
umask 022

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
