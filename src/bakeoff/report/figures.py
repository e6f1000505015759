"""Headline figures of scenarios as short strings, shared by the terminal and the reports.

Values come from :func:`bakeoff.verdicts.metrics.metric_estimate`, so every renderer shows the
same numbers with the same 95% intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bakeoff.analysis.requirements import SINGLE_OBSERVATION
from bakeoff.errors import BakeoffError
from bakeoff.metrics import metric_percentile
from bakeoff.results.values import TargetResult
from bakeoff.scenarios.base import rounds_text
from bakeoff.scenarios.dist import steps_words
from bakeoff.scenarios.registry import known_scenario
from bakeoff.settings import TrialSettings
from bakeoff.settings.exec import current_names
from bakeoff.settings.nodes import Nodes
from bakeoff.stats import samples_needed
from bakeoff.units import clip, figure, human_bytes
from bakeoff.verdicts.metrics import metric_estimate

__all__ = [
    "correct_word",
    "figure",
    "human_bytes",
    "log_fact",
    "placement_share",
    "placement_word",
    "requirement_figures",
    "scenario_figures",
    "settings_line",
    "spans_fact",
    "speed_caveat",
]


def _short(text: str, width: int = 60) -> str:
    return clip(text, width)


def log_fact(result: TargetResult, run_id: str = "RUN") -> str | None:
    """One sentence about what the libraries said while ``result``'s target ran (None if
    nothing): how many lines, how many distinct, the most frequent, and where to read them."""
    if not result.log:
        return None
    counts: dict[str, int] = {}
    for line in result.log:  # the same line in several phases is one distinct line here
        counts[line["text"]] = counts.get(line["text"], 0) + line["count"]
    total = sum(counts.values())
    top = sorted(counts.items(), key=lambda item: -item[1])[:3]
    shown = ", ".join(f"{_short(text)} x{count}" for text, count in top)
    more = ", ..." if len(counts) > len(top) else ""
    noun = "library message" if total == 1 else "library messages"
    return f"{total} {noun} ({len(counts)} distinct: {shown}{more}); `bakeoff show {run_id} --log`"


def _estimate(result: TargetResult, metric: str, label: str, unit: str = "ms") -> str | None:

    found = metric_estimate(result, metric)
    if found is None:
        return None
    text = f"{label} {figure(found.value, unit)}"
    if found.high > found.low:
        text += f" [{figure(found.low, unit)}-{figure(found.high, unit)}]"
    if not found.enough:
        pct = metric_percentile(metric)
        need = f": p{pct:g} needs {samples_needed(pct)}" if pct is not None else ""
        text += f" (only {found.samples} samples{need})"
    elif found.samples > 1:
        text += f" (n={found.samples})"
    return text


def scenario_figures(result: TargetResult, scenario: Any) -> list[str]:
    """The headline figures of one scenario, with intervals and sample counts (the scenario
    declares them: :meth:`~bakeoff.scenarios.base.Scenario.figures`)."""

    facts = scenario.facts
    declared = known_scenario(scenario.name)
    figures = [] if declared is None else declared.figures(result, scenario, lambda *a: _estimate(result, *a))
    if facts.get("inputs"):  # which inputs it ran on; results stored before they said so have none
        figures.append(f"inputs: {facts['inputs']}")
    if facts.get("graphs"):
        figures.append(f"{facts['graphs']} more graph(s) compiled for its new shapes")
    elif facts.get("compilations"):  # documents written before graphs were counted per scenario
        figures.append(f"{facts['compilations']} compilation(s) for its new shapes")
    figures.append(rounds_text(scenario))  # any scenario merged from rounds, a plugin's too
    return [f for f in figures if f]


def requirement_figures(check: dict[str, Any]) -> tuple[str, str]:
    """``(measured, interval)`` of one requirement check, in its unit ("-" where there is none).

    A value read once has no interval: its interval reads "single observation", never a
    zero-width range that would look like certainty.
    """

    unit = "ms" if check.get("unit") is None else check["unit"]
    value, low, high = check.get("value"), check.get("low"), check.get("high")
    measured = "-" if value is None else figure(value, unit)
    interval = "-"
    if value is not None and check.get("samples") == 1:
        interval = SINGLE_OBSERVATION
    elif low is not None and high is not None and high > low:
        interval = f"{figure(low, unit)}-{figure(high, unit)}"
    elif value is not None and low is not None and high is None:  # too few requests to bound it above
        interval = f"{figure(low, unit)}-unbounded"
    return measured, interval


def confidence_of(check: Mapping[str, Any]) -> float:
    """The level of a stored requirement check's interval (one stored before it was kept: 95%)."""
    return float(check.get("confidence") or 0.95)


