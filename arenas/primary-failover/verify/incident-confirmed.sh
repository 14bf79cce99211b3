#!/usr/bin/env bash
# Milestone failed-primary-preserved: over SSH, the failed primary's incident marker
# /var/lib/failover/primary.failed still exists and nothing listens on its port 8081
# (`ss -lnt` shows no ":8081 "). True in the starting state; it stays true only if the
# player keeps the marker and never brings 8081 back.
# Evidence: {"failed_primary":8081,"listening":false,"preserved":true}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_EVIDENCE_FILE

load_password
probe_state || fail "$PROBE_ERR"
[[ "$S_failed" == yes ]] || fail "$STATE_DIR/primary.failed is missing: the failed primary's incident marker must be kept"
check_old_port_closed ""

write_evidence "{\"failed_primary\":$((OLD_PORT)),\"listening\":false,\"preserved\":true}"
