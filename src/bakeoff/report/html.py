"""The HTML evidence report: one self-contained file that works offline.

Safety: the page is rendered by jinja2 with autoescaping on, so every name, note, tag, path and
error message is text, never markup. Figures travel as JSON in ``<script type="application/json">``
blocks (not executed) with ``<``, ``>``, ``&`` and the JavaScript line separators escaped, so
no value can close the tag; strings shown inside plots are entity-escaped because plotly
interprets a few HTML-like tags in labels. A Content-Security-Policy with a per-page nonce
lets only the page's own scripts run and forbids every network load.

plotly's JavaScript is inlined once per page; figures are drawn when they scroll into view, so
a report of a thousand runs opens quickly.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from bakeoff.analysis.requirements import requirement_state
from bakeoff.checks.registry import guarded, registered_checks
from bakeoff.report.charts import dist_charts, fit_map
from bakeoff.report.charts import plot_layout as _layout
from bakeoff.report.charts import plot_text as _t
from bakeoff.report.evidence import Evidence, answers_for, check_lines, scenario_rows
from bakeoff.report.figures import requirement_figures, settings_line, speed_caveat, with_level
from bakeoff.results.strictjson import for_display
from bakeoff.results.values import RunResult, TargetResult
from bakeoff.scenarios.dist import dist_of
from bakeoff.scenarios.fit import fit_of
from bakeoff.units import duration

__all__ = ["figures_for_run", "history_figures", "render_html", "safe_json"]

_OUTCOME_COLOUR = {
    "regressed": "#c62828",
    "failed": "#6a1b9a",
    "improved": "#2e7d32",
    "unchanged": "#607d8b",
    "not_comparable": "#f9a825",
}


def safe_json(value: Any) -> str:
    """JSON that cannot end the ``<script>`` element it sits in, nor break a JavaScript string."""

    text = json.dumps(for_display(value), separators=(",", ":"), default=str, allow_nan=False)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _label(result: TargetResult) -> str:
    return result.target.spec + (f" [{result.variant}]" if result.variant != "as-is" else "")


def figures_for_run(run: RunResult) -> list[tuple[str, dict[str, Any]]]:
    """``(caption, figure)`` pairs for one run: latency distributions, speed ratios, placement,
    recompilations per shape (each only when there is something to draw)."""
    figures: list[tuple[str, dict[str, Any]]] = []
    timed = [r for r in run.results if r.latency is not None and r.latency.count]
    if timed:
        data = [
            {"type": "box", "y": list(r.latency.samples_ms), "name": _t(_label(r)), "boxpoints": "outliers"}
            for r in timed
            if r.latency is not None
        ]
        figures.append(
            (
                "Latency per call (every timed call; the box spans the middle half, the line is the median)",
                {"data": data, "layout": _layout("latency per call", "ms")},
            )
        )
    rated = [r for r in run.results if r.speedup is not None and r.speedup_ci and not r.is_reference]
    if rated:
        ci = [r.speedup_ci or {} for r in rated]
        figures.append(
            (
                "Speed relative to eager CPU with 95% bootstrap intervals (above 1 is faster; an interval "
                "crossing the dashed line means no significant difference)",
                {
                    "data": [
                        {
                            "type": "scatter",
                            "mode": "markers",
                            "x": [_t(_label(r)) for r in rated],
                            "y": [r.speedup for r in rated],
                            "error_y": {
                                "type": "data",
                                "symmetric": False,
                                "array": [
                                    max(c.get("high", r.speedup) - r.speedup, 0) for r, c in zip(rated, ci, strict=True)
                                ],
                                "arrayminus": [
                                    max(r.speedup - c.get("low", r.speedup), 0) for r, c in zip(rated, ci, strict=True)
                                ],
                            },
                            "marker": {"size": 10},
                        }
                    ],
                    "layout": _layout(
                        "speed vs eager CPU",
                        "x faster",
                        shapes=[
                            {
                                "type": "line",
                                "xref": "paper",
                                "x0": 0,
                                "x1": 1,
                                "y0": 1,
                                "y1": 1,
                                "line": {"dash": "dash", "color": "#888"},
                            }
                        ],
                    ),
                },
            )
        )
    # a CPU target's dispatch audit does not say where work ran (the host is the device)
    audited = [
        r
        for r in run.results
        if r.status == "ok" and r.placement is not None and r.placement.ops_total and r.target.device != "cpu"
    ]
    if any(r.placement is not None and r.placement.verdict != "not_applicable" for r in audited):
        labels = [_t(_label(r)) for r in audited]
        device, fallback, host = [], [], []
        for r in audited:
            p = r.placement
            assert p is not None
            fb = sum(p.fallback_ops.values())
            device.append(p.ops_on_device)
            fallback.append(fb)
            host.append(max(p.ops_total - p.ops_on_device - fb, 0))
        figures.append(
            (
                "Where the op calls ran: on the target device, in the backend's host fallback, or on the host",
                {
                    "data": [
                        {"type": "bar", "name": "on device", "x": labels, "y": device, "marker": {"color": "#2e7d32"}},
                        {"type": "bar", "name": "fallback", "x": labels, "y": fallback, "marker": {"color": "#f9a825"}},
                        {"type": "bar", "name": "host", "x": labels, "y": host, "marker": {"color": "#c62828"}},
                    ],
                    "layout": _layout("placement of op calls", "op calls", barmode="stack", showlegend=True),
                },
            )
        )
    for r in run.results:
        fitted = fit_of(r.scenario("fit"))
        if fitted is not None and fitted.points:
            figures.append(fit_map(_label(r), fitted))
        spread = dist_of(r.scenario("dist"))
        if spread is not None:
            figures += dist_charts(_label(r), spread)
    for check in registered_checks():  # what the checks draw themselves (training curves, ...)
        figures += guarded(check, "figures", run.results, fallback=[])
    shaped = [r for r in run.results if r.compilation is not None and r.compilation.per_shape]
    if shaped:
        data = []
        for r in shaped:
            assert r.compilation is not None
            rows = r.compilation.per_shape
            data.append(
                {
                    "type": "bar",
                    "name": _t(_label(r)),
                    "x": [_t(row.get("shape", "?")) for row in rows],
                    "y": [row.get("first_call_ms") for row in rows],
                }
            )
        figures.append(
            (
                "First call per request shape (ms): a shape far above the others compiled again "
                "(recompilation); the recompilation reasons are listed with each target",
                {"data": data, "layout": _layout("first call per shape", "ms", barmode="group", showlegend=True)},
            )
        )
    return figures


def history_figures(evidence: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """Median latency of each workload + target across runs, coloured by environment, with the
    latest result's classification marked (see the regressions table)."""
    env_index = {fp: i for i, fp in enumerate(evidence.environments)}
    flagged = {(c.after_run, c.target, c.variant): c for c in evidence.regressions}
    figures = []
    for (workload, spec, variant), points in evidence.series().items():
        timed = [(run, r) for run, r in points if r.latency is not None and r.latency.count]
        if len(timed) < 2:
            continue
        trace = {
            "type": "scatter",
            "mode": "lines+markers",
            "x": [run.created_at[:19].replace("T", " ") for run, _ in timed],
            "y": [r.latency.p50_ms for _, r in timed if r.latency is not None],
            "text": [_t(f"run {run.run_id}, environment {run.environment.fingerprint}") for run, _ in timed],
            "marker": {
                "size": 9,
                "color": [env_index[run.environment.fingerprint] for run, _ in timed],
                "colorscale": "Viridis",
            },
            "line": {"color": "#9e9e9e"},
            "name": "p50",
        }
        marks = [
            (run, r, flagged[(run.run_id, spec, variant)]) for run, r in timed if (run.run_id, spec, variant) in flagged
        ]
        data = [trace]
        for run, r, comparison in marks:
            assert r.latency is not None
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers+text",
                    "x": [run.created_at[:19].replace("T", " ")],
                    "y": [r.latency.p50_ms],
                    "text": [comparison.outcome.replace("_", " ")],
                    "textposition": "top center",
                    "marker": {
                        "size": 16,
                        "symbol": "x" if comparison.outcome in ("regressed", "failed") else "circle-open",
                        "color": _OUTCOME_COLOUR[comparison.outcome],
                    },
                    "name": comparison.outcome,
                }
            )
        label = spec + (f" [{variant}]" if variant != "as-is" else "")
        figures.append(
            (
                f"{workload} on {label}: median latency per run (colour = environment; the latest result "
                "is marked with its classification against the previous environment)",
                {"data": data, "layout": _layout(f"{workload} on {label}", "p50 ms")},
            )
        )
    return figures


