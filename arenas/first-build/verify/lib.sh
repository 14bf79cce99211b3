# First-build's verifier helpers (sourced, not executed): the runner's verifier toolkit
# (docs/arena-packages.md, "The verifier toolkit"), then what is first-build's own.
. "${AOE_TUI_VERIFY_KIT:?the aoe-tui referee names its verifier toolkit here}"

# LOST_AFTER_MS: a service that answers 404 for a record for this long has lost it
# (the poll stops early instead of waiting for its whole deadline).
LOST_AFTER_MS=${LOST_AFTER_MS:-3000}
