"""plotly.js: the cartesian bundle (1.5 MB, not the full 4.8 MB), the version the installed plotly
package writes figures for, cached for good under its versioned name, and only on pages that draw charts."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from bench.models import BenchJob

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = "vendor/plotly-cartesian/plotly-cartesian-4.1.1.min.js"
TRACES_IN_BUNDLE = {"Bar", "Box", "Contour", "Heatmap", "Histogram", "Histogram2d", "Histogram2dContour", "Image",
                    "Pie", "Scatter", "Scatterternary", "Violin"}  # fmt: skip


def _version(text: str) -> str:
    found = re.search(r"plotly\.js (?:\([a-z -]+\) )?v(\d+\.\d+\.\d+)", text[:400])
    assert found, text[:200]
    return found.group(1)


def test_the_vendored_bundle_is_the_plotly_js_the_installed_package_writes_for() -> None:
    spec = importlib.util.find_spec("plotly")
    assert spec is not None and spec.origin is not None
    package = Path(spec.origin).parent / "package_data" / "plotly.min.js"
    vendored = ROOT / "labapp" / "static" / BUNDLE
    assert _version(vendored.read_text(encoding="utf-8")) == _version(package.read_text(encoding="utf-8"))
    assert BUNDLE.endswith(f"-{_version(package.read_text(encoding='utf-8'))}.min.js")  # the name carries it
    assert vendored.stat().st_size < 2_000_000 < package.stat().st_size


def test_every_trace_type_the_site_draws_is_in_the_bundle() -> None:
    used: set[str] = set()
    for source in [*ROOT.glob("bench/**/*.py"), *ROOT.glob("labapp/**/*.py")]:
        used |= set(re.findall(r"\bgo\.([A-Z][A-Za-z0-9]*)\(", source.read_text(encoding="utf-8")))
    assert used - {"Figure"} <= TRACES_IN_BUNDLE, "a new trace type needs a larger plotly.js bundle"


def test_the_bundle_is_cached_for_good_and_the_site_scripts_are_not() -> None:
    immutable = settings.WHITENOISE_IMMUTABLE_FILE_TEST
    assert immutable("", f"/static/{BUNDLE}")
    assert not immutable("", "/static/lab/bench.js") and not immutable("", "/static/lab/demo.js")


@pytest.mark.django_db
def test_plotly_loads_only_on_pages_with_charts() -> None:
    owner = User.objects.create(username="charts")
    client = Client()
    client.force_login(owner)
    cells = [{"cell": "a", "completed": 1, "chunk_size": 200, "top_k": 1, "median_context_tokens": 9.0,
              "median_ttft_ms": 30.0, "median_tpot_ms": 9.0}]  # fmt: skip
    job = BenchJob.objects.create(owner=owner, kind="retrieval", config={}, engine_url="http://e", status="done",
                                  results={"cells": cells})  # fmt: skip
    for path in ("/", "/chapter/prefill-decode/", "/labs/", "/bench/", "/demo/"):
        assert "plotly" not in client.get(path).content.decode(), path
    for path in (f"/bench/{job.pk}/", f"/demo/?job={job.pk}", "/labs/1/"):
        page = client.get(path).content.decode()
        assert page.count(BUNDLE) == 1 and "plotly.min.js" not in page, path
