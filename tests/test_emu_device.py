"""The emu test device must behave like an out-of-tree accelerator, not invent findings.

Two ways it did: ``Module.to("emu")`` untied tied weights (PyTorch counted a CPU and a
PrivateUse1 tensor as incompatible for ``param.data = ...``, so ``Module._apply`` made a new
Parameter per module), which gave a real training drift a GPU would not have; and ``torch.emu``
lacked what PyTorch's generic code calls on a device module (``torch.load`` with
``map_location="emu"`` entered ``torch.emu.device``, which was missing). Everything runs in one
fresh process (emu renames PrivateUse1 for the whole process). The seeded faults are the old
behaviours, recreated there: PyTorch's switch that makes ``.to()`` replace parameters (what emu
used to do), and a device module without ``device``.
"""

from __future__ import annotations

import pytest
from tests.conftest import fresh_process_json

SCRIPT = r"""
import gc, io, json, sys, warnings
import torch
from bakeoff import emu
emu.enable(unsupported=[], wrong={}, autocast=[])
facts = {}


class Tiny(torch.nn.Module):
    def __init__(self, tied):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 8)
        self.mix = torch.nn.Linear(8, 8)
        self.lm_head = torch.nn.Linear(8, 11, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.mix(self.embed(ids))))


def losses(model, device, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = torch.tensor([[1, 4, 2, 9, 3, 7]]).to(device)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def moved(tied, overwrite=False):
    torch.manual_seed(0)
    model = Tiny(tied)
    torch.manual_seed(0)
    reference = Tiny(tied)
    count = len(list(model.parameters()))
    torch.__future__.set_overwrite_module_params_on_conversion(overwrite)
    try:
        model.to("emu")
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    return {
        "params": [count, len(list(model.parameters()))],
        "tied": model.lm_head.weight is model.embed.weight,
        "devices": sorted({str(p.device) for p in model.parameters()}),
        "cpu": losses(reference, "cpu"),
        "emu": losses(model, "emu"),
        "back_tied": model.to("cpu").lm_head.weight is model.embed.weight,
    }


for name, tied, overwrite in json.loads(sys.argv[1]):
    facts[name] = moved(tied, overwrite)

# a parameter with a gradient keeps it (moved along) and stays tied
torch.manual_seed(0)
model = Tiny(True)
losses(model, "cpu", steps=1)
model.to("emu")
facts["grad"] = [str(model.embed.weight.grad.device), model.lm_head.weight is model.embed.weight]

# the device module, called the way PyTorch's generic code calls it
mod = torch.emu
attrs = {}


def probe(name, call):
    present = hasattr(mod, name)
    try:
        value = call() if present else None
        plain = isinstance(value, (bool, int, str, list, type(None)))
        attrs[name] = {"present": present, "value": value if plain else repr(value)}
    except Exception as exc:
        attrs[name] = {"present": present, "error": f"{type(exc).__name__}: {exc}"}


def entered(device):
    with mod.device(device) as ctx:
        return [ctx.idx, torch.empty(1, device="emu").device.index]


def refused(call):
    try:
        call()
    except (RuntimeError, ValueError) as exc:
        return type(exc).__name__
    return "accepted"


probe("device", lambda: [entered(0), entered("emu"), entered(torch.device("emu", 0)), entered(None),
                         refused(lambda: mod.device(1)), refused(lambda: mod.device("cpu"))])
probe("is_available", lambda: mod.is_available())
probe("is_initialized", lambda: mod.is_initialized())
probe("_lazy_init", lambda: mod._lazy_init())
probe("device_count", lambda: mod.device_count())
probe("current_device", lambda: mod.current_device())
probe("set_device", lambda: [mod.set_device(0), mod.set_device("emu:0"), refused(lambda: mod.set_device(1))])
probe("synchronize", lambda: [mod.synchronize(), mod.synchronize(0), mod.synchronize("emu")])
probe("_is_in_bad_fork", lambda: mod._is_in_bad_fork())
probe("get_device_name", lambda: mod.get_device_name(0))
probe("is_bf16_supported", lambda: [
    mod.is_bf16_supported(),
    mod.is_bf16_supported(including_emulation=False),
    str((torch.ones(3, dtype=torch.bfloat16, device="emu") * 3).dtype),
])


def same_draws(seed_call):
    seed_call(5)
    first = torch.rand(6, device="emu").cpu()
    torch.rand(1)  # the host moves on in between
    seed_call(5)
    return torch.equal(first, torch.rand(6, device="emu").cpu())


probe("manual_seed", lambda: same_draws(mod.manual_seed))
probe("manual_seed_all", lambda: same_draws(mod.manual_seed_all))
probe("initial_seed", lambda: [mod.manual_seed(9), mod.initial_seed()][1])
probe("seed", lambda: [mod.seed(), mod.seed_all(), isinstance(mod.initial_seed(), int)][-1])


def restored(get, set_):
    state = get()
    first = torch.rand(6, device="emu").cpu()
    set_(state)
    return torch.equal(first, torch.rand(6, device="emu").cpu())


probe("get_rng_state", lambda: [str(mod.get_rng_state().dtype), str(mod.get_rng_state("emu").device)])
probe("set_rng_state", lambda: restored(mod.get_rng_state, lambda s: mod.set_rng_state(s, "emu")))
probe("get_rng_state_all", lambda: len(mod.get_rng_state_all()))
probe("set_rng_state_all", lambda: restored(mod.get_rng_state_all, mod.set_rng_state_all))

# the allocator answers: a 1 MiB tensor shows in every count
gc.collect()
mod.empty_cache()
before = mod.memory_allocated()
mod.reset_peak_memory_stats()
block = torch.empty(1 << 20, dtype=torch.uint8, device="emu")
probe("memory_allocated", lambda: mod.memory_allocated(0) - before)
probe("max_memory_allocated", lambda: mod.max_memory_allocated() - before)
probe("memory_reserved", lambda: mod.memory_reserved() - before)
probe("max_memory_reserved", lambda: mod.max_memory_reserved() - before)
KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "active_bytes.all.current")
probe("memory_stats", lambda: [mod.memory_stats()[key] - before for key in KEYS])
del block
probe("reset_peak_memory_stats", lambda: [mod.reset_peak_memory_stats(), mod.max_memory_allocated() - before])
probe("reset_max_memory_allocated", lambda: [mod.reset_max_memory_allocated(), mod.max_memory_allocated() - before])
probe("empty_cache", lambda: mod.empty_cache())


def resized():  # a storage shrinks and grows through the device's allocator (FSDP2 frees this way)
    held = torch.ones(1 << 18, device="emu")  # 1 MiB
    base = mod.memory_allocated()
    held.untyped_storage().resize_(0)
    freed = base - mod.memory_allocated()
    held.untyped_storage().resize_(1 << 20)
    return [freed, mod.memory_allocated() - base]


def streams():  # a synchronous device's streams and events: every wait already satisfied
    side, event = mod.Stream(priority=-1), mod.Event()
    with mod.stream(side):
        side.wait_stream(mod.current_stream())
        recorded = event.record()
    mod.current_stream().wait_event(event)
    return [recorded, event.query(), side.query(), type(mod.current_stream()).__name__]


facts["resize"] = resized()
probe("Stream", streams)
probe("mem_get_info", lambda: [isinstance(x, int) and x > 0 for x in mod.mem_get_info()])
probe("get_amp_supported_dtype", lambda: mod.get_amp_supported_dtype())
emu.enable(autocast=["bf16"])
facts["amp_with_bf16"] = [str(d) for d in mod.get_amp_supported_dtype()]
emu.enable(autocast=[])
facts["attrs"] = attrs

# PyTorch's own paths through the module
from torch.utils.backend_registration import _get_custom_mod_func



def custom_mod_funcs():
    return [_get_custom_mod_func(n)() for n in ("is_available", "device_count", "is_bf16_supported")]


try:
    facts["custom_mod_func"] = custom_mod_funcs()
except Exception as exc:
    facts["custom_mod_func"] = f"{type(exc).__name__}: {exc}"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.manual_seed(3)
    first = torch.rand(4, device="emu").cpu()
    torch.manual_seed(3)
    again = torch.rand(4, device="emu").cpu()
    facts["torch_manual_seed"] = [torch.equal(first, again), [str(w.message) for w in caught]]
try:
    with torch.random.fork_rng(device_type="emu"):
        inside = torch.rand(4, device="emu").cpu()
    facts["fork_rng"] = torch.equal(inside, torch.rand(4, device="emu").cpu())
except Exception as exc:
    facts["fork_rng"] = f"{type(exc).__name__}: {exc}"

torch.manual_seed(0)
layer = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)).to("emu")
x = torch.randn(4, 8, device="emu")
grads = []
# recomputing builds a disabled torch.autocast("emu"), which PyTorch refuses on a device module
# without get_amp_supported_dtype (emu without BAKEOFF_EMU_AUTOCAST): give it the hook here
emu.enable(autocast=["bf16"])
try:
    for use in (False, True):
        layer.zero_grad()
        torch.manual_seed(1)
        out = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False) if use else layer(x)
        out.sum().backward()
        grads.append(layer[0].weight.grad.cpu().clone())
    facts["checkpoint"] = torch.equal(*grads)
except Exception as exc:
    facts["checkpoint"] = f"{type(exc).__name__}: {exc}"
emu.enable(autocast=[])

saved = {"w": torch.randn(3, 4), "ids": torch.arange(5), "half": torch.randn(2, dtype=torch.bfloat16)}
buffer = io.BytesIO()
torch.save(saved, buffer)
loads = {}
for key, where in (("emu", "emu"), ("emu:0", "emu:0"), ("torch.device", torch.device("emu", 0))):
    buffer.seek(0)
    try:
        got = torch.load(buffer, map_location=where, weights_only=True)
        loads[key] = {k: [str(v.device), str(v.dtype), torch.equal(v.cpu(), saved[k])] for k, v in got.items()}
    except Exception as exc:
        loads[key] = f"{type(exc).__name__}: {exc}"
facts["load"] = loads
on_device = io.BytesIO()
torch.save({k: v.to("emu") for k, v in saved.items()}, on_device)
on_device.seek(0)
try:
    back = torch.load(on_device, weights_only=True)
    facts["load_saved_on_emu"] = sorted({str(v.device) for v in back.values()})
except Exception as exc:
    facts["load_saved_on_emu"] = f"{type(exc).__name__}: {exc}"

# seeded fault: the module without ``device`` (what emu had)
device_class = getattr(mod, "device", None)
if device_class is not None:
    delattr(mod, "device")
buffer.seek(0)
try:
    torch.load(buffer, map_location="emu", weights_only=True)
    facts["load_without_device"] = "loaded"
except Exception as exc:
    facts["load_without_device"] = f"{type(exc).__name__}: {exc}"
finally:
    if device_class is not None:
        mod.device = device_class
print(json.dumps(facts))
"""

