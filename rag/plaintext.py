"""Markdown as the words a reader sees: a retrieved chunk shown as a source without "##", "**" or "`".

Parsed with markdown-it-py, the parser that already renders the chapter (labapp's ``markdown``
filter, same preset): what a source shows is the text the chapter page shows, and lists, code,
links and tables come out right where patterns stripping marks would guess (a "#" in "C#", a
"*" in "2 * 3"). A chunk cut inside a strong emphasis leaves one unpaired "**" the parser reads as
text: those are dropped too (a double mark is never prose).
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": False}).enable("table")
_BLOCK_ENDS = {"paragraph_close", "heading_close", "list_item_close", "tr_close", "blockquote_close", "hr"}
_CELL_ENDS = {"th_close", "td_close"}
_UNPAIRED = re.compile(r"\*\*|__")


def readable(markdown: str) -> str:
    """``markdown``'s text as read on a page: headings, emphasis, code and link marks dropped, one
    line per block, table cells apart."""
    parts: list[str] = []
    for token in _md.parse(markdown):
        if token.type == "inline":
            for child in token.children or []:
                if child.type == "text":
                    parts.append(_UNPAIRED.sub("", child.content))
                elif child.type in ("code_inline", "image"):  # an image's content is its alt text
                    parts.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    parts.append(" " if child.type == "softbreak" else "\n")
        elif token.type in ("fence", "code_block"):
            parts.append(token.content.rstrip("\n") + "\n")
        elif token.type in _CELL_ENDS:
            parts.append(" · ")
        elif token.type in _BLOCK_ENDS:
            parts.append("\n")
    text = re.sub(r" · \n", "\n", "".join(parts))
    return re.sub(r"\n{2,}", "\n", text).strip()
