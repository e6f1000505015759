"""The test device's process-group backend (``emu``, gloo over host copies): two ranks on the
device run every collective to its analytic value (rank-distinct ramps), a device mesh over them
finds its group, and three DDP steps on the device end where the same job on the CPU with gloo
ends, and where one process on the global batch ends (within float32 rounding)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tests.conftest import EMU_ENV, FIXTURES

WORLD = 2


def _job(tmp_path: Path, device: str) -> list[dict]:
    rendezvous = tmp_path / f"rendezvous-{device}"
    outs = [tmp_path / f"rank{rank}-{device}.json" for rank in range(WORLD)]
    script = [sys.executable, "-W", "ignore", str(FIXTURES / "dist_rank.py")]
    ranks = [
        subprocess.Popen(
            [*script, str(rank), str(WORLD), str(rendezvous), device, str(outs[rank])],
            env={**os.environ, **EMU_ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(WORLD)
    ]
    for rank, process in enumerate(ranks):
        try:
            _, err = process.communicate(timeout=300)
        finally:
            process.kill()
        assert process.returncode == 0, f"rank {rank}: {err[-2000:]}"
    return [json.loads(out.read_text()) for out in outs]


def _ramp(rank: int, n: int = 4) -> list[float]:
    return [float(i + rank * 100) for i in range(n)]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    here = tmp_path_factory.mktemp("dist")
    return {device: _job(here, device) for device in ("emu", "cpu")}


@pytest.mark.emu
def test_every_collective_on_the_device_gives_its_analytic_value(jobs):
    ramps = [_ramp(r) for r in range(WORLD)]
    for rank, got in enumerate(jobs["emu"]):
        assert got["backend"] == "emu" and got["mesh_group"]  # a device mesh finds the device's group by name
        assert got["all_reduce_sum"] == [sum(col) for col in zip(*ramps, strict=True)]
        assert got["all_reduce_avg"] == [sum(col) / WORLD for col in zip(*ramps, strict=True)]
        assert got["all_reduce_max"] == [max(col) for col in zip(*ramps, strict=True)]
        assert got["all_gather"] == [x for r in ramps for x in r]
        assert got["all_gather_list"] == ramps
        long = [_ramp(r, 2 * WORLD) for r in range(WORLD)]
        summed = [sum(col) for col in zip(*long, strict=True)]
        assert got["reduce_scatter"] == summed[2 * rank : 2 * rank + 2]
        assert got["broadcast"] == ramps[1]
        assert got["all_to_all"] == [x for r in range(WORLD) for x in long[r][2 * rank : 2 * rank + 2]]
    same = ("backend", "mesh_group")
    assert [{k: v for k, v in g.items() if k not in same} for g in jobs["emu"]] == [
        {k: v for k, v in g.items() if k not in same} for g in jobs["cpu"]
    ]


@pytest.mark.emu
def test_ddp_on_the_device_ends_where_gloo_on_the_cpu_and_one_process_on_the_global_batch_end(jobs):
    from torch import nn

    emu, cpu = jobs["emu"], jobs["cpu"]
    assert emu[0]["ddp"] == emu[1]["ddp"] == cpu[0]["ddp"]  # replicas agree, and the device's job is gloo's
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):  # one process, the global batch: every rank's slice in order
        xs, ys = [], []
        for rank in range(WORLD):
            torch.manual_seed(1000 + step * WORLD + rank)
            xs.append(torch.randn(4, 8))
            ys.append(torch.randn(4, 1))
        optimizer.zero_grad()
        nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        optimizer.step()
    single = [p.detach().double().flatten().tolist() for p in model.parameters()]
    gap = max(abs(a - b) for p, q in zip(single, emu[0]["ddp"], strict=True) for a, b in zip(p, q, strict=True))
    assert gap < 1e-6, gap
