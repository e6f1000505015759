"""Workload specs and builders: arch:, hf: and py:."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bakeoff.errors import SpecError, WorkloadError
from bakeoff.workload import BuiltWorkload, WorkloadSpec, build_workload, list_architectures, parse_workload

SMALL = "layers=1&hidden=32&seq=8"

# -- parse_workload ---------------------------------------------------------------------


def test_parse_workload() -> None:
    spec = parse_workload("arch:llama?layers=1&hidden=32")
    assert spec == WorkloadSpec("arch", "llama", {"layers": "1", "hidden": "32"})
    assert spec.spec == "arch:llama?layers=1&hidden=32"
    assert str(spec) == spec.spec
    assert parse_workload("arch:llama").spec == "arch:llama"


def test_parse_workload_keeps_colons_in_name() -> None:
    spec = parse_workload("py:my/file.py:make?n=3")
    assert (spec.kind, spec.name, dict(spec.options)) == ("py", "my/file.py:make", {"n": "3"})


@pytest.mark.parametrize("text", ["llama", "model:llama", "arch:", ":llama", "ARCH:llama", "hub:x/y"])
def test_parse_workload_malformed(text: str) -> None:
    with pytest.raises(SpecError, match="malformed workload") as info:
        parse_workload(text)
    message = str(info.value)
    for kind in ("arch:", "hf:", "py:"):
        assert kind in message
    assert "bakeoff workloads" in (info.value.hint or "")


@pytest.mark.parametrize("text", ["", "  ", "?layers=1"])
def test_parse_workload_empty(text: str) -> None:
    with pytest.raises(SpecError, match="empty workload spec"):
        parse_workload(text)


@pytest.mark.parametrize("text", ["arch:llama?", "arch:llama?layers", "arch:llama?layers=", "arch:llama?=1"])
def test_parse_workload_bad_options(text: str) -> None:
    with pytest.raises(SpecError, match=r"ends with '\?' but has no options|malformed option"):
        parse_workload(text)


def test_parse_workload_duplicate_option() -> None:
    with pytest.raises(SpecError, match="given twice"):
        parse_workload("arch:llama?layers=1&layers=2")


# -- arch: ------------------------------------------------------------------------------


def test_list_architectures_heads() -> None:
    archs = list_architectures()
    assert archs["llama"] == "causal_lm"
    assert archs["gpt2"] == "causal_lm"
    assert archs["bert"] == "base"  # encoders are built as the base model
    assert list(archs) == sorted(archs)


def test_arch_llama_defaults() -> None:
    w = build_workload("arch:llama")
    assert isinstance(w, BuiltWorkload)
    assert w.details["head"] == "causal_lm"
    assert w.details["model_class"] == "LlamaForCausalLM"
    assert w.details["config"]["num_hidden_layers"] == 2
    assert w.details["config"]["hidden_size"] == 64
    assert w.details["inputs"] == {"input_ids": [1, 16], "attention_mask": [1, 16]}
    assert w.details["parameters"] == sum(p.numel() for p in w.model.parameters())
    assert w.kwargs["use_cache"] is False
    assert not w.model.training
    assert w.dtype == "float32"
    assert w.seed == 0
    with torch.no_grad():
        out = w()
    assert tuple(out.logits.shape) == (1, 16, 1024)


def test_arch_llama_options_in_details() -> None:
    w = build_workload(f"arch:llama?{SMALL}&heads=2&kv_heads=1&vocab=128&intermediate=48&batch=2")
    cfg = w.details["config"]
    assert cfg["num_hidden_layers"] == 1
    assert cfg["hidden_size"] == 32
    assert cfg["num_attention_heads"] == 2
    assert cfg["num_key_value_heads"] == 1
    assert cfg["vocab_size"] == 128
    assert cfg["intermediate_size"] == 48
    assert cfg["head_dim"] == 16
    assert w.details["inputs"]["input_ids"] == [2, 8]
    assert len(w.model.model.layers) == 1
    assert int(w.kwargs["input_ids"].max()) < 128
    with torch.no_grad():
        assert tuple(w().logits.shape) == (2, 8, 128)
    assert w.to_dict()["spec"] == f"arch:llama?{SMALL}&heads=2&kv_heads=1&vocab=128&intermediate=48&batch=2"


def test_arch_gpt2() -> None:
    w = build_workload(f"arch:gpt2?{SMALL}")
    assert w.details["head"] == "causal_lm"
    assert w.details["model_class"] == "GPT2LMHeadModel"
    assert w.details["config"]["num_hidden_layers"] == 1
    assert w.details["config"]["hidden_size"] == 32
    with torch.no_grad():
        assert tuple(w().logits.shape) == (1, 8, 1024)


def test_arch_bert_base_model() -> None:
    w = build_workload(f"arch:bert?{SMALL}")
    assert w.details["head"] == "base"
    assert w.details["model_class"] == "BertModel"
    assert "use_cache" not in w.kwargs
    with torch.no_grad():
        out = w()
    assert tuple(out.last_hidden_state.shape) == (1, 8, 32)


def test_arch_to_dict() -> None:
    w = build_workload(f"arch:llama?{SMALL}")
    data = w.to_dict()
    assert data["kind"] == "arch"
    assert data["fingerprint"] == w.fingerprint
    assert len(data["fingerprint"]) == 16
    assert data["dtype"] == "float32"
    assert data["details"] is w.details


def test_arch_fingerprint_stable_across_builds() -> None:
    a, b = build_workload(f"arch:llama?{SMALL}"), build_workload(f"arch:llama?{SMALL}")
    assert a.fingerprint == b.fingerprint
    assert torch.equal(a.kwargs["input_ids"], b.kwargs["input_ids"])
    with torch.no_grad():
        assert torch.equal(a().logits, b().logits)


@pytest.mark.parametrize("change", ["seed=1", "seq=9", "layers=2", "hidden=64", "batch=2", "vocab=512"])
def test_arch_fingerprint_changes(change: str) -> None:
    base = build_workload(f"arch:llama?{SMALL}")
    key = change.split("=")[0]
    options = "&".join(p for p in SMALL.split("&") if not p.startswith(key + "=")) + "&" + change
    assert build_workload(f"arch:llama?{options}").fingerprint != base.fingerprint


def test_arch_seed_changes_weights_and_inputs() -> None:
    a, b = build_workload(f"arch:llama?{SMALL}"), build_workload(f"arch:llama?{SMALL}&seed=1")
    assert b.seed == 1
    assert not torch.equal(a.kwargs["input_ids"], b.kwargs["input_ids"])
    assert not torch.equal(a.model.lm_head.weight, b.model.lm_head.weight)


def test_fingerprint_sees_changed_weights() -> None:
    w = build_workload(f"arch:llama?{SMALL}")
    before = w.fingerprint
    w2 = build_workload(f"arch:llama?{SMALL}")
    with torch.no_grad():
        w2.model.lm_head.weight[0, 0] += 1.0
    assert w2.fingerprint != before


def test_unknown_architecture() -> None:
    with pytest.raises(SpecError, match="unknown architecture 'notamodel'") as info:
        build_workload("arch:notamodel")
    assert "bakeoff workloads" in info.value.one_line()


def test_unknown_arch_option() -> None:
    with pytest.raises(SpecError, match="unknown option 'bogus'") as info:
        build_workload("arch:llama?bogus=1")
    assert "layers" in (info.value.hint or "")


BAD_ARCH_OPTIONS = ["layers=two", "seq=0", "batch=0", "hidden=-4", "hidden=30&heads=4", "heads=4&kv_heads=3", "seed=x"]


@pytest.mark.parametrize("options", BAD_ARCH_OPTIONS)
def test_bad_arch_option_values(options: str) -> None:
    with pytest.raises(SpecError, match=r"is not an integer|must be at least 1|is not divisible by"):
        build_workload(f"arch:llama?{options}")


@pytest.mark.parametrize("options", BAD_ARCH_OPTIONS)
def test_bad_arch_option_values_are_refused_without_a_build(options: str) -> None:
    """What a sweep checks in a population file before anything runs: the same refusals."""
    from bakeoff.workload.hf import check_arch_options

    with pytest.raises(SpecError, match=r"is not an integer|must be at least 1|is not divisible by"):
        check_arch_options(parse_workload(f"arch:llama?{options}"))


@pytest.mark.parametrize("options", ["", "heads=3&hidden=48", "heads=2&kv_heads=1&seed=0", "max_params=5", "bogus=1"])
def test_fitting_arch_options_pass_the_check_without_a_build(options: str) -> None:
    """The controls: sizes that fit (a default kv_heads that does not divide the heads becomes
    full attention), and an option naming a config attribute, which only a build can judge."""
    from bakeoff.workload.hf import check_arch_options

    check_arch_options(parse_workload(f"arch:llama?{options}" if options else "arch:llama"))


def test_arch_config_attribute_option() -> None:
    w = build_workload(f"arch:llama?{SMALL}&rms_norm_eps=0.001&tie_word_embeddings=true")
    assert w.model.config.rms_norm_eps == 0.001
    assert w.model.config.tie_word_embeddings is True


# -- py: --------------------------------------------------------------------------------

FACTORY = textwrap.dedent("""
    import torch


    class Net(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            self.lin = torch.nn.Linear(width, 3)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale


    def as_tensor():
        return Net(), torch.randn(2, 4)


    def as_tuple():
        return Net(), (torch.randn(2, 4),)


    def as_list():
        return Net(), [torch.randn(2, 4)]


    def as_dict():
        return Net(), {"x": torch.randn(2, 4)}


    def as_pair():
        return Net(), ((torch.randn(2, 4),), {"scale": 2.0})


    def sized(width, rows="2"):
        return Net(int(width)), torch.randn(int(rows), int(width))


    def not_a_pair():
        return 42


    def not_a_module():
        return "model", torch.randn(2, 4)


    def bad_inputs():
        return Net(), 3.5


    def raises():
        raise RuntimeError("factory exploded")


    NOT_CALLABLE = 3
""")


@pytest.fixture
def factory(tmp_path: Path) -> Path:
    path = tmp_path / "factory.py"
    path.write_text(FACTORY)
    return path


def _check_linear_output(w: BuiltWorkload, scale: float = 1.0) -> None:
    x = w.args[0] if w.args else w.kwargs["x"]
    expected = w.model.lin(x) * scale
    with torch.no_grad():
        assert torch.allclose(w(), expected)


def test_py_factory_tensor_inputs(factory: Path) -> None:
    w = build_workload(f"py:{factory}:as_tensor")
    assert len(w.args) == 1 and w.kwargs == {}
    assert tuple(w.args[0].shape) == (2, 4)
    assert w.details["model_class"] == "Net"
    assert w.details["parameters"] == 15
    assert w.details["inputs"] == {"arg0": [2, 4]}
    assert w.identity["kind"] == "py"
    assert w.identity["function"] == f"{factory}:as_tensor"
    assert not w.model.training
    _check_linear_output(w)


def test_py_factory_tuple_and_list_inputs(factory: Path) -> None:
    for name in ("as_tuple", "as_list"):
        w = build_workload(f"py:{factory}:{name}")
        assert isinstance(w.args, tuple) and len(w.args) == 1 and w.kwargs == {}
        _check_linear_output(w)


def test_py_factory_dict_inputs(factory: Path) -> None:
    w = build_workload(f"py:{factory}:as_dict")
    assert w.args == ()
    assert list(w.kwargs) == ["x"]
    assert w.details["inputs"] == {"x": [2, 4]}
    _check_linear_output(w)


def test_py_factory_args_kwargs_pair(factory: Path) -> None:
    w = build_workload(f"py:{factory}:as_pair")
    assert len(w.args) == 1
    assert w.kwargs == {"scale": 2.0}
    _check_linear_output(w, scale=2.0)


def test_py_factory_options_passed_as_strings(factory: Path) -> None:
    w = build_workload(f"py:{factory}:sized?width=6&rows=3")
    assert tuple(w.args[0].shape) == (3, 6)
    assert w.identity["options"] == {"width": "6", "rows": "3"}


def test_py_factory_seeded_and_fingerprint(factory: Path) -> None:
    a = build_workload(f"py:{factory}:as_tensor")
    b = build_workload(f"py:{factory}:as_tensor")
    assert torch.equal(a.args[0], b.args[0])
    assert torch.equal(a.model.lin.weight, b.model.lin.weight)
    assert a.fingerprint == b.fingerprint
    c = build_workload(f"py:{factory}:as_tensor?seed=5")
    assert c.seed == 5
    assert not torch.equal(a.args[0], c.args[0])
    assert c.fingerprint != a.fingerprint
    # the factory's options are part of the identity
    assert build_workload(f"py:{factory}:sized?width=4").fingerprint != a.fingerprint


def test_py_module_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bakeoff_test_factory_mod.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    w = build_workload("py:bakeoff_test_factory_mod:as_dict")
    assert w.identity["function"] == "bakeoff_test_factory_mod:as_dict"
    _check_linear_output(w)


@pytest.mark.parametrize(
    ("function", "match"),
    [
        ("missing", "no function 'missing'"),
        ("NOT_CALLABLE", "no function 'NOT_CALLABLE'"),
        ("not_a_pair", r"not \(model, inputs\)"),
        ("not_a_module", r"not \(model, inputs\)"),
        ("bad_inputs", "inputs of type float"),
        ("sized", "failed"),  # required option not given
        ("as_tensor?unexpected=1", "failed"),  # option the factory does not accept
    ],
)
def test_py_factory_errors(factory: Path, function: str, match: str) -> None:
    with pytest.raises(WorkloadError, match=match) as info:
        build_workload(f"py:{factory}:{function}")
    assert info.value.hint


def test_py_factory_that_raises_gives_workload_error(factory: Path) -> None:
    with pytest.raises(WorkloadError, match="factory exploded"):
        build_workload(f"py:{factory}:raises")


def test_py_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such file"):
        build_workload(f"py:{tmp_path / 'absent.py'}:make")


def test_py_module_with_import_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import torch\nraise ImportError('needs a thing')\n")
    with pytest.raises(WorkloadError, match=r"importing .* failed: ImportError: needs a thing"):
        build_workload(f"py:{path}:make")


def test_a_module_that_parses_its_arguments_at_import_sees_only_its_own_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(
        "import argparse, sys, torch\n"
        "seen = list(sys.argv)\n"
        "args = argparse.ArgumentParser().parse_args()  # bakeoff's arguments would be 'unrecognized'\n"
        "def make():\n"
        "    return torch.nn.Linear(2, 2), torch.ones(1, 2)\n"
    )
    monkeypatch.setattr(sys, "argv", ["bakeoff", "trial", f"py:{path}:make", "--on", "cpu"])
    build_workload(f"py:{path}:make")
    (module,) = [m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path)]
    assert module.seen == [str(path)] and sys.argv[0] == "bakeoff"  # restored after the import


def test_py_module_with_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "syntax.py"
    path.write_text("def make(:\n")
    with pytest.raises(WorkloadError, match="SyntaxError"):
        build_workload(f"py:{path}:make")


def test_py_unknown_module() -> None:
    with pytest.raises(WorkloadError, match="cannot import module"):
        build_workload("py:bakeoff_no_such_module_xyz:make")


@pytest.mark.parametrize("text", ["py:onlyname", "py::make", "py:file.py:"])
def test_py_malformed_name(text: str) -> None:
    with pytest.raises(SpecError, match="malformed workload"):
        build_workload(text)


def test_py_bad_seed(factory: Path) -> None:
    with pytest.raises(SpecError, match="seed"):
        build_workload(f"py:{factory}:as_tensor?seed=-1")


# -- hf: --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, BuiltWorkload]:
    original = build_workload("arch:llama?layers=1&hidden=32")
    path = tmp_path_factory.mktemp("hf") / "tiny-llama"
    original.model.save_pretrained(path)
    return path, original


def test_hf_dir_loads_saved_model(saved_llama: tuple[Path, BuiltWorkload]) -> None:
    path, original = saved_llama
    loaded = build_workload(f"hf:{path}")
    assert loaded.details["model_class"] == "LlamaForCausalLM"
    assert loaded.details["head"] == "causal_lm"
    assert loaded.details["config"]["hidden_size"] == 32
    assert loaded.dtype == "float32"
    assert loaded.identity["kind"] == "hf"
    # same seed and vocabulary: the same inputs
    assert torch.equal(loaded.kwargs["input_ids"], original.kwargs["input_ids"])
    for name, tensor in original.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name
    with torch.no_grad():
        expected, got = original().logits, loaded().logits
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_hf_dir_input_options(saved_llama: tuple[Path, BuiltWorkload]) -> None:
    path, _ = saved_llama
    w = build_workload(f"hf:{path}?seq=5&batch=2&seed=3")
    assert w.details["inputs"]["input_ids"] == [2, 5]
    assert w.seed == 3
    assert build_workload(f"hf:{path}").fingerprint == build_workload(f"hf:{path}").fingerprint
    assert w.fingerprint != build_workload(f"hf:{path}").fingerprint


def test_hf_dir_rejects_arch_options(saved_llama: tuple[Path, BuiltWorkload]) -> None:
    path, _ = saved_llama
    with pytest.raises(SpecError, match="unknown option 'layers'"):
        build_workload(f"hf:{path}?layers=1")


def test_hf_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such directory"):
        build_workload(f"hf:{tmp_path / 'no' / 'such-model'}")


def test_hf_dir_without_config(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(WorkloadError, match=r"no config\.json"):
        build_workload(f"hf:{tmp_path}")


def test_hf_dir_with_broken_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ this is not json")
    with pytest.raises(WorkloadError, match="could not load"):
        build_workload(f"hf:{tmp_path}")


def test_hf_dir_with_config_but_no_weights(saved_llama: tuple[Path, BuiltWorkload], tmp_path: Path) -> None:
    path, _ = saved_llama
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    with pytest.raises(WorkloadError, match="could not load"):
        build_workload(f"hf:{tmp_path}")


def test_hf_dir_with_corrupt_weights(saved_llama: tuple[Path, BuiltWorkload], tmp_path: Path) -> None:
    path, _ = saved_llama
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file" * 4)
    with pytest.raises(WorkloadError, match="could not load"):
        build_workload(f"hf:{tmp_path}")


def test_py_unicode_digit_seed_is_a_spec_error(factory: Path) -> None:
    with pytest.raises(SpecError, match="seed"):
        build_workload(f"py:{factory}:as_tensor?seed=²")


@pytest.mark.parametrize("kind", ["arch", "py"])
def test_a_build_is_the_same_whatever_thread_count_the_caller_runs(kind: str, tmp_path: Path) -> None:
    """A cpu target's worker runs with one thread, the baseline's process with the machine's
    count: the same spec must build the same weights under both. arch:rwkv's initialisation
    rounds differently when its work is split over two threads; the py: factory makes its
    weights from the thread count outright (a seeded fault no build may let through)."""
    if kind == "py":
        factory = tmp_path / "threads.py"
        factory.write_text(
            textwrap.dedent(
                """
                import torch

                def make():
                    model = torch.nn.Linear(2, 2)
                    with torch.no_grad():
                        model.weight.fill_(float(torch.get_num_threads()))
                    return model, torch.ones(1, 2)
                """
            )
        )
        spec = f"py:{factory}:make"
    else:
        spec = "arch:rwkv"
    before = torch.get_num_threads()
    try:
        fingerprints = set()
        for threads in (1, 2):
            torch.set_num_threads(threads)
            fingerprints.add(build_workload(spec).fingerprint)
            assert torch.get_num_threads() == threads  # the caller's own count is given back
    finally:
        torch.set_num_threads(before)
    assert len(fingerprints) == 1


@pytest.mark.parametrize(
    ("options", "said"),
    [
        # a token input of 1e11 raised a RuntimeError traceback; 1e20 layers grew memory without end
        ("seq=99999999999", "batch=1 x seq=99,999,999,999 in arch:llama?seq=99999999999 is more than 67,108,864"),
        ("batch=65536&seq=2048", "is more than 67,108,864 tokens"),
        ("layers=99999999999999999999", "layers=99999999999999999999 in arch:llama?layers=99999999999999999999 is more "
         "than 1,000"),
    ],
)  # fmt: skip
def test_sizes_no_machine_holds_are_refused_in_one_line_without_a_build(options: str, said: str) -> None:
    from bakeoff.workload.hf import check_arch_options

    for refuse in (
        lambda: build_workload(f"arch:llama?{options}"),
        lambda: check_arch_options(parse_workload(f"arch:llama?{options}")),
    ):
        with pytest.raises(SpecError) as raised:
            refuse()
        assert said in str(raised.value)
    # the control: ordinary sizes are built
    assert build_workload("arch:llama?layers=3&seq=32").details["parameters"] > 0
