"""A script's destroyed process groups are freed after it, by bakeoff: DDP's reducer, freed with
the GIL held, is never the last to hold one (the gloo teardown deadlock of
:mod:`bakeoff.script.process_groups`; the exec runs of ``tests/test_exec_ranks.py`` are where it
hung). One rank of gloo in this process, on a file store."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from bakeoff.script.process_groups import kept_process_groups

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="PyTorch without torch.distributed")


def _init(tmp_path: Path, name: str = "store") -> weakref.ref:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / name}", rank=0, world_size=1)
    return weakref.ref(dist.group.WORLD)


def _freed(group: weakref.ref) -> bool:
    gc.collect()
    return group() is None


@pytest.fixture(autouse=True)
def _no_group_left():
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_without_the_guard_destroying_the_group_frees_it_at_once(tmp_path: Path) -> None:
    """The control: what the guard changes is when the group goes, nothing else."""
    group = _init(tmp_path)
    dist.destroy_process_group()
    assert _freed(group)


def test_a_destroyed_group_outlives_the_script_and_is_freed_after_it(tmp_path: Path) -> None:
    """Inside, destroying the group leaves bakeoff's reference: whatever lets go of it last in the
    script (DDP's reducer, as ``main()`` returns) does not free it; bakeoff does, on leaving."""
    originals = dist.destroy_process_group, dist.init_process_group
    with kept_process_groups():
        assert dist.destroy_process_group is c10d.destroy_process_group  # one function, as in PyTorch
        assert dist.destroy_process_group is not originals[0]
        group = _init(tmp_path)
        total = torch.ones(2)
        dist.all_reduce(total)
        dist.destroy_process_group()
        assert not _freed(group)
    assert _freed(group)
    assert (dist.destroy_process_group, dist.init_process_group) == originals
    assert c10d.destroy_process_group is originals[0]


def test_creating_the_group_again_frees_the_kept_one_first_and_the_new_one_works(tmp_path: Path) -> None:
    with kept_process_groups():
        first = _init(tmp_path, "first")
        dist.destroy_process_group()
        assert not _freed(first)
        second = _init(tmp_path, "second")
        assert _freed(first)
        total = torch.ones(3)
        dist.all_reduce(total)
        assert total.tolist() == [1.0, 1.0, 1.0]
        dist.destroy_process_group()
        assert not _freed(second)
    assert _freed(second)


def test_a_destroyed_subgroup_is_kept_and_the_world_stays(tmp_path: Path) -> None:
    with kept_process_groups():
        world = _init(tmp_path)
        sub = dist.new_group([0])
        kept = weakref.ref(sub)
        dist.destroy_process_group(group=sub)
        del sub
        assert not _freed(kept)
        assert dist.is_initialized() and world() is dist.group.WORLD
        dist.destroy_process_group()
    assert _freed(kept) and _freed(world)
