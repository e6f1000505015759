"""What the quality check scores: the team's own evaluation function, or a built-in task for
language models that needs nothing downloaded.

A task scores one model over a fixed list of examples and returns one number per example, the
same examples in the same order for every model it is given (the check pairs them). It is called
as ``score(model, place)``: ``place(value)`` moves a tensor (or a tuple, list or dict of them) to
where that model takes its inputs, cast to its dtype (integer ids stay integers).

* ``eval=module:function`` (or ``path/to/file.py:function``): the user's function, called the
  same way, returning a sequence of numbers (a list, a 1-D tensor or array).
* ``task=perplexity``: the text of ``text=FILE`` (a bundled sample by default) cut into rows
  shaped like the workload's own ``input_ids`` (its batch and length, so a compiled or exported
  target runs the shape it was prepared for); each row's score is minus its mean next-token
  negative log-likelihood in nats, computed in float64 from the model's logits.
* ``task=exact_match``: greedy decoding from each prompt of ``prompts=FILE`` (JSON lines with
  ``prompt`` and optional ``answer``, or plain lines; bundled by default); a prompt scores 1
  when the generated tokens start with its answer's, 0 otherwise. A prompt without an answer is
  scored against the tokens the reference generates from it (``tokens`` of them): the reference
  then scores 1 by construction, and the difference is how often the target's tokens differ.

Text becomes token ids through the tokenizer saved beside an ``hf:`` model; a model without one
(``arch:`` configs, own factories) reads the text's UTF-8 bytes, each modulo its vocabulary. The
scores are then those of that token stream: good for comparing two runs of one model, not a
published perplexity.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from bakeoff.checks.greedy import decode, logits_of
from bakeoff.errors import SpecError, WorkloadError

__all__ = ["TASKS", "Task", "finite_scores", "load_eval", "task_for"]

#: The built-in tasks (``quality?task=NAME``).
TASKS = ("perplexity", "exact_match")
#: Score functions: ``(model, place) -> one number per example``.
Score = Callable[[Any, Callable[[Any], Any]], Sequence[float]]


@dataclass(frozen=True)
class Task:
    """A way to score a model: ``what`` says it in a few words, ``scale`` turns a difference of
    mean scores into the unit reported (``points``: fractions x100; ``score``: as returned);
    ``higher`` what the reported figures mean beside it (the perplexity's own number, say)."""

    what: str
    unit: str
    scale: float
    score: Score
    bounded: bool = False  # scores must be fractions in [0, 1] (points)
    perplexity: bool = False


def load_eval(spec: str) -> Score:
    """The user's ``module:function`` or ``path/to/file.py:function``, imported.

    Raises:
        SpecError: malformed, or naming nothing importable and callable.
    """
    from bakeoff.workload.user import load_module

    module_name, colon, name = spec.rpartition(":")
    hint = "name it as module:function or path/to/file.py:function, e.g. my_evals:score"
    if not colon or not module_name or not name.isidentifier():
        raise SpecError(f"evaluation function {spec!r} is not module:function", hint=hint)
    try:
        module = load_module(module_name)
    except WorkloadError as exc:
        raise SpecError(f"cannot load the evaluation function {spec!r}: {exc.message}", hint=hint) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{module_name!r} has no function {name!r} for the quality check", hint=hint)
    return function


def _bundled(name: str) -> Path:
    return Path(str(resources.files("bakeoff.examples").joinpath(name)))


def _read(path: str, default: str, what: str) -> tuple[str, str]:
    """``(text, name shown)`` of the file a user named, or of the bundled one."""
    file = Path(path).expanduser() if path else _bundled(default)
    try:
        return file.read_text(encoding="utf-8"), (file.name if path else f"the bundled {default}")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"cannot read the quality check's {what} file {path!r}: {exc}",
            hint=f"give a UTF-8 text file as {what}=FILE",
        ) from None


def _tokenizer(workload: Any, vocab: int) -> tuple[Callable[[str], list[int]], str]:
    """Text to token ids: the tokenizer saved beside an ``hf:`` model, else UTF-8 bytes."""
    if workload.spec.kind == "hf":
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(workload.spec.name)
            return (lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])), "its tokenizer"
        except Exception:  # no tokenizer saved: bytes, said below
            pass
    return (lambda text: [b % vocab for b in text.encode("utf-8")]), f"UTF-8 bytes modulo its {vocab} tokens"


def _vocabulary(workload: Any) -> int:
    """The model's vocabulary: its config's, else the width of the logits of its own input."""
    import torch

    size = getattr(getattr(workload.model, "config", None), "vocab_size", None)
    if isinstance(size, int) and size > 0:
        return size
    with torch.no_grad():
        logits = logits_of(workload.model(*workload.args, **workload.kwargs))
    if logits is None:
        raise SpecError("the model returns no logits", hint="use quality?eval=module:function for other models")
    return int(logits.shape[-1])


def _language_model(workload: Any, task: str) -> tuple[Any, Any]:
    """The workload's own ``input_ids`` and its other keyword inputs (refused when it has none)."""
    ids = workload.kwargs.get("input_ids")
    if ids is None or workload.args or ids.dim() != 2:
        raise SpecError(
            f"the quality check's {task} task needs a language model taking input_ids by keyword",
            hint="give your own evaluation with quality?eval=module:function",
        )
    return ids, {k: v for k, v in workload.kwargs.items() if k not in ("input_ids", "attention_mask")}


