"""The GPU path, measured in one call: ``make gpu-check`` (issue 28).

On a machine with an NVIDIA GPU (``nvidia-smi`` answers and torch sees CUDA)
it runs these stages, one after another, each within its own time budget; a
stage that fails or runs out of time is recorded as such and the next one goes
on, so the run always ends with a table:

1. **machine**: the card, driver, torch, CUDA and NCCL versions, cores;
   then **nccl**: the line ``phalanx.train.init`` prints with NCCL (version and
   transport from NCCL's INFO output), on a one-rank NCCL group;
2. **capacity**: ``phalanx queue`` lists the GPU read from ``nvidia-smi``; two
   1-GPU jobs submitted together run one after the other (their attempts'
   start and end times do not overlap) and each is given the GPU;
3. **batch**: the largest per-GPU batch of ResNet-50 (bf16, channels_last)
   that fits, by trying a few sizes from the largest down (``--batch`` skips it);
4. **synthetic**: the reference workload (:mod:`phalanx.bench.workload`:
   ResNet-50 v1.5, one random batch on the GPU, AMP bf16, channels_last,
   optionally ``--compile``) under ``phalanx run`` and under bare ``torchrun``,
   alternately: images/s and the ratio (goal ≥ 0.99);
5. **shards**: ``examples/imagenet/train.py`` as a phalanx job from real JPEG
   shards (generated here, converted with ``phalanx data convert imagefolder``,
   kept in ``--cache`` for the next run) through the streaming loader, against
   the same script on synthetic data: the loader's share (goal ≥ 0.95), with the
   JPEGs decoded by the CPU workers and, on a GPU, by nvJPEG (``--decode gpu``);
   then **decode**: ``benchmarks/decode_split.py`` (a core's decode rate on each
   path, the GPU's nvJPEG rate);
6. **checkpoint**: ``benchmarks/checkpoint.py --device cuda``: the step stall
   of a synchronous and an asynchronous save (goal async ≤ 0.2 × sync);
7. **container**: a 1-GPU job in a container image, when a container engine
   with GPU support (CDI for podman, the nvidia runtime for docker) and a local
   image are there; else one line saying which is missing.

It writes ``gpu_check.json`` and ``gpu_check.md`` under ``$OUT`` when set,
else ``benchmarks/results/``, and prints the table last.

Without a GPU it says so in one line and runs ``--dry-run`` instead: every
stage's code path with tiny sizes on the CPU (a stand-in ``nvidia-smi`` that
lists one GPU, so the capacity stage's queue and ordering checks run too), to
show that the script itself is sound; it exits 0 when every stage passed.
``tests/system/cli/test_gpu_check.py`` runs that path.

Usage (``benchmarks/gpu_check.sh`` sets up the environment first)::

    python benchmarks/gpu_check.py [--budget-s 400] [--batch N] [--compile]
        [--stages capacity,batch,...] [--cache DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_check_machine import gpu_engine, has_gpu, stand_in_smi, stop_workspace
from gpu_check_report import STAGES, figure, table, write

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BIN = Path(PYTHON).parent
TERMINAL = ("Completed", "Failed", "Canceled")
# Seconds of the whole budget each stage may use at most (the rest goes on).
SHARES = {
    "machine": 0.03,
    "nccl": 0.04,
    "capacity": 0.07,
    "batch": 0.08,
    "synthetic": 0.27,
    "shards": 0.33,
    "decode": 0.06,
    "checkpoint": 0.08,
    "container": 0.04,
}
BATCHES = (512, 384, 256, 192, 128)
"""Per-GPU batch sizes tried, largest first (ResNet-50 bf16 at 224 px)."""


class StageFailed(Exception):
    """A stage could not produce its figure; the message says why."""


@dataclass
class Check:
    """What every stage shares: the options, the clock and the results so far."""

    args: argparse.Namespace
    work: Path
    env: dict[str, str]
    deadline: float = 0.0
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def dry(self) -> bool:
        return bool(self.args.dry_run)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(
        self, cmd: list[str], *, timeout: float | None = None, floor: float = 1.0, **kw: Any
    ) -> str:
        """Run ``cmd`` within the stage's time left (at least ``floor`` seconds); its
        output, or StageFailed."""
        limit = max(floor, min(timeout or self.left(), self.left()))
        proc = subprocess.Popen(
            cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, **kw,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its children (ranks, workers) too
            proc.communicate()
            raise StageFailed(f"{Path(cmd[0]).name} ran past {limit:.0f} s") from None
        if proc.returncode != 0:
            raise StageFailed(f"{' '.join(cmd[:4])} … exited {proc.returncode}: {tail(out)}")
        return out

    def phalanx(self, *argv: str) -> str:
        """A quick phalanx command (never a job's run): given 30 s even at a stage's end."""
        return self.run([str(BIN / "phalanx"), *argv], floor=30)

    def job(self, spec: str, name: str) -> dict[str, Any]:
        """``phalanx run`` ``spec`` (as a user would); ``job show --json`` once it ended."""
        path = self.work / f"{name}.yml"
        path.write_text(spec)
        try:
            out = self.run([str(BIN / "phalanx"), "run", str(path)])
        except StageFailed:
            self.cancel_unfinished()
            raise
        job = re.search(r"^job (\S+)", out, re.MULTILINE)
        if job is None:
            raise StageFailed(f"phalanx run printed no job name: {tail(out)}")
        return self.show(job.group(1))

    def show(self, job: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(self.phalanx("job", "show", job, "--json"))
        return shown

    def cancel_unfinished(self) -> None:
        """Cancel this check's jobs still queued or running (a stage ran out of time)."""
        listed = subprocess.run([str(BIN / "phalanx"), "job", "list", "--json"], env=self.env,
                                capture_output=True, text=True, timeout=60)  # fmt: skip
        for job in json.loads(listed.stdout or "[]"):
            if job.get("status") not in TERMINAL:
                subprocess.run([str(BIN / "phalanx"), "job", "cancel", job["name"]],
                               env=self.env, capture_output=True, timeout=60)  # fmt: skip


def tail(text: str, lines: int = 6) -> str:
    # Not "|": the text may land in a Markdown table cell.
    return " ¶ ".join(text.strip().splitlines()[-lines:])[-600:]


def completed(shown: dict[str, Any]) -> dict[str, Any]:
    if shown["status"] != "Completed":
        error = (shown.get("error") or {}).get("message", "")
        log = Path(shown["user_logs"][0]).read_text() if shown.get("user_logs") else ""
        raise StageFailed(f"job {shown['name']} {shown['status']}: {error} {tail(log)}")
    return shown


def spec(command: str, *, gpus: int, code: str) -> str:
    """A 1-node × 1-process job; ``code`` is its snapshot (never the check's own folder,
    which holds the workspace)."""
    doc = {
        "command": command,
        "code": code,
        "compute": "local",
        "resources": {"instance_count": 1, "gpus_per_instance": gpus},
        "distribution": {"type": "pytorch", "process_count_per_instance": 1},
    }
    return json.dumps(doc)  # JSON is YAML


# -----------------------------------------------------------------------------
# Stages


def stage_machine(c: Check) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cores": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        nccl = torch.cuda.nccl.version()  # a tuple in torch >= 1.12, an int before
        facts["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    smi = shutil.which("nvidia-smi", path=c.env["PATH"])
    if smi:
        query = "--query-gpu=name,driver_version,memory.total"
        facts["nvidia_smi"] = c.run([smi, query, "--format=csv,noheader"], timeout=20).strip()
    return facts


NCCL_LINE = textwrap.dedent(
    """
    import os, sys, torch
    import torch.distributed as dist
    from phalanx.train.dist import nccl_version
    from phalanx.train.nccl import describe, finish_capture, start_capture
    backend = sys.argv[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
    capture = start_capture(os.environ)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, rank=0, world_size=1,
                            device_id=device if backend == "nccl" else None)
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    path = finish_capture(os.environ, capture)
    print(describe(nccl_version() if backend == "nccl" else "(gloo: none)", path))
    print("LEFT", sorted(k for k in os.environ if k.startswith("NCCL_DEBUG")))
    dist.destroy_process_group()
    """
)


def stage_nccl(c: Check) -> dict[str, Any]:
    """The NCCL line of phalanx.train.init, on a one-rank NCCL group (one GPU: a group of
    several would need a GPU each); the dry run goes through it with gloo."""
    import socket

    script = c.work / "nccl_line.py"
    script.write_text(NCCL_LINE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = "gloo" if c.dry else "nccl"
    out = c.run([PYTHON, str(script), backend, str(port)], timeout=60)
    line = next((ln for ln in out.splitlines() if ln.startswith("phalanx: NCCL")), None)
    if line is None:
        raise StageFailed(f"no 'phalanx: NCCL' line: {tail(out)}")
    left = next(ln for ln in out.splitlines() if ln.startswith("LEFT"))
    if left != "LEFT []":
        raise StageFailed(f"the NCCL_DEBUG variables it set were not taken back: {left}")
    return {"line": line, "backend": backend}


def stage_capacity(c: Check) -> dict[str, Any]:
    queue = json.loads(c.phalanx("queue", "--json"))
    local = next(t for t in queue if t["target"] == "local")
    gpus = [g for h in local["capacity"]["hosts"] for g in h["gpus"]]
    if not gpus:
        raise StageFailed(f"phalanx queue shows no GPU on local: {local['capacity']}")
    # Long enough that an overlap shows in the attempts' times (whole seconds).
    hold = f"python -c 'import time; time.sleep({1 if c.dry else 3})'"
    names = []
    for i in range(2):
        path = c.work / f"capacity{i}.yml"
        path.write_text(spec(hold, gpus=1, code=str(c.work / "code")))
        names.append(c.phalanx("job", "create", "-f", str(path)).strip().splitlines()[-1])
    for name in names:  # follows each until it ends; the second may have ended already
        try:
            c.run([str(BIN / "phalanx"), "job", "stream", name])
        except StageFailed:
            c.cancel_unfinished()
            raise
    jobs = [completed(c.show(n)) for n in names]
    spans = sorted(
        (a["started_at"], a["ended_at"], j["name"], a["nodes"][0]["gpus"])
        for j in jobs
        for a in j["attempts"]
    )
    (s1, e1, n1, g1), (s2, e2, n2, g2) = spans[0], spans[-1]
    if len(spans) != 2 or s2 < e1:
        raise StageFailed(f"the two 1-GPU jobs overlapped: {spans}")
    if g1 != g2 or len(g1) != 1:
        raise StageFailed(f"the jobs were given GPUs {g1} and {g2}, not one each")
    return {"gpus_in_queue": gpus, "job1": [n1, s1, e1, g1], "job2": [n2, s2, e2, g2],
            "one_after_the_other": True}  # fmt: skip


PROBE = textwrap.dedent(
    """
    import sys, torch
    from phalanx.nets import resnet50
    batch, size, device = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    torch.backends.cudnn.benchmark = True  # as the workload: its workspaces count too
    model = resnet50().to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, size, size, device=device)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    for _ in range(2):
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print("PEAK_GB", torch.cuda.max_memory_allocated() / 2**30)
    print("FITS", batch)
    """
)


def stage_batch(c: Check) -> dict[str, Any]:
    if c.args.batch:
        c.results["_batch"] = {"batch": c.args.batch}
        return {"batch": c.args.batch, "probed": False}
    script = c.work / "probe.py"
    script.write_text(PROBE)
    sizes, size, device = ((2,), 32, "cpu") if c.dry else (BATCHES, 224, "cuda")
    tried = []
    for batch in sizes:
        try:
            out = c.run([PYTHON, str(script), str(batch), str(size), device], timeout=90)
        except StageFailed as exc:
            tried.append(f"{batch}: {str(exc)[-120:]}")
            if "out of memory" in str(exc).lower() or "OutOfMemory" in str(exc):
                continue
            raise
        peak = next((ln.split()[1] for ln in out.splitlines() if ln.startswith("PEAK_GB")), None)
        c.results["_batch"] = {"batch": batch}
        return {"batch": batch, "probed": True, "peak_gb": peak, "too_large": tried}
    raise StageFailed(f"no batch size fits: {tried}")


def workload_args(c: Check, batch: int) -> list[str]:
    if c.dry:
        sizes = ["--image-size", "32", "--batch-size", "2", "--steps", "2", "--warmup", "1"]
    else:
        sizes = ["--image-size", "224", "--batch-size", str(batch), "--steps", "60",
                 "--warmup", "30" if c.args.compile else "15"]  # fmt: skip
    extra = ["--compile"] if c.args.compile else []
    return ["--model", "resnet50", "--precision", "bf16", "--channels-last", "on", *sizes, *extra]


def batch_of(c: Check) -> int:
    return int(c.results.get("_batch", {}).get("batch") or c.args.batch or 256)


def stage_synthetic(c: Check) -> dict[str, Any]:
    args = workload_args(c, batch_of(c))
    rounds = 1 if c.dry else c.args.rounds
    figures: dict[str, list[float]] = {"phalanx": [], "torchrun": []}
    round_s = 0.0
    for r in range(rounds):
        began = time.monotonic()
        if r and c.left() < 1.2 * round_s:
            break  # one round is a figure; a second that cannot finish is none
        out = c.work / f"torchrun{r}.json"
        c.run([PYTHON, "-m", "torch.distributed.run", "--nproc-per-node=1", "--max-restarts=0",
               "-m", "phalanx.bench.workload", *args, "--out", str(out)])  # fmt: skip
        figures["torchrun"].append(json.loads(out.read_text())["img_per_sec_total"])
        command = " ".join(["python", "-m", "phalanx.bench.workload", *args])
        job = spec(command, gpus=0 if c.dry else 1, code=str(c.work / "code"))
        shown = completed(c.job(job, f"synthetic{r}"))
        result = json.loads((Path(shown["outputs_dir"]) / "bench.json").read_text())
        figures["phalanx"].append(result["img_per_sec_total"])
        round_s = time.monotonic() - began
    best = {k: max(v) for k, v in figures.items()}  # the least disturbed run of each
    return {
        "img_per_sec_phalanx": best["phalanx"],
        "img_per_sec_torchrun": best["torchrun"],
        "ratio": best["phalanx"] / best["torchrun"],
        "runs": figures,
        "batch": batch_of(c),
        "device_name": result["device_name"],
        "compiled": bool(c.args.compile),
    }


def make_shards(c: Check, images: int) -> Path:
    """Real JPEGs, converted by phalanx's converter; kept in the cache between runs."""
    classes = 2 if c.dry else 16
    per_class = max(1, -(-images // classes))
    root = Path(c.args.cache) / f"shards-{classes}x{per_class}"
    if (root / "train" / "index.json").is_file():
        return root
    raw = Path(tempfile.mkdtemp(prefix="raw-", dir=c.args.cache))
    sides = "(40, 64)" if c.dry else "(300, 500)"
    make = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from multiprocessing import Pool
        from phalanx.data.synthetic import make_imagefolder
        def one(k):
            part = make_imagefolder(Path(sys.argv[1], str(k)), 1, {per_class}, {sides}, k,
                                    learnable=True)
            (part / "n00000000").rename(Path(sys.argv[1], "all", f"n{{k:08d}}"))
        if __name__ == "__main__":
            Path(sys.argv[1], "all").mkdir()
            with Pool() as pool:
                pool.map(one, range({classes}))
        """
    )
    (c.work / "make_images.py").write_text(make)
    c.run([PYTHON, str(c.work / "make_images.py"), str(raw)])
    c.phalanx("data", "convert", "imagefolder", str(raw / "all"), str(root / "train"),
              "--shard-size", "32M", "--overwrite")  # fmt: skip
    shutil.rmtree(raw, ignore_errors=True)
    return root


def stage_shards(c: Check) -> dict[str, Any]:
    batch = 2 if c.dry else min(batch_of(c), 256)
    steps = 3 if c.dry else 50
    warm = 1 if c.dry else 10
    started = time.monotonic()
    data = make_shards(c, batch * steps)
    made_s = time.monotonic() - started
    train = REPO / "examples" / "imagenet"
    common = (
        f"python train.py --arch resnet50 --batch-size {batch} --epochs 1 --amp on "
        f"--amp-dtype bf16 --channels-last on --timing-warmup-steps {warm} "
        f"--checkpoint-dir '' --image-size {32 if c.dry else 224}"
    )
    workers = 1 if c.dry else max(1, (os.cpu_count() or 2) - 2)
    runs = [
        ("synthetic", f"--steps-per-epoch {steps}"),
        ("shards", f"--data {data} --workers {workers}"),
    ]
    if not c.dry:  # nvJPEG needs CUDA: train.py refuses --decode gpu without it
        runs.append(("shards_gpu_decode", f"--data {data} --workers {workers} --decode gpu"))
    figures: dict[str, Any] = {}
    for kind, extra in runs:
        try:
            job = spec(f"{common} {extra}", gpus=0 if c.dry else 1, code=str(train))
            shown = completed(c.job(job, kind))
        except StageFailed as exc:
            if kind != "shards_gpu_decode":
                raise
            figures[kind] = None  # the CPU path's figure stands; this one says why not
            figures["gpu_decode_error"] = str(exc)
            continue
        result = json.loads((Path(shown["outputs_dir"]) / "throughput.json").read_text())
        figures[kind] = result["img_per_sec_total"]
    gpu = figures.get("shards_gpu_decode")
    return {
        "img_per_sec_synthetic": figures["synthetic"],
        "img_per_sec_shards": figures["shards"],
        "ratio": figures["shards"] / figures["synthetic"],
        "img_per_sec_shards_gpu_decode": gpu,
        "ratio_gpu_decode": gpu / figures["synthetic"] if gpu else None,
        "gpu_decode_error": figures.get("gpu_decode_error"),
        "workers": workers,
        "batch": batch,
        "images": batch * steps,
        "dataset": str(data),
        "dataset_made_s": round(made_s, 1),
    }


def stage_decode(c: Check) -> dict[str, Any]:
    """``benchmarks/decode_split.py``: a core's decoding rate on each path, and the GPU's
    nvJPEG rate where CUDA is there."""
    out = c.work / "decode.json"
    sizes = ["--images", "8", "--batch", "4", "--rounds", "1"] if c.dry else []
    c.run([PYTHON, str(REPO / "benchmarks" / "decode_split.py"), "--json", str(out), *sizes])
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def stage_checkpoint(c: Check) -> dict[str, Any]:
    out = c.work / "checkpoint.json"
    sizes = ["--batch", "2", "--image-size", "32", "--saves", "1", "--arch", "resnet18"]
    if not c.dry:
        sizes = ["--saves", "5"]
    device = "cpu" if c.dry else "cuda"
    c.run([PYTHON, str(REPO / "benchmarks" / "checkpoint.py"), "--device", device,
           "--dir", str(c.args.cache), "--json", str(out), *sizes])  # fmt: skip
    return json.loads(out.read_text())


def stage_container(c: Check) -> dict[str, Any]:
    engine, why = gpu_engine(c.env)
    if engine is None or c.dry:
        return {"ran": False, "note": why}
    image = c.args.container_image
    if not image:
        listed = c.run([engine, "images", "--format", "{{.Repository}}:{{.Tag}}"], timeout=30)
        image = next((i for i in listed.split() if "<none>" not in i), None)
    if not image:
        return {"ran": False, "note": f"{why}, but no local image (none can be pulled here)"}
    doc = json.loads(spec("nvidia-smi -L", gpus=1, code=str(c.work / "code")))
    job = json.dumps({**doc, "environment": {"image": image}})
    shown = completed(c.job(job, "container"))
    log = Path(shown["user_logs"][0]).read_text()
    return {"ran": True, "engine": why, "image": image, "gpus_seen": tail(log, 2)}


RUNNERS: dict[str, Callable[[Check], dict[str, Any]]] = {
    "machine": stage_machine,
    "nccl": stage_nccl,
    "capacity": stage_capacity,
    "batch": stage_batch,
    "synthetic": stage_synthetic,
    "shards": stage_shards,
    "decode": stage_decode,
    "checkpoint": stage_checkpoint,
    "container": stage_container,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=float, default=400, help="all stages together")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset")
    p.add_argument("--batch", type=int, default=0, help="per-GPU batch (0: probe)")
    p.add_argument("--rounds", type=int, default=2, help="synthetic: alternating runs each")
    p.add_argument("--compile", action="store_true", help="torch.compile the workload")
    p.add_argument("--cache", default="/tmp/phalanx-gpu-check", help="shards, checkpoints")
    p.add_argument("--container-image", default=None, help="default: the first local image")
    p.add_argument("--dry-run", action="store_true", help="tiny CPU run of every stage")
    args = p.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    if unknown := [s for s in stages if s not in STAGES]:
        p.error(f"--stages: unknown {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    gpu, what = has_gpu()
    if not gpu and not args.dry_run:
        print(f"gpu-check: no GPU here ({what}); checking the script itself with --dry-run")
        args.dry_run = True

    Path(args.cache).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="phalanx-gpu-check-"))
    (work / "code").mkdir()
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PHALANX_HOME"] = str(work / "home")  # a fresh workspace: its queue is this check's
    env["PYTHONUNBUFFERED"] = "1"
    if args.dry_run:
        # Its sampler asks nvidia-smi for readings the stand-in has not. On a GPU it
        # stays on: what phalanx costs includes it.
        env["PHALANX_SYSTEM_METRICS_INTERVAL"] = "0"
        stand_in_smi(work / "bin")
        env["PATH"] = f"{work / 'bin'}{os.pathsep}{env['PATH']}"
        env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    c = Check(args=args, work=work, env=env)
    mode = "dry run on CPU (no GPU here)" if args.dry_run else f"on {what}"
    header = f"## gpu-check, {mode}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    end = time.monotonic() + args.budget_s
    saved = 0.0  # what earlier stages left of their shares goes to the next ones
    try:
        for stage in stages:
            share = SHARES[stage] * args.budget_s
            started = time.monotonic()
            c.deadline = min(end, started + share + saved) if stage != stages[-1] else end
            print(f"gpu-check: {stage} (≤ {c.left():.0f} s) …", flush=True)
            try:
                r = RUNNERS[stage](c)
            except StageFailed as exc:
                r = {"error": str(exc)}
            except Exception as exc:  # a bug in a stage: recorded, the next goes on
                r = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            r["seconds"] = time.monotonic() - started
            saved = max(0.0, saved + share - r["seconds"])
            c.results[stage] = r
            print(f"gpu-check: {stage}: {figure(stage, r)}", flush=True)
            write(c.results, header + " (so far)")  # a call cut short still leaves its figures
    finally:
        stop_workspace(env["PHALANX_HOME"])
        shutil.rmtree(work, ignore_errors=True)
    out = write(c.results, header)
    print("\n" + table(c.results, header))
    print(f"gpu-check: results in {out}/gpu_check.json and gpu_check.md")
    failed = [s for s in stages if "error" in c.results[s]]
    return 1 if failed and args.dry_run else 0


if __name__ == "__main__":
    sys.exit(main())
