"""Pure formatting of match times and events for people: the TUI, exports and the
headless progress lines all format through here (no I/O).

- :func:`fmt_clock`: a match clock from **milliseconds**, in one of the styles below.
- :func:`fmt_tokens`, :func:`fmt_cost`: token counts and micro-USD costs.
- :func:`sanitize_line`: one safe display line from arbitrary adapter output (the TUI).
- :func:`printable`: a headless output line safe for a terminal (control characters shown
  as visible escapes); every plain-text line the commands print goes through it.
- :func:`summarize_event`: one event (§2) → one human line (:class:`EventLine`), in the
  voice of the TUI feed (``"feed"``), ``aoe match run``'s progress lines (``"match"``) or
  ``aoe run``'s headless season lines (``"season"``); :func:`summarize_season_event`: one
  season event (``season.jsonl``) → one line of the TUI's season log.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ACTIVITY_LINE_LIMIT",
    "ClockStyle",
    "EventLine",
    "fmt_clock",
    "fmt_cost",
    "fmt_tokens",
    "first_line",
    "printable",
    "RepeatedFailures",
    "sanitize_line",
    "short_line",
    "summarize_event",
    "summarize_season_event",
]

#: ``"mm:ss"``: ``MM:SS``, ``H:MM:SS`` past an hour (TUI clocks, feed, season log);
#: ``"mm:ss.d"``: ``MM:SS.d``, tenths cut, minutes past 59 kept (``aoe match run`` lines);
#: ``"m:ss.d"``: ``M:SS.d``, tenths rounded (exports' median durable times);
#: ``"s.d"``: ``12.3s``, seconds with rounded tenths (``aoe run`` headless lines, ``aoe inspect``).
ClockStyle = Literal["mm:ss", "mm:ss.d", "m:ss.d", "s.d"]


def fmt_clock(ms: int | None, style: ClockStyle = "mm:ss", *, none: str = "--:--") -> str:
    """A match clock from ``ms`` (milliseconds; negative counts as 0 in the ``mm:ss``
    styles) in ``style`` (see :data:`ClockStyle`); ``none`` when ``ms`` is None.
    Raises ``ValueError`` for an unknown style."""
    if ms is None:
        return none
    if style == "mm:ss":
        s = max(0, int(ms)) // 1000
        h, rem = divmod(s, 3600)
        m, sec = divmod(rem, 60)
        return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"
    if style == "mm:ss.d":
        ms = max(0, int(ms))
        return f"{ms // 60000:02d}:{(ms // 1000) % 60:02d}.{(ms % 1000) // 100}"
    if style == "m:ss.d":
        s = ms / 1000
        minutes, secs = int(s // 60), f"{s % 60:04.1f}"
        if secs == "60.0":  # 59.96 s rounds up to the next minute, not to "0:60.0"
            minutes, secs = minutes + 1, "00.0"
        return f"{minutes}:{secs}"
    if style == "s.d":
        return f"{ms / 1000:.1f}s"
    raise ValueError(f"unknown clock style {style!r}")


def fmt_tokens(n: int | None) -> str:
    """Compact token count (``12.3k``, ``1.2M``) or ``n/a`` when unknown (None)."""
    if n is None:
        return "n/a"
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    if n >= 1000:
        return f"{n / 1000:.1f}k"
    return str(n)


def fmt_cost(microusd: int | None, *, none: str = "n/a") -> str:
    """``$X.XXXX`` from micro-USD (§8.2), or ``none`` when unknown (None)."""
    if microusd is None:
        return none
    return f"${microusd / 1_000_000:.4f}"


#: ANSI/VT escape sequences (CSI, OSC, other ESC-introduced) an adapter may write
_ANSI_RE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
#: longest activity line kept (characters); longer lines end in "…"
ACTIVITY_LINE_LIMIT = 200


def _regional_letter(n: int) -> str:
    return chr(n - 0x1F1E6 + ord("A"))


def _joins_emoji(n: int) -> bool:
    """Variation selectors (U+FE00–FE0F, U+E0100–E01EF) and the skin-tone modifiers
    (U+1F3FB–1F3FF): they only change how the character before them looks."""
    return 0xFE00 <= n <= 0xFE0F or 0xE0100 <= n <= 0xE01EF or 0x1F3FB <= n <= 0x1F3FF


def sanitize_line(text: object, limit: int = ACTIVITY_LINE_LIMIT, collapse: bool = False) -> str:
    """One safe display line from arbitrary adapter output (activity lines, details,
    model names an agent reports).

    Removes ANSI escape sequences; turns tabs/newlines/carriage returns into spaces (one
    line always; ``collapse`` also folds runs of spaces, else only the ends are trimmed); drops other control, format (bidi overrides, zero-width), surrogate,
    private-use and unassigned characters; folds runs of U+FFFD (undecodable bytes) into
    one. A line that is mostly undecodable becomes ``‹binary output, N chars›``. The
    result is plain text — callers append it to ``rich.text.Text`` (never parsed as
    markup). Cut to ``limit`` characters with a trailing ``…``.

    **Widths a terminal agrees with.** Rich measures an emoji sequence as one 2-cell
    grapheme, a terminal counting code points (wcwidth, as xterm, tmux and pyte do) sees
    more cells, so a panel's right border would shift on such a row. The line is put in
    NFC and the parts that join code points into one picture are taken out: variation
    selectors and skin-tone modifiers dropped (``❤️`` → ``❤``, ``👍🏽`` → ``👍``), zero-width
    joiners dropped with the other format characters (``👩‍💻`` → ``👩💻``), regional-indicator
    flags as their letters (``🇫🇷`` → ``FR``). What remains measures the same cell by cell.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    raw = _ANSI_RE.sub("", str(text))
    out: list[str] = []
    bad = 0
    for ch in unicodedata.normalize("NFC", raw):
        if ch in "\t\n\r\v\f":
            out.append(" ")
            continue
        n = ord(ch)
        if _joins_emoji(n):
            continue
        if 0x1F1E6 <= n <= 0x1F1FF:
            out.append(_regional_letter(n))
            continue
        cat = unicodedata.category(ch)
        if ch == "\ufffd" or cat in ("Cs", "Co", "Cn"):
            bad += 1
            if not out or out[-1] != "\ufffd":
                out.append("\ufffd")
            continue
        if cat in ("Cc", "Cf"):
            bad += 1
            continue
        out.append(ch)
    line = "".join(out)
    line = " ".join(line.split()) if collapse else line.strip()
    if raw and bad * 3 > len(raw):
        return f"‹binary output, {len(raw)} chars›"
    return line if len(line) <= limit else line[: limit - 1] + "…"


