"""The documents stay true to the repository: links resolve, named paths exist, nothing points outside.

Read as plain text (no services): README.md, CONTRIBUTING.md and docs/*.md.

- Every relative Markdown link or image resolves to a file or folder of the repository, and
  its ``#anchor``, if any, to a heading of that file (GitHub's slugs).
- Every backticked repository path (``bench/kinds/speed.py``, ``tests/``, ``Makefile``) exists.
- No file in the repository points at the steering notes outside it.
- docs/operations.md's configuration table and ``labapp.env.VARIABLES`` name the same variables.
- README.md stays a front door: short, the two commands first.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from labapp import env

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MOST_LINES = 200

# Where a backticked token has to start to be taken for a repository path.
TOP_LEVEL_DIRS = ("labapp/", "rag/", "bench/", "lti/", "templates/", "tests/", "docker/", "docs/", "locale/", ".ci/")
TOP_LEVEL_FILES = ("Makefile", "Procfile", "manage.py", "pyproject.toml", "README.md", "CONTRIBUTING.md")
PATH_ENDINGS = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".html", ".js", ".css", ".json", ".jsonl", ".po", ".sh")
# Not in a clone: the embedded stack's data and the browser tests' screenshots are git-ignored.
NOT_IN_A_CLONE = ("data/", "test-artifacts/")

# Spelled in two halves so that this file does not contain what it looks for.
OUTSIDE_NOTES = (*("shared" + "/" + name for name in ("METRICS.md", "CHAPTER.md", "STYLE.md")), ".." + "/shared")

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
INDENTED = re.compile(r"^(?: {4}|\t).*$", re.MULTILINE)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _prose(text: str) -> str:
    """The text without fenced or indented code blocks (whose brackets and backticks are code, not links)."""
    return INDENTED.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link and code marks dropped, lower case, punctuation removed
    (letters of any script, digits, ``_`` and ``-`` kept), spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; a repeated heading gets -1, -2, … as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images in ``text``'s prose (inline code left out)."""
    return LINK.findall(CODE_SPAN.sub("", _prose(text)))


def broken_link(doc: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``doc``) does not resolve, or None when it does or is not relative."""
    if SCHEME.match(target):
        return None
    where, _, anchor = target.partition("#")
    if where:
        base = ROOT if where.startswith("/") else doc.parent
        file = (base / where.lstrip("/")).resolve()
        if not file.exists():
            return f"{_name(doc)}: link ({target}) points at {where}, which does not exist"
        if not file.is_relative_to(ROOT):
            return f"{_name(doc)}: link ({target}) leaves the repository"
    else:
        file = doc
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{_name(doc)}: link ({target}) names #{anchor}, which is no heading of {_name(file)}"
    return None


def repository_paths(text: str) -> Iterator[str]:
    """The words of backticked spans that name a repository file or folder."""
    for span in CODE_SPAN.findall(_prose(text)):
        for word in span.split():
            word = word.rstrip(",;:)")
            if any(mark in word for mark in "*?<>{}…$") or word.startswith(NOT_IN_A_CLONE):
                continue
            is_path = "/" in word or word.endswith(PATH_ENDINGS) or word in TOP_LEVEL_FILES
            in_repository = word.startswith((*TOP_LEVEL_DIRS, "requirements")) or word in TOP_LEVEL_FILES
            if is_path and in_repository:
                yield word


def missing_paths(doc: Path) -> list[str]:
    return [
        f"{_name(doc)}: `{word}` is no file or folder of the repository"
        for word in repository_paths(doc.read_text(encoding="utf-8"))
        if not (ROOT / word).exists()
    ]


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_relative_link_and_image_resolves(doc: Path) -> None:
    broken = [why for target in links(doc.read_text(encoding="utf-8")) if (why := broken_link(doc, target))]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_every_path_a_document_names_exists(doc: Path) -> None:
    missing = missing_paths(doc)
    assert not missing, "\n".join(missing)


def _repository_files() -> list[Path]:
    """Files git tracks, or would track once added (new, not ignored): what a clone will hold."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_no_file_points_at_notes_outside_the_repository() -> None:
    pointing = []
    for path in _repository_files():
        data = path.read_bytes()
        if b"\0" in data:
            continue  # a binary file (an image, a compiled catalogue)
        text = data.decode("utf-8", errors="replace")
        pointing += [f"{_name(path)}: {note}" for note in OUTSIDE_NOTES if note in text]
    assert not pointing, "these point outside the repository:\n" + "\n".join(pointing)


def configuration_table(text: str) -> list[str]:
    """The first-column names of the table under docs/operations.md's "## Configuration" heading."""
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\|\s*`([^`]+)`\s*\|", section, re.MULTILINE)


def test_the_configuration_table_lists_every_variable_and_no_other() -> None:
    operations = ROOT / "docs" / "operations.md"
    text = operations.read_text(encoding="utf-8")
    undocumented = [name for name in env.VARIABLES if f"`{name}`" not in text]
    assert not undocumented, f"docs/operations.md does not document {undocumented}"
    unknown = [name for name in configuration_table(text) if name.isupper() and name not in env.VARIABLES]
    assert not unknown, f"docs/operations.md's configuration table names {unknown}, not in labapp.env.VARIABLES"


def test_the_readme_is_a_short_front_door_with_the_two_commands_first() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines (at most {README_MOST_LINES})"
    body = [line for line in lines if line.strip() and not line.startswith("# ")]
    assert "make run" in body[0], f"README.md: the first line after the title is {body[0]!r}, not `make run`"
    assert "make test" in body[1], f"README.md: the second line after the title is {body[1]!r}, not `make test`"
