"""Does the target service answer as the reference service does? Response parity, request by request.

Two load runs sent the same bodies (:mod:`bakeoff.serve.load`); requests are paired by
:attr:`~bakeoff.serve.load.Sent.index`. A request that failed (or is missing) on either side is
not compared and is counted apart: on the reference's side first, then the target's, so the two
counts never overlap. No difference is a pass only where the reference answered at least
:data:`MIN_COMPARED_SHARE` (90%) of the requests: a reference that failed on more (a service that
died partway) leaves the target's answers to them unchecked, and the verdict says so
(``not_compared``, never a pass). Each pair of bodies is then judged by one rule:

* **JSON** (the default): both bodies are parsed and walked together. Keys must match (a missing
  or extra key is a difference at its path, ``$.choices[0].text``), lists must have the same
  length, strings, booleans, nulls and integers (token ids, counts) must be equal, and a number
  written as a float on either side passes when ``|t - r| <= tol * (1 + |r|)``, with
  ``tol = tolerance_for(dtype)``: the allclose fallback of :mod:`bakeoff.analysis.tolerance`
  (``atol = rtol = TOLERANCE[dtype]``; 1e-4 in float32, 1e-2 in bfloat16). Another engine's
  rounding (a few units of roundoff) passes; a 1% error of a number above ~0.01 fails in every
  float dtype but bfloat16. A body that is not JSON is compared as bytes, exactly.
* **Candidates**: one position's top candidates (an item of a ``logprobs``/``top_logprobs`` list
  mapping token to number, or a ``top_logprobs`` list of objects with a ``token`` and a
  ``logprob``) are compared as sets cut at their lowest: a candidate both sides list must agree
  in its number, one listed on one side only passes where it is not above the other side's
  lowest (within the tolerance): two near-equal candidates at the cut fall either side of it as
  another engine's rounding orders them. A different count of candidates is a difference.
* **Near ties**: an object holding generated ``token_ids`` (or ``tokens``: a list of integers)
  beside per-position ``top_logprobs`` (or ``logprobs``: each position a mapping of candidate to
  number, a list of numbers, or a list of objects with a ``logprob``), whose token lists part at
  position ``k`` where the reference's two best candidates are within the same allclose rule,
  is a near tie, as in the greedy check (:mod:`bakeoff.checks.greedy`): either token is right,
  where the target's token is one of the reference's candidates within the rule of its best
  (where candidates name no token, a list of bare numbers, that is not checked). It is
  reported, not counted as a difference; the logprobs before ``k`` are still compared, and the
  rest of that object (later tokens, its text, its finish reason) follows the parted generation:
  its values are not compared, but its keys and their kinds are (a key missing, extra, or a
  number where the reference has text is a difference). Unlike the greedy check there is no
  float64 copy to ask: the gap is the reference service's own.
* **A user's function** ``f(reference_body: bytes, target_body: bytes) -> bool | (bool, reason)``
  given as a callable or ``"module:function"`` (the current directory on ``sys.path``). Its
  exception is a difference naming the exception; it never stops the comparison.

What it cannot see (:data:`CANNOT_SEE`): a systematic error below the tolerance (no golden here,
so no bias test), an error of a number near zero below the absolute part, digits a service does
not write (numbers serialised with fewer digits than the dtype carries), failed requests.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from bakeoff.analysis.tolerance import tolerance_for
from bakeoff.codec import Value
from bakeoff.errors import SpecError
from bakeoff.serve.load import LoadRun, Sent

__all__ = [
    "CANNOT_SEE",
    "MIN_COMPARED_SHARE",
    "Difference",
    "ResponseParity",
    "answers_by_body",
    "compare_by_body",
    "compare_responses",
    "load_compare",
]

CANNOT_SEE = (
    "a systematic error below the tolerance (no golden, no bias test), errors of numbers near zero "
    "below the absolute tolerance, digits the service does not write, failed requests"
)
#: Keys that hold generated token ids, and keys that hold their per-position candidates.
TOKEN_KEYS = ("token_ids", "tokens")
LOGPROB_KEYS = ("top_logprobs", "logprobs")
#: A path that holds one position's candidates: an item of a logprobs list, or a ``top_logprobs`` list itself.
_CANDIDATES = re.compile(r"\.(?:top_logprobs|logprobs)\[\d+\]$|\.top_logprobs$")
#: The key that names a candidate's token in a list of candidate objects.
_TOKEN_OF = ("token", "token_id", "id")
#: Keys of one candidate's own object: a mapping holding one is that object, not token -> number.
_FIELDS = frozenset({*_TOKEN_OF, "logprob", "prob", "rank"})
CLIP = 80
_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
Found = list[tuple[str, str, str, str]]  # (path, reference, target, reason)
Compare = Callable[[bytes, bytes], Any]


@dataclass(frozen=True)
class Difference(Value):
    """Where request ``index``'s responses first part: the ``path`` in the body (``$``: the whole
    body), both values as text (clipped to :data:`CLIP` characters) and why they differ."""

    index: int
    path: str
    reference: str
    target: str
    reason: str


#: The share of the requests the reference must have answered for a target's answers to pass:
#: the rest of the target's answers have nothing to be compared with.
MIN_COMPARED_SHARE = 0.9


@dataclass(frozen=True)
class ResponseParity(Value):
    """Responses of the target against the reference's (see the module docstring): how many pairs
    were ``compared``, how many of them ``differing`` and at a ``near_ties`` (and no difference),
    requests not compared because they failed on the reference / (only) on the target; the first
    differing requests and near ties, the ``rule`` applied and what it ``cannot_see``."""

    DERIVED: ClassVar[tuple[str, ...]] = ("verdict", "reason")

    compared: int
    differing: int
    near_ties: int
    not_compared_reference: int
    not_compared_target: int
    first: tuple[Difference, ...] = ()
    ties: tuple[Difference, ...] = ()
    rule: str = ""
    cannot_see: str = CANNOT_SEE

    @property
    def verdict(self) -> str:
        """``fail`` when a response differs; ``pass`` when none did and the reference answered at
        least :data:`MIN_COMPARED_SHARE` of the requests (a pass says the target's answers were
        checked, not a few of them); else ``not_compared`` (never a pass)."""
        if self.differing:
            return "fail"
        return "pass" if self.compared and not self.too_few_compared else "not_compared"

    @property
    def too_few_compared(self) -> bool:
        """Whether the reference failed on more than 1 - :data:`MIN_COMPARED_SHARE` of the
        requests, so that too few of the target's answers had an answer to be compared with."""
        return self.compared < MIN_COMPARED_SHARE * (self.compared + self.not_compared_reference)

    @property
    def reason(self) -> str:
        """One line whose figures are the fields'."""
        skipped = self.not_compared_reference + self.not_compared_target
        tail = (
            f"; {skipped} not compared ({self.not_compared_reference} failed on the reference, "
            f"{self.not_compared_target} on the target alone)"
            if skipped
            else ""
        )
        if self.verdict == "not_compared":
            if self.compared:
                return (f"only {self.compared} of {self.compared + self.not_compared_reference} requests could be "
                        f"compared (under {MIN_COMPARED_SHARE:.0%}): the reference failed on the rest, so the "
                        f"target's answers to them were never checked; {self.compared} matched{tail}")  # fmt: skip
            return f"no response compared{tail or ' (no requests)'}"
        if self.verdict == "pass":
            ties = f", {self.near_ties} of them at a near tie" if self.near_ties else ""
            return f"all {self.compared} responses match the reference's{ties}{tail}"
        shown = "; ".join(
            f"request {d.index} at {d.path} ({d.reference} vs {d.target}, {d.reason})" for d in self.first
        )
        more = f"; and {self.differing - len(self.first)} more" if self.differing > len(self.first) else ""
        return f"{self.differing} of {self.compared} responses differ from the reference's: {shown}{more}{tail}"


