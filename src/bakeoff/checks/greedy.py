"""Does the target generate the same text? The greedy-decoding check (on request:
``--check greedy``, ``greedy?tokens=16``; a coverage sweep asks for it on every cell).

A language model's logits can pass the correctness check and still pick another token where
two candidates are close, and every later token then differs. The check decodes ``tokens``
tokens greedily (argmax, no sampling, the whole sequence recomputed each step, no KV cache)
from the workload's own prompt, on the target as prepared and on a fresh eager copy in the
target's dtype on the CPU (the reference), and compares the token ids of every row. Verdicts:

    same            every generated token is identical
    tie             they part at a step where, in a float64 copy given the same prefix, the two
                    candidates' logits are within what rounding explains (the ``m x`` reference
                    error rule of the correctness check, for the two logits, plus two units in
                    the last place): either token is right, and the rest cannot be compared
    differs         they part where the float64 copy clearly prefers one token
    error           the target ran the workload's input but raised while decoding (a longer
                    sequence than it was prepared for, say)
    not_applicable  the workload does not take ``input_ids`` or return ``logits``, or the
                    reference cannot decode that many tokens

What it cannot see: sampling (temperature, top-k), a KV cache's own numerics (the model is run
without one), prompts other than the workload's, and more tokens than asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from bakeoff.analysis.trajectory import machine_eps, multiple_for
from bakeoff.checks.base import Check, CheckContext, Metric
from bakeoff.codec import Value
from bakeoff.specsyntax import Option

__all__ = ["RANK", "Greedy", "GreedyCheck", "decode", "logits_of"]

#: Verdicts for regressions, better higher.
RANK = {"same": 2, "tie": 2, "not_applicable": 2, "differs": 0, "error": 0}
#: Verdicts that count as generating the same tokens.
SAME = ("same", "tie", "not_applicable")


@dataclass(frozen=True)
class Greedy(Value):
    """``steps_same`` tokens agreed before ``first_divergence`` (None: all ``tokens`` did);
    at that step ``margin`` is the float64 copy's logit gap between the reference's token and
    the target's, ``allowance`` what rounding explains there; ``reference``/``target`` are the
    first row's generated ids."""

    verdict: str
    reason: str = ""
    tokens: int = 0
    steps_same: int = 0
    first_divergence: int | None = None
    margin: float | None = None
    allowance: float | None = None
    reference: tuple[int, ...] = ()
    target: tuple[int, ...] = ()


def logits_of(output: Any) -> Any:
    if isinstance(output, Mapping) and "logits" in output:
        return output["logits"]
    return getattr(output, "logits", None)


def _step(model: Any, kwargs: dict[str, Any], ids: Any) -> Any:
    """The last position's logits for the sequence ``ids`` (as float64 on the CPU)."""
    import torch

    mask = torch.ones_like(ids)
    output = model(**{**kwargs, "input_ids": ids, "attention_mask": mask})
    logits = logits_of(output)
    if logits is None:
        raise LookupError("no logits")
    return logits[:, -1, :].detach().to("cpu", torch.float64)


def decode(model: Any, kwargs: dict[str, Any], tokens: int) -> tuple[Any, list[Any]]:
    """Greedy ids appended to ``kwargs['input_ids']`` (``tokens`` of them) and each step's logits."""
    import torch

    ids = kwargs["input_ids"]
    steps = []
    with torch.no_grad():
        for _ in range(tokens):
            last = _step(model, kwargs, ids)
            steps.append(last)
            ids = torch.cat([ids, last.argmax(-1).to(ids.device)[:, None]], dim=1)
    return ids[:, kwargs["input_ids"].shape[1] :].to("cpu"), steps


