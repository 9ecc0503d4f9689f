"""A plain torchrun DDP script, with no phalanx import, runs unchanged under phalanx."""

from __future__ import annotations

import subprocess
import sys

from conftest import Cli
from phalanx.launch.ports import free_port

PLAIN_DDP = """
import gc, os, sys
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
x = torch.randn(64, 8, generator=g)
y = x.sum(dim=1, keepdim=True)
losses = []
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
# DDP keeps replicas identical: every rank holds the same weights.
w = model.module.weight.detach().clone()
gathered = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(gathered, w)
assert all(torch.equal(w, other) for other in gathered)
if rank == 0:
    with open(sys.argv[1], "w") as f:
        f.write(f"{world} {losses[0]} {losses[-1]}")
# Drop DDP (it holds the process group) before destroying the group: torch
# 2.13's gloo threads can otherwise abort the interpreter at exit.
del model, opt
gc.collect()
dist.destroy_process_group()
"""


def test_plain_ddp_script_runs_under_phalanx_and_torchrun(cli: Cli) -> None:
    script = cli.write("src/plain_ddp.py", PLAIN_DDP)

    # Bare torchrun first: the script is a real, unmodified torchrun script.
    bare = cli.workdir / "bare.txt"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            f"--master-port={free_port()}",
            str(script),
            str(bare),
        ],
        env=cli.env,
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert bare.read_text().split()[0] == "2"

    spec = cli.write(
        "job.yml",
        """
        command: python plain_ddp.py ${{outputs.out}}/result.txt
        code: src
        outputs: {out: {type: uri_folder}}
        resources: {instance_count: 2}
        distribution: {type: pytorch, process_count_per_instance: 1}
        """,
    )
    proc = cli.run("run", str(spec), timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = next(line for line in proc.stdout.splitlines() if line.startswith("job ")).split()[1]
    job = cli.show(name)
    world, first, last = (
        (cli.home / "jobs" / name / "outputs" / "out" / "result.txt").read_text().split()
    )
    assert world == "2"
    assert float(last) < float(first)
    assert job["status"] == "Completed"
