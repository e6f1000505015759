"""The device remap of a CUDA-style script, on this CPU-only PyTorch: snippets written for CUDA run
on the host (or ``meta``, a target without autocast), the ledger counts each rewrite at its first
call site, numerics-changing rewrites are flagged (and refused when strict), and everything the
remap replaced is back after it, also when the body raises."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from bakeoff.errors import RemapError
from bakeoff.script import Ledger, Remapper
from bakeoff.script import ledger as ledger_module
from bakeoff.script.cuda_namespace import UnmappedAttribute
from bakeoff.script.devices import DeviceMap, map_backend
from bakeoff.script.ledger import relative_site

HERE = __file__


def _next_line() -> str:
    """``file:line`` of the line after the caller's: where the next statement's call is made,
    named as the ledger names it (relative to the directory the process started in)."""
    return relative_site(f"{HERE}:{sys._getframe(1).f_lineno + 1}", ledger_module._STARTED_IN)


def _replaced() -> dict[str, object]:
    """Every object a remap replaces, by name, as it is now."""
    from torch.distributed import distributed_c10d

    return {
        "torch.cuda": torch.cuda,
        "sys.modules[torch.cuda]": sys.modules["torch.cuda"],
        "torch.Generator": torch.Generator,
        "autocast.__init__": torch.amp.autocast_mode.autocast.__dict__["__init__"],
        "GradScaler.__init__": torch.amp.grad_scaler.GradScaler.__dict__["__init__"],
        "torch.load": torch.load,
        "torch.serialization.load": torch.serialization.load,
        "dist.init_process_group": dist.init_process_group,
        "c10d.init_process_group": distributed_c10d.init_process_group,
        "dist.new_group": dist.new_group,
        "DistributedDataParallel.__init__": torch.nn.parallel.DistributedDataParallel.__dict__["__init__"],
    }


def test_a_cuda_style_snippet_computes_on_the_host_and_each_rewrite_is_counted_at_its_site() -> None:
    torch.manual_seed(0)
    with Remapper({"cuda": "cpu"}) as remap:
        randn_site = _next_line()
        x = torch.randn(4, device="cuda")
        model_site = _next_line()
        model = torch.nn.Linear(4, 2).cuda()
        y = model(x.to("cuda"))
        torch.randn(4, device=torch.device("cuda", 0))  # the device is rewritten where it is made
        torch.randn(4, device="cuda:0")
        sync_site = _next_line()
        torch.cuda.synchronize()
        torch.cuda.synchronize()
    assert x.device.type == "cpu" and model.weight.device.type == "cpu"
    assert y.shape == (2,) and torch.isfinite(y).all()
    ledger = remap.ledger
    assert isinstance(ledger, Ledger) and Ledger.from_dict(ledger.to_dict()) == ledger
    randn = ledger.get("torch.randn")
    assert (randn.count, randn.site, randn.reason) == (2, randn_site, "cuda -> cpu")
    assert randn.site.startswith("tests/") or not HERE.startswith(ledger_module._STARTED_IN)  # relative
    cuda = ledger.get("Tensor.cuda")  # Module.cuda moves each parameter with Tensor.cuda
    assert (cuda.count, cuda.site) == (2, model_site)
    assert ledger.get("Tensor.to").count == 1
    assert (ledger.get("torch.device").count, ledger.get("torch.device").reason) == (1, "cuda:0 -> cpu")
    sync = ledger.get("torch.cuda.synchronize")
    assert (sync.count, sync.site) == (2, sync_site)
    assert ledger.numerics == ()  # a pure device rewrite changes no numerics (the control)
    assert [r.api for r in ledger.rewrites][:2] == ["torch.randn", "Tensor.cuda"]  # in order of first use


def test_the_cuda_namespace_answers_for_the_host() -> None:
    with Remapper({"cuda": "cpu"}) as remap:
        assert torch.cuda.is_available() is True
        assert (torch.cuda.device_count(), torch.cuda.current_device()) == (1, 0)
        torch.cuda.set_device(0)
        torch.cuda.manual_seed_all(3)
        first = torch.randn(3, device="cuda")
        torch.cuda.manual_seed(3)
        assert torch.equal(torch.randn(3, device="cuda"), first)
        torch.cuda.empty_cache()
        assert torch.cuda.memory_allocated() == torch.cuda.max_memory_allocated() == 0
        assert isinstance(torch.cuda.get_device_name(), str)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) >= 0.0
        from torch.cuda import synchronize  # found through sys.modules too

        synchronize()
    ledger = remap.ledger
    assert ledger.get("torch.cuda.is_available").reason == "answered True: cpu stands in for cuda"
    assert (
        ledger.get("torch.cuda.memory_allocated").reason == "on cpu: the host keeps no allocator statistics: answered 0"
    )
    assert ledger.get("torch.cuda.synchronize").count == 1
    assert ledger.get("torch.cuda.manual_seed_all").count == 1
    assert torch.cuda.is_available() is False  # the truth again


class _PlainAllocatorDevice:
    """A device module whose allocator counts what it holds but is no caching ``DeviceAllocator``:
    the statistics PyTorch would read for it through ``torch.accelerator`` assert instead."""

    @staticmethod
    def memory_allocated(device: object = None) -> int:
        return 4096

    @staticmethod
    def max_memory_allocated(device: object = None) -> int:
        raise RuntimeError(
            'device_allocator INTERNAL ASSERT FAILED at "CachingDeviceAllocator.h":261, please report a bug to '
            "PyTorch. Allocator for plain is not a DeviceAllocator."
        )


def test_memory_queries_a_device_cannot_answer_get_the_hosts_answer_and_the_ledger_says_whose(monkeypatch) -> None:
    from bakeoff.script.cuda_namespace import CudaNamespace
    from bakeoff.script.ledger import Recorder

    found = torch.get_device_module
    monkeypatch.setattr(
        torch, "get_device_module", lambda kind=None: _PlainAllocatorDevice if kind == "plain" else found(kind)
    )
    recorder = Recorder()
    cuda = CudaNamespace(torch.cuda, DeviceMap({"cuda": "plain"}), recorder)
    assert cuda.memory_allocated() == 4096  # the control: the device's own answer, the truth
    assert cuda.max_memory_allocated() == 0  # the seeded fault: its statistics assert
    assert cuda.memory_reserved() == 0 and cuda.reset_peak_memory_stats() is None  # it has none
    with pytest.raises(UnmappedAttribute):
        cuda.mem_get_info()  # the host's free memory is no device's: no stand-in
    ledger = recorder.ledger()
    assert ledger.get("torch.cuda.memory_allocated").reason == "-> torch.plain.memory_allocated"
    assert ledger.get("torch.cuda.max_memory_allocated") is None
    assert ledger.get("torch.cuda.max_memory_allocated (answered by bakeoff)").reason == (
        "plain cannot answer (torch.plain.max_memory_allocated: RuntimeError: Allocator for plain is not a "
        "DeviceAllocator): answered 0, as on cpu"
    )
    assert ledger.get("torch.cuda.memory_reserved (answered by bakeoff)").reason == (
        "plain cannot answer (torch.plain has no memory_reserved): answered 0, as on cpu"
    )
    assert ledger.numerics == ()


def test_the_host_answers_its_free_memory_for_the_reference() -> None:
    with Remapper({"cuda": "cpu"}) as remap:
        free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total
    assert remap.ledger.get("torch.cuda.mem_get_info").reason == "on cpu: the host's available and total memory"


def test_an_unmappable_cuda_attribute_is_a_clear_error_naming_it_and_the_target() -> None:
    with Remapper({"cuda": "cpu"}):
        with pytest.raises(UnmappedAttribute) as caught:
            torch.cuda.get_device_properties(0)
        assert not hasattr(torch.cuda, "nvtx")  # an AttributeError too, so hasattr says no
        assert torch.cuda.amp.autocast is not None  # passed through: remapped in its class
    assert caught.value.message == "torch.cuda.get_device_properties has no counterpart on cpu"
    assert "synchronize" in caught.value.hint
    assert isinstance(caught.value, RemapError)


def test_a_library_asking_is_available_gets_the_truth_and_the_question_is_flagged(tmp_path: Path) -> None:
    library = tmp_path / "site-packages" / "bakeoff_test_fakelib.py"
    library.parent.mkdir()
    library.write_text("import torch\n\ndef pick():\n    return torch.cuda.is_available()\n")
    sys.path.insert(0, str(library.parent))
    try:
        import bakeoff_test_fakelib

        with Remapper({"cuda": "cpu"}) as remap:
            site = _next_line()
            assert bakeoff_test_fakelib.pick() is False  # the library would take a CUDA-only path
            assert torch.cuda.is_available() is True  # the script's own question
    finally:
        sys.path.remove(str(library.parent))
        sys.modules.pop("bakeoff_test_fakelib", None)
    asked = remap.ledger.get("torch.cuda.is_available (asked by a library)")
    assert asked.numerics and asked.site == site  # the user's line that led to the library's question
    assert "answered False (the truth) to bakeoff_test_fakelib" in asked.reason
    assert not remap.ledger.get("torch.cuda.is_available").numerics


def test_a_library_naming_a_cuda_only_class_gets_the_real_one_and_the_users_code_does_not() -> None:
    # a virtual environment's site-packages lies under what sysconfig calls its platstdlib: a
    # library there is still a library, not the standard library
    import sysconfig

    root = Path(sysconfig.get_paths()["platstdlib"], "site-packages")
    source = "import torch\n\ndef annotate():\n    return torch.cuda.CUDAGraph, torch.cuda.Stream | None\n"
    namespace: dict[str, object] = {}
    exec(compile(source, str(root / "bakeoff_test_fakelib2.py"), "exec"), namespace)
    with Remapper({"cuda": "cpu"}) as remap:
        site = _next_line()
        graph, optional_stream = namespace["annotate"]()  # type: ignore[operator]
        with pytest.raises(UnmappedAttribute, match=r"torch\.cuda\.CUDAGraph has no counterpart on cpu"):
            torch.cuda.CUDAGraph  # noqa: B018  (the user's own code: a clear error)
        stream = torch.cuda.Stream()
    assert graph is torch.cuda.CUDAGraph  # the real class, outside the remap too
    assert optional_stream is not None and isinstance(stream, torch.cpu.Stream)
    given = remap.ledger.get("torch.cuda.CUDAGraph (asked by a library)")
    assert given.count == 1 and given.site == site and not given.numerics
    assert "the real one, given to" in given.reason and "using it needs CUDA" in given.reason


def test_a_cuda_generator_becomes_a_host_generator() -> None:
    with Remapper({"cuda": "cpu"}) as remap:
        site = _next_line()
        generator = torch.Generator(device="cuda")
        generator.manual_seed(7)
        drawn = torch.randn(3, generator=generator, device="cuda")
        assert isinstance(generator, torch.Generator) and isinstance(torch.default_generator, torch.Generator)
    assert generator.device.type == "cpu" and isinstance(generator, torch.Generator)
    assert torch.equal(drawn, torch.randn(3, generator=torch.Generator().manual_seed(7)))
    assert remap.ledger.get("torch.Generator").site == site
    with pytest.raises(RuntimeError):  # the seeded need: without the remap it cannot be made
        torch.Generator(device="cuda")


def test_autocast_maps_to_the_targets_with_the_dtype_the_script_asked_for() -> None:
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match="Disabling autocast"):  # what happens without the remap
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert model(x).dtype == torch.float32
    with Remapper({"cuda": "cpu"}) as remap:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert model(x).dtype == torch.bfloat16
        with torch.amp.autocast("cuda"):  # CUDA's default, float16, not the host's bfloat16
            assert model(x).dtype == torch.float16
        with pytest.warns(FutureWarning), torch.cuda.amp.autocast(dtype=torch.bfloat16):
            assert model(x).dtype == torch.bfloat16
        scaler = torch.amp.GradScaler()  # its device defaults to cuda
        assert scaler.is_enabled()
    autocast = remap.ledger.get('torch.autocast("cuda")')
    assert autocast.count == 3 and not autocast.numerics
    assert remap.ledger.get('GradScaler("cuda")').reason == "-> GradScaler('cpu')"
    assert remap.ledger.numerics == ()


def test_autocast_the_target_cannot_honour_is_flagged_and_refused_when_strict() -> None:
    with Remapper({"cuda": "meta"}) as remap:
        x = torch.randn(2, 4, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert (x @ x.T).dtype == torch.float32  # the region runs without autocast
    (flagged,) = remap.ledger.numerics
    assert flagged.api == 'torch.autocast("cuda") (not honoured)'
    assert flagged.reason.endswith("the region runs in float32, not torch.bfloat16")
    assert remap.ledger.get("torch.randn").numerics is False
    with Remapper({"cuda": "meta"}, strict=True) as strict:
        torch.randn(2, device="cuda")  # a pure device rewrite passes strict
        with pytest.raises(RemapError, match=r'torch.autocast\("cuda"\) \(not honoured\) at .* would change numerics'):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                pass
    assert strict.ledger.get('torch.autocast("cuda") (not honoured)').count == 1  # the refusal is on record


@pytest.mark.filterwarnings("ignore:In CPU autocast")  # PyTorch's word that cpu has no float32 autocast
def test_a_float32_autocast_changes_no_precision_and_is_not_flagged_even_when_strict() -> None:
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    for target in ("cpu", "meta"):  # cpu: no float32 autocast; meta: no autocast at all
        with Remapper({"cuda": target}, strict=True) as remap:  # strict: a flagged rewrite would raise
            with torch.autocast("cuda", dtype=torch.float32):
                assert model.to(target)(x.to(target)).dtype == torch.float32
        (listed,) = [r for r in remap.ledger.rewrites if r.api.startswith("torch.autocast")]
        assert listed.api == 'torch.autocast("cuda") (float32, not applied)' and not listed.numerics, listed
        assert "changes no precision" in listed.reason and remap.ledger.numerics == ()
    # the seeded fault beside it: bfloat16 on a device that cannot honour it is still flagged and refused
    with Remapper({"cuda": "meta"}, strict=True) as strict:
        with pytest.raises(RemapError, match=r"not honoured.*would change numerics"):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                pass
    assert [r.api for r in strict.ledger.numerics] == ['torch.autocast("cuda") (not honoured)']


def test_torch_accelerator_answers_for_the_cpu_side_as_on_a_cpu_only_machine() -> None:
    real = {name: getattr(torch.accelerator, name) for name in torch.accelerator.__all__}
    with Remapper({"cuda": "cpu"}) as remap:
        site = _next_line()
        chosen = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
        assert chosen == torch.device("cpu") and torch.accelerator.current_accelerator() is None
        assert torch.accelerator.device_count() == 0
        with pytest.raises(RuntimeError, match="Cannot access accelerator device when none is available"):
            torch.accelerator.synchronize()
        with torch.accelerator.device_index(None):
            pass
    ledger = remap.ledger
    available = ledger.get("torch.accelerator.is_available")
    assert (available.count, available.site) == (1, site) and not available.numerics
    assert available.reason == "answered False: cpu has no accelerator, as on a CPU-only machine"
    assert ledger.get("torch.accelerator.current_accelerator").count == 1  # only asked on the second line
    assert ledger.get("torch.accelerator.synchronize").count == 1
    assert {name: getattr(torch.accelerator, name) is function for name, function in real.items()} == dict.fromkeys(
        real, True
    )


def test_a_dtype_downgrade_is_flagged_and_a_plain_float64_is_not() -> None:
    with Remapper({"cuda": "cpu"}) as control:
        assert torch.zeros(2, dtype=torch.float64, device="cuda").dtype == torch.float64
    assert control.ledger.numerics == ()
    with Remapper({"cuda": "cpu"}, dtypes={torch.float64: torch.float32}) as remap:
        assert torch.zeros(2, dtype=torch.float64, device="cuda").dtype == torch.float32
        assert torch.ones(2).to("cuda", torch.float64).dtype == torch.float32
        assert torch.zeros(2, dtype=torch.float64).dtype == torch.float64  # stays on the host: untouched
    apis = {r.api: r for r in remap.ledger.numerics}
    assert set(apis) == {"torch.zeros (dtype)", "Tensor.to (dtype)"}
    assert apis["torch.zeros (dtype)"].reason == "torch.float64 -> torch.float32: cpu lacks the dtype"
    with Remapper({"cuda": "cpu"}, dtypes={torch.float64: torch.float32}, strict=True):
        with pytest.raises(RemapError, match="would change numerics"):
            torch.zeros(2, dtype=torch.float64, device="cuda")


def _save_as_if_on_cuda(path: Path) -> None:
    """A checkpoint whose storages say ``cuda:0``, as one saved on a CUDA machine does."""
    registry = torch.serialization._package_registry
    before = list(registry)
    torch.serialization.register_package(0, lambda storage: "cuda:0", lambda storage, location: None)
    try:
        torch.save({"w": torch.arange(4.0)}, path)
    finally:
        registry[:] = before


def test_load_maps_a_cuda_map_location_and_cuda_saved_tensors(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    saved_on_cuda = tmp_path / "cuda.pt"
    _save_as_if_on_cuda(saved_on_cuda)
    with pytest.raises(RuntimeError):  # the seeded need: it cannot be loaded here as it is
        torch.load(saved_on_cuda, weights_only=True)
    with Remapper({"cuda": "cpu"}) as remap:
        buffer.seek(0)
        site = _next_line()
        loaded = torch.load(buffer, map_location="cuda", weights_only=True)
        assert torch.equal(torch.load(saved_on_cuda, weights_only=True)["w"], torch.arange(4.0))
    assert loaded["w"].device.type == "cpu"
    assert remap.ledger.get("torch.load(map_location=)").site == site
    assert remap.ledger.get("torch.load (saved on a remapped device)").reason == "cuda:0 -> cpu"


def test_the_process_group_backend_follows_the_device() -> None:
    devices = DeviceMap({"cuda": "cpu"})
    assert map_backend("nccl", devices) == "gloo"
    assert map_backend("NCCL", devices) == "gloo"
    assert map_backend("gloo", devices) == "gloo"
    assert map_backend(None, devices) is None
    assert map_backend("cuda:nccl,cpu:gloo", devices) == "cpu:gloo"
    assert map_backend("nccl", DeviceMap({"cuda": "xpu"})) == "xccl"
    with pytest.raises(RemapError, match="no process-group backend known for device 'emu'"):
        map_backend("nccl", DeviceMap({"cuda": "emu"}), {"cpu": "gloo", "cuda": "nccl"})
    with Remapper({"cuda": "cpu"}) as remap:
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
        try:
            assert dist.get_backend() == "gloo"
        finally:
            dist.destroy_process_group()
    assert remap.ledger.get("torch.distributed.init_process_group(backend=)").reason == "nccl -> gloo"


def test_ddp_gets_no_device_ids_on_the_host_and_the_targets_device_of_the_same_index_elsewhere() -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    from bakeoff.script.remap_dist import _device_of

    with Remapper({"cuda": "cpu"}) as remap:  # PyTorch refuses a device_id on the host, as DDP its device_ids
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0))
        try:  # DDP refuses device_ids for a host module: the script's [0] would raise here
            model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[0], output_device=0)
            assert model(torch.ones(1, 2, device="cuda")).shape == (1, 2)
            # DDP's reducer holds the group: freed after it, its gloo threads' join hung the worker once
            del model
        finally:
            dist.destroy_process_group()
    rewrites = {r.api: r.reason for r in remap.ledger.rewrites}
    assert rewrites["DistributedDataParallel(device_ids=)"] == "[0] -> None"
    assert rewrites["DistributedDataParallel(output_device=)"] == "0 -> None"
    assert (
        rewrites["torch.distributed.init_process_group(device_id=)"] == "cpu -> None (the host)"
    )  # made by torch.device
    assert "__wrapped__" not in DDP.__init__.__dict__  # put back
    # on a device target an index stays an index of the target's device, a device becomes its
    assert _device_of(1, DeviceMap({"cuda": "xpu"})) == 1
    assert _device_of(1, DeviceMap({"cuda": "xpu:0"})) == 0  # ranks sharing the target's first device
    assert _device_of(torch.device("cuda", 1), DeviceMap({"cuda": "xpu"})) == torch.device("xpu", 1)
    assert _device_of(torch.device("cpu"), DeviceMap({"cuda": "xpu"})) == torch.device("cpu")  # not remapped


def test_a_host_run_on_a_machine_with_an_accelerator_tells_pytorch_its_device_is_the_host(monkeypatch) -> None:
    # PyTorch's own code (FSDP2's default mesh) asks torch._C._get_accelerator, not torch.accelerator:
    # on a machine with one, a host run would build its mesh there, beside a gloo process group
    fake = torch.device("meta")
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: fake)
    with Remapper({"cuda": "cpu"}) as remap:
        assert torch._C._get_accelerator() == torch.device("cpu")
    assert torch._C._get_accelerator() is fake  # put back
    asked = remap.ledger.get("torch._C._get_accelerator (asked by torch)")
    assert asked.reason == "answered cpu: the run is on the host"
    with Remapper({"cuda": "xpu"}):  # the control: a device target's answer is the truth
        assert torch._C._get_accelerator() is fake


def test_ranks_sharing_the_host_see_as_many_devices_as_ranks(monkeypatch) -> None:
    # the usual guard of a torchrun script: assert torch.cuda.device_count() >= LOCAL_WORLD_SIZE
    with Remapper({"cuda": "cpu"}):
        assert torch.cuda.device_count() == 1  # the control: no torchrun, one device
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with Remapper({"cuda": "cpu"}) as remap:
        assert torch.cuda.device_count() == 4
    reason = remap.ledger.get("torch.cuda.device_count").reason
    assert "LOCAL_WORLD_SIZE (the ranks share the device)" in reason, reason


def test_device_names_map_with_their_index() -> None:
    assert DeviceMap({"cuda": "cpu"}).map_name("cuda:3") == "cpu"
    assert DeviceMap({"cuda": "xpu"}).map_name("cuda:3") == "xpu:3"
    assert DeviceMap({"cuda": "xpu:0"}).map_name("cuda:3") == "xpu:0"
    assert DeviceMap({"cuda": "cpu"}).map_name("cpu") is None
    assert DeviceMap({"cuda": "cpu"}).map(True) is None  # a bool is no device index
    with pytest.raises(RemapError, match="the left side is a device type"):
        DeviceMap({"cuda:0": "cpu"})
    with pytest.raises(RemapError, match="PyTorch knows no such device"):
        Remapper({"cuda": "nosuchdevice"})


def test_everything_is_restored_after_the_block_also_when_it_raises() -> None:
    before = _replaced()
    remap = Remapper({"cuda": "cpu"})
    with pytest.raises(ValueError, match="the script failed"), remap:
        assert torch.cuda.is_available() and torch.Generator is not before["torch.Generator"]
        assert len(torch.overrides._get_current_function_mode_stack()) == 1
        with pytest.raises(RemapError, match="already installed"):
            Remapper({"cuda": "cpu"}).install()
        raise ValueError("the script failed")
    after = _replaced()
    assert {name: after[name] is value for name, value in before.items()} == dict.fromkeys(before, True)
    assert torch.overrides._get_current_function_mode_stack() == []
    assert torch.cuda.is_available() is False and torch.Generator is torch._C.Generator
    with pytest.raises((RuntimeError, AssertionError)):
        torch.randn(1, device="cuda")  # no rewrite left behind
    remap.install()  # a remapper can be installed again
    remap.uninstall()
    assert _replaced() == before


EMU_SCRIPT = textwrap.dedent("""
    import json, torch
    from bakeoff import emu
    emu.enable()
    from bakeoff.errors import RemapError
    from bakeoff.script import Remapper
    facts = {}
    with Remapper({"cuda": "emu"}) as remap:
        model = torch.nn.Linear(4, 2).cuda()
        x = torch.randn(3, 4, device="cuda")
        facts["device"] = str(model(x).device)
        torch.cuda.synchronize()
        facts["available"] = [torch.cuda.is_available(), torch.cuda.device_count()]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            facts["autocast_dtype"] = str(model(x).dtype)
        generator = torch.Generator(device="cuda").manual_seed(7)
        drawn = torch.randn(3, device="cuda", generator=generator)
        facts["generator"] = [generator.device.type, str(drawn.device)]
        facts["same_draws"] = torch.equal(drawn.cpu(), torch.randn(3, generator=torch._C.Generator().manual_seed(7)))
    facts["ledger"] = remap.ledger.to_dict()
    facts["truth"] = str(torch.accelerator.current_accelerator())
    for side in ("cpu", "emu"):
        with Remapper({"cuda": side}) as picked:
            available = torch.accelerator.is_available()
            device = torch.accelerator.current_accelerator() if available else torch.device("cpu")
            facts[side] = [str(torch.ones(1, device=device).device), torch.accelerator.device_count()]
        facts[side].append(picked.ledger.get("torch.accelerator.is_available").reason)
    with Remapper({"cuda": "emu"}) as named:  # autocast asked of the target by its own name
        device = torch.accelerator.current_accelerator()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            facts["named_dtype"] = str(model(x).dtype)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=False):
            pass
    facts["named"] = named.ledger.to_dict()
    with Remapper({"cuda": "cpu"}) as host:  # checkpoint's recompute names emu, registered but not the run's
        with torch.autocast("emu", dtype=torch.bfloat16, enabled=False):
            facts["host_disabled"] = str(model.cpu()(x.cpu()).dtype)
        try:
            with torch.autocast("emu", dtype=torch.bfloat16):
                pass
        except (RuntimeError, AssertionError):
            facts["host_enabled"] = "refused"
    facts["host"] = host.ledger.to_dict()
    print(json.dumps(facts))
