#!/usr/bin/env bash
# stray-adapter.sh: a §5 command adapter that deploys the first-build service slot
# (builder-app.service runs a tiny loop) and leaves processes running from its SSH
# sessions inside the territory, then works until it is stopped or its time ends.
# Used by tests/test_containment.py.
set -euo pipefail
SSHPASS=$(set +u; . "$AOE_CREDENTIAL_FILE" >/dev/null 2>&1; printf '%s' "${AOE_SSH_PASSWORD:-}")
export SSHPASS
guest() {
  sshpass -e ssh -p "$AOE_SSH_PORT" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o PreferredAuthentications=password -o PubkeyAuthentication=no \
    -o ConnectTimeout=10 "root@$AOE_TERRITORY_HOST" "$@"
}
# the deployment: under systemd, not the agent's process
guest 'mkdir -p /opt/builder && printf "import time\nwhile True:\n    time.sleep(1)\n" > /opt/builder/app.py &&
       systemctl reset-failed builder-app.service; systemctl restart builder-app.service'
# strays: a setsid + nohup sleep and a background shell loop, each from its own SSH session
guest 'setsid nohup sleep 601 >/dev/null 2>&1 </dev/null & echo started'
guest 'nohup bash -c "while :; do sleep 0.5; done" stray-loop >/dev/null 2>&1 </dev/null & echo started'
echo "deployed; strays started"
sleep 1000