def load_compare(spec: str) -> Compare:
    """The function ``"module:function"`` names, imported now (the current directory on ``sys.path``).

    Raises:
        SpecError: ``spec`` is malformed, or names nothing importable and callable.
    """
    hint = "name it as module:function, e.g. mychecks:same_answer, run from the directory that holds mychecks.py"
    if not _SPEC.match(spec):
        raise SpecError(f"response comparison {spec!r} is not module:function", hint=hint)
    module_name, _, name = spec.partition(":")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise SpecError(f"cannot import {module_name!r} for {spec!r}: {type(exc).__name__}: {exc}", hint=hint) from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{module_name!r} has no function {name!r}", hint=hint)
    return function


def compare_responses(
    reference: LoadRun,
    target: LoadRun,
    *,
    dtype: str = "float32",
    compare: str | Compare | None = None,
    shown: int = 5,
) -> ResponseParity:
    """Each request's response on ``target`` against ``reference``'s (see the module docstring),
    numbers at ``dtype``'s tolerance unless a user's ``compare`` function decides; the first
    ``shown`` differing requests (and near ties) are kept, in request order.

    Raises:
        SpecError: ``compare`` is a malformed or unimportable ``module:function``.
    """
    function = load_compare(compare) if isinstance(compare, str) else compare
    tol = tolerance_for(dtype)
    rule = (
        f"numbers within {tol:g} absolute + relative ({dtype} allclose), integers, text and keys exactly"
        if function is None
        else f"the user's function {compare if isinstance(compare, str) else _name(function)}"
    )
    ours = {r.index: r for r in reference.requests}
    theirs = {r.index: r for r in target.requests}
    judged: list[tuple[int, Found, Found]] = []
    skipped = [0, 0]  # failed (or missing) on the reference; answered there, failed on the target
    for index in sorted(ours.keys() | theirs.keys()):
        r, t = ours.get(index), theirs.get(index)
        if r is None or r.error is not None:
            skipped[0] += 1
        elif t is None or t.error is not None:
            skipped[1] += 1
        else:
            judged.append((index, *_judge(r.body, t.body, tol, function)))
    differing = [Difference(i, *found[0]) for i, found, _ in judged if found]
    ties = [Difference(i, *tied[0]) for i, found, tied in judged if tied and not found]
    return ResponseParity(
        len(judged), len(differing), len(ties), *skipped, tuple(differing[:shown]), tuple(ties[:shown]), rule
    )


