#!/usr/bin/env bash
# Runs at every boot before traffic-surge.service. Writes only what is absent:
# the editable service program (from the pristine copy next to this script) and the
# historical priority ledger.
set -euo pipefail
here=/usr/lib/aoe-arena/traffic-surge
install -d -m 0755 /opt/traffic-surge /var/lib/traffic-surge
if [[ ! -e /opt/traffic-surge/app.py ]]; then
  install -m 0755 "$here/app.py" /opt/traffic-surge/app.py
fi
if [[ ! -e /var/lib/traffic-surge/priority.json ]]; then
  printf '%s\n' '{"history-amber-a91":"ledger-alpha","history-cobalt-f73":"ledger-beta","history-umber-2d4":"ledger-gamma"}' \
    > /var/lib/traffic-surge/priority.json
fi
