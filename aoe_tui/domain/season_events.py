"""Typed ``season.jsonl`` events (ours; upstream has no seasons, spec §10.2).

One line per event: ``{"schema_version":1,"sequence":N,"time_unix_ms":T,"kind":K,...fields}``
— the envelope first, then the fields in declaration order (compact JSON, UTF-8 raw).
``sequence`` is contiguous from 0; ``time_unix_ms`` is wall-clock Unix time in **ms**
(seasons span days, so there is no single match clock), for people. ``season_clock_ms``
(optional; absent in logs written before it) is the season clock at the record: running ms
of all run sessions, measured by the writer on the **monotonic** clock (a wall-clock step
neither freezes nor jumps it; see :class:`~aoe_tui.replay.season_log.SeasonLogWriter`) — the
arithmetic uses it, not ``time_unix_ms``. Unknown kinds and unknown keys
are refused on read (the format is ours and strict).

Lifecycle of a heat: ``round_scheduled`` (all heats of a round in one line, so a kill can
never leave half a round scheduled) → ``attempt_started`` → ``attempt_finished``
(``outcome`` ``counted`` / ``retry`` / ``void``; on a cluster ``attempt_placed`` between the
two names the worker node) or, on resume, ``attempt_interrupted`` →
… → ``heat_finished``. Rounds end with ``round_finished`` (knockout: who advanced), the
season with ``season_finished``. ``season_stopped`` records that a run session ended
before the season did (a signal, or "stop" in the TUI) after its running heats aborted
and their territories were torn down; the next ``aoe run`` of the same file and folder
resumes (``season_resumed``, ``attempt_interrupted`` for each aborted attempt).
``heats_reopened`` (``aoe run --retry-void``) opens void
heats again: new attempts, then a new ``heat_finished``, ``round_finished`` and
``season_finished``. A full disk also ends a run with ``season_stopped``
(``reason`` ``disk_full``); the attempt it cut short stays open (no ``attempt_finished``:
it does not count against ``max_attempts``) and the next ``aoe run`` marks it
``attempt_interrupted`` and re-runs it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "SEASON_EVENT_KINDS",
    "SeasonEvent",
    "SeasonRecord",
    "EntrantHeatStats",
    "SeasonArena",
]


class _Ev(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EntrantHeatStats(_Ev):
    """One entrant's figures in one attempt (from its world and events).

    ``territory`` = its seat; ``points`` sum of passed milestone points; ``passed`` count;
    ``durable_at_ms`` (ms, match clock) or None; ``milestones`` = milestone id → match-clock
    ms when it (last) passed, for milestones passed at the end; token/cost sums;
    ``usage_recorded`` = at least one usage checkpoint with tokens or cost (§7.1);
    ``terminal_state``/``failure_source`` of its agent. Tokens are token counts, costs
    µUSD. ``cache_read_tokens`` / ``cache_write_tokens``: how many of ``input_tokens``
    the provider read from / wrote to its prompt cache (null: the adapter did not say);
    ``cost_source``: who computed ``cost_microusd`` — ``"price table"`` (the season's
    ``[prices]``), ``"adapter"`` (the adapter's own figure, e.g. opencode's) or null (no cost).
    """

    territory: str
    rank: int
    points: int = 0
    passed: int = 0
    durable_at_ms: int | None = None
    milestones: dict[str, int] = Field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_microusd: int = 0
    usage_recorded: bool = False
    terminal_state: str | None = None
    failure_source: str | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost_source: str | None = None


class SeasonArena(_Ev):
    """One arena a season races: its manifest ``id`` and ``display_name``, its milestone
    ids in manifest order, the ``category`` (§1.3, may be null) and the manifest ``path``
    as the season file names it."""

    id: str
    display_name: str = ""
    milestones: list[str] = Field(default_factory=list)
    category: str | None = None
    path: str = ""


class SeasonStarted(_Ev):
    """First event: what the season is. ``format`` is the ``[format]`` table;
    ``season_sha256`` the hex digest of the season file bytes. ``arena_id`` and
    ``milestones`` are the first arena's; ``arenas`` lists every arena the rounds cycle
    through, in order (logs written before cups across arenas have none: one arena)."""

    kind: Literal["season_started"] = "season_started"
    season: str
    label: str
    arena_id: str
    format: dict[str, Any]
    entrants: list[str]
    seed: int
    heat_size: int
    min_heat_size: int
    max_attempts: int
    season_sha256: str
    milestones: list[str] = Field(default_factory=list)
    models: dict[str, str] = Field(default_factory=dict)
    arenas: list[SeasonArena] = Field(default_factory=list)
    #: each entrant's cost limit over the season (µUSD; the season file's
    #: ``[budget] season_max_cost_microusd``), shown in the standings as spend / limit; None: none
    cost_limit_microusd: int | None = None


class SeasonResumed(_Ev):
    """The runner started again on an existing season folder. ``rules_changed``: what decides
    results that changed since the season started (arena package files, adapters: one
    ``path changed|added|removed`` each, :mod:`aoe_tui.season.rules_record`), which this
    resume went on with because ``aoe run --accept-changed-rules`` said so; empty when
    nothing changed."""

    kind: Literal["season_resumed"] = "season_resumed"
    pid: int
    detail: str = ""
    rules_changed: list[str] = Field(default_factory=list)


class SeasonStopped(_Ev):
    """A run session stopped before the season finished, resumably (the same ``aoe run``
    resumes it), its running heats aborted and their territories torn down.

    ``reason``: the signal name (``SIGINT``, ``SIGTERM``, ``SIGHUP``), ``quit`` (the TUI's
    "stop" choice), ``disk_full`` (the season folder's file system had less free space
    than a heat needs before it started, or filled while a heat ran) or ``void_heat`` (the
    format decides nothing from a void heat — a knockout round — so the season waits until
    ``aoe run --retry-void`` re-runs it; ``round``/``heat``: the first such heat, ``detail``
    names them all). ``pid``: the runner's
    process id. ``open_attempts``: the running attempts it aborted (``rRhHaA`` tags), left
    open (no ``attempt_finished``: they do not count against ``max_attempts``) and re-run on
    resume. ``detail`` (a full disk): one line naming the folder and the space (free /
    needed, or the path the write failed on); ``round``/``heat``/``attempt``: the heat the
    disk stopped (``attempt`` null when it was about to start)."""

    kind: Literal["season_stopped"] = "season_stopped"
    reason: str
    pid: int | None = None
    open_attempts: list[str] = Field(default_factory=list)
    detail: str = ""
    round: int | None = None
    heat: int | None = None
    attempt: int | None = None


class StaleTerritoriesCleaned(_Ev):
    """Territories a killed runner left behind were torn down (``territories`` = ids)."""

    kind: Literal["stale_territories_cleaned"] = "stale_territories_cleaned"
    folder: str
    territories: list[str]


class HeatSeats(_Ev):
    """One heat in ``round_scheduled``: ``seats[i]`` = entrant on territory ``i`` or null."""

    heat: int
    seats: list[str | None]


class RoundScheduled(_Ev):
    """All heats (and byes) of one round; ``final`` marks a knockout final; ``arena`` the
    id of the arena every heat of the round races (null in older logs: the only arena)."""

    kind: Literal["round_scheduled"] = "round_scheduled"
    round: int
    heats: list[HeatSeats]
    byes: list[str] = Field(default_factory=list)
    final: bool = False
    arena: str | None = None


class AttemptStarted(_Ev):
    """An attempt's match folder (``folder``, relative to the season folder) is in use."""

    kind: Literal["attempt_started"] = "attempt_started"
    round: int
    heat: int
    attempt: int
    folder: str