def interval_heading(checks: Iterable[Mapping[str, Any]]) -> str:
    """The heading of a column of requirement intervals: ``95% interval`` (their level, when
    they share one), else ``interval`` (each cell then says its own, :func:`with_level`)."""
    levels = {confidence_of(c) for c in checks}
    return f"{levels.pop() * 100:g}% interval" if len(levels) == 1 else "interval"


def with_level(interval: str, check: Mapping[str, Any], heading: str = "interval") -> str:
    """An interval (:func:`requirement_figures`) with `` (99%)`` after it where ``heading`` does
    not say its level."""
    if heading != "interval" or interval in ("-", SINGLE_OBSERVATION):
        return interval
    return f"{interval} ({confidence_of(check) * 100:g}%)"


#: The words for a placement verdict, the same in every format (the JSON keeps the code beside them).
PLACEMENT_WORDS = {
    "on_device": "on device",
    "not_applicable": "host is device",
    "fallbacks": "fallbacks",
    "left_on_host": "left on host",
    "engine_did_not_run": "engine did not run",
    "unknown": "unknown",
}


def correct_word(result: TargetResult) -> str:
    """The correctness answer in one word or two, as every format shows it."""
    if result.status == "skipped":
        return "not run"
    if result.status == "error":
        return "error"
    verdict = result.correctness.verdict if result.correctness is not None else None
    if verdict is None:  # the reference of a script run is what the others are compared with
        return "reference" if result.is_reference else "not checked"
    return verdict.replace("_", " ")


def placement_word(result: TargetResult) -> str:
    """Where the work ran, in the words every format uses: a CPU target's ``not_applicable`` is
    "host is device" (the work cannot have run anywhere else)."""
    if result.status != "ok":
        return "not run" if result.status == "skipped" else "unknown"
    p = result.placement
    if p is None:
        return "not audited"
    return PLACEMENT_WORDS.get(p.verdict, p.verdict.replace("_", " "))


def placement_share(result: TargetResult) -> str:
    """Where the op calls ran, in words that match the audit's figures.

    An engine that reports its work gets its own share (of the op calls handed to it); a CPU
    target's dispatch audit says nothing about where work ran (the host is the device), so
    it gets none; a device target gets the share of op calls (and FLOPs) on the device.
    """
    p = result.placement
    if p is None or result.status != "ok":  # a run that did not finish measured no share
        return ""
    work = p.engine_work
    if work and work.get("share") is not None:
        return (
            f"{work.get('engine', 'the engine')} ran {work['share']:.0%} of the op calls handed to it "
            f"({work.get('op_calls_in_engine', 0)} of {work.get('op_calls', 0)})"
        )
    if result.target.device == "cpu" or p.verdict == "not_applicable" or p.device_op_share is None:
        return ""
    text = f"{p.device_op_share:.0%} of ops on the device ({p.ops_on_device} of {p.ops_total})"
    if p.device_flop_share is not None:
        text += f", {p.device_flop_share:.0%} of FLOPs"
    return text