""")


@pytest.mark.emu
def test_a_cuda_style_snippet_runs_on_the_emu_test_device() -> None:
    ran = subprocess.run([sys.executable, "-c", EMU_SCRIPT], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stderr
    facts = json.loads(ran.stdout.splitlines()[-1])
    assert facts["device"] == "emu:0" and facts["available"] == [True, 1]
    assert facts["autocast_dtype"] == "torch.float32"  # emu has no autocast: flagged below
    # emu has no generator: a host one stands in, and its draws are copied to the device
    assert facts["generator"] == ["cpu", "emu:0"] and facts["same_draws"]
    rewrites = {r["api"]: r for r in facts["ledger"]["rewrites"]}
    assert rewrites["Tensor.cuda"]["count"] == 2 and not rewrites["Tensor.cuda"]["numerics"]
    assert rewrites["torch.cuda.synchronize"]["reason"] == "-> torch.accelerator.synchronize"
    assert rewrites['torch.autocast("cuda") (not honoured)']["numerics"]
    assert [r["api"] for r in facts["ledger"]["rewrites"] if r["numerics"]] == ['torch.autocast("cuda") (not honoured)']
    assert "a host generator (emu has none)" in rewrites["torch.Generator"]["reason"]
    assert rewrites["torch.randn (generator)"]["reason"] == "drawn on the host, copied to emu"
    # torch.accelerator answers for the side, not for the process (which has emu registered)
    assert facts["truth"] == "emu"
    assert facts["cpu"] == ["cpu", 0, "answered False: cpu has no accelerator, as on a CPU-only machine"]
    assert facts["emu"] == ["emu:0", 1, "-> emu, the current accelerator"]
    # torch.autocast("emu") where emu has none: flagged as the cuda one is (it crashed in PyTorch);
    # a disabled region asks for nothing and is no numerics change
    named = {r["api"]: r for r in facts["named"]["rewrites"]}
    assert facts["named_dtype"] == "torch.float32"
    assert named['torch.autocast("emu") (not honoured)']["numerics"]
    assert not named['torch.autocast("emu") (disabled)']["numerics"]
    # on another side, a disabled region of the registered emu is a no-op; an enabled one is the script's error
    host = {r["api"]: r for r in facts["host"]["rewrites"]}
    assert facts["host_disabled"] == "torch.float32" and facts["host_enabled"] == "refused"
    assert not host['torch.autocast("emu") (disabled)']["numerics"]


def test_call_sites_in_the_runs_copy_are_named_relative_to_it():
    # each run works in its own temporary copy: an absolute path there would make a run and its
    # rerun name the same line differently, and their ledgers "differ"
    work = "/tmp/bakeoff-exec-123-abcd1234-xyz/work"
    assert relative_site(f"{work}/model/layers.py:12", work) == "model/layers.py:12"
    assert relative_site("/usr/lib/python3/site.py:3", work) == "/usr/lib/python3/site.py:3"  # outside: as it is
    assert relative_site(f"{work}-other/train.py:1", work) == f"{work}-other/train.py:1"  # a sibling is outside
    assert relative_site("?", work) == "?"