class AttemptPlaced(_Ev):
    """A running attempt's heat was placed on a worker node of a Ray cluster (``aoe run
    --cluster``): ``node`` is the node's name (``AOE_WORKER_NAME``), ``node_id`` Ray's id
    of it; ``code_revision`` and ``image_digest`` what the node ran the heat with (its heat
    actor's :func:`aoe_tui.cluster.code_revision` and :func:`aoe_tui.cluster.image_digest`;
    ``"unknown"``: a node too old to say; None: logged before nodes said). The runner does
    not refuse a node that differs from it: it records this and says so. Local heats have none."""

    kind: Literal["attempt_placed"] = "attempt_placed"
    round: int
    heat: int
    attempt: int
    node: str
    node_id: str = ""
    code_revision: str | None = None
    image_digest: str | None = None


class AttemptInterrupted(_Ev):
    """A half-run attempt (runner killed) was renamed to ``renamed_to``; it is re-run.
    ``renamed_to`` is null when the runner was killed after ``attempt_started`` but before
    the attempt's folder was made: there was nothing to keep."""

    kind: Literal["attempt_interrupted"] = "attempt_interrupted"
    round: int
    heat: int
    attempt: int
    renamed_to: str | None


class AttemptFinished(_Ev):
    """An attempt ended. ``outcome``: ``counted`` (the heat's result), ``retry`` (spoiled by
    the infrastructure; attempt N+1 follows) or ``void`` (spoiled, no attempts left).
    ``failure_source`` is the infrastructure source that spoiled it (``arena``/``provider``/
    ``harness``) or null; ``ranks`` entrant → 1-based rank (§3.6 ties share a rank);
    ``winner`` the winning entrant or null; ``bundle`` the heat bundle path (relative);
    ``adapter_failures`` entrant → the infrastructure source (``provider``/``harness``) its
    own agent ended with in this attempt (its adapter failed, not the race)."""

    kind: Literal["attempt_finished"] = "attempt_finished"
    round: int
    heat: int
    attempt: int
    outcome: Literal["counted", "retry", "void"]
    match_state: str | None = None
    finish_reason: str | None = None
    failure_source: str | None = None
    detail: str = ""
    winner: str | None = None
    ranks: dict[str, int] = Field(default_factory=dict)
    stats: dict[str, EntrantHeatStats] = Field(default_factory=dict)
    bundle: str | None = None
    elapsed_ms: int = 0
    adapter_failures: dict[str, str] = Field(default_factory=dict)


