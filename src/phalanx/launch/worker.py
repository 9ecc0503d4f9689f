"""One rank's wrapper: run the user's command, capture its output, record its end.

torchrun (or ``mpirun``) starts ``python -m phalanx.launch.worker COMMAND`` once
per rank. This
module imports only the standard library (and :mod:`phalanx.launch.logtimes`, which
does too), so it adds a few tens of milliseconds to a rank's start-up; while the rank
runs it copies the rank's output into its log (a read and a write per burst).

The wrapper stays in the rank's process group, so torchrun's ``killpg`` reaches
the command and everything it started. It notes termination signals rather
than dying on them, so that it outlives the command and can record how the
command ended; it then ends the same way (same exit code, or same signal).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from phalanx.launch.logtimes import TimesWriter

HOOK_DIR = str(Path(__file__).with_name("_hook"))
_NOTED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
# Python's exit code for an uncaught exception. The error file describes how
# the command ended only when it ended so, or died of a signal while shutting
# down after the exception (gloo can abort then); otherwise it is left over
# from an earlier Python process of the command that failed harmlessly.
_PYTHON_EXCEPTION_EXIT = 1
# The command's output: read this much at a time, through a pipe this large...
READ_BYTES = 1 << 20
PIPE_BYTES = 1 << 20
# ...and, once the command has ended, until the pipe is quiet this long (or at most
# DRAIN_S more).
QUIET_S = 0.2
DRAIN_S = 5.0


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


def _copy_output(proc: subprocess.Popen[bytes], pipe: int, log: int, log_path: Path) -> int:
    """Copy the command's output into its log until the command has ended and its
    output is drained; its exit status.

    Whatever the command left running that still holds the pipe (a daemon it
    started) is not waited for: once the command has ended, copying stops when the
    pipe has been quiet for :data:`QUIET_S`, or :data:`DRAIN_S` later at most.
    Nothing here may end the copy early (the command would get ``EPIPE``): a failed
    write or stamp is dropped, and the copy goes on.
    """
    times: TimesWriter | None = None
    with contextlib.suppress(OSError):
        times = TimesWriter(log_path, os.fstat(log).st_size)
    returncode: int | None = None
    ended_at = next_poll = 0.0
    try:
        while True:
            ready, _, _ = select.select([pipe], [], [], QUIET_S)
            if ready:
                data = os.read(pipe, READ_BYTES)
                if not data:  # every writer has closed the pipe
                    break
                if times is not None:
                    times.note(len(data), time.time())
                if not _write_all(log, data) and times is not None:
                    # Some bytes noted never reached the log: the index's offsets
                    # follow the log's size again.
                    with contextlib.suppress(OSError):
                        times.resync(os.fstat(log).st_size)
            elif times is not None:
                times.settle()
            now = time.monotonic()
            if returncode is None and now >= next_poll:
                returncode, next_poll, ended_at = proc.poll(), now + QUIET_S, now
            if returncode is not None and (not ready or now - ended_at >= DRAIN_S):
                break
    finally:
        os.close(pipe)
        if times is not None:
            times.close()
    return proc.wait()


def _write_all(fd: int, data: bytes) -> bool:
    """Write ``data`` whole; whether it all went (a full disk loses the rest)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:  # a full disk: this output is lost, as it would be anyway
            return False
    return True


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
    # The command writes into a pipe that this wrapper copies into the log, stamping
    # each read in the log's time index (:mod:`phalanx.launch.logtimes`): the log stays
    # byte for byte what the command wrote, and lines of different ranks can be put in
    # the order they were written. (Sampling the file's size instead would give two
    # lines written between samples one time, and misorder ranks that take turns.)
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):  # room for a burst while this wrapper is scheduled
        fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    with open(log_path, "ab", buffering=0) as log:
        try:
            proc = subprocess.Popen(
                [shell, "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                env=env,
                # MPI: mpirun gives every rank node 0's folder; a node's own is its daemon's.
                cwd=env.get("PHALANX_NODE_WORKDIR") or None,
            )
        finally:
            os.close(write_end)
        returncode = _copy_output(proc, read_end, log.fileno(), log_path)
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
