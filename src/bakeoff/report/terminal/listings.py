"""The terminal's listings: stored runs, devices and backends, checks, workload kinds, a baseline.

Each function renders what one listing command reads from the API (``bakeoff history``,
``targets``, ``checks``, ``workloads``, ``baseline``) as Rich tables and lines; none of them
knows a run's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table

from bakeoff.report.printable import Shown as Text  # every line shows the control characters of stored text
from bakeoff.report.printable import escape
from bakeoff.results.summary import RunSummary
from bakeoff.results.values import BaselineInfo

__all__ = ["baseline_view", "checks_view", "history_table", "targets_view", "workloads_view"]


def history_table(rows: Sequence[RunSummary]) -> Table:
    table = Table(header_style="bold")
    for column in (
        "run",
        "when (UTC)",
        "workload",
        "fingerprint",
        "environment",
        "targets",
        "ok",
        "pass",
        "fail",
        "error",
        "skipped",
    ):
        table.add_column(column, overflow="fold", no_wrap=column != "workload")
    for row in rows:
        table.add_row(
            row.run_id,
            row.created_at[:19].replace("T", " "),
            escape(row.workload_spec),
            row.fingerprint,
            row.environment_fingerprint,
            str(row.targets),
            str(row.ok),
            str(row.passed),
            Text(str(row.failed), style="red" if row.failed else ""),
            Text(str(row.errors), style="red" if row.errors else ""),
            str(row.skipped),
        )
    return table


def targets_view(info: dict[str, list[dict[str, Any]]]) -> Group:
    devices = Table(title="devices", header_style="bold", title_justify="left")
    for column in ("device", "available", "count", "detail"):
        devices.add_column(column)
    for d in info["devices"]:
        devices.add_row(
            d["name"],
            Text("yes", "green") if d["available"] else Text("no", "dim"),
            str(d["count"]),
            escape(d["detail"]),
        )
    backends = Table(title="torch.compile backends", header_style="bold", title_justify="left")
    for column in ("backend", "available", "detail"):
        backends.add_column(column)
    for b in info["backends"]:
        backends.add_row(b["name"], Text("yes", "green") if b["available"] else Text("no", "dim"), escape(b["detail"]))
    usable = [d["name"] for d in info["devices"] if d["available"]]
    example = f"e.g. bakeoff trial arch:llama --on {','.join(usable)},cpu+inductor"
    return Group(devices, backends, Text(f"target syntax: DEVICE[:INDEX][+BACKEND][?option=value&...]; {example}"))


def checks_view(info: list[dict[str, Any]]) -> Group:
    table = Table(title="checks (each runs on every target it applies to)", header_style="bold", title_justify="left")
    for column in ("check", "from", "runs", "options (default)", "requirement metrics"):
        table.add_column(column)
    for check in info:
        options = [
            f"{key}={o['default']}"
            + (f" (>= {o['minimum']})" if o["minimum"] is not None else "")
            + (f": {o['help']}" if o["help"] else "")
            for key, o in check["options"].items()
        ]
        table.add_row(
            escape(check["name"]),
            escape(check["source"]),
            escape(check.get("runs", "always")),
            escape("\n".join(options)) or "-",
            escape(", ".join(check["requirement_metrics"])) or "-",
        )
    return Group(table, Text("set options with --check NAME?key=value, e.g. --check determinism?repeats=5"))


def workloads_view(info: dict[str, Any]) -> Group:
    kinds = Table(title="workload kinds", header_style="bold", title_justify="left")
    kinds.add_column("kind")
    kinds.add_column("syntax")
    for kind, text in info["kinds"].items():
        kinds.add_row(kind, escape(text))
    causal = sorted(n for n, head in info["architectures"].items() if head == "causal_lm")
    base = sorted(n for n, head in info["architectures"].items() if head == "base")
    options = ", ".join(f"{k}={v}" for k, v in info["arch_options"].items())
    return Group(
        kinds,
        Text(f"arch: options (defaults): {options}, or any attribute of the model's config"),
        Text.assemble(("arch: causal language models ", "bold"), f"({len(causal)}): ", ", ".join(causal)),
        Text.assemble(("arch: other models (base model outputs) ", "bold"), f"({len(base)}): ", ", ".join(base)),
    )


def baseline_view(info: BaselineInfo, notes: Sequence[str]) -> Group:
    lines = [
        Text.assemble(("baseline ", "bold"), (info.id, "bold cyan"), f" for {info.workload_spec}"),
        Text(f"fingerprint {info.fingerprint}  seed {info.seed}  created {info.created_at[:19]} UTC"),
        Text(f"references: {', '.join(info.references)}"),
        Text(
            "eager runs agree exactly"
            if info.deterministic
            else f"eager runs differ by up to {info.repeat_max_abs_err:.3g} (nondeterministic)",
            style="green" if info.deterministic else "yellow",
        ),
        Text(f"tensors: {info.path}"),
    ]
    lines.extend(Text(f"note: {n}", style="dim") for n in notes)
    if not notes:
        lines.append(Text("reused the stored baseline (unchanged fingerprint); --refresh recomputes it", style="dim"))
    return Group(*lines)
