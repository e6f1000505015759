"""Root module calls compiled with a target's backend (aot_eager, for real): only the outermost
call of each module is compiled, once (PyTorch's own modules too); a module the script compiled itself is left
alone; the ledger counts the calls; the replacement and the module captures add no graph break."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bakeoff.script.capture import Captures
from bakeoff.script.compiled import SCRIPT_COMPILE, RootCompiler, ScriptCompiles
from bakeoff.script.modules import DEFAULT, ModuleCalls
from bakeoff.target.dynamo import CompileWatch
from bakeoff.target.spec import parse_target


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def test_root_calls_are_compiled_in_place_and_counted_nested_ones_are_not() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net, loss = Net(), nn.MSELoss()
    own = Net()
    own.compile(backend="aot_eager")  # the script's own compile is left as it is
    x, y = torch.randn(3, 4), torch.randn(3, 2)
    expected = net(x).detach()
    compiler = RootCompiler(parse_target("cpu+aot_eager?dynamic=false"))
    original = nn.Module.__call__
    watch = CompileWatch()
    compiler.install()
    try:
        for _ in range(2):
            out = net(x)
            loss(out, y)
        own(x)
        net.fc1(x)  # called on its own: a root too
    finally:
        compiler.uninstall()
        summary = watch.summary()
        watch.close()
    torch.testing.assert_close(out, expected)
    assert nn.Module.__call__ is original  # restored
    assert own._compiled_call_impl is not None  # the script's own compile: left alone
    ledger = {r.api: r for r in compiler.recorder.ledger().rewrites}
    assert set(ledger) == {"torch.compile(Net)", "torch.compile(MSELoss)", "torch.compile(Linear)"}
    assert ledger["torch.compile(Net)"].count == 2 and ledger["torch.compile(Linear)"].count == 1
    assert ledger["torch.compile(Net)"].reason == "backend=aot_eager, fullgraph=False, dynamic=False"
    assert ledger["torch.compile(Net)"].site.endswith(f"test_script_compiled.py:{_line('out = net(x)')}")
    assert summary["graphs"] >= 3 and summary["graph_breaks"] == 0, summary


def test_the_scripts_own_compiles_get_the_targets_backend_once_each_and_their_graphs_are_not_compiled_again() -> None:
    """A decorated function's graph runs as a GraphModule call outside any module: bakeoff's root
    compile must not compile it again (it did: ``torch.compile(GraphModule)``), and a decorator
    factory (``@torch.compile(backend=...)``) is one compile of the script's, not two."""
    torch._dynamo.reset()
    compiler = RootCompiler(parse_target("cpu+aot_eager"))
    own = ScriptCompiles(parse_target("cpu+aot_eager"))
    compiler.install()
    own.install()
    try:

        @torch.compile(backend="eager", mode="max-autotune-no-cudagraphs")
        def doubled(x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @torch.compile
        def shifted(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        out = shifted(doubled(torch.ones(3)))
    finally:
        own.uninstall()
        compiler.uninstall()
    torch.testing.assert_close(out, torch.full((3,), 3.0))
    assert compiler.recorder.ledger().rewrites == ()  # no root module: nothing of bakeoff's compiled
    (script,) = own.recorder.ledger().rewrites
    assert script.api == SCRIPT_COMPILE and script.count == 2
    assert script.reason == "the script's backend eager -> the target's aot_eager: the target's compile ran"


def test_a_root_that_is_one_of_pytorchs_own_modules_is_compiled_too() -> None:
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiler = RootCompiler(parse_target("cpu+aot_eager"))
    watch = CompileWatch()
    compiler.install()
    try:
        model(torch.randn(2, 4))
    finally:
        compiler.uninstall()
        summary = watch.summary()
        watch.close()
    assert summary["graphs"] == 1, summary  # model.compile() would have left it eager: 0 graphs


def test_a_compiled_targets_module_captures_are_its_root_calls_without_a_graph_break() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 4)
    captures = Captures()
    modules = ModuleCalls(["Net*"], captures)
    compiler = RootCompiler(parse_target("cpu+aot_eager"), modules)
    watch = CompileWatch()
    compiler.install()
    try:
        out = net(x)
    finally:
        compiler.uninstall()
        summary = watch.summary()
        watch.close()
    assert captures.names() == ("module:Net",) and torch.equal(captures["module:Net"][0], out.detach())
    assert summary["graph_breaks"] == 0


@pytest.mark.filterwarnings("ignore:Using `torch.compile")  # the script's own torch.compile, with global hooks
def test_module_capture_hooks_add_no_graph_break_to_the_scripts_own_compile() -> None:
    torch._dynamo.reset()
    net = Net()
    captures = Captures()
    modules = ModuleCalls(["*"], captures)
    compiled = torch.compile(net, backend="aot_eager")
    watch = CompileWatch()
    modules.install()
    try:
        compiled(torch.randn(3, 4))
    finally:
        modules.uninstall()
        summary = watch.summary()
        watch.close()
    assert summary["graph_breaks"] == 0 and summary["graphs"] == 1, summary
    assert captures.names() == ("module:Net",)  # the wrapper under the model's name; the layers ran in the graph


def _line(text: str) -> int:
    from pathlib import Path

    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_a_backend_that_exports_the_whole_model_or_an_engine_option_is_refused_with_a_reason() -> None:
    from bakeoff.runner.script import _compile_refusal

    assert "exports a whole model" in (_compile_refusal(parse_target("cpu+onnxrt")) or "")
    assert "precision=" in (_compile_refusal(parse_target("cpu+openvino?precision=f32")) or "")
    assert _compile_refusal(parse_target("cpu+aot_eager?dynamic=true")) is None


def test_inductor_compiles_a_root_call_with_the_targets_mode_and_computes_the_same() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(2, 4)
    expected = model(x)
    compiler = RootCompiler(parse_target("cpu+inductor?mode=default&dynamic=false"))
    watch = CompileWatch()
    compiler.install()
    try:
        out = model(x)
    finally:
        compiler.uninstall()
        summary = watch.summary()
        watch.close()
    torch.testing.assert_close(out, expected)
    assert summary["graphs"] == 1, summary  # inductor's own compile events depend on its cache: not asserted
    (rewrite,) = compiler.recorder.ledger().rewrites
    assert rewrite.reason == "backend=inductor, fullgraph=False, dynamic=False, mode=default"


def test_the_scripts_compile_keeps_its_options_only_where_they_cannot_clash_with_the_targets(monkeypatch) -> None:
    """torch.compile takes a mode or options, not both: the target's mode wins over the script's
    options; another backend drops the script's mode and options (they are its backend's)."""
    given: list[dict] = []
    monkeypatch.setattr(torch, "compile", lambda model=None, **kwargs: given.append(kwargs) or model)
    for spec in ("cpu+inductor?mode=max-autotune", "cpu+aot_eager"):
        own = ScriptCompiles(parse_target(spec))
        own.install()
        try:
            torch.compile(Net(), backend="inductor", options={"trace.enabled": False})
            torch.compile(Net(), mode="reduce-overhead")
        finally:
            own.uninstall()
    tuned, tuned_mode, other, other_mode = given
    assert tuned["mode"] == "max-autotune" and "options" not in tuned
    assert tuned_mode["mode"] == "max-autotune"
    assert other["backend"] == "aot_eager" and "options" not in other and "mode" not in other
    assert other_mode["backend"] == "aot_eager" and "mode" not in other_mode


@pytest.mark.filterwarnings("ignore:Using `torch.compile")
def test_the_scripts_own_compiled_model_is_the_same_root_capture_in_the_reference_and_on_a_compiled_target() -> None:
    """The default module captures record root calls: the script's ``torch.compile(net)`` wrapper
    is one in the eager reference (hooks) and on a compiled target (bakeoff's root wrapper, which
    must not compile it again), once per call on both sides."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net()
    compiled = torch.compile(net, backend="eager")
    x = torch.randn(3, 4)
    reference, target = Captures(), Captures()
    hooks = ModuleCalls(DEFAULT, reference)
    hooks.install()
    try:
        for _ in range(2):
            compiled(x)
    finally:
        hooks.uninstall()
    compiler = RootCompiler(parse_target("cpu+aot_eager"), ModuleCalls(DEFAULT, target))
    compiler.install()
    try:
        for _ in range(2):
            compiled(x)
    finally:
        compiler.uninstall()
    assert reference.names() == target.names() == ("module:Net",)
    assert len(reference["module:Net"]) == len(target["module:Net"]) == 2
    torch.testing.assert_close(target["module:Net"][1], reference["module:Net"][1])
    assert compiler.recorder.ledger().rewrites == ()  # the script's compile ran; bakeoff compiled nothing


def test_only_bakeoffs_own_frames_without_ops_are_left_out_of_the_compilations() -> None:
    from types import SimpleNamespace

    import bakeoff.script.remap as remap
    from bakeoff.target.dynamo import _own_frame

    ours = SimpleNamespace(co_filename=remap.__file__, graph_op_count=0, fail_type=None)
    assert _own_frame(ours)
    assert not _own_frame(SimpleNamespace(co_filename=remap.__file__, graph_op_count=3, fail_type=None))
    assert not _own_frame(SimpleNamespace(co_filename=remap.__file__, graph_op_count=0, fail_type="Unsupported"))
    assert not _own_frame(SimpleNamespace(co_filename=__file__, graph_op_count=0, fail_type=None))  # the user's
