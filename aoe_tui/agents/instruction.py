"""Assembly of an agent's prompt, ``agents/<id>/instruction.md`` (spec §5.2).

- **Fog arena** (``[fog_of_war]`` present): the ``player_brief`` file, then the fixed
  fog paragraph.
- **Build race without fog:** ``instructions/<territory>.md``, then the fixed build
  paragraph, then a ``# Service contract`` heading and the text of ``CONTRACT.md``.
- **Conquest:** ``instructions/<territory>.md`` only.

Model identity is never put in the prompt. The fixed paragraphs are our own words for
what upstream's say; both state the hard deadline in seconds (``rules.duration_seconds``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aoe_tui.errors import AoeError

__all__ = ["InstructionError", "build_instruction", "build_paragraph", "fog_paragraph"]


class InstructionError(AoeError):
    """A file the prompt is assembled from is missing or unreadable (one line naming it)."""


def build_paragraph(duration_seconds: int) -> str:
    """The fixed paragraph that follows the seat instructions in a build race (spec §5.2)."""
    return (
        "The referee owned by the controller is the only authority on whether you succeeded: "
        "it checks your territory from outside, milestone by milestone, while you work. "
        "Do not stop after describing a plan. Implement the service, verify it yourself, and "
        "leave it running when you finish. You have no access to the referee's evidence or to "
        f"the other competitors. The hard deadline is {int(duration_seconds)} seconds from your start."
    )


def fog_paragraph(duration_seconds: int) -> str:
    """The fixed paragraph that follows the player brief in a fog arena (spec §5.2)."""
    return (
        "The referee owned by the controller is the only authority on whether you succeeded. "
        "Implement what the brief asks, verify it yourself, and leave the service running when "
        "you finish. The referee's evidence, the hidden topology, the other competitors and "
        "future events are not available to you; discover what you need on your own territory. "
        f"The hard deadline is {int(duration_seconds)} seconds from your start."
    )


def _enum_value(value: Any) -> str:
    return str(getattr(value, "value", value))


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InstructionError(f"{path}: {what} is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstructionError(f"{path}: cannot read {what}: {exc}") from None


def build_instruction(loaded: Any, territory_id: str) -> str:
    """Return the full ``instruction.md`` text for the agent seated on ``territory_id``.

    Args:
        loaded: a ``LoadedManifest`` (``aoe_tui.domain.arena.load_manifest``): uses
            ``.manifest.arena.mode``, ``.manifest.rules.duration_seconds``,
            ``.manifest.fog_of_war`` (``.player_brief``, package-relative) and ``.arena_dir``.
        territory_id: the seat's territory id (selects ``instructions/<territory>.md``).

    Raises:
        InstructionError: a needed package file (player brief, seat instructions,
            ``CONTRACT.md``) is missing or unreadable.
    """
    manifest = loaded.manifest
    arena_dir = Path(loaded.arena_dir)
    duration = int(manifest.rules.duration_seconds)
    mode = _enum_value(getattr(manifest.arena, "mode", "conquest"))
    fog = getattr(manifest, "fog_of_war", None)

    if fog is not None:
        brief = _read(arena_dir / str(fog.player_brief), "the fog player brief")
        return f"{brief.rstrip()}\n\n{fog_paragraph(duration)}\n"

    seat = _read(arena_dir / "instructions" / f"{territory_id}.md", f"the seat instructions for {territory_id}")
    if mode not in ("build_race", "buildrace"):
        return seat
    contract = _read(arena_dir / "CONTRACT.md", "the service contract")
    return f"{seat.rstrip()}\n\n{build_paragraph(duration)}\n\n# Service contract\n\n{contract.rstrip()}\n"
