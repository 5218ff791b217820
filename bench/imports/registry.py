"""The registry of importers: one module per tool whose results the lab can read.

An importer says whether a file is its tool's (``detect``, on the parsed file) and reads it
(``load``) into a ``bench.imports.result.Imported``. A tool that writes one run into several files
(AIPerf: its requests in one, its configuration and aggregates in another) also reads them together
(``load_together``) into one run. The upload form, the job page and the compare page ask this
registry and never branch on a tool's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.imports.result import Imported, NotImportable
from labapp.said import gettext as _

# A --save-detailed run of a few thousand requests fits; a larger body never reaches the form
# (settings.REQUEST_MAX_BYTES, 5 MB + 64 KB, is refused with a 413 before it is read).
MAX_BYTES = 5 * 1024 * 1024
MAX_RUNS = 20  # runs read from one file (a GuideLLM sweep holds one per strategy)
MAX_FILES = 2  # files of one run uploaded together (AIPerf's two)


@dataclass(frozen=True)
class Importer:
    """A tool's results: ``name`` is stored with the run, ``tool`` is how people call the tool."""

    name: str
    tool: str
    detect: Callable[[Any], bool]  # the parsed file (a dict, or a list of JSON Lines' objects)
    # Every run in the file (a GuideLLM sweep holds several); NotImportable when it is the tool's but unusable.
    load: Callable[[Any], list[Imported]]
    # The parsed files of one run the tool writes separately, read into one; None: each file stands alone.
    # NotImportable (with words saying why) when they are not one run's.
    load_together: Callable[[list[Any]], list[Imported]] | None = None
    together: str = ""  # the files that go together, as the tool names them (the form's words)


_IMPORTERS: dict[str, Importer] = {}


def register(importer: Importer) -> Importer:
    if importer.name in _IMPORTERS and _IMPORTERS[importer.name] is not importer:
        raise ValueError(f"an importer named {importer.name!r} is already registered")
    _IMPORTERS[importer.name] = importer
    return importer


def find(name: str) -> Importer | None:
    return _IMPORTERS.get(name)


def all_importers() -> list[Importer]:
    return list(_IMPORTERS.values())


def parsed(data: bytes) -> Any:
    """The file as JSON, or as JSON Lines (a list of objects); NotImportable says why it is neither."""
    if not data.strip():
        raise NotImportable(_("파일이 비어 있습니다"))
    if len(data) > MAX_BYTES:
        raise NotImportable(_("파일이 너무 큽니다 (최대 %(mb)d MB)") % {"mb": MAX_BYTES // (1024 * 1024)})
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotImportable(_("UTF-8 텍스트가 아닙니다")) from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    lines: list[Any] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except (ValueError, RecursionError):
            raise NotImportable(
                _("JSON도 JSON Lines도 아닙니다 (%(line)d번째 줄을 읽을 수 없습니다)") % {"line": number}
            ) from None
    return lines


def _importer_of(content: Any) -> Importer:
    for importer in all_importers():
        if importer.detect(content):
            return importer
    tools = ", ".join(importer.tool for importer in all_importers())
    raise NotImportable(_("어느 도구의 결과인지 알 수 없습니다. 읽을 수 있는 도구: %(tools)s") % {"tools": tools})


def _checked(importer: Importer, runs: list[Imported]) -> list[Imported]:
    if not runs:
        raise NotImportable(_("%(tool)s의 파일이지만 실행 결과가 하나도 없습니다") % {"tool": importer.tool})
    if len(runs) > MAX_RUNS:
        raise NotImportable(_("실행 결과가 너무 많습니다 (한 파일에 최대 %(most)d개)") % {"most": MAX_RUNS})
    return runs


def read(data: bytes) -> list[Imported]:
    """The runs in the file, read by the first importer that recognises it; NotImportable when none does, or
    when it holds no run."""
    content = parsed(data)
    importer = _importer_of(content)
    return _checked(importer, importer.load(content))


def together_words() -> str:
    """Which files may be uploaded together, per tool: "AIPerf (profile_export.jsonl, …)"."""
    return ", ".join(f"{i.tool} ({i.together})" for i in all_importers() if i.load_together is not None)


def _named(name: str, data: bytes) -> Any:
    """One of several files, parsed and known to an importer; what is wrong with it says which file."""
    try:
        content = parsed(data)
        _importer_of(content)
    except NotImportable as exc:
        raise NotImportable(name + ": " + exc.message) from None
    return content


def read_together(files: list[tuple[str, bytes]]) -> list[Imported]:
    """The runs in these files (name, content): one file's, or the one run a tool split into several files;
    NotImportable says why when they are not one tool's files of one run."""
    if not files:
        raise NotImportable(_("파일이 비어 있습니다"))
    if len(files) == 1:
        return read(files[0][1])
    if len(files) > MAX_FILES:
        raise NotImportable(_("한 번에 파일을 %(most)d개까지 올릴 수 있습니다") % {"most": MAX_FILES})
    contents = [_named(name, data) for name, data in files]
    found = [_importer_of(content) for content in contents]
    importer = found[0]
    if any(other is not importer for other in found) or importer.load_together is None:
        raise NotImportable(
            _(
                "여러 파일을 함께 올릴 수 있는 것은 한 도구가 한 실행을 나눠 적은 파일들뿐입니다: %(together)s. "
                "다른 결과는 하나씩 올리세요."
            )
            % {"together": together_words()}
        )
    return _checked(importer, importer.load_together(contents))
