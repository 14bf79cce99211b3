"""The repository stands alone: every format citation resolves to ``docs/formats.md``.

* Every section sign citation (``§3.6``, ``§ 3.6``, ``§5``, ``§7.3.``, the second half of a
  range such as ``§5.3–5.4``) and every appendix citation (``Appendix B``,
  ``Appendix A.10``) in the ``.py`` files under ``aoe_tui/``, ``tests/``, ``benchmarks/`` and the ``.md`` files under
  ``docs/`` plus ``README.md`` must name a heading of ``docs/formats.md`` (an appendix item
  such as A.10 must appear as the label ``**A.10**`` inside that appendix).
* No file under ``aoe_tui``, ``tests``, ``benchmarks`` may point at the outside developer
  notes or the shared folder next to the repository.
* Nothing cites the outside research notes: their facts live in ``docs/territories.md``,
  ``docs/opencode.md``, ``docs/serving.md`` and the arena READMEs (:data:`PENDING_NOTES`
  lists allowed exceptions per file; it is empty).

The matchers are tested on small synthetic inputs too, so a broken matcher cannot make the
real checks pass vacuously.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ROOT / "docs" / "formats.md"
CODE_DIRS = ("aoe_tui", "tests", "benchmarks")
SECTION = "\u00a7"  # the section sign, built so this file cites nothing itself

#: ``§3.6``, ``§ 3.6``, ``§5``, ``§7.3.`` (sentence dot dropped), ``§5.3–5.4`` (range end kept)
CITE_RE = re.compile(SECTION + r"\s?(\d+(?:\.\d+)*)(?:\s?[\u2013-]\s?(?:" + SECTION + r"\s?)?(\d+(?:\.\d+)*))?")
#: ``Appendix B``, ``Appendix A.10``
APPENDIX_RE = re.compile(r"\bAppendix ([A-Z])(?:\.(\d+))?\b")
#: a markdown heading line
HEADING_RE = re.compile(r"^#{1,6}\s+(.*)$", re.M)

#: Citations of the outside research notes (path, count) still waiting to be repointed.
PENDING_NOTES: dict[str, int] = {}
#: How an outside-notes citation looks: ``notes/x.md``, ``notes pitfall N``, ``(notes: …``, ``anchors §N``.
NOTES_RE = re.compile(
    r"(?<![\w/.-])notes/\w" r"|\bnotes pitfall\b" r"|\(notes:" r"|\banchors " + SECTION
)


def headings(text: str) -> tuple[set[str], dict[str, str]]:
    """Section numbers of the headings of ``text`` and ``{appendix letter: its body}``."""
    numbers: set[str] = set()
    appendices: dict[str, str] = {}
    found = list(HEADING_RE.finditer(text))
    for i, m in enumerate(found):
        title = m.group(1)
        sec = re.match(SECTION + r"\s?(\d+(?:\.\d+)*)", title)
        if sec:
            numbers.add(sec.group(1))
        app = re.match(r"Appendix ([A-Z])\b", title)
        if app:
            end = found[i + 1].start() if i + 1 < len(found) else len(text)
            appendices[app.group(1)] = text[m.end():end]
    return numbers, appendices


def citations(text: str) -> list[tuple[int, str]]:
    """``(line number, citation)`` for every citation in ``text``: ``"3.6"`` or ``"Appendix A.10"``."""
    out: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in CITE_RE.finditer(line):
            out.append((lineno, m.group(1)))
            if m.group(2):
                out.append((lineno, m.group(2)))
        for m in APPENDIX_RE.finditer(line):
            out.append((lineno, "Appendix " + m.group(1) + ("." + m.group(2) if m.group(2) else "")))
    return out


def unresolved(cites: list[tuple[str, int, str]], text: str) -> list[str]:
    """The citations of ``cites`` (``(file, line, citation)``) that ``text`` has no heading for."""
    numbers, appendices = headings(text)
    bad = []
    for file, line, cite in cites:
        if cite.startswith("Appendix "):
            letter, _, item = cite[len("Appendix "):].partition(".")
            ok = letter in appendices and (not item or f"**{letter}.{item}**" in appendices[letter])
        else:
            ok = cite in numbers
        if not ok:
            bad.append(f"{file}:{line}: {cite}")
    return bad


def cited_files() -> list[Path]:
    """The files whose citations must resolve."""
    files = [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py")) if "__pycache__" not in p.parts]
    files += sorted((ROOT / "docs").rglob("*.md"))
    files.append(ROOT / "README.md")
    return files


def all_citations() -> list[tuple[str, int, str]]:
    out = []
    for p in cited_files():
        rel = p.relative_to(ROOT).as_posix()
        out += [(rel, line, c) for line, c in citations(p.read_text(encoding="utf-8"))]
    return out


def grep(needles: list[str]) -> list[str]:
    """``path:line: text`` for each line under :data:`CODE_DIRS` containing one of ``needles``
    (tracked and untracked files, like ``git grep --untracked``; a plain walk without git)."""
    try:
        patterns = [a for n in needles for a in ("-e", n)]
        r = subprocess.run(
            ["git", "grep", "--untracked", "-n", "-I", "-F", *patterns, "--", *CODE_DIRS],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        if r.returncode in (0, 1):
            return r.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        pass
    hits = []
    for d in CODE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if not p.is_file() or "__pycache__" in p.parts:
                continue
            try:
                text = p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for i, line in enumerate(text.splitlines(), 1):
                if any(n in line for n in needles):
                    hits.append(f"{p.relative_to(ROOT).as_posix()}:{i}:{line}")
    return hits


# --- the real checks -------------------------------------------------------------------


def test_every_citation_resolves_to_a_formats_heading() -> None:
    cites = all_citations()
    assert len(cites) > 200, f"only {len(cites)} citations found: the matcher is broken"
    bad = unresolved(cites, FORMATS.read_text(encoding="utf-8"))
    assert not bad, "citations without a heading in docs/formats.md:\n" + "\n".join(bad)


def test_no_pointer_outside_the_repository() -> None:
    needles = ["DEVELOPERS" + ".md", ".." + "/shared"]
    hits = grep(needles)
    assert not hits, "references to documents outside the repository:\n" + "\n".join(hits)


def test_outside_notes_citations_do_not_grow() -> None:
    counts: dict[str, int] = {}
    for d in CODE_DIRS:
        for p in sorted((ROOT / d).rglob("*.py")):
            if p == Path(__file__).resolve():
                continue
            n = len(NOTES_RE.findall(p.read_text(encoding="utf-8")))
            if n:
                counts[p.relative_to(ROOT).as_posix()] = n
    grown = {f: n for f, n in counts.items() if n > PENDING_NOTES.get(f, 0)}
    assert not grown, (
        f"new citations of outside notes {grown}: cite docs/territories.md, docs/opencode.md, "
        "docs/serving.md or an arena README instead"
    )


def test_formats_has_every_numbered_heading_once() -> None:
    text = FORMATS.read_text(encoding="utf-8")
    titles = [m.group(1) for m in HEADING_RE.finditer(text)]
    nums = [re.match(SECTION + r"(\d+(?:\.\d+)*)", t).group(1) for t in titles if t.startswith(SECTION)]
    assert len(nums) == len(set(nums)), "duplicate section numbers in docs/formats.md"
    for n in nums:  # a subsection lives under its parent section
        if "." in n:
            assert n.rsplit(".", 1)[0] in nums, f"{SECTION}{n} has no parent heading"


# --- the matchers themselves --------------------------------------------------------------

S = SECTION


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"spec {S}3.6 standings", ["3.6"]),
        (f"see {S} 3.6.", ["3.6"]),
        (f"upstream {S}5, {S}7.3.", ["5", "7.3"]),
        (f"spec {S}5.3\u20135.4", ["5.3", "5.4"]),
        (f"{S}1.1\u2013{S}1.11", ["1.1", "1.11"]),
        (f"spec {S}6.1's opts", ["6.1"]),
        ("the bundle (Appendix B) and Appendix A.10", ["Appendix B", "Appendix A.10"]),
        ("no citation here, section 3", []),
    ],
)
def test_citation_matcher(line: str, expected: list[str]) -> None:
    assert [c for _, c in citations(line)] == expected


def test_unresolved_detects_a_missing_heading() -> None:
    doc = f"# T\n## {S}3 Rules\n### {S}3.6 Standings\n## Appendix A Hazards\n- **A.10** x\n## Appendix B Bundle\n"
    cites = [("f.py", 1, "3"), ("f.py", 2, "3.6"), ("f.py", 3, "Appendix B"), ("f.py", 4, "Appendix A.10")]
    assert unresolved(cites, doc) == []
    without = doc.replace(f"### {S}3.6 Standings\n", "")
    assert unresolved(cites, without) == ["f.py:2: 3.6"]
    assert unresolved(cites, doc.replace("## Appendix B Bundle\n", "")) == ["f.py:3: Appendix B"]
    assert unresolved(cites, doc.replace("**A.10**", "A.10")) == ["f.py:4: Appendix A.10"]


def test_real_formats_minus_one_heading_fails() -> None:
    """Removing a cited heading from the real document makes the real check fail."""
    text = FORMATS.read_text(encoding="utf-8")
    cut = re.sub(r"^### " + S + r"3\.6 .*$", "", text, flags=re.M)
    assert cut != text
    assert any(b.endswith(": 3.6") for b in unresolved(all_citations(), cut))


def test_notes_matcher() -> None:
    lines = [
        "see ``notes/territories.md`` pitfall 1",
        "in-place reset (notes pitfall 3)",
        "(notes: ``quiet`` is fastest)",
        f"is removed (anchors {S}3.4)",
        "territory/files/etc/job-queue-notes/hint.txt",
        "/etc/t/notes.txt",
    ]
    assert [bool(NOTES_RE.search(x)) for x in lines] == [True, True, True, True, False, False]


#: A source file named in backticks in the docs: ``referee/rules.py``, ``aoe_tui/fsio.py``,
#: ``season/runner.load_season_file`` (a module path with an attribute), ``fsio.py``.
DOC_PATH_RE = re.compile(r"`((?:[a-z_]+/)*[a-z_]+)(?:\.py|\.(?!(?:md|sh|toml|json|jsonl|txt|log|tcss|nix|service)`)"
                         r"[A-Za-z_]\w*)`")


def _doc_sources() -> set[str]:
    """Every module of the repository as ``a/b/c`` without ``.py``, with and without the
    ``aoe_tui/`` prefix, and every bare module name."""
    out: set[str] = set()
    for p in ROOT.glob("**/*.py"):
        rel = p.relative_to(ROOT)
        if rel.parts[0].startswith(".") or "venv" in rel.parts[0]:
            continue
        stem = rel.with_suffix("").as_posix()
        out |= {stem, stem.removeprefix("aoe_tui/"), rel.stem}
    return out


def test_docs_name_only_modules_that_exist():
    """A module the docs name in backticks (``referee/rules.py``, ``season/runner.SeasonRunner``)
    exists, so the map stays true when code moves."""
    known = _doc_sources()
    bad = []
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in DOC_PATH_RE.finditer(line):
                name = m.group(1)
                if ("/" in name or m.group(0).endswith(".py`")) and name not in known:
                    bad.append(f"{doc.relative_to(ROOT)}:{i}: {m.group(0)}")
    assert bad == []


def test_doc_module_matcher():
    assert DOC_PATH_RE.findall("`referee/rules.py` and `season/runner.load_season_file` `fsio.py` `x`") == [
        "referee/rules", "season/runner", "fsio"]
    assert "referee/rules" in _doc_sources() and "aoe_tui/referee/rules" in _doc_sources()