#: invisible format characters that reorder or hide what follows on a terminal line (bidi
#: embeddings/overrides/isolates, marks, zero-width space/joiners except ZWJ, word joiner,
#: BOM) and the Unicode line/paragraph separators; :func:`printable` shows them escaped
_HIDDEN = frozenset("\u061c\u200b\u200c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e"
                    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\ufeff")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def printable(text: object, *, newlines: bool = False) -> str:
    """``text`` (what a guest's console, an agent or a verifier wrote, inside a line we
    print) safe to write to a terminal: ESC and every other C0/C1 control character, DEL,
    lone surrogates and the invisible bidi/format characters of :data:`_HIDDEN` become
    visible escapes (``\\x1b``, ``\\r``, ``\\t``, ``\\x9b``, ``\\u202e``), so no
    escape sequence reaches the terminal (colours, cursor moves, a cleared screen, a window
    title, a rewritten line) and the line reads as sent. Line feeds are escaped too, so
    one message stays one line, unless ``newlines`` (multi-line error messages keep theirs).
    Everything else (including emoji and backslashes) is kept as is."""
    s = str(text)
    if s.isprintable() and not any(ch in _HIDDEN for ch in s):
        return s
    out = []
    for ch in s:
        n = ord(ch)
        if ch == "\n" and newlines:
            out.append(ch)
        elif n < 0x20 or 0x7F <= n < 0xA0 or ch in _HIDDEN or 0xD800 <= n < 0xE000:
            out.append(_escaped(ch))
        else:
            out.append(ch)
    return "".join(out)


def json_printable(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) safe to write to a terminal,
    meaning the same JSON: the characters :func:`printable` escapes that JSON leaves raw
    (DEL, the C1 controls U+0080–U+009F such as ``\\x9b`` CSI and ``\\x9d`` OSC, lone
    surrogates, the bidi/format characters of :data:`_HIDDEN`) become ``\\uXXXX`` escapes.
    They can only occur inside JSON strings, where ``\\uXXXX`` decodes to the same
    character, so ``json.loads`` of the result equals that of ``text``."""
    return "".join(f"\\u{ord(ch):04x}" if 0x7F <= ord(ch) < 0xA0 or ch in _HIDDEN or 0xD800 <= ord(ch) < 0xE000
                   else ch for ch in text)


def first_line(text: str | None, limit: int | None = 160) -> str:
    """The first line of ``text`` cut to ``limit`` characters (None: not cut; ``""`` for
    None/empty); the headless lines' form of a failure detail."""
    return text.splitlines()[0][:limit] if text else ""


def short_line(text: str | None, limit: int = 160) -> str:
    """:func:`sanitize_line` of ``text`` with spaces folded (``""`` for None/empty)."""
    if not text:
        return ""
    return sanitize_line(text, limit, collapse=True)


@dataclass(frozen=True)
class EventLine:
    """One event as a human line.

    ``text``: the line (no clock); ``tone``: ``good``, ``bad``, ``warn``, ``state``,
    ``dim``, ``win`` or ``""`` (the TUI styles it); ``key``: equal keys of consecutive
    lines mean "the same failure again" (the feed folds them; headless output keys a
    failure by territory and milestone only and prints it once until the milestone
    passes); ``territory`` the line is about, if any.
    """

    text: str
    tone: str = ""
    key: tuple | None = None
    territory: str | None = None


Voice = Literal["feed", "match", "season"]


def summarize_event(event: Any, voice: Voice = "feed", *, name: Callable[[str], str] | None = None,
                    elapsed_ms: int = 0, world: Any = None) -> EventLine | None:
    """One event (§2, a model of :mod:`aoe_tui.domain.events`) as a line, or None when
    the voice skips it.

    ``"feed"`` (TUI feed, ``aoe watch``): every kind except healthy conquest ticks,
    verifier starts and usage checkpoints that charge nothing; details sanitized.
    ``"match"`` (``aoe match run``): milestones, competitor/agent/match changes, usage
    totals (needs ``world``: the reduced world after the event), infrastructure failures,
    the drain; ``elapsed_ms`` (of the record) skips the start-of-match state changes.
    ``"season"`` (``aoe run`` headless): milestones, durable deployments and
    infrastructure failures, territories named by ``name`` (e.g. territory → entrant).
    """
    if voice == "feed":
        return _feed_line(event)
    if voice == "match":
        return _match_line(event, elapsed_ms, world)
    if voice == "season":
        return _season_line(event, name or (lambda t: t))
    raise ValueError(f"unknown voice {voice!r}")


def _usage_text(e: Any) -> str:
    parts = []
    if e.input_tokens is not None or e.output_tokens is not None:
        parts.append(f"+{fmt_tokens(e.input_tokens or 0)} in / +{fmt_tokens(e.output_tokens or 0)} out")
    if e.cost_microusd is not None:
        parts.append(f"+{fmt_cost(e.cost_microusd)}")
    parts.append(f"{e.resource_units} units")
    return f"{e.agent} usage " + ", ".join(parts)


def _feed_line(e: Any) -> EventLine | None:
    k = e.kind
    if k == "milestone_evaluation_started":
        return None
    if k == "health_observed":
        if e.healthy:
            return None
        status = "transport error" if e.status is None else str(e.status)
        return EventLine(f"{e.territory} health down ({status}): {short_line(e.detail, 100)}", "bad",
                         ("health", e.territory, e.status, short_line(e.detail, 100)), e.territory)
    if k == "resources_changed":
        if e.reason == "healthy tick":
            return None
        return EventLine(f"{e.territory} resources {e.delta:+d} → {e.remaining} ({e.reason})", "", None, e.territory)
    if k == "usage_charged":
        if not (e.input_tokens or e.output_tokens or e.cost_microusd):
            return None
        return EventLine(_usage_text(e), "dim", None, None)
    if k == "milestone_passed":
        return EventLine(f"{e.territory} passed {e.milestone} (+{e.points})", "good", None, e.territory)
    if k == "milestone_failed":
        detail = short_line(e.detail, 120)
        return EventLine(f"{e.territory} failed {e.milestone}: {detail}", "bad",
                         ("failed", e.territory, e.milestone, e.category, detail), e.territory)
    if k == "milestone_revoked":
        return EventLine(f"{e.territory} lost {e.milestone}: {short_line(e.reason)}", "bad", None, e.territory)
    if k == "competitor_state_changed":
        return EventLine(f"{e.territory} {e.from_} → {e.to} ({short_line(e.reason, 80)})", "state", None, e.territory)
    if k == "durable_deployment_completed":
        return EventLine(f"{e.territory} completed a durable deployment at {fmt_clock(e.elapsed_ms)}", "good", None, e.territory)
    if k == "match_state_changed":
        return EventLine(f"match {e.from_} → {e.to}", "state", None, None)
    if k == "match_finished":
        return EventLine(f"match finished, winner {e.winner or 'none'}: {short_line(e.reason)}", "win", None, None)
    if k == "territory_registered":
        return EventLine(f"{e.territory} registered ({e.class_}) for {e.agent}", "dim", None, e.territory)
    if k == "territory_state_changed":
        return EventLine(f"{e.territory} {e.from_} → {e.to} ({short_line(e.reason, 80)})", "state", None, e.territory)
    if k == "agent_started":
        return EventLine(f"{e.agent} started on {e.territory} ({short_line(e.model, 80)})", "dim", None, e.territory)
    if k == "agent_finished":
        verb = "finished" if e.success else f"failed ({e.source})"
        return EventLine(f"{e.agent} {verb}: {short_line(e.detail, 100)}", "good" if e.success else "bad", None, None)
    if k == "agent_interrupted":
        return EventLine(f"{e.agent} interrupted ({e.source}): {short_line(e.detail, 100)}", "warn", None, None)
    if k == "agent_terminated":
        return EventLine(f"{e.agent} terminated: {short_line(e.reason, 100)}", "warn", None, None)
    if k == "agent_outraced":
        return EventLine(f"{e.agent} outraced: {short_line(e.reason, 100)}", "dim", None, None)
    if k == "post_match_drain_started":
        return EventLine(f"post-match drain: {e.pending_agents} agent(s), {e.timeout_ms // 1000} s", "dim", None, None)
    if k == "post_match_drain_finished":
        return EventLine(f"drain done: {e.captured_agents} captured, {e.terminated_agents} terminated", "dim", None, None)
    if k == "territory_eliminated":
        return EventLine(f"{e.territory} eliminated ({e.source}): {short_line(e.detail, 100)}", "bad", None, e.territory)
    if k == "infrastructure_failure":
        return EventLine(f"infrastructure failure {e.component} ({e.source}): {short_line(e.detail, 100)}", "bad", None, None)
    return EventLine(k, "", None, None)  # pragma: no cover - every kind handled above




def summarize_season_event(e: Any, multi_arena: bool = False) -> str | None:
    """One season-log line (TUI season screen, ``aoe watch``) for a season event (a model
    of :mod:`aoe_tui.domain.season_events`), None for nothing worth a line; ``multi_arena``
    names the arena a round races (as the runner's own progress line does)."""
    k = e.kind
    if k == "season_started":
        return f"season {e.season} · {e.label} started: {len(e.entrants)} entrants"
    if k == "season_resumed":
        return f"resumed (pid {e.pid}): {e.detail}"
    if k == "season_stopped":
        if e.reason == "disk_full":
            at = f" at r{e.round}h{e.heat}" + (f"a{e.attempt}" if e.attempt is not None else "") if e.round else ""
            return f"season stopped{at} (disk full): {e.detail}; resume with the same aoe run"
        if e.reason == "void_heat":
            return f"season waiting: {e.detail}; aoe run --retry-void re-runs it"
        running = f"; aborted {', '.join(e.open_attempts)}" if e.open_attempts else ""
        return f"stopped ({e.reason}, pid {e.pid}){running}; the same aoe run resumes"
    if k == "stale_territories_cleaned":
        return f"tore down {len(e.territories)} leftover territories"
    if k == "round_scheduled":
        heats = "; ".join(f"h{h.heat}: " + " vs ".join(x for x in h.seats if x) for h in e.heats)
        on = f" on {e.arena}" if multi_arena and e.arena else ""
        return f"round {e.round} scheduled{' (final)' if e.final else ''}{on}: {heats}" + (
            f"; byes {', '.join(e.byes)}" if e.byes else "")
    if k == "attempt_started":
        return f"r{e.round}h{e.heat}a{e.attempt} started"
    if k == "attempt_placed":
        return f"r{e.round}h{e.heat}a{e.attempt} on node {e.node}"
    if k == "attempt_interrupted":
        kept = f"kept as {e.renamed_to}" if e.renamed_to else "before its folder was made"
        return f"r{e.round}h{e.heat}a{e.attempt} interrupted, {kept}"
    if k == "attempt_finished":
        tag = f"r{e.round}h{e.heat}a{e.attempt}"
        if e.outcome == "counted":
            return f"{tag} finished in {fmt_clock(e.elapsed_ms)}: winner {e.winner or 'none (tie)'}"
        first = short_line(e.detail.splitlines()[0]) if e.detail else ""
        return f"{tag} spoiled by {e.failure_source}: {first} → " + ("retry" if e.outcome == "retry" else "void")
    if k == "heat_finished":
        return None
    if k == "round_finished":
        return f"round {e.round} finished" + (f": advanced {', '.join(e.advanced)}" if e.advanced else "")
    if k == "season_finished":
        failed = "".join(f"; adapter failed every attempt: {x} ({line})"
                         for x, line in getattr(e, "adapters_failed", {}).items())
        return f"season finished: champion {', '.join(e.champions) or 'none'}{failed}"
    if k == "heats_reopened":
        return (f"retry-void: reopened {', '.join(f'r{r}h{h}' for r, h in e.heats)} "
                f"(up to {e.max_attempts} new attempt(s) each)")
    return None


def _match_line(e: Any, elapsed_ms: int, world: Any) -> EventLine | None:
    k = e.kind
    if k == "milestone_passed":
        return EventLine(f"{e.territory} passed {e.milestone} (+{e.points})", "good", None, e.territory)
    if k == "milestone_failed":
        detail = first_line(e.detail)
        return EventLine(f"{e.territory} failed {e.milestone}: {detail}", "bad",
                         ("failed", e.territory, e.milestone, detail), e.territory)
    if k == "competitor_state_changed" and elapsed_ms > 0:
        return EventLine(f"{e.territory} is {e.to.value}: {e.reason}", "state", None, e.territory)
    if k == "agent_finished":
        return EventLine(f"agent {e.agent} {'completed' if e.success else 'failed'} ({e.source.value}): "
                         f"{first_line(e.detail)}")
    if k == "agent_interrupted":
        return EventLine(f"agent {e.agent} interrupted ({e.source.value}): {e.detail[:160]}", "warn")
    if k in ("agent_terminated", "agent_outraced"):
        return EventLine(f"agent {e.agent} {k.split('_')[1]}: {e.reason}", "warn")
    if k == "usage_charged" and (e.input_tokens or e.output_tokens or e.cost_microusd):
        a = world.agents.get(e.agent) if world is not None else None
        if a is not None:
            return EventLine(f"agent {e.agent} usage: {a.input_tokens + a.output_tokens} tokens, "
                             f"${a.cost_microusd / 1e6:.4f}", "dim")
        return None
    if k == "infrastructure_failure":
        return EventLine(f"INFRASTRUCTURE FAILURE {e.component} ({e.source.value}): {e.detail}", "bad")
    if k == "match_state_changed" and e.to.value == "running":
        return EventLine("match running", "state")
    if k == "match_finished":
        return EventLine(f"match finished: winner={e.winner or 'none'} ({e.reason})", "win")
    if k == "post_match_drain_started":
        return EventLine(f"post-match drain: waiting up to {e.timeout_ms / 1000:.0f} s for {e.pending_agents} agent(s)",
                         "dim")
    if k == "post_match_drain_finished":
        return EventLine(f"drain finished: {e.captured_agents} captured, {e.terminated_agents} terminated", "dim")
    return None


def _season_line(e: Any, name: Callable[[str], str]) -> EventLine | None:
    k = e.kind
    if k == "milestone_passed":
        return EventLine(f"{name(e.territory)} passed {e.milestone}", "good", None, e.territory)
    if k == "milestone_failed":
        detail = first_line(e.detail)
        return EventLine(f"{name(e.territory)} failed {e.milestone}: {detail}", "bad",
                         ("failed", e.territory, e.milestone, detail), e.territory)
    if k == "durable_deployment_completed":
        return EventLine(f"{name(e.territory)} is durable", "good", None, e.territory)
    if k == "infrastructure_failure":
        return EventLine(f"infrastructure failure ({e.source}): {first_line(e.detail, None)}", "bad")
    return None


class RepeatedFailures:
    """Headless output prints one line per milestone state change: a milestone's failure
    once when it starts failing, not again while it keeps failing (verifiers retry every
    tick, and a changing detail — a counter, a timestamp, another error text — is the same
    failing state); a pass forgets it, so a later failure is news. ``scope`` separates
    heats (e.g. ``r1h2a1``)."""

    def __init__(self) -> None:
        #: (scope, territory, milestone) of the milestones whose failure was printed
        self._failing: set[tuple] = set()

    def fresh(self, line: EventLine, scope: Any = None) -> bool:
        """False when ``line`` is a failure of a milestone already printed as failing
        (whatever its detail); True for every other line."""
        if line.key is None or line.key[0] != "failed":
            return True
        where = (scope, *line.key[1:3])
        if where in self._failing:
            return False
        self._failing.add(where)
        return True

    def passed(self, territory: str, milestone: str, scope: Any = None) -> None:
        """``territory`` passed ``milestone``: its next failure is news again."""
        self._failing.discard((scope, territory, milestone))
