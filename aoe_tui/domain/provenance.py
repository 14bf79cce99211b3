"""Match provenance (``match.json``) and the compatibility key — upstream §2.7, §7.3.

All digests are lowercase hex sha256. Paths matter: the verifier digest hashes
the verifier *path strings* as ``<manifest parent as given>/<verifier>``, so the
same arena invoked as ``arenas/x/arena.toml`` and ``./arenas/x/arena.toml`` gets
different keys (as upstream). Pass the manifest path in the form you want.

This module reads files (the manifest's verifiers, brief and adapters) — the one
exception to "no I/O in domain", because provenance is defined over file bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from aoe_tui.domain.arena import LoadedManifest
from aoe_tui.errors import AoeError


class ProvenanceError(AoeError):
    """A file needed for provenance (verifier, brief, adapter) cannot be read."""


class MatchProvenance(BaseModel):
    """``match.json`` (§2.7): unknown keys rejected, key order as upstream.

    ``player_brief_sha256`` is absent in files older than fog mode; it is always
    written (null when not fog) by :meth:`to_json`.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    controller_version: str
    source_revision: str | None = None
    arena_id: str
    arena_mode: Literal["buildrace", "conquest"]
    manifest_sha256: str
    player_brief_sha256: str | None = None
    verifier_sha256: str
    adapter_sha256: dict[str, str] = Field(default_factory=dict)
    compatibility_key: str

    def to_json(self) -> dict:
        """JSON-ready dict in upstream key order."""
        return self.model_dump(mode="json")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ProvenanceError(f"{path}: cannot read {what}: {err.strerror}") from None


def file_sha256(path: str | Path, what: str) -> str:
    """sha256 (lowercase hex) of the file at ``path``. Raises :class:`ProvenanceError`
    ("``path``: cannot read ``what``: …") when it cannot be read."""
    return _sha(_read(path, what))


_SECTION_RE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_CATEGORY_RE = re.compile(r"^category\s*=")


def evaluation_manifest_text(text: str) -> str:
    """The manifest text with ``[arena]`` ``category = …`` lines removed (§7.3).

    Lines are kept verbatim (with their line endings); only the category
    lines inside the ``[arena]`` section are dropped.
    """
    out = []
    section = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        m = _SECTION_RE.match(stripped)
        if m:
            section = m.group(1).strip()
        elif section == "arena" and _CATEGORY_RE.match(stripped):
            continue
        out.append(line)
    return "".join(out)


def verifier_digest(manifest_path: str, verifiers: list[str]) -> str:
    """``verifier_sha256`` (§7.3): sort the ``<parent>/<verifier>`` strings, then hash
    ``path, NUL, bytes, NUL`` per file. ``manifest_path`` is the path string as given."""
    parent = os.path.dirname(manifest_path)
    paths = sorted(f"{parent}/{v}" if parent else v for v in verifiers)
    h = hashlib.sha256()
    for p in paths:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
        h.update(_read(p, "verifier"))
        h.update(b"\0")
    return h.hexdigest()


def compatibility_key(
    arena_id: str, evaluation_manifest_sha256: str, player_brief_sha256: str | None, verifier_sha256: str
) -> str:
    """Current formula: sha256 of ``"1\\n" id "\\n" eval_sha "\\n" (brief or "") "\\n" verifier_sha``."""
    text = f"1\n{arena_id}\n{evaluation_manifest_sha256}\n{player_brief_sha256 or ''}\n{verifier_sha256}"
    return _sha(text.encode("utf-8"))


def legacy_compatibility_key(arena_id: str, manifest_sha256: str, verifier_sha256: str) -> str:
    """Pre-fog formula (before upstream ``0bb389e``): ``"1\\n" id "\\n" manifest_sha "\\n" verifier_sha``."""
    return _sha(f"1\n{arena_id}\n{manifest_sha256}\n{verifier_sha256}".encode("utf-8"))


def compute_provenance(
    loaded: LoadedManifest,
    adapters: dict[str, Path],
    controller_version: str,
    source_revision: str | None,
) -> MatchProvenance:
    """Build ``match.json`` for a loaded manifest with the §7.3 formulas.

    ``adapters`` maps each registered adapter name to its file (hashed as bytes).
    Raises :class:`ProvenanceError` if a verifier, the brief or an adapter file
    cannot be read.
    """
    m = loaded.manifest
    given = loaded.path_text
    raw = loaded.raw
    brief_sha = None
    if m.fog_of_war is not None:
        brief_sha = file_sha256(loaded.arena_dir / m.fog_of_war.player_brief, "player brief")
    verifiers = [ms.verifier for ms in (m.build.milestones if m.build else [])]
    ver_sha = verifier_digest(given, verifiers)
    eval_sha = _sha(evaluation_manifest_text(raw.decode("utf-8")).encode("utf-8"))
    return MatchProvenance(
        controller_version=controller_version,
        source_revision=source_revision,
        arena_id=m.arena.id,
        arena_mode="buildrace" if m.arena.mode == "build_race" else "conquest",
        manifest_sha256=_sha(raw),
        player_brief_sha256=brief_sha,
        verifier_sha256=ver_sha,
        adapter_sha256={name: file_sha256(p, f"adapter {name}") for name, p in sorted(adapters.items())},
        compatibility_key=compatibility_key(m.arena.id, eval_sha, brief_sha, ver_sha),
    )


#: Files of an arena package that decide no result (documentation), left out of
#: :func:`package_digests`.
NOT_RULES = frozenset({"README.md"})


def package_digests(arena_dir: str | Path) -> dict[str, str]:
    """sha256 (lowercase hex) of every file of an arena package that decides results, by its
    path relative to the package (``verify/service-up.sh``, ``arena.toml``, ``territory/...``,
    ``adapters/builders/...``, the player's text): every file, symlinks followed, except
    :data:`NOT_RULES`, hidden files and folders and ``__pycache__``. Sorted by path.

    Raises :class:`ProvenanceError` if a file cannot be read.
    """
    root = Path(arena_dir)
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if rel in NOT_RULES or not path.is_file():
                continue
            out[rel] = file_sha256(path, "arena file")
    return dict(sorted(out.items()))
