"""The repository stands alone: every `§`, `ADR-` and `*.md` reference in code and docs resolves here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("semula", "answerer", "tests", "docs", "deploy", "migrations", "bench")
TOP_LEVEL = ("README.md", "setup.cfg", "pyproject.toml", "Makefile")
SUFFIXES = {".py", ".sql", ".md", ".html", ".cfg", ".toml", ".example", ".service", ".txt"}
# Names that are not references to a document: files a program writes.
NOT_REFERENCES = {("bench/__main__.py", "report.md")}
HEADING = re.compile(r"^#+ §")

MD = re.compile(r"(?<![\w./-])([\w./-]*[\w-]\.md)\b")
SECTION = re.compile(r"§\s?(\d+)")
ADR = re.compile(r"\bADR-(\d+)")
URL = re.compile(r"https?://\S+")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in TOP_LEVEL if (ROOT / name).is_file()]
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                files.append(path)
    return [p for p in files if p != Path(__file__).resolve()]


def resolve(document: str, source: Path) -> Path | None:
    for base in (ROOT, source.parent, ROOT / "docs"):
        candidate = (base / document).resolve()
        if candidate.is_file() and ROOT in candidate.parents:
            return candidate
    return None


def broken_references(path: Path, text: str) -> list[str]:
    """Each reference in `text` (of the file at `path`) that does not resolve, as "file:line: what"."""
    name = path.relative_to(ROOT).as_posix()
    broken = []
    for number, line in enumerate(text.splitlines(), 1):
        line = URL.sub("", line)
        where = f"{name}:{number}"
        for match in ADR.finditer(line):
            if not list((ROOT / "docs" / "decisions").glob(f"{match[1]}-*.md")):
                broken.append(f"{where}: {match[0]} is no file in docs/decisions/")
        documents = [(m.start(), m[1]) for m in MD.finditer(line) if (name, m[1]) not in NOT_REFERENCES]
        for _, document in documents:
            if resolve(document, path) is None:
                broken.append(f"{where}: {document} does not exist")
        for match in [] if HEADING.match(line) else SECTION.finditer(line):
            cited = [doc for start, doc in documents if start < match.start()]
            if not cited:
                broken.append(f"{where}: {match[0]} names no document before it on its line")
                continue
            target = resolve(cited[-1], path)
            if target is not None and not re.search(rf"^#+ §{match[1]}\b", target.read_text(), re.MULTILINE):
                broken.append(f"{where}: {cited[-1]} has no section §{match[1]}")
    return broken


def test_every_reference_resolves_to_a_file_in_the_repository():
    broken = [
        problem
        for path in scanned_files()
        for problem in broken_references(path, path.read_text(errors="replace"))
    ]
    assert broken == [], "\n".join(broken)


SCRATCH = ROOT / "docs" / "design" / "scratch.md"  # never written: only its folder is used


@pytest.mark.parametrize(
    "text, problem",
    [
        ("see SPEC §3", "§3 names no document"),
        ("see docs/design/product.md §99", "has no section §99"),
        ("see docs/design/nowhere.md", "does not exist"),
        ("PERFORMANCE.md says so", "does not exist"),
        ("ADR-0013 says so", "no file in docs/decisions/"),
    ],
)
def test_a_reference_that_resolves_nowhere_is_found(text, problem):
    [found] = broken_references(SCRATCH, text)
    assert problem in found


def test_references_that_resolve_are_accepted():
    text = "docs/design/product.md §3, §4 and §7-§9; answerer.md; docs/decisions/0012-proxy-hot-path.md"
    assert broken_references(SCRATCH, text) == []