def answers_by_body(runs: Iterable[tuple[LoadRun, Callable[[int], int]]]) -> dict[int, Sent]:
    """The reference's answer to each body of the traffic, from the first of ``runs`` that answered
    it: each run with the function that gives its request ``i``'s place in the traffic file."""
    found: dict[int, Sent] = {}
    for run, place in runs:
        for sent in run.requests:
            if sent.error is None:
                found.setdefault(place(sent.index), sent)
    return found


def compare_by_body(
    answers: Mapping[int, Sent], target: LoadRun, place: Callable[[int], int], **options: Any
) -> ResponseParity:
    """``target``'s answers (a run of other traffic than the reference's: a cold replica's, a
    search step's; ``place`` gives its request ``i``'s place in the traffic file) against the
    reference's answer to the same body (:func:`answers_by_body`), as :func:`compare_responses`
    compares them. A request that failed on the target, or whose body the reference never
    answered, is left out: under a rate the service cannot keep, failures are the objectives' to
    judge, not the answers'."""
    kept = tuple(s for s in target.requests if s.error is None and place(s.index) in answers)
    ours = tuple(replace(answers[place(s.index)], index=s.index) for s in kept)
    return compare_responses(LoadRun(ours, target.wall_s), LoadRun(kept, target.wall_s), **options)


def _name(function: Any) -> str:
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', repr(function))}"


def _show(value: Any) -> str:
    text = value.decode(errors="replace") if isinstance(value, bytes) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= CLIP else text[: CLIP - 3] + "..."


