"""The committed English catalog (django.mo) is the compiled django.po, entry for entry.

``compilemessages`` skips a .po older than its .mo, and a merge that takes one side's .mo makes
exactly that: the pages then show Korean to an English reader for every string added on the other
side. Compiling the .po afresh and comparing the two catalogs finds it in the check tier.
"""

from __future__ import annotations

import gettext
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "locale" / "en" / "LC_MESSAGES"


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="gettext's msgfmt is not installed")
def test_the_committed_mo_is_the_compiled_po(tmp_path: Path) -> None:
    fresh = tmp_path / "django.mo"
    subprocess.run(["msgfmt", "-o", str(fresh), str(CATALOG / "django.po")], check=True)
    with fresh.open("rb") as compiled, (CATALOG / "django.mo").open("rb") as committed:
        want = gettext.GNUTranslations(compiled)._catalog  # type: ignore[attr-defined]
        have = gettext.GNUTranslations(committed)._catalog  # type: ignore[attr-defined]
    missing = sorted(str(k)[:60] for k in want.keys() - have.keys())
    assert not missing, f"run `touch {CATALOG / 'django.po'}` and compilemessages; not in django.mo: {missing[:5]}"
    assert want == have