def settings_line(run: Any) -> str | None:
    """How the run's targets were measured (:meth:`~bakeoff.settings.TrialSettings.describe`)
    and the check options a user set, or None where its stored settings are not ones this
    release reads. What the line does not show is not read (scenarios, requirements), and the
    check options are shown as stored: a plugin's check or scenario, absent now, does not hide
    the rest."""
    service = run.settings.get("serve")
    if isinstance(service, dict):  # bakeoff serve: the service started once per target
        mapped = ", ".join(str(e) for e in service.get("map_devices") or ()) or "nothing"
        slo = ", ".join(service.get("slo") or ()) or "none given"
        return (
            f"the service started once per target, {mapped} remapped to its device; {service.get('warmup')} warm-up "
            f"requests, then {service.get('rate')}/s ({service.get('arrivals')}) for {service.get('duration_s')} s, "
            f"each timed from when it was due; objectives: {slo}"
        )
    spread = run.settings.get("dist")
    if isinstance(spread, dict):  # bakeoff dist: a job per world size
        ranks = ", ".join(str(n) for n in spread.get("ranks") or ())
        if run.workload.get("spec") != "dist:collectives":
            modes = "/".join(str(m).upper() for m in spread.get("modes") or ("ddp",))
            steps = f"{steps_words(spread.get('steps'), modes)} (SGD, lr {spread.get('lr')}) at {ranks} ranks"
            return (
                f"{steps}, one process each on the target's backend, against one float64 process and the CPU's gloo job"
            )
        return (f"collectives at {ranks} ranks, one process each on the target's process-group backend; "
                f"{spread.get('iterations')} timed calls per collective, size and dtype")  # fmt: skip
    fitted = run.settings.get("fit")
    if isinstance(fitted, dict):  # bakeoff fit: predicted on the host, probed on the target
        step = f"a training step ({fitted.get('optimizer')})" if fitted.get("training") else "one inference step"
        probes = "calibrated and verified on the target" if fitted.get("probes", True) else "predicted only"
        return f"{step} per point of {fitted.get('grid')} under fake tensors on the host, {probes}"
    script = run.settings.get("exec")
    if isinstance(script, dict):  # bakeoff exec: one run of a script per target
        script = current_names(script)
        mapped = ", ".join(str(e).partition("=")[0] for e in script.get("map_devices") or ()) or "nothing"
        nproc = script.get("nproc") or 1
        each = (
            "each in a process and a copy of the working directory of its own"
            if nproc == 1
            else f"each as {nproc} ranks (torchrun's environment), processes sharing a copy of the working directory"
        )
        if script.get("nodes"):  # this machine's ranks of a job across machines
            try:
                nodes = Nodes.parse(str(script["nodes"]))
            except BakeoffError:
                nodes = None
            if nodes is not None:
                each = (f"each as this machine's {nproc} of {nproc * nodes.count} ranks (node {nodes.rank} of "
                        f"{nodes.count}, meeting at {nodes.host}:{nodes.port}; torchrun's environment), sharing a "
                        f"copy of the working directory")  # fmt: skip
        return (
            f"the script run once per target, {each}; "
            f"{mapped} remapped to each target's device; seed {script.get('seed')}, timeout {script.get('timeout_s')} s"
            + ("; strict" if script.get("strict") else "")
            + (
                f"; timed over {script['repeats']} more runs a side without the audit or --capture's tracing"
                if script.get("repeats")
                else ""
            )
        )
    stored = {k: v for k, v in run.settings.items() if k not in ("scenarios", "requirements")}
    checks = stored.pop("checks", None)
    checks = checks if isinstance(checks, list) else []
    try:
        line = TrialSettings.from_dict(stored).describe()
    except (BakeoffError, TypeError, ValueError, KeyError):
        return None
    asked = [str(text) for text in checks if "?" in str(text)]  # a name alone changed nothing
    return line + ("; check options " + " ".join(asked) if asked else "")


def speed_caveat(result: Any) -> str:
    """What a target's speed figures cannot say: the bundled test device emulates a device on
    the CPU, so its speed does not transfer to a real accelerator ("" for other targets)."""
    from bakeoff.emu import NAME

    return f"not transferable: {NAME} emulates a device on the CPU" if result.target.device == NAME else ""


def spans_fact(result: Any, limit: int = 5) -> str:
    """A script run's slowest spans between captures with their ratios to the reference's
    (``conditions["timing"]``, :mod:`bakeoff.analysis.spans`), in one line; "" without spans."""
    timing = (result.conditions or {}).get("timing") or {}
    rows = [r for r in timing.get("spans") or () if r.get("ms") is not None]
    if not rows:
        return ""
    slowest = sorted(rows, key=lambda r: -r["ms"])[:limit]
    said = [
        f"{r['span']} {figure(r['ms'], 'ms')}"
        + (f" ({r['ratio']:.3g}x{', out of line' if r.get('out_of_line') else ''})" if r.get("ratio") else "")
        for r in slowest
    ]
    typical = timing.get("typical_span_ratio")
    return (
        f"slowest spans: {', '.join(said)}"
        + (f" (of {len(rows)}; typical ratio {typical:.3g}x" if typical else f" (of {len(rows)}")
        + f", from {timing.get('spans_from', 'the runs')})"
    )