CASES = [
    ("tied", True, False),
    ("untied", False, False),
    # the seeded fault: .to() replacing each module's parameter, as it did on emu
    ("tied, parameters replaced", True, True),
]


@pytest.fixture(scope="module")
def facts() -> dict:
    return fresh_process_json(SCRIPT, CASES, timeout=600)


def _close(a: list[float], b: list[float]) -> bool:
    return all(abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.emu
def test_tied_weights_stay_tied_on_the_device_and_train_like_the_host(facts):
    tied = facts["tied"]
    assert tied["params"] == [3, 3]  # embedding (shared with the head), mix weight and bias
    assert tied["tied"] is True and tied["devices"] == ["emu:0"]
    assert _close(tied["emu"], tied["cpu"]), (tied["emu"], tied["cpu"])
    assert tied["back_tied"] is True  # and back to the host
    assert facts["grad"] == ["emu:0", True]


@pytest.mark.emu
def test_an_untied_model_is_moved_as_it_is(facts):
    untied = facts["untied"]
    assert untied["params"] == [4, 4] and untied["tied"] is False
    assert _close(untied["emu"], untied["cpu"]), (untied["emu"], untied["cpu"])


@pytest.mark.emu
def test_untying_is_caught_as_a_drift_from_the_second_step(facts):
    broken = facts["tied, parameters replaced"]
    assert broken["params"] == [3, 4] and broken["tied"] is False
    assert broken["emu"][0] == pytest.approx(broken["cpu"][0], rel=1e-6)  # same start
    assert not _close(broken["emu"][1:], broken["cpu"][1:])


#: What PyTorch's generic code calls on a device module, and emu's answer (called in the script).
EXPECTED = {
    "device": [[0, 0], [0, 0], [0, 0], [0, 0], "RuntimeError", "ValueError"],
    "is_available": True,
    "is_initialized": True,
    "_lazy_init": None,
    "device_count": 1,
    "current_device": 0,
    "set_device": [None, None, "RuntimeError"],
    "synchronize": [None, None, None],
    "_is_in_bad_fork": False,
    "get_device_name": "bakeoff emu (test device, host memory)",
    "is_bf16_supported": [True, True, "torch.bfloat16"],
    "manual_seed": True,
    "manual_seed_all": True,
    "initial_seed": 9,
    "seed": True,
    "get_rng_state": ["torch.uint8", "cpu"],
    "set_rng_state": True,
    "get_rng_state_all": 1,
    "set_rng_state_all": True,
    "memory_allocated": 1 << 20,
    "max_memory_allocated": 1 << 20,
    "memory_reserved": 1 << 20,
    "max_memory_reserved": 1 << 20,
    "memory_stats": [1 << 20] * 4,
    "reset_peak_memory_stats": [None, 0],
    "reset_max_memory_allocated": [None, 0],
    "empty_cache": None,
    "mem_get_info": [True, True],
    "Stream": [None, True, True, "Stream"],
}


@pytest.mark.emu
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_device_module_has_what_pytorch_calls(facts, name):
    found = facts["attrs"][name]
    assert found["present"], f"torch.emu.{name} is missing"
    assert "error" not in found, found["error"]
    assert found["value"] == EXPECTED[name]


@pytest.mark.emu
def test_a_storage_shrinks_and_grows_through_the_devices_allocator(facts):
    assert facts["resize"] == [1 << 20, 0]  # freed when resized to nothing, held again when grown back


@pytest.mark.emu
def test_autocast_dtypes_are_offered_only_when_the_device_has_autocast(facts):
    assert facts["attrs"]["get_amp_supported_dtype"] == {"present": False, "value": None}
    assert facts["amp_with_bf16"] == ["torch.bfloat16"]


@pytest.mark.emu
def test_pytorch_seeds_forks_and_checkpoints_through_the_module(facts):
    assert facts["custom_mod_func"] == [True, 1, True]
    assert facts["torch_manual_seed"] == [True, []]  # no "add manual_seed_all" warning
    assert facts["fork_rng"] is True
    assert facts["checkpoint"] is True  # dropout replayed with the same mask


@pytest.mark.emu
@pytest.mark.parametrize("where", ["emu", "emu:0", "torch.device"])
def test_a_host_checkpoint_loads_onto_the_device(facts, where):
    assert facts["load"][where] == {
        "w": ["emu:0", "torch.float32", True],
        "ids": ["emu:0", "torch.int64", True],
        "half": ["emu:0", "torch.bfloat16", True],
    }
    assert facts["load_saved_on_emu"] == ["emu:0"]


@pytest.mark.emu
def test_loading_fails_without_the_device_context(facts):
    # the seeded fault: the module as it was, without ``device``
    assert "has no attribute 'device'" in facts["load_without_device"], facts["load_without_device"]