class HeatFinished(_Ev):
    """A heat's result is final: the ``attempt`` counted (null when ``void``)."""

    kind: Literal["heat_finished"] = "heat_finished"
    round: int
    heat: int
    attempt: int | None
    void: bool = False
    ranks: dict[str, int] = Field(default_factory=dict)
    winner: str | None = None


class HeatsReopened(_Ev):
    """``aoe run --retry-void``: void ``heats`` (``[round, heat]`` pairs; the infrastructure
    spoiled every attempt) are open again and get up to ``max_attempts`` new attempts,
    numbered on from their last; their rounds and the season are no longer finished.
    ``season_sha256`` is the season file run from now on (it may differ from the first
    only in ``max_attempts``)."""
    kind: Literal["heats_reopened"] = "heats_reopened"
    heats: list[tuple[int, int]]
    max_attempts: int
    season_sha256: str


class RoundFinished(_Ev):
    """Every heat of a round is finished; knockout: ``advanced`` go on, ``eliminated`` are out."""

    kind: Literal["round_finished"] = "round_finished"
    round: int
    advanced: list[str] = Field(default_factory=list)
    eliminated: list[str] = Field(default_factory=list)


class SeasonFinished(_Ev):
    """The format has no more rounds. ``champions``: knockout final winners (or league
    leaders by the standings order); ``adapters_failed``: entrant → one line (its adapter,
    attempts, sources) for every entrant whose own adapter failed (source ``provider`` /
    ``harness``) in every attempt it was seated in."""

    kind: Literal["season_finished"] = "season_finished"
    champions: list[str]
    rounds: int
    adapters_failed: dict[str, str] = Field(default_factory=dict)


SEASON_EVENT_TYPES = (
    SeasonStarted,
    SeasonResumed,
    SeasonStopped,
    StaleTerritoriesCleaned,
    RoundScheduled,
    AttemptStarted,
    AttemptPlaced,
    AttemptInterrupted,
    AttemptFinished,
    HeatFinished,
    HeatsReopened,
    RoundFinished,
    SeasonFinished,
)
SEASON_EVENT_KINDS: dict[str, type[_Ev]] = {t.model_fields["kind"].default: t for t in SEASON_EVENT_TYPES}

SeasonEvent = Annotated[Union[SEASON_EVENT_TYPES], Field(discriminator="kind")]  # type: ignore[valid-type]
SEASON_EVENT_ADAPTER: TypeAdapter = TypeAdapter(SeasonEvent)


class SeasonRecord(BaseModel):
    """One ``season.jsonl`` line: envelope + event."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    sequence: int
    time_unix_ms: int
    event: SeasonEvent
    #: the season clock (ms of running time) at this record, monotonic; None in older logs
    season_clock_ms: int | None = None
