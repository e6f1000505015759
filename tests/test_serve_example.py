"""The bundled example service (``python -m bakeoff.examples.tiny_lm_service``) as ``bakeoff serve``
will run it: written for ``cuda``, started on the emu device through the remap, it serves the
bundled traffic; the same service on the CPU answers alike (the honest control: another device's
rounding), while a seeded fault on the device (every matmul's output 1% off) is caught by the
response comparison; malformed bodies are refused with 422; the stream holds /generate's tokens."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from bakeoff.serve.load import LoadRun, send_on_schedule
from bakeoff.serve.responses import compare_responses
from bakeoff.serve.schedule import Schedule
from bakeoff.serve.service import Service, start_service
from bakeoff.serve.traffic import read_traffic

# one worker for the module: its services (torch, the model and the emu device load in each) are shared
pytestmark = [pytest.mark.emu, pytest.mark.xdist_group("test_serve_example")]

COMMAND = f"{sys.executable} -m bakeoff.examples.tiny_lm_service --port {{port}} --device {{device}}"
TRAFFIC = read_traffic(Path(str(resources.files("bakeoff.examples") / "tiny_lm_requests.jsonl")))
VOCAB = 1024  # the demo llama's
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _start(tmp: Path, device_map: dict[str, str], **env: str) -> Service:
    service = start_service(
        COMMAND, out=tmp, device="cuda", device_map=device_map, env={**os.environ, **env}, timeout_s=120
    )
    assert service.error is None, service.error
    return service


@pytest.fixture(scope="module")
def emu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    service = _start(tmp_path_factory.mktemp("emu"), {"cuda": "emu"})
    yield service
    assert service.stop().ok


@pytest.fixture(scope="module")
def emu_run(emu: Service) -> LoadRun:
    return _send(emu)


def _send(service: Service) -> LoadRun:
    """The bundled traffic, 16 requests at 10 a second (a low rate: the service queues little)."""
    times = Schedule("constant").times(10, len(TRAFFIC.bodies))
    return send_on_schedule(service.url + "/generate", list(TRAFFIC.bodies), times, timeout_s=60)


def _post(url: str, body: bytes) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with _DIRECT.open(request, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def test_a_cuda_service_remapped_to_emu_serves_the_bundled_traffic(emu: Service, emu_run: LoadRun):
    with _DIRECT.open(emu.health_url, timeout=10) as response:
        assert json.loads(response.read()) == {"ok": True, "device": "emu:0"}
    assert len(TRAFFIC.bodies) == 16 and emu_run.errors() == {}
    for sent in emu_run.requests:
        asked, answer = TRAFFIC.bodies[sent.index], json.loads(sent.body)
        assert sent.status == 200 and len(answer["token_ids"]) == asked["max_new_tokens"]
        assert all(0 <= t < VOCAB for t in answer["token_ids"])
        # the greedy token is the best of the two candidates kept at each position
        for token, candidates in zip(answer["token_ids"], answer["logprobs"], strict=True):
            assert len(candidates) == 2 and max(candidates, key=candidates.get) == str(token)
        assert len(answer["last_logits"]) == 8


def test_cpu_and_emu_answer_alike_and_a_seeded_device_fault_is_caught(
    emu_run: LoadRun, tmp_path_factory: pytest.TempPathFactory
):
    # the control: the same model and seed on the CPU, the reference
    with _start(tmp_path_factory.mktemp("cpu"), {"cuda": "cpu"}) as cpu:
        reference = _send(cpu)
    parity = compare_responses(reference, emu_run)
    assert (parity.verdict, parity.compared, parity.differing) == ("pass", 16, 0), parity.reason
    # not a bit-identical control: emu's kernels round differently in the last bits
    assert any(r.body != t.body for r, t in zip(reference.requests, emu_run.requests, strict=True))
    # the seeded fault: every matrix product on the device 1% off (the emu device's own fault switch)
    with _start(tmp_path_factory.mktemp("fault"), {"cuda": "emu"}, BAKEOFF_EMU_WRONG="aten::mm=1.01") as faulty:
        faulted = _send(faulty)
    assert faulted.errors() == {}
    caught = compare_responses(reference, faulted)
    assert caught.verdict == "fail" and caught.differing == caught.compared == 16, caught.reason
    far = compare_responses(reference, faulted, compare=_logits_close)
    assert far.differing == 16  # the last logits themselves are off, beyond float32's tolerance


def _logits_close(reference: bytes, target: bytes) -> bool:
    r, t = json.loads(reference)["last_logits"], json.loads(target)["last_logits"]
    return all(abs(b - a) <= 1e-4 * (1 + abs(a)) for a, b in zip(r, t, strict=True))


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"prompt_ids": [1, 2', "JSON decode error"),
        (b'{"max_new_tokens": 4}', "Field required"),
        (b'{"prompt_ids": [1, 1024]}', "token id 1024 is outside the model's vocabulary (0 to 1023)"),
        (b'{"prompt_ids": [-1]}', "greater than or equal to 0"),
        (b'{"prompt_ids": ["7"]}', "valid integer"),
        (b'{"prompt_ids": []}', "at least 1 item"),
        (b'{"prompt_ids": [1], "max_new_tokens": 65}', "less than or equal to 64"),
    ],
)
@pytest.mark.parametrize("endpoint", ["/generate", "/generate_stream"])
def test_a_malformed_request_is_refused_with_422_and_its_reason(emu: Service, endpoint: str, body: bytes, says: str):
    status, _, answer = _post(emu.url + endpoint, body)
    assert status == 422 and says in answer.decode(), answer
    # the control: a well-formed body is served
    assert _post(emu.url + endpoint, b'{"prompt_ids": [1], "max_new_tokens": 1}')[0] == 200


def test_the_stream_yields_the_tokens_of_generate(emu: Service, emu_run: LoadRun):
    for sent in emu_run.requests[:4]:
        status, kind, stream = _post(emu.url + "/generate_stream", json.dumps(TRAFFIC.bodies[sent.index]).encode())
        assert status == 200 and kind.startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in stream.decode().split("\n\n") if line]
        assert events[-1] == "[DONE]"
        assert [json.loads(e)["token_id"] for e in events[:-1]] == json.loads(sent.body)["token_ids"]