@lru_cache(maxsize=1)
def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script")


def _environment_rows(env_data: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key in ("torch", "python", "os", "machine", "cpu", "cpu_count", "captured_at"):
        if key in env_data:
            rows.append((key, str(env_data[key])))
    for key, value in (env_data.get("devices") or {}).items():
        if value not in (None, "", []):
            rows.append((f"device {key}", str(value)))
    for key, value in (env_data.get("packages") or {}).items():
        rows.append((f"package {key}", str(value)))
    for key, value in (env_data.get("threads") or {}).items():
        rows.append((f"threads {key}", str(value)))
    for key, value in (env_data.get("env") or {}).items():
        rows.append((f"env {key}", str(value)))
    return rows


_DECISION_SAID = {
    "recommended": ("recommended", "#1a7f37"),
    "tie": ("no clear winner; best estimate", "#9a6700"),
    "inconclusive": ("inconclusive; best candidate", "#9a6700"),
    "none": ("no target qualifies; closest", "#cf222e"),
    "nothing": ("nothing to decide", "#57606a"),
}


def glance_runs(runs: Sequence[RunResult]) -> list[str]:
    """The run "At a glance" shows for each workload: its latest *full comparison*, the latest of
    the runs with the most targets, so that a smaller follow-up run (one target again, say) does
    not replace the main comparison."""
    best: dict[str, tuple[int, str, str]] = {}
    for run in runs:
        size = len({r.target.spec for r in run.results})
        key = (size, run.created_at, run.run_id)
        if run.workload["spec"] not in best or key > best[run.workload["spec"]]:
            best[run.workload["spec"]] = key
    return [run_id for _size, _when, run_id in best.values()]


def _context(evidence: Evidence) -> dict[str, Any]:
    figures: list[dict[str, Any]] = []

    def add(caption: str, figure: dict[str, Any]) -> dict[str, Any]:
        item = {"id": f"fig{len(figures)}", "caption": caption, "json": safe_json(figure)}
        figures.append(item)
        return item

    runs = []
    for run in reversed(evidence.runs):  # newest first
        targets = []
        for r in run.results:
            comparison = evidence.comparison_for(run.run_id, r)
            targets.append(
                {
                    "result": r,
                    "label": _label(r),
                    "answers": answers_for(r),
                    "comparison": comparison,
                    "requirements": [
                        {**q, "measured": shown[0], "interval": with_level(shown[1], q), "state": requirement_state(q)}
                        for q in getattr(r, "requirements", None) or ()
                        for shown in [requirement_figures(q)]
                    ],
                    "noise": getattr(r, "noise", None) or (),
                    "scenarios": scenario_rows(r),
                    "checks": check_lines(r, detailed=True),
                    "caveat": speed_caveat(r),
                }
            )
        runs.append(
            {
                "run": run,
                "targets": targets,
                "notes": evidence.notes.get(run.run_id, ()),
                "tags": evidence.tags.get(run.run_id, ()),
                "figures": [add(c, f) for c, f in figures_for_run(run)],
                "measured": settings_line(run),
                "decision": evidence.decisions.get(run.run_id),
                "remedies": evidence.remedies.get(run.run_id, {}),
            }
        )
    shown = set(glance_runs(evidence.runs))
    glance = [item for item in runs if item["run"].run_id in shown]
    history = [add(c, f) for c, f in history_figures(evidence)]
    environments = [
        {
            "fingerprint": fp,
            "rows": _environment_rows(env.data),
            "runs": [run.run_id for run in evidence.runs if run.environment.fingerprint == fp],
        }
        for fp, env in evidence.environments.items()
    ]
    return {
        "e": evidence,
        "runs": runs,
        "glance": glance,
        "history": history,
        "environments": environments,
        "regressions": sorted(
            evidence.regressions,
            key=lambda c: (
                ("failed", "regressed", "not_comparable", "improved", "unchanged").index(c.outcome),
                c.workload,
            ),
        ),
        "counts": {o: sum(1 for c in evidence.regressions if c.outcome == o) for o in _OUTCOME_COLOUR},
        "outcome_colour": _OUTCOME_COLOUR,
        "decision_said": _DECISION_SAID,
        "figure_count": len(figures),
    }


@lru_cache(maxsize=4)
def _template(name: str = "report.html.j2") -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("bakeoff.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = duration
    env.filters["pct"] = lambda v: "-" if v is None else f"{v:.0%}"
    env.filters["when"] = lambda v: str(v)[:19].replace("T", " ")
    return env.get_template(name)


def render_html(evidence: Evidence) -> str:
    """The whole page as a string (plotly inlined once, figures drawn lazily)."""
    from markupsafe import Markup

    context = _context(evidence)
    context["plotly_js"] = Markup(_plotly_js())  # plotly's own bundle, with any "</script" neutralised
    context["figure_json"] = {f["id"]: Markup(f["json"]) for r in context["runs"] for f in r["figures"]}
    context["figure_json"].update({f["id"]: Markup(f["json"]) for f in context["history"]})
    context["nonce"] = secrets.token_urlsafe(16)
    return _template().render(**context)
