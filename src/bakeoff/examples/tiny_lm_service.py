"""An example model service: the bundled tiny llama behind FastAPI and uvicorn, for ``bakeoff serve``.

    python -m bakeoff.examples.tiny_lm_service --port 8000 [--device cuda] [--dtype float32] [--seed 0]

It is written as a team's GPU service would be (``--device cuda`` by default), so that ``bakeoff
serve`` has a real service to start on each target, remapping ``cuda`` to the target's device as
``bakeoff exec`` does. Without a GPU and without that remapping it fails at start, as the team's
service would. At start it builds the model ``bakeoff demo`` uses (``arch:llama``: 2 layers,
random weights drawn from ``--seed``, no download), moves it to ``--device`` in ``--dtype``, runs
one forward pass (a warm replica) and only then listens. Endpoints:

* ``GET /health``: ``{"ok": true, "device": "cuda:0"}``, the device the weights are on;
* ``POST /generate``, ``{"prompt_ids": [int, ...], "max_new_tokens": 8}`` (1 to 64): greedy
  decoding of exactly ``max_new_tokens`` tokens (no end-of-sequence stop), answered as
  ``{"token_ids": [...], "logprobs": [{"<id>": logprob, ...}, ...], "last_logits": [...]}``:
  the two best candidates' log-probabilities at each generated position (what
  :mod:`bakeoff.serve.responses` reads to tell a near tie) and the first 8 logits of the last
  position, numbers to compare at the dtype's tolerance;
* ``POST /generate_stream``: the same generation as server-sent events (``text/event-stream``),
  ``data: {"token_id": N}`` per token as it is chosen, then ``data: [DONE]``.

A body that is not JSON, lacks ``prompt_ids``, holds an id outside the vocabulary or asks for
more than 64 tokens is answered 422 with the reason (FastAPI's validation error format).

Why it is simple: one worker thread runs the model, so requests are served one at a time in
arrival order (a FIFO server; no batching), and each step runs the whole sequence again (no KV
cache). Each answer is then a pure function of its prompt, the seed, the device and the dtype,
whatever else is queued, which is what a response comparison between two services needs. A
streamed generation whose client has left still runs to its end before the next request starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

import torch
import uvicorn
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from bakeoff.workload.registry import DEMO_WORKLOAD, build_workload

__all__ = ["MAX_NEW_TOKENS", "GenerateRequest", "TinyLM", "create_app", "main"]

DEFAULT_NEW_TOKENS = 8
MAX_NEW_TOKENS = 64
#: The longest prompt taken: with the longest generation it stays inside the model's 512 positions.
MAX_PROMPT = 256
#: Candidates kept per generated position, and logits of the last position returned.
TOP_CANDIDATES = 2
LOGITS_SHOWN = 8
DTYPES = ("float32", "bfloat16", "float16")


class GenerateRequest(BaseModel):
    """The body of ``/generate`` and ``/generate_stream`` (the vocabulary is checked apart: it is
    the model's, known once it is built)."""

    prompt_ids: list[Annotated[int, Field(strict=True, ge=0)]] = Field(min_length=1, max_length=MAX_PROMPT)
    max_new_tokens: int = Field(DEFAULT_NEW_TOKENS, strict=True, ge=1, le=MAX_NEW_TOKENS)


class TinyLM:
    """The bundled tiny llama on one device, in eval mode, warmed by one forward pass."""

    def __init__(self, device: str = "cuda", dtype: str = "float32", seed: int = 0) -> None:
        built = build_workload(f"{DEMO_WORKLOAD}?seed={seed}")  # on the CPU, as bakeoff demo builds it
        self.model = built.model.to(device=device, dtype=getattr(torch, dtype)).eval()
        self.device = next(self.model.parameters()).device  # the real one, after any remapping
        self.vocab_size = int(self.model.config.vocab_size)
        self.generate([0], 1)

    def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, on_token: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """Greedy decoding of ``max_new_tokens`` tokens after ``prompt_ids`` (see the module
        docstring), calling ``on_token`` with each as it is chosen."""
        ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=self.device)
        tokens: list[int] = []
        candidates: list[dict[str, float]] = []
        with torch.inference_mode():
            for _ in range(max_new_tokens):
                logits = self.model(input_ids=ids, use_cache=False).logits[0, -1].float()
                top = torch.log_softmax(logits, dim=-1).topk(TOP_CANDIDATES)
                values, indices = top.values.tolist(), top.indices.tolist()
                tokens.append(indices[0])
                candidates.append({str(i): v for i, v in zip(indices, values, strict=True)})
                if on_token is not None:
                    on_token(indices[0])
                ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
        return {"token_ids": tokens, "logprobs": candidates, "last_logits": logits[:LOGITS_SHOWN].tolist()}


def create_app(lm: TinyLM) -> FastAPI:
    """The HTTP service over ``lm``: its model runs on one worker thread, one request at a time."""
    app = FastAPI(title="bakeoff tiny LM example")
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiny-lm")

    def checked(request: GenerateRequest) -> GenerateRequest:
        errors = [
            {
                "type": "less_than",
                "loc": ("body", "prompt_ids", i),
                "msg": f"token id {v} is outside the model's vocabulary (0 to {lm.vocab_size - 1})",
                "input": v,
                "ctx": {"lt": lm.vocab_size},
            }
            for i, v in enumerate(request.prompt_ids)
            if v >= lm.vocab_size
        ]
        if errors:
            raise RequestValidationError(errors)
        return request

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "device": str(lm.device)}

    @app.post("/generate")
    async def generate(request: GenerateRequest) -> dict[str, Any]:
        request = checked(request)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(worker, lm.generate, request.prompt_ids, request.max_new_tokens)

    @app.post("/generate_stream")
    async def generate_stream(request: GenerateRequest) -> StreamingResponse:
        request = checked(request)
        loop = asyncio.get_running_loop()
        chosen: asyncio.Queue[int | None] = asyncio.Queue()

        def run() -> None:
            try:
                lm.generate(
                    request.prompt_ids,
                    request.max_new_tokens,
                    lambda t: loop.call_soon_threadsafe(chosen.put_nowait, t),
                )
            finally:
                loop.call_soon_threadsafe(chosen.put_nowait, None)

        done = loop.run_in_executor(worker, run)

        async def events() -> AsyncIterator[str]:
            while (token := await chosen.get()) is not None:
                yield f"data: {json.dumps({'token_id': token})}\n\n"
            await done  # a failed generation ends the stream without its [DONE]
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bakeoff.examples.tiny_lm_service",
        description="Serve the bundled tiny llama (random weights) over HTTP: /health, /generate, /generate_stream.",
        epilog="example: python -m bakeoff.examples.tiny_lm_service --port 8000 --device cuda",
    )
    parser.add_argument("--port", type=int, required=True, help="the port to listen on, on 127.0.0.1")
    parser.add_argument("--device", default="cuda", help="the device the model runs on (default: cuda)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="the weights' dtype (default: float32)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the random weights (default: 0, as the demo)")
    args = parser.parse_args(argv)
    lm = TinyLM(args.device, args.dtype, args.seed)
    print(f"tiny LM on {lm.device} at http://127.0.0.1:{args.port}", flush=True)
    uvicorn.run(create_app(lm), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
