"""Where the workspace database is, what a bad setting says, and serialised writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

import pg
from conftest import Cli
from phalanx.errors import PhalanxError
from phalanx.launch.ports import free_port
from phalanx.workspace import Workspace


def test_phalanx_db_puts_the_records_in_postgresql_and_children_inherit_it(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHALANX_DB", pg_url)
    ws = Workspace(tmp_path / "home")
    ws.create_job({"command": "echo hi"}, spec_text="", name="in-postgres")
    assert not (tmp_path / "home" / "phalanx.db").exists()
    assert ws.child_env() == {"PHALANX_HOME": str(ws.home), "PHALANX_DB": pg_url}
    # The same records through the argument, as the server's --db gives it.
    monkeypatch.delenv("PHALANX_DB")
    other = Workspace(tmp_path / "other", db=pg_url)
    assert [j.name for j in other.list_jobs()] == ["in-postgres"]
    assert Workspace(tmp_path / "home").child_env() == {"PHALANX_HOME": str(ws.home)}
    # The spellings people write reach the same database (through psycopg 3).
    for scheme in ("postgres://", "postgresql+psycopg2://", "postgresql+psycopg://"):
        spelled = Workspace(tmp_path / "other", db=pg_url.replace("postgresql://", scheme))
        assert [j.name for j in spelled.list_jobs()] == ["in-postgres"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nonsense", "is not a database URL"),
        ("postgresql://u:hunter2@host:port/db", "is not a database URL"),
        ("mysql://u:hunter2@localhost/db", "names a mysql database"),
        ("mysql+pymysql://u:hunter2@localhost/db", "names a mysql database"),
        ("sqlite:///relative.db", "absolute path"),
    ],
)
def test_a_bad_url_is_one_line_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    monkeypatch.setenv("PHALANX_DB", url)
    with pytest.raises(PhalanxError, match=message) as caught:
        Workspace(tmp_path / "home")
    assert str(caught.value).startswith("PHALANX_DB ") and "\n" not in str(caught.value)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(PhalanxError, match=r"^--db "):
        Workspace(tmp_path / "home", db=url)


def test_a_wrong_password_or_missing_server_names_the_fix_not_the_password(
    tmp_path: Path, postgres: pg.Postgres, pg_url: str
) -> None:
    wrong = "not-the-password@:/%"
    for url, reason in [
        (postgres.url(pg_url.rsplit("/", 1)[1], password=wrong), "password authentication failed"),
        (postgres.url("no_such_database"), 'database "no_such_database" does not exist'),
        (f"postgresql://phalanx:{quote(wrong, safe='')}@127.0.0.1:{free_port()}/x", "refused"),
    ]:
        with pytest.raises(PhalanxError) as caught:
            Workspace(tmp_path / "home", db=url)
        text = str(caught.value)
        assert text.startswith("cannot open the workspace database postgresql://phalanx:***@")
        assert reason in text and "check that the server runs" in text and "--db" in text
        for secret in (wrong, quote(wrong, safe=""), postgres.password):
            assert secret not in text
        assert "\n" not in text


def test_the_cli_prints_a_database_error_in_one_line(
    cli: Cli, postgres: pg.Postgres, pg_url: str
) -> None:
    cli.env["PHALANX_DB"] = postgres.url(pg_url.rsplit("/", 1)[1], password="wrong-one")
    proc = cli.run("job", "list")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "PHALANX_DB" in proc.stderr and "wrong-one" not in proc.stderr


_CLAIM = """
import os, sys
from pathlib import Path
from phalanx.workspace import Workspace
ws = Workspace(Path(sys.argv[1]))
print(ws.claim_supervisor("job", os.getpid(), lambda pid: True) is not None)
"""

_VERSIONS = """
import sys
from pathlib import Path
from phalanx.storage.assets import create_asset
from phalanx.workspace import Workspace
ws = Workspace(Path(sys.argv[1]))
for _ in range(5):
    print(create_asset(ws, name="shared", path="/data").version)
"""


def test_read_then_write_transactions_never_interleave(tmp_path: Path, db: str | None) -> None:
    """Processes racing for one supervisor claim, or for the next version number."""
    home = tmp_path / "home"
    Workspace(home).create_job({"command": "true"}, spec_text="", name="job")
    outputs = _run_together([_CLAIM] * 4, home)
    assert sorted(outputs) == ["False", "False", "False", "True"]
    versions = [line for out in _run_together([_VERSIONS] * 4, home) for line in out.split()]
    assert sorted(versions, key=int) == [str(v) for v in range(1, 21)]


def _run_together(scripts: list[str], home: Path) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(home)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in scripts
    ]
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [err for _, err in results]
    return [out.strip() for out, _ in results]


def test_a_database_gone_after_open_is_one_line_not_a_traceback(
    cli: Cli, postgres: pg.Postgres, pg_url: str
) -> None:
    import time

    cli.env["PHALANX_DB"] = pg_url
    cli.write("src/wait.py", "import time\nprint('up', flush=True)\ntime.sleep(6)\n")
    name = cli.create(cli.write("job.yml", "command: python wait.py\ncode: src\n"))
    cli.wait(name, ("Running",))
    stream = cli.popen("job", "stream", name)
    assert stream.stdout is not None
    # The stream has the database open once it shows the rank's first line (after its
    # heading and the job's state); the rank sleeps 6 s, so it comes within 3 lines.
    seen = [stream.stdout.readline() for _ in range(3)]
    assert "up\n" in seen, seen
    postgres.drop_database(pg_url)  # connections ended, the database gone
    _, err = stream.communicate(timeout=60)
    assert stream.returncode == 2
    assert err.startswith("error: the workspace database stopped answering (")
    assert "PHALANX_DB" in err and "Traceback" not in err
    assert postgres.password not in err
    time.sleep(8)  # the rank ends by itself; nothing of the job is left to kill
