"""axe-core's accessibility rules, run in a page the browser tests have open.

axe-core comes from npm (`make test` installs it under ``.tools/``, pinned in the Makefile).
It is evaluated through the DevTools protocol, which the page's Content-Security-Policy does not
govern, so the CSP watcher of tests/conftest.py sees nothing of it.
"""

from __future__ import annotations

from pathlib import Path

AXE_JS = Path(__file__).resolve().parent.parent / ".tools" / "node_modules" / "axe-core" / "axe.min.js"
# What fails a page: the violations axe rates serious or critical, and landmark-unique (two landmarks
# of one kind that a screen reader cannot tell apart), which it rates moderate.
ALWAYS = ("landmark-unique",)
RUN = """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations.map(v => ({
  id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}))"""


def violations(page: object) -> list[str]:
    """The page's serious and critical violations (and landmark-unique), one line each; empty: none."""
    page.evaluate(AXE_JS.read_text())  # type: ignore[attr-defined]
    found = page.evaluate(RUN)  # type: ignore[attr-defined]
    return [
        f"{v['id']} ({v['impact']}): {', '.join(v['nodes'])}"
        for v in found
        if v["impact"] in ("serious", "critical") or v["id"] in ALWAYS
    ]
