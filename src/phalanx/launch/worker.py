"""One rank's wrapper: run the user's command, capture its output, record its end.

torchrun (or ``mpirun``) starts ``python -m phalanx.launch.worker COMMAND`` once
per rank. This
module imports only the standard library, so it adds a few tens of
milliseconds to a rank's start-up and nothing to its steady state.

The wrapper stays in the rank's process group, so torchrun's ``killpg`` reaches
the command and everything it started. It notes termination signals rather
than dying on them, so that it outlives the command and can record how the
command ended; it then ends the same way (same exit code, or same signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HOOK_DIR = str(Path(__file__).with_name("_hook"))
_NOTED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# Python's exit code for an uncaught exception. The error file describes how
# the command ended only when it ended so, or died of a signal while shutting
# down after the exception (gloo can abort then); otherwise it is left over
# from an earlier Python process of the command that failed harmlessly.
_PYTHON_EXCEPTION_EXIT = 1


def _error_explains(returncode: int) -> bool:
    return returncode == _PYTHON_EXCEPTION_EXIT or returncode < 0 or returncode > 128


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _read_error(path: Path) -> dict[str, object] | None:
    """The ``message`` part of a torchelastic error file, or None."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, str):  # some writers store a bare string
        return {"message": message, "extraInfo": {}}
    return message if isinstance(message, dict) else None


def _rank_env_from_mpi(env: dict[str, str]) -> None:
    """torchrun's rank variables from Open MPI's, where ``mpirun`` started the rank."""
    if "OMPI_COMM_WORLD_RANK" not in env:
        return  # torchrun set them (it always overwrites what the launcher inherited)
    rank = int(env["OMPI_COMM_WORLD_RANK"])
    local_size = int(env.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    env["RANK"] = str(rank)
    env["WORLD_SIZE"] = env.get("OMPI_COMM_WORLD_SIZE", "1")
    env["LOCAL_RANK"] = env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
    env["LOCAL_WORLD_SIZE"] = str(local_size)
    env["NODE_RANK"] = str(rank // max(1, local_size))  # mpirun maps ranks by slot


def _tf_config(env: dict[str, str]) -> None:
    """``TF_CONFIG`` for this rank: worker ``RANK``, or a parameter server after the workers."""
    cluster = env.get("PHALANX_TF_CLUSTER")
    if cluster is None:
        return
    tasks = json.loads(cluster)
    rank = int(env["RANK"])
    workers = len(tasks["worker"])
    task = {"type": "worker", "index": rank} if rank < workers else {
        "type": "ps", "index": rank - workers
    }  # fmt: skip
    env["TF_CONFIG"] = json.dumps({"cluster": tasks, "task": task})


def _mlflow_rank(env: dict[str, str], rank: int) -> None:
    """Point this rank's MLflow client at the node's endpoint under its rank (which keeps
    rank 0's calls only); a tracking URI the job's spec set is left alone.

    The registry URI is set to the same, as MLflow's default would make it; set, it
    spares each ``mlflow.log_metric`` call two searches for a Spark session (a failed
    ``import pyspark`` each, over the whole ``sys.path``): 130 µs a call → 46 µs.
    """
    url = env.get("PHALANX_TRACKING_URL")
    if url and env.get("MLFLOW_TRACKING_URI") == url:
        env["MLFLOW_TRACKING_URI"] = f"{url}/ranks/{rank}"
        env.setdefault("MLFLOW_REGISTRY_URI", env["MLFLOW_TRACKING_URI"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m phalanx.launch.worker COMMAND", file=sys.stderr)
        return 2
    env = dict(os.environ)
    # MPI: mpirun gives every rank node 0's command line; a node's own (its input paths)
    # comes from its daemon's environment.
    command = env.get("PHALANX_NODE_COMMAND") or argv[0]
    _rank_env_from_mpi(env)
    _tf_config(env)
    rank = int(env["RANK"])
    attempt = int(env.get("PHALANX_ATTEMPT", "1"))
    job_dir = Path(env["PHALANX_JOB_DIR"])
    attempt_dir = job_dir / "system_logs" / f"attempt_{attempt}"
    attempt_dir.mkdir(parents=True, exist_ok=True)
    log_path = job_dir / "user_logs" / f"std_log_process_{rank}.txt"
    error_path = attempt_dir / f"error_{rank}.json"
    error_path.unlink(missing_ok=True)

    # Our error file for the command; torchrun's own is filled in afterwards.
    torchrun_error_file = env.get("TORCHELASTIC_ERROR_FILE")
    env["TORCHELASTIC_ERROR_FILE"] = env["PHALANX_ERROR_FILE"] = str(error_path)
    env["PHALANX_HEARTBEAT_FILE"] = str(attempt_dir / f"heartbeat_{rank}")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HOOK_DIR, env.get("PYTHONPATH")) if p)
    _mlflow_rank(env, rank)
    env.setdefault("PYTHONUNBUFFERED", "1")

    received: list[int] = []
    for sig in _NOTED:
        signal.signal(sig, lambda signum, _frame: received.append(signum))

    shell = shutil.which("bash") or "/bin/sh"
    started = time.time()
    with open(log_path, "ab", buffering=0) as log:
        proc = subprocess.Popen(
            [shell, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            # MPI: mpirun gives every rank node 0's folder; a node's own is its daemon's.
            cwd=env.get("PHALANX_NODE_WORKDIR") or None,
        )
        returncode = proc.wait()
    ended = time.time()

    error = _read_error(error_path) if _error_explains(returncode) else None
    record: dict[str, object] = {
        "rank": rank,
        "local_rank": int(env.get("LOCAL_RANK", "0")),
        "node_rank": int(env.get("NODE_RANK", env.get("GROUP_RANK", "0"))),
        "attempt": attempt,
        "pid": proc.pid,
        "exit_code": returncode if returncode >= 0 else None,
        "signal": signal.Signals(-returncode).name if returncode < 0 else None,
        "signals_received": [signal.Signals(s).name for s in received],
        "started_at": started,
        "ended_at": ended,
        "error": error,
        "log_file": str(log_path),
    }
    _write_json(attempt_dir / f"rank_{rank}.json", record)
    if error is not None and torchrun_error_file:
        # torchrun's summary is a convenience; ours is recorded above.
        with contextlib.suppress(OSError):
            shutil.copyfile(error_path, torchrun_error_file)

    if returncode < 0:
        # End the way the command ended, so torchrun reports the same signal.
        with contextlib.suppress(OSError, ValueError):  # SIGKILL/SIGSTOP cannot be set
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        time.sleep(5)
        return 128 - returncode
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
