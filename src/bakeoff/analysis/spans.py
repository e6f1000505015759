"""The time between a script's captures, and which span of a target is out of line with the rest.

A script run under ``bakeoff exec`` records when each captured value was kept (a loss passed to
``backward()``, a ``bakeoff.capture`` call, a ``--capture``'d return), in seconds from the
script's start. :func:`spans` turns those times into the script's *spans*: from the start to the
first capture, between consecutive captures, and from the last to the end, each named by its two
ends (``start→loss[0]``, ``loss[0]→loss[1]``, ``loss[2]→end``). Their times add up to the run's.

:func:`compare_spans` sets a target's spans beside the reference's, span by span (the median
over the runs of each side, in milliseconds), as ``ratio`` = target / reference (>1 is slower).
A target is usually slower or faster than the reference everywhere by about the same factor,
so a span is *out of line* when it is slow against that typical factor, not against 1.

The first ``warmup`` (2) spans are *warm-up*: the script's setup (imports, building and moving
the model) and its first step, where a device pays its first-use costs (loading kernels,
allocating, compiling). They are shown with their ratios, marked ``warmup``, and never out of
line: on the test device the setup took several times the reference's while every later step
was quicker, and a warm-up span judged against the steady steps is flagged for what is
expected. A typical ratio is the median of steady spans' ratios weighted by the reference's
time in each: the ratio of the spans that hold most of the steady work, which many tiny spans
cannot outvote (with no span past the warm-up, the warm-up spans' own). Each span is judged
against the typical ratio of the *other* steady spans (``typical_ratio`` in its row): a
slow span never sets the bar it is judged by, even where the reference happened to spend most of
its steady time in that span (a hiccup on a loaded machine gave it the weight to be the median
of its own judgement, and the 300x span was typical of itself). The run's typical ratio, shown
beside the spans, is that of the steady spans not out of line. A span past the warm-up is out of
line when

* its ratio is at least ``factor`` (2) times the other spans' typical ratio, and
* the time it loses against that ratio is at least ``min_share`` (5%) of the target's time over
  all spans: a span of a fraction of a millisecond that doubles by chance is not one.

What it cannot say: a slow first step (inside the warm-up), where inside a span the time went,
nor anything about spans whose names do not match between the two sides (a script that captures
a different number of values on the target: those spans are kept without a ratio).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.stats import percentile

__all__ = ["END", "MAX_SPANS", "START", "compare_spans", "spans"]

START = "start"
END = "end"
#: Spans kept per run: captures past this many join the last span (which then ends at the end).
MAX_SPANS = 500


def spans(times: Mapping[str, Sequence[float]], wall_s: float | None = None) -> dict[str, float]:
    """The spans of one run, in order, in seconds: ``{"start→loss[0]": 0.08, ...}``.

    Args:
        times: per capture name, the seconds from the script's start to each of its calls.
        wall_s: the script's whole run; with it, a last span runs from the last capture to ``end``.

    No capture: no spans (the whole run is the wall time already).
    """
    events = sorted((t, f"{name}[{i}]") for name, calls in times.items() for i, t in enumerate(calls))
    if not events:
        return {}
    if len(events) >= MAX_SPANS:
        events = events[: MAX_SPANS - 1]
    found: dict[str, float] = {}
    before, at = START, 0.0
    for t, name in events:
        found[f"{before}→{name}"] = max(t - at, 0.0)
        before, at = name, t
    if wall_s is not None:
        found[f"{before}→{END}"] = max(wall_s - at, 0.0)
    return found


def compare_spans(
    target: Mapping[str, Sequence[float]],
    reference: Mapping[str, Sequence[float]] | None,
    factor: float = 2.0,
    min_share: float = 0.05,
    warmup: int = 2,
) -> dict[str, Any]:
    """A target's spans beside the reference's (see the module docstring).

    Args:
        target: per span (in order), its times in milliseconds, one per run.
        reference: the same for the reference; None or empty: the spans are kept without ratios.
        factor: how many times the typical ratio makes a span out of line.
        min_share: the least share of the target's time a span must lose to be out of line.
        warmup: how many first spans are warm-up (never out of line, not in the typical ratio).

    Returns:
        ``{"spans": [{"span", "samples_ms", "ms", "reference_ms", "ratio", "warmup", "typical_ratio",
        "out_of_line"}, ...], "typical_ratio": float | None}``; ``reference_ms``, ``ratio`` None
        where the reference has no such span (or took no time in it); a row's ``typical_ratio`` is
        the one it was judged against (the other steady spans'; None for the warm-up and spans
        without a ratio), the top-level one the steady spans' not out of line.
    """
    reference = reference or {}
    rows: list[dict[str, Any]] = []
    for index, (name, samples) in enumerate(target.items()):
        ms = percentile(samples, 50) if samples else None
        ref = reference.get(name)
        ref_ms = percentile(ref, 50) if ref else None
        ratio = ms / ref_ms if ms is not None and ref_ms else None
        rows.append(
            {
                "span": name,
                "samples_ms": [round(x, 4) for x in samples],
                "ms": ms,
                "reference_ms": ref_ms,
                "ratio": ratio,
                "warmup": index < warmup,
                "typical_ratio": None,
                "out_of_line": False,
            }
        )
    steady = [r for r in rows if not r["warmup"]] or rows
    total = sum(r["ms"] for r in rows if r["ms"] is not None)
    for r in rows:
        if r["ratio"] is None or r["warmup"]:
            continue
        others = _weighted_median(
            [(o["ratio"], o["reference_ms"]) for o in steady if o is not r and o["ratio"] is not None]
        )
        r["typical_ratio"] = others
        if others is not None and total > 0:
            lost = r["ms"] - r["reference_ms"] * others
            r["out_of_line"] = r["ratio"] >= factor * others and lost >= min_share * total
    typical = _weighted_median(
        [(r["ratio"], r["reference_ms"]) for r in steady if r["ratio"] is not None and not r["out_of_line"]]
    )
    return {"spans": rows, "typical_ratio": typical}


def _weighted_median(pairs: Sequence[tuple[float, float]]) -> float | None:
    """The value at which half the total weight lies at or below it (None: no pairs)."""
    if not pairs:
        return None
    ordered = sorted(pairs)
    half = sum(w for _, w in ordered) / 2
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= half:
            return value
    return ordered[-1][0]
