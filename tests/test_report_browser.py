"""The HTML report in a real headless Chromium: it renders, and markup in stored strings stays text.

Needs Debian's ``chromium`` (``.ci/run`` installs it). Skipped with the reason when it is absent,
except in CI (``CI`` set), where its absence is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from tests.conftest import FIXTURES
from tests.revisit_data import update_series
from tests.test_revisit import _injected_db

from bakeoff import api
from bakeoff.store import Store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TITLE = "bakeoff evidence report"


@pytest.fixture(scope="module")
def chromium() -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("chromium is not installed (apt-get install -y chromium) ; the report's browser tests need it")
    return CHROMIUM


def _chromium(binary: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG into rows of pixel bytes (enough for a screenshot)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                corner = previous[i - bpp] if i >= bpp else 0
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, bpp, rows


def _colours(png: Path) -> dict[bytes, int]:
    width, bpp, rows = _png_pixels(png.read_bytes())
    counts: dict[bytes, int] = {}
    for row in rows:
        for x in range(0, width * bpp, bpp):
            pixel = row[x : x + 3]
            counts[pixel] = counts.get(pixel, 0) + 1
    return counts


def test_report_renders_in_chromium(chromium, tmp_path):
    db = tmp_path / "kb.db"
    update_series(Store.open(db))
    page = tmp_path / "report.html"
    api.report(db=db, html=page)
    shot = tmp_path / "shot.png"
    result = _chromium(chromium, tmp_path, "--window-size=900,1400", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    colours = _colours(shot)
    total = sum(colours.values())
    white = colours.get(b"\xff\xff\xff", 0)
    assert len(colours) > 50, f"only {len(colours)} colours: a blank or unstyled page"
    assert white < 0.95 * total
    assert colours.get(b"\x1f\x3a\x5f", 0) > 1000  # the header band's colour: the page's own CSS applied
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert dom.count('class="main-svg"') >= 2, "plotly drew no figure (scripts blocked or failed)"


def test_markup_in_stored_strings_does_not_execute(chromium, tmp_path):
    db = _injected_db(tmp_path)
    page = tmp_path / "report.html"
    api.report(db=db, html=page)
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert f"<title>{TITLE}</title>" in dom, "the page's title changed: injected script ran"
    assert "pwned" not in re.findall(r"<title>(.*?)</title>", dom)[0]
    assert not re.search(r"<img[^>]*src=\"?x", dom), "an injected <img> became an element"
    assert not re.search(r"<script>document\.title", dom), "an injected <script> became an element"
    # the markup is visible as text: in the workload name, the error message and (with notes) the note
    shown = "&lt;img src=x onerror=\"document.title='pwned'\"&gt;"
    assert dom.count(shown) >= 3, dom.count(shown)
    assert 'compile failed &lt;script&gt;document.title="pwned"&lt;/script&gt;' in dom
    assert "tried the new driver &lt;script&gt;" in dom
    assert dom.count('class="main-svg"') >= 2, "the page did not finish rendering its figures"
    shot = tmp_path / "shot.png"
    _chromium(chromium, tmp_path, "--window-size=900,1000", f"--screenshot={shot}", page.as_uri())
    assert len(_colours(shot)) > 50


def test_coverage_page_draws_its_heatmap_and_keeps_markup_as_text(chromium, tmp_path):
    from bakeoff.report.coverage import render_coverage_html
    from bakeoff.results.values import ErrorInfo, TargetResult
    from bakeoff.target.spec import parse_target
    from bakeoff.verdicts.coverage import Coverage, grade_cell

    crafted = "arch:x?label=<img src=x onerror=\"document.title='pwned'\">"
    failed = TargetResult(
        target=parse_target("cpu"),
        status="error",
        error=ErrorInfo("RuntimeError", "<script>document.title='pwned'</script>", "exception", "first call"),
    )
    cells = (grade_cell(crafted, failed), grade_cell("arch:y", None, {"type": "E", "message": "no"}, "cpu"))
    population = {"name": "list <b>", "unit": "workload", "size": 2, "specs": [crafted, "arch:y"]}
    page = tmp_path / "coverage.html"
    page.write_text(render_coverage_html(Coverage("s1", "2026-01-01T00:00:00", population, ("cpu",), cells)))
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "<title>bakeoff coverage s1</title>" in dom, "the page's title changed: injected script ran"
    assert not re.search(r"<img[^>]*src=\"?x", dom), "an injected <img> became an element"
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # the reason, shown as text
    assert dom.count('class="main-svg"') >= 1, "plotly drew no heat-map"


def test_a_fit_map_is_drawn_as_a_heat_map(chromium, tmp_path):
    db = tmp_path / "kb.db"
    workload = f"py:{FIXTURES / 'fit_models.py'}:net?jump=16"
    found = api.fit(workload, "cpu", grid="batch=1,2,...,32&seq=32,64", memory="20MiB", db=db)
    page = tmp_path / "report.html"
    api.report(run_ids=[found.run_id], db=db, html=page)
    text = page.read_text()
    assert '"type":"heatmap"' in text and "Largest batch that fits: seq 32: 8; seq 64: 8" in text
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "fit map: cpu" in dom, "plotly drew no fit map"
    assert 'class="hm"' in dom, "the heat-map layer was not drawn"
    assert "34.4 MiB" in dom and "1.3 MiB" in dom  # the cells' peaks, written on the map
    assert "Decision</strong>" not in dom  # a map measures no correctness or speed: no decision is claimed


def test_a_distributed_checks_bandwidth_and_tail_are_drawn_per_size_with_a_wrong_collective_crossed(chromium, tmp_path):
    from bakeoff.distributed.record import dist_run
    from bakeoff.scenarios.dist import CollectiveCell, DistResult, WorldRun
    from bakeoff.settings.dist import DIST_OPTIONS
    from bakeoff.settings.option import read_options
    from bakeoff.store.db import Store
    from bakeoff.target.spec import parse_target

    def cell(op: str, size: int, p50: float, error: float = 0.0) -> CollectiveCell:
        speed = size / p50 / 1e3
        verdict = "pass" if error <= 1 else "fail"
        return CollectiveCell(op, "float32", size, verdict, error, 1.0, p50_us=p50, p99_us=p50 * 3, busbw_gbs=speed,
                              iterations=20)  # fmt: skip

    cells = (cell("all_reduce_sum", 4096, 100.0), cell("all_reduce_sum", 1 << 20, 900.0, error=7.0),
             cell("all_gather", 4096, 80.0), cell("all_gather", 1 << 20, 700.0))  # fmt: skip
    found = DistResult("collectives", "cpu", "collectives", (WorldRun(2, "fail", "x", "gloo <b>", cells=cells),))
    run = dist_run(found, parse_target("cpu"), read_options(DIST_OPTIONS, {"sizes": "4KiB,1MiB"}, "dist"))
    Store.open(tmp_path / "kb.db").save_run(run)
    page = tmp_path / "report.html"
    api.report(run_ids=[run.run_id], db=tmp_path / "kb.db", html=page)
    text = page.read_text()
    assert "Bus bandwidth of each collective on cpu at 2 ranks (gloo &lt;b&gt;)" in text  # escaped
    dom = _chromium(chromium, tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "bus bandwidth: cpu, 2 ranks" in dom and "tail: cpu, 2 ranks" in dom, "plotly drew no dist chart"
    assert dom.count('class="main-svg"') >= 2
    assert "Decision</strong>" not in dom  # a distributed check measures no speed against a baseline
    assert '"symbol":["circle","x"]' in text  # the wrong all_reduce at 1 MiB is crossed