def _perplexity(workload: Any, text_file: str, examples: int) -> Task:
    import torch

    ids, others = _language_model(workload, "perplexity")
    batch, length = ids.shape
    if length < 2:
        raise SpecError("perplexity needs rows of at least 2 tokens", hint="give the workload seq=16 or more")
    text, shown = _read(text_file, "quality_sample.txt", "text")
    vocab = _vocabulary(workload)
    tokenize, how = _tokenizer(workload, vocab)
    tokens = tokenize(text)
    rows = min(examples, len(tokens) // length)
    if rows < 2:
        raise SpecError(
            f"{shown} holds {len(tokens)} tokens: fewer than 2 rows of {length}", hint="give a longer text=FILE"
        )
    stream = torch.tensor(tokens[: rows * length], dtype=ids.dtype).reshape(rows, length)
    keep = {k: v for k, v in others.items() if torch.is_tensor(v) and v.shape[:1] == (batch,)}

    def score(model: Any, place: Callable[[Any], Any]) -> list[float]:
        scores: list[float] = []
        for start in range(0, rows, batch):
            chunk = stream[start : start + batch]
            filled = torch.cat([chunk, stream[: batch - len(chunk)]]) if len(chunk) < batch else chunk
            kwargs = {**keep, "input_ids": filled, "attention_mask": torch.ones_like(filled)}
            logits = logits_of(model(**place(kwargs)))
            if logits is None:
                raise LookupError("the model returned no logits")
            logp = torch.log_softmax(logits.detach().to("cpu", torch.float64)[:, :-1], dim=-1)
            nll = -logp.gather(-1, filled[:, 1:, None]).squeeze(-1).mean(dim=-1)
            scores += (-nll[: len(chunk)]).tolist()
        return scores

    what = f"perplexity on {shown}: {rows} rows of {length} tokens ({how})"
    return Task(what, "points", 100.0, score, perplexity=True)


def _prompts(path: str, tokenize: Callable[[str], list[int]]) -> tuple[list[tuple[list[int], list[int]]], str]:
    text, shown = _read(path, "quality_prompts.jsonl", "prompts")
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        prompt, answer = line, ""
        if line.lstrip().startswith("{"):
            try:
                data = json.loads(line)
                prompt = str(data["prompt"])
                answer = "" if data.get("answer") is None else str(data["answer"])
            except (ValueError, KeyError, TypeError):
                raise SpecError(
                    f"line {number} of {shown} is not a JSON object with a prompt",
                    hint='write {"prompt": "...", "answer": "..."} per line, or plain prompt lines',
                ) from None
        ids = tokenize(prompt)
        if ids:
            items.append((ids, tokenize(answer) if answer else []))
    if not items:
        raise SpecError(f"{shown} holds no prompt", hint="write one prompt per line")
    return items, shown


def _exact_match(workload: Any, prompts_file: str, examples: int, tokens: int) -> Task:
    import torch

    ids, others = _language_model(workload, "exact_match")
    tokenize, how = _tokenizer(workload, _vocabulary(workload))
    items, shown = _prompts(prompts_file, tokenize)
    items = items[:examples]
    keep = {k: v[:1] for k, v in others.items() if torch.is_tensor(v) and v.shape[:1] == ids.shape[:1]}
    expected: list[list[int]] = []  # the reference's own tokens, for prompts without an answer

    def score(model: Any, place: Callable[[Any], Any]) -> list[float]:
        reference = not expected  # the check scores the reference first
        scores = []
        for index, (prompt, answer) in enumerate(items):
            want = len(answer) or tokens
            kwargs = place({**keep, "input_ids": torch.tensor([prompt], dtype=ids.dtype)})
            got = decode(model, kwargs, want)[0][0].tolist()
            if reference:
                expected.append(got)
            scores.append(float(got[: len(answer)] == answer if answer else got == expected[index]))
        return scores

    answered = sum(1 for _, answer in items if answer)
    against = "their answers" if answered == len(items) else f"{answered} answers, the rest the reference's tokens"
    what = f"greedy exact match over {len(items)} prompts of {shown} ({against}; {how})"
    return Task(what, "points", 100.0, score, bounded=True)


def task_for(options: dict[str, Any], workload: Any) -> Task:
    """The task the check's options name, for ``workload`` (the reference as built).

    Raises:
        SpecError: an unknown task, an unreadable file, or a task the workload cannot run.
    """
    if options["eval"]:
        function = load_eval(options["eval"])
        unit = options["unit"]
        return Task(f"{options['eval']} (the team's evaluation)", unit, 100.0 if unit == "points" else 1.0,
                    function, bounded=unit == "points")  # fmt: skip
    task = options["task"]
    if task == "perplexity":
        return _perplexity(workload, options["text"], options["examples"])
    if task == "exact_match":
        return _exact_match(workload, options["prompts"], options["examples"], options["tokens"])
    raise SpecError(f"unknown quality task {task!r}", hint="use task=" + " or task=".join(TASKS))


def finite_scores(values: Any, what: str) -> list[float]:
    """A score function's answer as floats, or ValueError saying what is wrong with it."""
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        raise ValueError(f"{what} returned {type(values).__name__}, not one number per example")
    scores = []
    for index, value in enumerate(values):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{what} returned {type(value).__name__} for example {index}, not a number") from None
        if not math.isfinite(number):
            raise ValueError(f"{what} returned {number} for example {index}: scores must be finite")
        scores.append(number)
    return scores
