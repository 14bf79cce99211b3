#!/usr/bin/env bash
# Milestone old-primary-fenced: over SSH, the failed primary is fenced and traffic is
# switched: /var/lib/failover/primary.failed and primary.fenced both exist,
# "$(cat upstream)" is 8082, "$(cat replica.role)" is primary, and nothing listens on
# port 8081.
# Evidence: {"old_port":8081,"old_primary":"fenced","promoted_port":8082}
. "$(dirname "$0")/lib.sh"
need_env AOE_HOST AOE_SSH_PORT AOE_EVIDENCE_FILE

load_password
probe_state || fail "$PROBE_ERR"
[[ "$S_failed" == yes ]] || fail "$STATE_DIR/primary.failed is missing: the failed primary's incident marker must be kept"
[[ "$S_fenced" == yes ]] || fail "$STATE_DIR/primary.fenced is missing: the old primary was never fenced (it must exist before writes are restored)"
[[ "$S_upstream_ok" == yes ]] || fail "$STATE_DIR/upstream is '$S_upstream', expected $NEW_PORT (the promoted replica)"
[[ "$S_role_ok" == yes ]] || fail "$STATE_DIR/replica.role is '$S_role', expected primary"
check_old_port_closed ""

write_evidence "{\"old_port\":$((OLD_PORT)),\"old_primary\":\"fenced\",\"promoted_port\":$((NEW_PORT))}"
