"""Where did the work really run? The placement audit.

One extra forward pass, after the timed ones so timings stay clean, runs under a
``TorchDispatchMode`` that sees every ATen op the model executes: the devices of its inputs
and outputs, cross-device copies (direction, bytes, and the module they happened in), and
device-to-host synchronisations. Parameters and buffers not on the target device, and a
Hugging Face ``hf_device_map``, are read from the model. A dispatch-level audit cannot see
work done inside a backend's own host fallback, or inside a compiled graph, so
backend-specific signals (the test device's fallback counter, the compile backends' own
reports) are merged in by the caller as ``fallback_ops`` and ``signals``.

Host-to-device copies inside the forward pass are sorted by where their data came from: the
workload's own inputs (when it places them itself), data the forward pass had just copied to
the host (a round trip), or anything else: host state the model keeps or builds on every call
(a plain tensor attribute that ``.to()`` does not move, a ``torch.tensor(...)`` made on the
host), which is left behind as surely as a parameter on the CPU.

Verdicts:
    on_device           every op ran on the target device, nothing left behind, no fallbacks
    fallbacks           some ops ran on the host (or a backend reports fallbacks), or tensors
                        were copied to the host and back in the middle of the forward pass
    left_on_host        parameters/buffers (or device-map entries) are not on the target
                        device, or host state is copied to the device on every forward pass,
                        or (a script or service) the work itself ran on host data: no op call,
                        or less of the arithmetic than the host's, on the device
    engine_did_not_run  the target's engine handed back most of its work (it ran under half of
                        the op calls given to it): what ran was mostly PyTorch
    not_applicable      a CPU target: there is no other place the work could have run (unless
                        a CPU compile backend reports that it handed work back: then fallbacks)
    unknown             not measured: the target's run failed or was skipped, so whatever its
                        audit saw covers only what ran before it stopped (:func:`unmeasured`),
                        or a script or service ran no PyTorch op while audited
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from bakeoff.checks.base import Check, CheckContext, Metric, ScriptContext
from bakeoff.checks.dispatch_audit import (
    HOST_SYNC_OPS,
    PlacementRecorder,
    audit_module,
    off_device_map_entries,
    stray_tensors,
)
from bakeoff.codec import Value
from bakeoff.target.probes import probe_for

__all__ = [
    "ENGINE_MOSTLY_HANDED_BACK",
    "HOST_SYNC_OPS",
    "RANK",
    "UNMEASURED",
    "VERDICTS",
    "Placement",
    "PlacementCheck",
    "PlacementRecorder",
    "audit_module",
    "audit_placement",
    "judge",
    "judge_host_work",
    "unmeasured",
]

#: Every placement verdict, best first for a device target.
VERDICTS = ("on_device", "not_applicable", "fallbacks", "left_on_host", "engine_did_not_run")
#: The verdict of an audit whose run did not finish: not measured. It is outside :data:`RANK`,
#: so a regression check calls it not comparable, never better or worse.
UNMEASURED = "unknown"
#: Placement verdicts for regressions, better higher; verdicts of equal rank are of different kinds.
RANK = {"on_device": 2, "not_applicable": 2, "fallbacks": 1, "left_on_host": 0, "engine_did_not_run": 0}
#: An engine that ran less than this share of the op calls given to it "did not run".
ENGINE_MOSTLY_HANDED_BACK = 0.5
#: Engine precisions that must change results against a float32 eager reference.
REDUCED_PRECISIONS = frozenset({"bf16", "f16", "bfloat16", "float16"})


@dataclass(frozen=True)
class Placement(Value):
    """Where a target's work ran (see the module docstring for the verdicts).

    ``device_op_share`` is the share of recorded op calls whose outputs were on the target
    device; ``device_flop_share`` the same weighted by estimated FLOPs (matmuls, convolutions,
    attention), None where no op had a FLOP estimate. ``transfers`` has ``count`` and ``bytes``
    per direction (``host_to_device``, ``device_to_host``); ``transfer_sites`` says in which
    module each kind of copy happened. ``scope`` says what the dispatch-level audit saw.
    ``ops_on_device`` counts op calls that ran on the device, after taking out what the
    backend's own fallback ran on the host (``ops_total`` on a CPU target, where the host is
    the device). ``host_state_copies`` lists, per module, host-to-device copies per forward
    pass of data that was not an input (host state left behind); ``engine_work`` is what an
    engine reports of the op calls handed to it and how many it ran itself (``share``).
    """

    verdict: str
    explanation: str
    scope: str = ""
    ops_total: int = 0
    ops_on_device: int = 0
    device_op_share: float | None = None
    device_flop_share: float | None = None
    host_ops: dict[str, int] = field(default_factory=dict)
    fallback_ops: dict[str, int] = field(default_factory=dict)
    transfers: dict[str, dict[str, int]] = field(default_factory=dict)
    transfer_sites: tuple[dict[str, Any], ...] = ()
    host_syncs: dict[str, int] = field(default_factory=dict)
    stray_parameters: tuple[str, ...] = ()
    device_map: dict[str, Any] | None = None
    signals: dict[str, Any] = field(default_factory=dict)
    host_state_copies: tuple[dict[str, Any], ...] = ()
    engine_work: dict[str, Any] | None = None


def unmeasured(placement: Placement, status: str) -> Placement:
    """``placement`` of a target whose run did not finish (``status`` error or skipped), as
    not measured: an audit of a run that crashed saw only the ops before the crash, so its
    "on_device" would be a verdict nobody measured. The figures stay, for whoever debugs the
    failure, and the scope and explanation say they are partial."""
    if placement.verdict == UNMEASURED:
        return placement
    return replace(
        placement,
        verdict=UNMEASURED,
        explanation=(
            f"not measured: the run did not finish (status {status}); the audit saw only what ran before it "
            f"stopped, and judged that part {placement.verdict}: {placement.explanation}"
        ),
        scope="partial: " + placement.scope if placement.scope else "partial",
    )


def top_counts(names: Mapping[str, int], n: int = 3, more: bool = False) -> str:
    """The ``n`` most frequent names with their counts (``aten::index x8, ...``); with ``more``,
    how many others there are."""
    shown = ", ".join(f"{name} x{count}" for name, count in Counter(names).most_common(n))
    others = len(names) - n
    return shown + (f" and {others} more" if more and others > 0 else "")


def _engine_handed_back(engine_work: Mapping[str, Any] | None) -> str | None:
    """The explanation when an engine ran under half of the op calls given to it, else None."""
    if not engine_work or engine_work.get("share") is None or engine_work["share"] >= ENGINE_MOSTLY_HANDED_BACK:
        return None
    name = engine_work.get("engine", "the engine")
    calls = engine_work.get("op_calls", 0)
    scope = engine_work.get("scope")
    # a scope reads on from the counts ("over every call of the trial"); with no calls counted
    # at all it says why instead ("every graph went to inductor")
    scope_text = (" " if calls else "; ") + scope if scope else ""
    text = (
        f"{name} ran {engine_work['share']:.0%} of the work handed to it "
        f"({engine_work.get('op_calls_in_engine', 0)} of {calls} op calls{scope_text}); "
        f"{engine_work.get('ran_instead', 'PyTorch')} ran the rest"
    )
    if engine_work.get("partitions_failed"):
        text += (
            f": {engine_work['partitions_failed']} of {engine_work.get('partitions', '?')} partition(s) "
            "failed at run time"
        )
    return text


def judge(
    *,
    cpu_target: bool,
    stray: list[str],
    off_map: list[str],
    host_ops: Mapping[str, int],
    fallback_ops: Mapping[str, int],
    transfers: Mapping[str, Mapping[str, int]],
    sites: list[dict],
    host_state: list[dict] | None = None,
    engine_work: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """The verdict and a one-line explanation, from the audit's findings (pure).

    The order says what a reader must hear first: an engine that mostly did not run (nothing
    else it reports matters much), then anything left behind on the host (parameters, buffers,
    device-map entries, host state copied in every call), then work that ran on the host.
    """
    handed_back = _engine_handed_back(engine_work)
    if handed_back:
        return "engine_did_not_run", handed_back
    if cpu_target:
        if fallback_ops:  # a CPU compile backend that handed work back to PyTorch or inductor
            return (
                "fallbacks",
                f"{sum(fallback_ops.values())} op call(s) did not run in the backend: {top_counts(fallback_ops)}",
            )
        return "not_applicable", "CPU target: all work runs on the host by definition"
    fallback_total = sum(fallback_ops.values()) + sum(host_ops.values())
    also = f"; also {fallback_total} op call(s) ran on the host" if fallback_total else ""
    if stray or off_map:
        what = (stray + off_map)[:3]
        more = len(stray) + len(off_map) - len(what)
        return "left_on_host", (
            "not on the target device: " + ", ".join(what) + (f" and {more} more" if more else "") + also
        )
    if host_state:
        count = sum(s["count"] for s in host_state)
        size = sum(s["bytes"] for s in host_state)
        where = ", ".join(f"{s['module']} ({s['count']} copies, {s['bytes']} B)" for s in host_state[:3])
        return "left_on_host", (
            f"host state copied to the device on every forward pass: {count} copies, {size} B per pass, in {where}; "
            "register it with register_buffer (so .to() moves it) or create it on the device" + also
        )
    round_trips = [s for s in sites if s["direction"] == "device_to_host"]
    if fallback_total:
        names = Counter({**host_ops}) + Counter({**fallback_ops})
        return "fallbacks", f"{fallback_total} op call(s) ran on the host: {top_counts(names)}"
    if round_trips and transfers["host_to_device"]["count"]:
        where = ", ".join(sorted({s["module"] for s in round_trips})[:3])
        return "fallbacks", f"tensors copied to the host and back during the forward pass (in {where})"
    return "on_device", "every op ran on the target device; nothing left on the host"


#: Ops that make or fill a tensor: a script that only makes one on the host and moves it has not
#: worked on the host (the spawning parent of a script whose work is in its child processes).
_MAKES = frozenset(
    f"aten::{name}"
    for name in (
        "zeros ones empty empty_strided full rand randn randint randperm arange linspace eye scalar_tensor "
        "lift_fresh lift_fresh_copy zeros_like ones_like empty_like full_like rand_like randn_like "
        "uniform_ normal_ zero_ fill_ bernoulli_ random_"
    ).split()
)


def judge_host_work(
    recorder: PlacementRecorder,
    host_only: Mapping[str, int],
    fallback_ops: Mapping[str, int],
    whose: str,
    explanation: str,
) -> tuple[str, str]:
    """The verdict and explanation of a script's (or service's) audit that :func:`judge` found
    ``on_device`` (with ``explanation``), given the op calls that ran on host data only
    (``host_only``). Those are the script's own host work (its preprocessing, its metrics) beside
    a device that did the work;
    but where no PyTorch op ran at all the placement is ``unknown``, and where they are all the
    work there was (more than making tensors, which a script then moves) or most of the
    arithmetic, the work itself never reached the device: ``left_on_host``."""
    on_device, device_flops = recorder.device_counts(fallback_ops)
    if not recorder.ops_total:
        return UNMEASURED, f"no PyTorch op ran in the {whose} while it was audited: where its work ran is not known"
    if not host_only:
        return "on_device", explanation
    worked = any(name.split(".")[0] not in _MAKES for name in host_only)
    if (not on_device and worked) or recorder.flops_host > device_flops:
        return "left_on_host", (
            f"the work ran on host data: {sum(host_only.values())} op call(s) on the host "
            f"({top_counts(host_only)}) against {on_device} on the device"
            + (f", {recorder.flops_host:.3g} FLOPs against {device_flops:.3g}" if recorder.flops_host else "")
            + f"; is the {whose} given the target's device?"
        )
    copies = recorder.ops_total - on_device - sum(host_only.values())
    return "on_device", (
        f"every op on the device's data ran on the device ({on_device} op calls); "
        f"{sum(host_only.values())} op call(s) ran on host data only (the {whose}'s own host work: "
        f"{top_counts(host_only)})"
        + (f"; {copies} op call(s) copied data between the host and the device" if copies > 0 else "")
        + "; nothing left on the host"
    )


def audit_placement(prepared: Any, target: Any, probe: Any | None) -> Any:
    """The full placement check for a prepared workload on ``target``.

    Runs the real execution path once between ``probe.begin()``/``probe.end()`` (backend
    signals), then once under the dispatch-level recorder. For a compiled target the recorder
    sees the eager ops PyTorch runs while a dispatch mode is active, not the compiled graph:
    ``scope`` says so, and the backend's own signals speak for the compiled graph. On a CPU
    target the host is the device, so the dispatch audit's shares say nothing: the shares are
    the engine's own (the op calls it ran itself) where it reports them, else None.
    """
    import torch

    def is_target(device: Any) -> bool:
        return device.type == target.device and (target.index is None or device.index in (None, target.index))

    fallback_ops: dict[str, int] = {}
    signals: dict[str, Any] = {}
    if probe is not None:
        probe.begin()
        with torch.no_grad():
            prepared()
        fallback_ops, signals = probe.end()
    if prepared.backend_signals is not None:
        backend_fallbacks, backend_signals = prepared.backend_signals()
        fallback_ops = {**fallback_ops, **backend_fallbacks}
        signals = {**signals, **backend_signals}
    engine_work = signals.pop("engine_work", None)
    if prepared.compile_summary is not None:  # graphs the compiler accepted vs frames left to eager
        summary = prepared.compile_summary()
        signals["compile"] = {
            key: summary.get(key, 0) for key in ("graphs", "graph_breaks", "eager_frames", "recompile_limit_hits")
        }
    root = getattr(prepared.model, "_orig_mod", prepared.model)
    recorder = audit_module(root, prepared, is_target, inputs=(prepared.args, prepared.kwargs))
    stray = stray_tensors(root, is_target)
    device_map = getattr(root, "hf_device_map", None)
    off_map = off_device_map_entries(device_map, is_target)
    sites = recorder.sites()
    host_state = recorder.host_state_sites()
    cpu_target = target.device == "cpu"
    verdict, explanation = judge(
        cpu_target=cpu_target,
        stray=stray,
        off_map=off_map,
        host_ops=recorder.host_ops,
        fallback_ops=fallback_ops,
        transfers=recorder.transfers,
        sites=sites,
        host_state=host_state,
        engine_work=engine_work,
    )
    if cpu_target:
        op_share = engine_work.get("share") if engine_work else None
        flop_share = None
        ops_on_device = recorder.ops_total
    else:
        op_share, flop_share = recorder.shares(fallback_ops)
        ops_on_device = recorder.device_counts(fallback_ops)[0]
    scope = (
        "eager ATen ops (the compiled graph itself is covered by backend signals)"
        if target.is_compiled
        else "every ATen op of one forward pass"
    )
    return Placement(
        verdict=verdict,
        explanation=explanation,
        scope=scope,
        ops_total=recorder.ops_total,
        ops_on_device=ops_on_device,
        device_op_share=op_share,
        device_flop_share=flop_share,
        host_ops=dict(recorder.host_ops),
        fallback_ops=fallback_ops,
        transfers=recorder.transfers,
        transfer_sites=tuple(sites),
        host_syncs=dict(recorder.host_syncs),
        stray_parameters=tuple(stray),
        device_map={str(k): str(v) for k, v in device_map.items()} if device_map else None,
        signals=signals,
        host_state_copies=tuple(host_state),
        engine_work=dict(engine_work) if engine_work else None,
    )


def _label_graphs(placement: Placement, stream_graphs: int | None, scenarios: Any = ()) -> Placement:
    """Say which traffic each graph the compiler made belongs to, so the counts add up.

    ``signals.compile.graphs`` counts every graph made until the placement audit; the
    compilation audit's ``graphs`` (``stream_graphs``) covers the single-stream traffic only,
    and each scenario records the graphs its own shapes added (training too: it runs before the
    audit). ``graphs_by_scenario`` lists them side by side.
    """
    compile_signals = placement.signals.get("compile")
    if compile_signals is None or stream_graphs is None:
        return placement
    by_scenario = {"single-stream": stream_graphs}
    by_scenario.update({s.name: s.facts["graphs"] for s in scenarios if "graphs" in s.facts})
    return replace(
        placement, signals={**placement.signals, "compile": {**compile_signals, "graphs_by_scenario": by_scenario}}
    )


def engine_notes(placement: Placement, result: Any) -> list[str]:
    """What an engine's precision setting meant for this result.

    A precision is stated as the one the work ran in only when the engine ran it: an engine
    that handed its work back to PyTorch never used its precision. Outputs bit-identical to
    a float32 eager reference under a reduced precision cannot have been computed in it.
    """
    notes = []
    err = result.correctness.max_abs_err if result.correctness is not None else None
    for engine, data in placement.signals.items():
        precision = data.get("precision") if isinstance(data, dict) else None
        if not precision:
            continue
        work = placement.engine_work or {}
        share = work.get("share") if work.get("engine") == engine else None
        if share is None:
            notes.append(f"{engine} ran in {precision}")
        elif share == 0:
            notes.append(f"{engine} did not run: its {precision} setting was never used")
        elif share < 1:
            notes.append(f"{engine} ran {share:.0%} of its op calls, in {precision}; PyTorch ran the rest")
        else:
            notes.append(f"{engine} ran in {precision}")
        if str(precision).lower() in REDUCED_PRECISIONS and err == 0.0 and result.target.dtype in (None, "float32"):
            notes.append(
                f"outputs are bit-identical to eager although {engine} was set to {precision}: "
                f"they were not computed in {precision}"
            )
    return notes


class PlacementCheck(Check):
    """Where the work really ran (see the module docstring for the verdicts)."""

    name = "placement"
    title = "placement"
    value_type = Placement
    answers = "placement"
    phase = "placement audit"
    last = True  # dynamo runs a compiled model eagerly after a call under the audit's dispatch mode
    offers: ClassVar[Mapping[str, tuple[str, str]]] = {
        "device_op_share": ("share", "share of op calls that ran on the device"),
        "host_op_calls": ("count", "op calls on the host per forward pass, the backend's fallbacks included"),
        "host_state_copies": ("count", "host-to-device copies of host state per forward pass"),
    }

    def run_script(self, context: ScriptContext) -> Placement | None:
        """Where a script's work ran: judged in the run's own process by its audit (None: the run
        was not audited, ``--no-audit``, or the audit left nothing)."""
        return (context.run.audit or {}).get("placement")

    def run(self, context: CheckContext) -> Placement:

        placement = audit_placement(context.prepared, context.target, probe_for(context.target))
        stream = context.compile_snapshot
        return _label_graphs(placement, stream.get("graphs", 0) if stream is not None else None, context.scenarios)

    def metrics(self, value: Placement | None) -> list[Metric]:
        """The verdict, the device's share of op calls, and the exact counts behind the share
        (a rounded share hides a few ops moving): op calls on the host (the dispatch audit's
        plus the backend's own fallbacks) and host-state copies per forward pass, by op or
        module."""
        metrics = [Metric("placement", value.verdict if value is not None else None, "verdict", RANK)]
        if value is None:
            return metrics
        host_ops = {**value.host_ops, **value.fallback_ops}
        copies = {s["module"]: s["count"] for s in value.host_state_copies}
        return [
            *metrics,
            Metric("device_op_share", value.device_op_share, "share"),
            Metric("host_op_calls", sum(host_ops.values()), "count", breakdown=host_ops),
            Metric("host_state_copies", sum(copies.values()), "count", breakdown=copies),
        ]

    def headline(self, value: Placement, result: Any) -> list[str]:
        quiet = ("on_device", "not_applicable", UNMEASURED)  # an unmeasured one: the target's error says why
        return [] if value.verdict in quiet else [f"placement: {value.explanation}"]

    def facts(self, value: Placement, result: Any) -> list[str]:
        facts = []
        if value.verdict not in ("on_device", "not_applicable"):
            facts.append(f"placement: {value.explanation}")
        return facts + engine_notes(value, result)
