"""The engine registry: built-in adapters, third-party ones from the ``bakeoff.engines`` entry points.

A third-party engine is installed for real here: a ``.dist-info`` with ``entry_points.txt`` on
``sys.path``, read by ``importlib.metadata`` as an installed package would be. Its adapter
wraps ``torch.compile(backend="eager")`` under a name dynamo does not know, so only the
registry can make it a target.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bakeoff.errors import SpecError
from bakeoff.target.detect import backend_status, check_backend_name
from bakeoff.target.engines import (
    ENGINES,
    ENTRY_POINT_GROUP,
    DynamoBackend,
    demo_backends,
    engine_for,
    registry,
    takers,
)
from bakeoff.target.spec import parse_target

ADAPTER = """
from bakeoff.target.engines import DYNAMIC, FULLGRAPH, Engine, compile_with_dynamo


class EagerWrap(Engine):
    name = "eager_wrap"
    options = (DYNAMIC, FULLGRAPH)

    def compile(self, model, target):
        return compile_with_dynamo(model, target, backend="eager")


class Impostor(Engine):
    name = "inductor"


class DynamoImpostor(Engine):
    name = "aot_eager"


def own_backend(gm, example_inputs):
    return gm.forward


class Own(Engine):
    name = "tiny_own"
"""

ENTRY_POINTS = f"""
[{ENTRY_POINT_GROUP}]
eager_wrap = tiny_bakeoff_engine:EagerWrap
broken = tiny_bakeoff_missing:Nope
impostor = tiny_bakeoff_engine:Impostor
dynamo_impostor = tiny_bakeoff_engine:DynamoImpostor
"""


def _install(root: Path, entry_points: str) -> None:
    (root / "tiny_bakeoff_engine.py").write_text(ADAPTER)
    info = root / "tiny_bakeoff_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-bakeoff-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    _install(tmp_path, ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    registry.cache_clear()


def test_builtin_engines_and_their_capabilities() -> None:
    engines = registry()
    for name in ("inductor", "openvino", "openvino_export", "onnxrt", "neuron", "emu"):
        assert name in engines
    assert set(ENGINES) == {"onnxrt", "openvino_export"}
    assert all(engines[n].inference_only and engines[n].fixed_signature for n in ENGINES)
    assert not engines["openvino"].inference_only and not engines["inductor"].fixed_signature
    assert takers("precision") == ["openvino", "openvino_export"]
    assert takers("mode") == ["inductor"]
    assert demo_backends() == ["openvino", "onnxrt"]
    # a name no adapter claims is a plain torch.compile backend
    plain = engine_for("aot_eager")
    assert plain.dynamo_backend and plain.takes("dynamic") and not plain.takes("precision")


def test_a_third_party_engine_is_found_and_runs(installed: Path, capsys: pytest.CaptureFixture) -> None:
    import torch

    from bakeoff.target.execute import prepare
    from bakeoff.workload.base import BuiltWorkload, WorkloadSpec

    engine = registry()["eager_wrap"]
    assert type(engine).__module__ == "tiny_bakeoff_engine"
    check_backend_name("eager_wrap")  # known: not a typo
    assert backend_status("eager_wrap", "cpu").available
    assert parse_target("cpu+eager_wrap?dynamic=false").backend == "eager_wrap"
    with pytest.raises(SpecError, match="applies only to OpenVINO"):
        parse_target("cpu+eager_wrap?precision=f32")

    torch._dynamo.reset()  # a compiled model run earlier in this process (under a dispatch mode) leaves frames skipped
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    workload = BuiltWorkload(spec=WorkloadSpec("py", "test:linear"), model=model, args=(x,))
    prepared = prepare(workload, parse_target("cpu+eager_wrap"))
    try:
        assert prepared.uses_dynamo
        assert torch.equal(prepared(), model(x))
        assert prepared.compile_events is not None and prepared.compile_events() >= 1
        assert prepared.compile_summary is not None and prepared.compile_summary()["graphs"] == 1
    finally:
        prepared.close()


def test_a_broken_or_clashing_entry_point_is_left_out_with_one_line(
    installed: Path, capsys: pytest.CaptureFixture
) -> None:
    engines = registry()
    lines = capsys.readouterr().err.splitlines()
    assert len([line for line in lines if "'broken'" in line]) == 1
    assert any(
        line.startswith("bakeoff: engine plugin 'broken' (tiny_bakeoff_missing:Nope) left out: ModuleNotFoundError")
        for line in lines
    )
    # the impostor never replaces the built-in inductor
    assert len([line for line in lines if "'impostor'" in line]) == 1
    assert type(engines["inductor"]).__module__ == "bakeoff.target.engines.inductor"
    assert engines["inductor"].takes("mode")
    # the good entry of the same package still loads, and read once: no second report
    assert "eager_wrap" in engines and "broken" not in engines
    registry()
    assert capsys.readouterr().err == ""


def test_a_plugin_never_replaces_a_torch_compile_backend(installed: Path, capsys: pytest.CaptureFixture) -> None:
    engines = registry()
    [line] = [line for line in capsys.readouterr().err.splitlines() if "'dynamo_impostor'" in line]
    assert line == (
        "bakeoff: engine plugin 'dynamo_impostor' (tiny_bakeoff_engine:DynamoImpostor) left out: "
        "ValueError: its name 'aot_eager' is empty or already taken"
    )
    assert "aot_eager" not in engines and type(engine_for("aot_eager")) is DynamoBackend
    assert "eager_wrap" in engines  # control: a name torch.compile does not know is the plugin's


def test_a_package_may_adapt_the_backend_it_registers(tmp_path: Path) -> None:
    """A package that registers a torch.compile backend may bring its adapter under that name
    (in a fresh process, where torch.compile lists the new backend)."""
    _install(
        tmp_path,
        f"""
        [torch_dynamo_backends]
        tiny_own = tiny_bakeoff_engine:own_backend

        [{ENTRY_POINT_GROUP}]
        tiny_own = tiny_bakeoff_engine:Own
        dynamo_impostor = tiny_bakeoff_engine:DynamoImpostor
        """,
    )
    code = (
        "from torch._dynamo import list_backends\n"
        "from bakeoff.target.engines import registry\n"
        "engines = registry()\n"
        "print('tiny_own' in list_backends(exclude_tags=()), type(engines['tiny_own']).__module__, "
        "'aot_eager' in engines)"
    )
    path = os.pathsep.join([str(tmp_path), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "tiny_bakeoff_engine", "False"]
    assert "'tiny_own'" not in done.stderr and "'dynamo_impostor'" in done.stderr


def test_without_the_package_the_engine_is_unknown() -> None:
    registry.cache_clear()
    assert "eager_wrap" not in registry()
    with pytest.raises(SpecError, match=r"unknown torch\.compile backend 'eager_wrap'"):
        check_backend_name("eager_wrap")