def _judge_user(function: Compare, ref: bytes, tgt: bytes) -> tuple[Found, Found]:
    try:
        result = function(ref, tgt)
    except Exception as exc:  # the user's bug is this request's finding, not the end of the comparison
        return [("$", _show(ref), _show(tgt), f"the function raised {type(exc).__name__}: {exc}")], []
    ok, why = result if isinstance(result, tuple) and len(result) == 2 else (result, "")
    if ok is None:
        return [("$", _show(ref), _show(tgt), "the function returned None, not True or False")], []
    return ([] if ok else [("$", _show(ref), _show(tgt), str(why) or "the function said they differ")]), []


def _judge(ref: bytes, tgt: bytes, tol: float, function: Compare | None) -> tuple[Found, Found]:
    if function is not None:
        return _judge_user(function, ref, tgt)
    try:
        r, t = json.loads(ref), json.loads(tgt)
    except ValueError:
        return ([] if ref == tgt else [("$", _show(ref), _show(tgt), "bytes differ (not JSON)")]), []
    found: Found = []
    tied: Found = []
    _walk(r, t, "$", tol, found, tied)
    return found, tied


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "a boolean" if value is not None else "null"
    return {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}[type(value)]


def _close(r: float, t: float, tol: float) -> bool:
    return r == t or (math.isnan(r) and math.isnan(t)) or abs(t - r) <= tol * (1.0 + abs(r))


def _off(r: float, t: float) -> str:
    if r == 0 or not math.isfinite(r) or not math.isfinite(t):
        return f"off by {abs(t - r):.3g}"
    rel = abs(t - r) / abs(r)
    return f"{rel:.1%} off" if rel >= 1e-3 else f"{rel:.2g} relative off"


def _walk(r: Any, t: Any, path: str, tol: float, found: Found, tied: Found) -> None:
    if _number(r) and _number(t):
        if type(r) is int and type(t) is int:
            if r != t:
                found.append((path, _show(r), _show(t), "differs"))
        elif not _close(float(r), float(t), tol):
            found.append((path, _show(r), _show(t), _off(float(r), float(t))))
    elif _CANDIDATES.search(path) and (rc := _candidates(r)) is not None and (tc := _candidates(t)) is not None:
        _walk_candidates(rc, tc, path, tol, found)
    elif isinstance(r, dict) and isinstance(t, dict):
        if _near_tie(r, t, path, tol, found, tied):
            return
        _by_key(r, t, path, found, lambda key: _walk(r[key], t[key], f"{path}.{key}", tol, found, tied))
    elif isinstance(r, list) and isinstance(t, list):
        for i, (a, b) in enumerate(zip(r, t, strict=False)):
            _walk(a, b, f"{path}[{i}]", tol, found, tied)
        if len(r) != len(t):
            found.append((path, _show(r), _show(t), f"{len(r)} items vs {len(t)}"))
    elif _kind(r) != _kind(t):
        found.append((path, _show(r), _show(t), f"{_kind(r)} vs {_kind(t)}"))
    elif r != t:
        found.append((path, _show(r), _show(t), "differs"))


def _by_key(r: dict, t: dict, path: str, found: Found, both: Callable[[Any], None]) -> None:
    """Each key of ``r`` in order, given to ``both`` where ``t`` has it too, else a difference
    (missing on the target); then each key only ``t`` has (extra on the target)."""
    for key in r:
        if key in t:
            both(key)
        else:
            found.append((f"{path}.{key}", _show(r[key]), "(missing)", "missing on the target"))
    for key in (k for k in t if k not in r):
        found.append((f"{path}.{key}", "(missing)", _show(t[key]), "extra on the target"))


