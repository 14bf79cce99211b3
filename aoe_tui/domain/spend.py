"""Live spend limits (issue 27): what an entrant may spend on model calls, and what it has spent.

A :class:`SpendCap` is a limit in three units — cost (**µUSD**), tokens (input + output,
cache and reasoning included) and model requests — any of which may be absent. A
:class:`SpendLedger` is what was spent against it. The credential proxy
(:mod:`aoe_tui.agents.proxy`) holds one ledger per entrant per heat (capped by the
manifest's / season file's ``budget.max_cost_microusd``, spec §1.11) and may share one
ledger per entrant across a whole season (capped by the season file's ``[budget]`` table,
:class:`aoe_tui.domain.season_file.SeasonBudget`); past a cap it refuses the next model
call and the seat ends ``budget_exceeded`` (spec §5.4).

"Past" means strictly greater than the cap for cost and tokens (spec §5.4: "if the
reported cost is greater"), and at least the cap for requests (a cap of 50 requests lets
50 through and refuses the 51st).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SpendCap", "SpendLedger"]


@dataclass(frozen=True)
class SpendCap:
    """A limit: ``max_cost_microusd`` (µUSD), ``max_tokens`` (tokens), ``max_requests``
    (model requests); ``None`` = no limit in that unit. ``scope`` names it in messages
    (``"heat"`` or ``"season"``)."""

    max_cost_microusd: int | None = None
    max_tokens: int | None = None
    max_requests: int | None = None
    scope: str = "heat"

    def is_empty(self) -> bool:
        """True when no unit is limited."""
        return self.max_cost_microusd is None and self.max_tokens is None and self.max_requests is None

    def crossed(self, spent: SpendLedger) -> str | None:
        """``None`` while ``spent`` is within the cap, else one line naming the limit and the
        amount spent, e.g. ``budget exceeded: spent 2150 µUSD of 2000 µUSD`` (a season cap
        says ``season budget exceeded: …``)."""
        what = "budget exceeded" if self.scope == "heat" else f"{self.scope} budget exceeded"
        if self.max_cost_microusd is not None and spent.cost_microusd > self.max_cost_microusd:
            return f"{what}: spent {spent.cost_microusd} µUSD of {self.max_cost_microusd} µUSD"
        if self.max_tokens is not None and spent.tokens > self.max_tokens:
            return f"{what}: used {spent.tokens} tokens of {self.max_tokens} tokens"
        if self.max_requests is not None and spent.requests >= self.max_requests:
            return f"{what}: made {spent.requests} model requests of {self.max_requests}"
        return None


@dataclass
class SpendLedger:
    """What was spent (cumulative): ``cost_microusd`` (µUSD), ``tokens`` (input + output),
    ``requests`` (model requests forwarded). Mutable; one object may be shared by several
    proxies in turn (a season ledger passes from heat to heat)."""

    cost_microusd: int = 0
    tokens: int = 0
    requests: int = 0

    def add(self, *, cost_microusd: int = 0, tokens: int = 0, requests: int = 0) -> None:
        """Add amounts (negative amounts count 0)."""
        self.cost_microusd += max(0, int(cost_microusd))
        self.tokens += max(0, int(tokens))
        self.requests += max(0, int(requests))