class GreedyCheck(Check):
    """Greedy tokens on the target against the reference's (see the module docstring)."""

    name = "greedy"
    title = "greedy decoding"
    value_type = Greedy
    phase = "greedy decoding check"
    on_request = True
    answers = "does it generate the same tokens"
    options: ClassVar[Mapping[str, Option]] = {
        "tokens": Option(int, 8, minimum=1, help="tokens generated greedily and compared")
    }

    def not_applicable(self, target: Any, is_reference: bool) -> str | None:
        from bakeoff.target.engines import engine_for

        if target.backend is not None and engine_for(target.backend).fixed_signature:
            return f"the {target.backend} engine runs one input shape; greedy decoding grows the sequence"
        if getattr(target, "amp", None):
            return "a mixed-precision target would need an autocast reference; its tokens are not compared"
        return None

    def run(self, context: CheckContext) -> Greedy:
        import torch

        from bakeoff.workload.registry import build_workload

        tokens = context.options["tokens"]
        prepared = context.prepared
        kwargs = dict(prepared.kwargs)
        if "input_ids" not in kwargs or prepared.args:
            return Greedy("not_applicable", "the workload does not take input_ids by keyword", tokens)
        reference = build_workload(context.job.workload_spec)
        if reference.fingerprint != context.job.fingerprint:
            why = f"the workload built again differs (fingerprint {reference.fingerprint} != {context.job.fingerprint})"
            return Greedy("not_applicable", why, tokens)
        dtype = getattr(torch, context.dtype)
        reference.model.to(dtype)
        ref_kwargs = {
            k: v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v for k, v in reference.kwargs.items()
        }
        try:
            ref_ids, ref_steps = decode(reference.model, ref_kwargs, tokens)
        except LookupError:
            return Greedy("not_applicable", "the model returns no logits", tokens)
        except Exception as exc:  # e.g. a prompt plus tokens longer than the model's positions
            why = f"the reference cannot decode {tokens} tokens eagerly: {type(exc).__name__}: {str(exc)[:200]}"
            return Greedy("not_applicable", why, tokens)
        try:
            target_ids, _ = decode(prepared.model, kwargs, tokens)
        except Exception as exc:  # the target ran its one input but cannot decode: a finding, not a crash
            why = f"decoding on the target raised {type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
            return Greedy("error", why, tokens)
        first = [list(row) for row in target_ids.tolist()], [list(row) for row in ref_ids.tolist()]
        same_rows = (target_ids == ref_ids).all(dim=0)
        parted = [i for i, same in enumerate(same_rows.tolist()) if not same]
        facts = {"tokens": tokens, "reference": tuple(first[1][0]), "target": tuple(first[0][0])}
        if not parted:
            return Greedy("same", f"{tokens} greedy tokens identical", steps_same=tokens, **facts)
        step = parted[0]
        row = int((target_ids[:, step] != ref_ids[:, step]).nonzero()[0, 0])
        ref_token, target_token = int(ref_ids[row, step]), int(target_ids[row, step])
        golden = build_workload(context.job.workload_spec)
        golden.model.to(torch.float64)
        prefix = ref_ids[:, :step]
        ids = torch.cat([reference.kwargs["input_ids"], prefix], dim=1)
        gold_kwargs = {
            k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in golden.kwargs.items()
        }
        with torch.no_grad():
            gold = _step(golden.model, gold_kwargs, ids)[row]
        ref_error = float((ref_steps[step][row] - gold).abs().max())
        scale = float(gold.abs().max())
        allowance = 2 * multiple_for(context.dtype) * ref_error + 2 * machine_eps(context.dtype) * scale
        margin = abs(float(gold[ref_token] - gold[target_token]))
        where = f"step {step + 1} of {tokens} (row {row}): token {target_token} instead of {ref_token}"
        common = {"steps_same": step, "first_divergence": step + 1, "margin": margin, "allowance": allowance, **facts}
        if margin <= allowance:
            why = f"tokens part at a near tie, {where}: float64 logit gap {margin:.3g} <= {allowance:.3g}"
            why += " (what rounding explains)"
            return Greedy("tie", why, **common)
        why = f"tokens differ from {where}: float64 logit gap {margin:.3g} > {allowance:.3g}"
        why += " (what rounding explains)"
        return Greedy("differs", why, **common)

    def on_error(self, why: str) -> Greedy:
        return Greedy("error", why)

    def metrics(self, value: Greedy | None) -> list[Metric]:
        return [] if value is None else [Metric("greedy", value.verdict, "verdict", RANK)]

    def misses(self, value: Greedy) -> tuple[list[str], list[str]]:
        if value.verdict in ("differs", "error"):
            return [f"greedy decoding: {value.reason}"], []
        return [], []

    def facts(self, value: Greedy, result: Any) -> list[str]:
        if value.verdict in ("same", "not_applicable"):
            return []
        return [f"greedy decoding {value.verdict}: {value.reason}"]

    def headline(self, value: Greedy, result: Any) -> list[str]:
        return self.facts(value, result)
