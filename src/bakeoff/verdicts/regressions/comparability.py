"""What makes a pair of runs not comparable: the settings that decide what was measured, and more.

:func:`settings_difference` reads from each run's stored settings what decides what it measured
(input profile, timing mode, cold compile cache, scenario and check options, padding buckets;
for a script run its device map, reference, captures, seed, strict mode, file comparison and
how it was timed) and says which differ. :func:`incomparable` gives the reason a pair as a
whole is not compared: another workload fingerprint, settings that differ, another adjustments
ledger for the same target, or a skipped side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.results.values import RunResult, TargetResult
from bakeoff.settings.exec import current_names
from bakeoff.units import clip

__all__ = ["incomparable", "settings_difference"]

#: Entries of a long adjustments ledger named in a reason (the rest are counted).
LEDGER_SHOWN = 3


def _spec_key(text: str) -> str:
    """A check or scenario spec with its options in a fixed order (``a?y=2&x=1`` -> ``a?x=1&y=2``)."""
    head, _, options = str(text).partition("?")
    return head + ("?" + "&".join(sorted(options.split("&"))) if options else "")


def _on(value: Any) -> str:
    return "on" if value else "off"


def _measured(run: RunResult, variant: str) -> dict[str, tuple[Any, str]]:
    """The stored settings that decide what ``run`` measured: name -> (the value compared, how
    it reads). A key a document lacks takes the value its version used."""
    stored = run.settings or {}
    found: dict[str, tuple[Any, str]] = {}
    script = stored.get("exec")
    if isinstance(script, Mapping):  # a script run (bakeoff exec): see bakeoff.settings.exec
        script = current_names(script)
        devices = [str(entry).partition("=")[0] for entry in script.get("map_devices") or ("cuda",)]
        found["device map"] = (devices, ",".join(map(str, devices)))
        as_written = bool(script.get("as_written", False))
        reference = stored.get("reference")
        found["reference"] = ((reference, as_written), f"{reference}" + (" as written" if as_written else ", remapped"))
        for key, name in (("capture", "captures"), ("capture_modules", "module captures")):
            names = sorted(map(str, script.get(key) or ()))
            found[name] = (names, ", ".join(names) or "none")
        found["seed"] = (script.get("seed", 0), str(script.get("seed", 0)))
        nproc = script.get("nproc") or 1
        found["ranks"] = (nproc, f"{nproc} rank{'s' if nproc != 1 else ''}")
        found["strict mode"] = (bool(script.get("strict", False)), _on(script.get("strict", False)))
        found["file comparison"] = (bool(script.get("files", True)), _on(script.get("files", True)))
        if script.get("repeats"):
            timing = "timing runs without the audit"
        else:
            timing = "the first run's wall time" + (", audited" if script.get("audit", True) else "")
        found["timing mode"] = (timing, timing)
        return found
    service = stored.get("serve")
    if isinstance(service, Mapping):  # a service run (bakeoff serve): see bakeoff.settings.serve
        return _service_measured(service, stored.get("reference"))
    profile = stored.get("profile")
    if isinstance(profile, Mapping):
        requests = [list(r) for r in profile.get("requests") or ()]
        found["input profile"] = (requests, f"{profile.get('source')} ({len(requests)} requests)")
    else:
        found["input profile"] = (None, "none")
    mode = "worker processes" if stored.get("isolate", True) else "one process"
    found["timing mode"] = (mode, mode)
    found["cold compile cache"] = (bool(stored.get("cold_cache", False)), _on(stored.get("cold_cache", False)))
    for kind in ("scenario", "check"):
        for text in stored.get(f"{kind}s") or ():
            name, _, options = str(text).partition("?")
            found[f"{kind} {name}"] = (_spec_key(text), options or "defaults")
    if variant != "as-is":
        plan = stored.get("buckets") if isinstance(stored.get("buckets"), Mapping) else {}
        sizes = list(plan.get("chosen") or ()) or stored.get("pad_to_buckets")
        found["padding buckets"] = (sizes, str(sizes))
    return found


def _service_measured(service: Mapping[str, Any], reference: Any) -> dict[str, tuple[Any, str]]:
    """What decides a service run's figures: the device map and reference, the offered traffic
    (rate and arrivals: 5/s and 10/s load a service differently), the endpoint, the warm-up and
    the cold traffic the measured start served first. Not: the duration, the schedule's seed or
    the client processes (how sure a figure is), the objectives, the search and the audited start
    (after the measured run, or in a process of their own)."""
    devices = [str(entry).partition("=")[0] for entry in service.get("map_devices") or ("cuda",)]
    rate, arrivals = service.get("rate"), service.get("arrivals", "poisson")
    cold = float(service.get("cold_s") or 0.0)
    return {
        "device map": (devices, ",".join(devices)),
        "reference": (reference, str(reference)),
        "offered traffic": ((rate, arrivals), f"{rate:g}/s {arrivals}" if isinstance(rate, float | int) else "none"),
        "endpoint": (service.get("path"), str(service.get("path"))),
        "warm-up": (service.get("warmup"), f"{service.get('warmup')} requests"),
        "cold traffic first": (cold, f"{cold:g} s"),
    }


def settings_difference(before: RunResult, after: RunResult, variant: str = "as-is") -> str:
    """The settings that decide what was measured and differ between two runs, in a line
    (``input profile seq=... (20 requests) -> seq=... (50 requests)``); "" when none does.

    Compared: the input profile's requests (not how they were written), the timing mode
    (worker processes or one process: a target timed beside the others, in their process, is
    timed under other conditions), a cold compile cache, the options of each scenario both runs
    ran (one that ran on one side only is simply not compared), each check's options (one not
    set is its defaults), and for a padded ``variant`` the buckets; for a script run its device
    map, reference, captures, seed, strict mode, file comparison and how it was timed; for a service
    run what :func:`_service_measured` names. Left out
    on purpose, as they change how sure a figure is but not what it measures: sample counts,
    minimum times, replicates, timing in turns or one after another (version 1 runs were timed
    one after another), the between-process spread; and timeouts, prices and requirements
    (each compared on its own).
    """
    b, a = _measured(before, variant), _measured(after, variant)
    parts = []
    for name in dict.fromkeys([*b, *a]):
        if name.startswith("scenario ") and (name not in b or name not in a):
            continue
        default = (name.removeprefix("check "), "defaults") if name.startswith("check ") else (None, "none")
        (kb, tb), (ka, ta) = b.get(name, default), a.get(name, default)
        if kb != ka:
            parts.append(f"{name} {tb} -> {ta}" if tb != ta else f"{name} {tb}, with other values")
    return "; ".join(parts)


def _shown(entries: Sequence[str], width: int = 60) -> str:
    """The first :data:`LEDGER_SHOWN` entries, each cut to ``width`` characters, the rest counted."""
    cut = [clip(e, width) for e in entries[:LEDGER_SHOWN]]
    more = len(entries) - len(cut)
    return ", ".join(cut) + (f" and {more} more" if more else "")


def _ledger_change(before: TargetResult, after: TargetResult, runs: tuple[str, str]) -> str:
    """How two adjustments ledgers differ, in a line: a short ledger in full, a long one (a
    script's rewrites run to hundreds) as counts with the first entries that differ, and where
    to read every entry."""

    def entries(result: TargetResult) -> list[str]:
        return [f"{a.get('name')}={a.get('value')}" for a in result.adjustments]

    b, a = entries(before), entries(after)
    if len(b) + len(a) <= 2 * LEDGER_SHOWN and all(len(e) <= 60 for e in (*b, *a)):
        return f"adjustments differ ({', '.join(b) or 'none'} -> {', '.join(a) or 'none'})"
    kept_b, kept_a = set(b), set(a)
    only = [(side, [e for e in mine if e not in theirs]) for side, mine, theirs in
            (("after", a, kept_b), ("before", b, kept_a))]  # fmt: skip
    parts = [f"{len(x)} only {side}: {_shown(x)}" for side, x in only if x] or ["the same entries, in another order"]
    where = " and ".join(f"`bakeoff show {run} --verbose`" for run in runs if run) or "`bakeoff show RUN --verbose`"
    return f"adjustments differ ({len(b)} -> {len(a)} entries; {'; '.join(parts)}; all of them: {where})"


def incomparable(
    before: TargetResult,
    after: TargetResult,
    fp_before: str,
    fp_after: str,
    same_target: bool,
    settings: str = "",
    runs: tuple[str, str] = ("", ""),
) -> str:
    if fp_before != fp_after:
        return f"workload fingerprint changed ({fp_before} -> {fp_after}): a different model or inputs"
    if settings:
        return f"settings differ: {settings}"
    if same_target and list(before.adjustments) != list(after.adjustments):
        return _ledger_change(before, after, runs)
    for side, result in (("before", before), ("after", after)):
        if result.status == "skipped":
            return f"skipped {side}: {result.reason}"
    return ""
