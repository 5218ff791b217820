"""CSV cells a spreadsheet shows as written: every CSV the site or a command writes puts each cell through ``csv_safe``.

A cell's text also loses any address's credentials (``labapp.addresses.scrubbed``): an error
saved from an engine's failure names the engine.

A cell whose text starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is read
by Excel, LibreOffice and Google Sheets as a formula (``=HYPERLINK(...)`` in a generated
text, an error message or a username would run when the file is opened); a leading ``'``
makes it text. See OWASP's "CSV Injection".
"""

from __future__ import annotations

from typing import Any

from labapp import addresses

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> str | int | float:
    """One cell: text that could start a formula gets a leading quote.

    Numbers are ours (measured values), never a formula, and stay numbers; None is empty
    and True is "yes" (False empty).
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, int | float):
        return value
    text = addresses.scrubbed(str(value))
    return "'" + text if text.startswith(FORMULA_STARTS) else text
