"""The fog-of-war guest leak audit (spec §1.10, §6.4), run before any agent starts.

For a fog arena whose manifest has ``[fog_of_war.guest_leak_audit]``, every territory is
searched over root SSH for every forbidden string: regular files smaller than 4 MiB under
the scan paths, same filesystem only (``find -xdev``), fixed-string and case-sensitive,
binary files skipped (``grep -I``). The first hit of a territory is reported. SSH errors
are retried 5 times, 500 ms apart, as upstream does.

The heat supervisor (:func:`aoe_tui.referee.heat.run_heat`) records a hit as an
``infrastructure_failure`` (source ``arena``, component :data:`LEAK_COMPONENT`) that names
the territory, the file and the string; the season does not re-run such an attempt
(:func:`aoe_tui.season.attempts.judge_attempt`): the package, not the machine, is at fault.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from aoe_tui.errors import AoeError

__all__ = ["LEAK_COMPONENT", "LEAK_REASON", "AuditError", "LeakHit", "audit_script", "guest_leak_audit"]

#: ``infrastructure_failure.component`` of a leak (the season never retries it).
LEAK_COMPONENT = "guest-leak-audit"
#: ``match_finished.reason`` of a heat ended by a leak.
LEAK_REASON = "guest leak audit failed"
#: exit status of the remote audit on a hit (as upstream's)
_HIT = 42
_ATTEMPTS = 5


class AuditError(AoeError):
    """The audit could not run on a territory (SSH failed 5 times, or the search failed)."""


@dataclass(frozen=True)
class LeakHit:
    """A forbidden string found in a territory: ``territory`` id, ``path`` of the file, ``string``."""

    territory: str
    path: str
    string: str

    def detail(self) -> str:
        """One line for the failure record: territory, file and string."""
        return f"guest leak in {self.territory}: {self.path} contains the forbidden string {self.string!r}"


def audit_script(scan_paths: Sequence[str], forbidden: Sequence[str]) -> str:
    """The bash script run as root in a territory: prints ``<string index>\\t<path>`` of the
    first hit and exits 42, or exits 0 when nothing is found. Strings travel base64-coded,
    so no quoting can change what is searched."""
    paths = " ".join(shlex.quote(p) for p in scan_paths)
    coded = " ".join(base64.b64encode(s.encode()).decode() for s in forbidden)
    return f"""set -u
paths=()
for p in {paths}; do [ -e "$p" ] && paths+=("$p"); done
[ ${{#paths[@]}} -gt 0 ] || exit 0
i=0
for b in {coded}; do
  s=$(printf %s "$b" | base64 -d)
  hit=$(find "${{paths[@]}}" -xdev -type f -size -4096k -print0 2>/dev/null \\
        | xargs -0 -r grep -F -l -I -s -e "$s" -- 2>/dev/null | head -n 1)
  if [ -n "$hit" ]; then printf '%s\\t%s\\n' "$i" "$hit"; exit {_HIT}; fi
  i=$((i + 1))
done
exit 0
"""


async def _audit_one(territory, script: str, forbidden: Sequence[str]) -> LeakHit | None:
    from aoe_tui.runtime.ssh import run

    last = ""
    for attempt in range(_ATTEMPTS):
        try:
            res = await run(territory.host, territory.ssh_port, territory.password, "bash -s", input=script,
                            timeout_s=60, connect_timeout_s=10)
        except Exception as err:  # noqa: BLE001 - retried, then reported in one line
            last = f"{type(err).__name__}: {err}"
        else:
            if res.exit_status == 0:
                return None
            if res.exit_status == _HIT:
                idx, _, path = res.stdout.strip().partition("\t")
                return LeakHit(territory.id, path, forbidden[int(idx)])
            last = f"audit exited with {res.exit_status}: {res.stderr.strip()[:200]}"
        if attempt + 1 < _ATTEMPTS:
            await asyncio.sleep(0.5)
    raise AuditError(f"guest leak audit of {territory.id} failed {_ATTEMPTS} times: {last}")


async def guest_leak_audit(territories: Sequence, scan_paths: Sequence[str],
                           forbidden: Sequence[str]) -> LeakHit | None:
    """Audit every territory (concurrently); the first hit in territory order, or None.

    ``territories`` are :class:`aoe_tui.runtime.provider.Territory` objects.

    Raises:
        AuditError: a territory could not be audited.
    """
    script = audit_script(scan_paths, forbidden)
    hits = await asyncio.gather(*(_audit_one(t, script, list(forbidden)) for t in territories))
    return next((h for h in hits if h is not None), None)