def _ids(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def _top_two(entry: Any) -> tuple[float, float] | None:
    """The two best candidates' numbers at one position, None where the shape is not known."""
    values = entry.values() if isinstance(entry, dict) else entry if isinstance(entry, list) else ()
    values = [v.get("logprob") if isinstance(v, dict) else v for v in values]
    numbers = sorted((float(v) for v in values if _number(v)), reverse=True)
    return (numbers[0], numbers[1]) if len(numbers) >= 2 else None


def _near_tie(r: dict, t: dict, path: str, tol: float, found: Found, tied: Found) -> bool:
    """Whether ``r`` and ``t`` part at a near tie (recorded in ``tied``; see the module docstring)."""
    tokens = next((k for k in TOKEN_KEYS if _ids(r.get(k)) and _ids(t.get(k))), None)
    logprobs = next((k for k in LOGPROB_KEYS if isinstance(r.get(k), list)), None)
    if tokens is None or logprobs is None or r[tokens] == t[tokens]:
        return False
    ours, theirs, candidates = r[tokens], t[tokens], r[logprobs]
    k = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    top = _top_two(candidates[k]) if k < len(candidates) else None
    if top is None or not _close(top[0], top[1], tol):
        return False
    named = _candidates(candidates[k])  # where candidates carry their token: the target's must be a tied one
    if named is not None and k < len(theirs):
        chosen = named.get(str(theirs[k]))
        if chosen is None or not _close(top[0], chosen, tol):
            return False
    where = f"{path}.{tokens}[{k}]"
    shown = [_show(x[k]) if k < len(x) else "(ended)" for x in (ours, theirs)]
    tied.append((where, shown[0], shown[1], f"near tie: the reference's top two {top[0]:.6g} and {top[1]:.6g}"))
    if isinstance(t.get(logprobs), list):
        _walk(candidates[:k], t[logprobs][:k], f"{path}.{logprobs}", tol, found, tied)

    def same_kind(key: Any) -> None:  # what follows the parted generation is not compared, but it is still there
        if key != tokens and _kind(r[key]) != _kind(t[key]):
            found.append((f"{path}.{key}", _show(r[key]), _show(t[key]), f"{_kind(r[key])} vs {_kind(t[key])}"))

    _by_key(r, t, path, found, same_kind)
    return True


def _candidates(value: Any) -> dict[str, float] | None:
    """One position's candidates as token -> number: a mapping of token to number, or a list of
    objects each with a ``logprob`` and its ``token`` (``token_id``, ``id``); None for any other
    shape (a list of bare numbers names no token)."""
    if isinstance(value, dict) and value and all(_number(v) for v in value.values()) and not value.keys() & _FIELDS:
        return {str(key): float(v) for key, v in value.items()}
    if isinstance(value, list) and value and all(isinstance(v, dict) and _number(v.get("logprob")) for v in value):
        names = [next((v[key] for key in _TOKEN_OF if key in v), None) for v in value]
        if all(isinstance(name, (str, int)) and not isinstance(name, bool) for name in names):
            return {str(name): float(v["logprob"]) for name, v in zip(names, value, strict=True)}
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _walk_candidates(r: dict[str, float], t: dict[str, float], path: str, tol: float, found: Found) -> None:
    """One position's top candidates on each side, as sets cut at their lowest: a candidate both
    sides list must agree in its number; one listed on one side only passes where its number is
    not above the other side's lowest listed (within the tolerance): two near-equal candidates at
    the cut may fall either side of it, as another engine's rounding orders them. A different
    count of candidates is a difference."""
    for key in r.keys() & t.keys():
        if not _close(r[key], t[key], tol):
            found.append((f"{path}.{key}", _show(r[key]), _show(t[key]), _off(r[key], t[key])))
    for here, there, side in ((r, t, "target"), (t, r, "reference")):
        cut = min(there.values())
        for key in sorted(here.keys() - there.keys()):
            if here[key] > cut and not _close(here[key], cut, tol):
                shown = (_show(here[key]), "(missing)") if side == "target" else ("(missing)", _show(here[key]))
                found.append((f"{path}.{key}", *shown, f"not among the {side}'s candidates, whose lowest is {cut:.6g}"))
    if len(r) != len(t):
        found.append((path, _show(r), _show(t), f"{len(r)} candidates vs {len(t)}"))
