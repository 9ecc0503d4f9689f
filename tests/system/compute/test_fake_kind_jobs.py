"""A compute kind defined only in the tests (tests/plugins/phalanx_fake_kind.py) runs a
2-node job through the CLI, the server and the scheduler: it registers itself through
an entry point in a folder on ``PYTHONPATH``, with no change to phalanx
(tests/unit/compute/test_kinds.py runs the conformance checks on it).

The folder lies beside the test's workspace (:func:`jobpython.workspace_home`), which a
server's walled-off job reaches: its supervisor imports the kind too."""

from __future__ import annotations

import json
from pathlib import Path

import fakekind
from conftest import LOCAL_AND_SERVER, Cli

TWO_NODES = """
command: >-
  python -c "import os; print('NODE', os.environ['NODE_RANK'], 'OF',
  os.environ['WORLD_SIZE'], flush=True)"
compute: fakes
resources: {instance_count: 2}
distribution: {type: pytorch, process_count_per_instance: 1}
"""


@LOCAL_AND_SERVER
def test_a_kind_from_an_entry_point_runs_a_two_node_job(cli: Cli) -> None:
    plugins = fakekind.install(cli.home.parent / "plugins")
    cli.export(PYTHONPATH=str(plugins))  # the server's too: restarted with it

    made = cli.run("compute", "create", "--type", "fake", "--name", "fakes", "--cpus", "2",
                   check=True)  # fmt: skip
    assert "compute fakes (fake) → 2 fake hosts of 2 CPU slots" in made.stdout
    listed = cli.run("compute", "list", check=True).stdout
    assert "fakes" in listed and "fake" in listed
    shown = json.loads(cli.run("compute", "show", "fakes", "--json", check=True).stdout)
    assert shown["settings"] == {"name": "fakes", "type": "fake", "cpus": 2.0, "hosts": 2}
    assert [h["host"] for h in shown["capacity"]["hosts"]] == ["fakes-0", "fakes-1"]
    wrong = cli.run("compute", "create", "--type", "fake", "--name", "x", "--address", "h:1")
    assert wrong.returncode == 2 and "--address is not an option of --type fake" in wrong.stderr
    assert "Traceback" not in wrong.stderr

    name = cli.create(cli.write("two.yml", TWO_NODES))
    job = cli.wait(name, ("Completed", "Failed", "Canceled"), timeout=180)
    assert job["status"] == "Completed", job
    logs = sorted(Path(p) for p in job["user_logs"] if "std_log_process_" in p)
    assert [p.name for p in logs] == ["std_log_process_0.txt", "std_log_process_1.txt"]
    said = {p.read_text().strip().splitlines()[-1] for p in logs}
    assert said == {"NODE 0 OF 2", "NODE 1 OF 2"}
    big = cli.run("job", "create", "-f", str(cli.write("big.yml", TWO_NODES)),
                  "--set", "resources.instance_count=3")  # fmt: skip
    assert big.returncode == 2 and "node" in big.stderr and "Traceback" not in big.stderr
