"""Worker start-up hook: record exceptions, dump stacks on SIGUSR2, let gloo drain at exit,
send MLflow's last points.

Python imports ``sitecustomize`` at start-up; phalanx puts this folder first on
``PYTHONPATH`` of every worker it starts. The hook writes torchelastic's error
file format, so torchrun and phalanx read the same thing, and then chains to
any ``sitecustomize`` the environment already had.
"""

import os
import sys


def _install() -> None:
    path = os.environ["PHALANX_ERROR_FILE"]
    previous = sys.excepthook

    def hook(exc_type, exc, tb):  # type: ignore[no-untyped-def]
        # The last failure wins: an earlier Python process of the same command
        # may have failed harmlessly (`python -c 'import apex' || fallback`).
        try:
            if not issubclass(exc_type, KeyboardInterrupt):
                import json
                import time
                import traceback

                record = {
                    "message": {
                        "message": _one_line(exc_type, exc),
                        "extraInfo": {
                            "py_callstack": "".join(traceback.format_exception(exc_type, exc, tb)),
                            "timestamp": str(int(time.time())),
                            "timestamp_ns": str(time.time_ns()),
                        },
                    }
                }
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(record, f)
                os.replace(tmp, path)
        except Exception:
            pass  # never let error reporting hide the error itself
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def _one_line(exc_type, exc):  # type: ignore[no-untyped-def]
    """The exception as the root cause shows it: ``Type: message``, but an error the
    user can fix (``phalanx.errors.PhalanxError``) as its own line, as the CLI prints it."""
    import traceback

    for cls in exc_type.__mro__:
        if cls.__module__ == "phalanx.errors" and cls.__name__ == "PhalanxError":
            line = str(exc).strip()
            if line:
                return line
    return "".join(traceback.format_exception_only(exc_type, exc)).strip()


def _settle_at_exit() -> None:
    """Let gloo's threads finish before the interpreter shuts down.

    torch 2.13: a gloo worker thread can release its last collective's tensors
    just as Python finalises; it then cannot take the GIL, and the process
    aborts ("terminate called without an active exception", exit 134) after
    the script itself finished. DDP keeps the process group, and so those
    threads, alive past ``destroy_process_group()``. Registered first, this
    handler runs last, and a short pause lets the threads drain (0 aborts in
    30 runs, against about 1 in 5 without it; pytorch/pytorch#190489).
    """
    import atexit

    def pause_if_distributed() -> None:
        if "torch.distributed" in sys.modules:
            import time

            time.sleep(0.05)

    atexit.register(pause_if_distributed)


_FLUSH_WAIT_S = 300.0
"""How long a rank's end waits for MLflow's last points: long enough for the client's
retries to meet a restarted endpoint, never for ever."""


def _mlflow_sent_before_exit() -> None:
    """Send the points MLflow's client still holds before the interpreter ends.

    In a job the client logs asynchronously (``MLFLOW_ENABLE_ASYNC_LOGGING``), and a
    script that never calls ``mlflow.end_run()`` (most do not) would lose the last
    batches: the client flushes in an ``atexit`` handler, after Python has shut down the
    thread pools it sends through ("cannot schedule new futures after interpreter
    shutdown"). This handler runs before them: registered with ``threading``'s exit
    hooks (run last-in first-out, before threads are joined) after the pools' own.
    """
    import concurrent.futures.thread  # noqa: F401  (the pools' exit hook, registered first)
    import contextlib
    import threading

    def send(client) -> None:  # type: ignore[no-untyped-def]
        with contextlib.suppress(Exception):
            client.flush_async_logging()

    def flush() -> None:
        client = sys.modules.get("mlflow")
        if client is not None and hasattr(client, "flush_async_logging"):
            # Waited for within a bound: a client whose sending thread died would wait
            # forever, and the job's end must not hang on its metrics' trouble.
            sender = threading.Thread(target=send, args=(client,), daemon=True)
            sender.start()
            sender.join(_FLUSH_WAIT_S)

    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(flush)


def _chain() -> None:
    """Import the next ``sitecustomize`` on the path, if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    taken = [(i, p) for i, p in enumerate(sys.path) if os.path.abspath(p or ".") == here]
    for index, _ in reversed(taken):
        del sys.path[index]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        if mine is not None:
            sys.modules["sitecustomize"] = mine
    finally:
        # Back where it was; what the next one added to the path (folders lent to a
        # container's image) stays.
        for index, entry in taken:
            sys.path.insert(index, entry)


def _stack_dumps() -> None:
    """On SIGUSR2, print every thread's Python stack to the rank's log.

    phalanx sends it when it finds a job hung, so the log shows where each
    rank was stuck. A script that sets its own SIGUSR2 handler replaces this.
    """
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR2, all_threads=True, chain=False)


if os.environ.get("PHALANX_ERROR_FILE"):
    _settle_at_exit()
    _install()
    _stack_dumps()
    _mlflow_sent_before_exit()
_chain()
