"""A view of phalanx's Python that walled-off jobs can run: read-only, and nothing else.

A walled-off job's processes (launcher, ranks, environment builds) run as an account of
their own on phalanx's interpreter and packages (:mod:`phalanx.jobs.walls`). The
README's install as root puts them where no other account goes: a pyenv interpreter in
``/root`` (0700), and with a checkout in ``/root`` its ``.venv`` and the editable
install's source too. Nothing of ``/root`` is opened for that (no ``chmod``, no access
list); root shows the job exactly what it runs, at ``/run/phalanx/python/<key>/``
(root's, 0755; the key hashes the installation's paths):

``base/bin``, ``base/lib``, ``base/include``
    the interpreter's installation (``sys.base_prefix``), bound read-only; its own
    ``site-packages`` covered by an empty folder (they are not phalanx's packages);
``packages/<n>``
    each ``site-packages`` of phalanx's environment, bound read-only;
``source/<hash>``
    each folder out of reach that a ``.pth`` file or an editable install's finder names
    (the checkout's ``src/``, not the checkout), bound read-only;
``venv/``
    a virtual environment on ``base/``: its ``site-packages`` holds a link per entry of
    ``packages/<n>``, and copies of the ``.pth`` files and finders that name a
    ``source/`` folder in place of the original; its ``bin/`` holds ``python`` and
    phalanx's scripts, their ``#!`` naming it;
``libpython/``
    only ``libpython``, for ``LD_LIBRARY_PATH``: a build that finds it by an absolute
    path into ``/root`` (pyenv's) finds it there.

Binds are read-only, ``nosuid``, ``nodev`` and without what is mounted below their
source; everything else is root's and read-only to others. A bind is live (a file
edited or a package upgraded shows at once); the links of ``venv/`` are brought up to
date each time the view is made sure of.

``phalanx server start`` makes sure of the view (and runs it as a job's account once),
and so does each supervisor of a walled-off job, which then executes itself again on the
view's Python before doing anything else: whatever it starts runs on it, whoever
started the supervisor (the server, the scheduler, root's own CLI). Jobs outlive the
server, so the view does too: it stays until the machine restarts (``umount -R`` on
its folder removes it), and a server or supervisor killed while making it leaves
nothing a later one trips on: each bind is checked against its source under a lock,
and remade when it is not there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import re
import site
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import phalanx
from phalanx.errors import PhalanxError
from phalanx.storage.bind import bind_readonly

VIEWS = Path("/run/phalanx/python")
"""Where views are made, one folder per installation."""
_VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
# A quoted absolute path in a finder module (setuptools' `MAPPING = {'pkg': '/…/src/pkg'}`).
_QUOTED_PATH = re.compile(r"""(['"])(/[^'"\n]+)\1""")
_PTH_IMPORT = re.compile(r"^import\s+([A-Za-z_]\w*)")
_MS_NOSUID, _MS_NODEV = 2, 4
_SCRIPT_MAX = 1 << 16
"""A file of the environment's ``bin/`` larger than this is no script of pip's."""


@dataclass(frozen=True)
class PythonView:
    """A view made (:func:`ensure`): its interpreter and what it needs in the environment."""

    folder: Path

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    def env(self, source: dict[str, str] | None = None) -> dict[str, str]:
        """``LD_LIBRARY_PATH`` with the view's ``libpython`` first (empty when the
        interpreter has none to find); ``source``: the environment it extends."""
        libs = self.folder / "libpython"
        if not any(libs.iterdir()):
            return {}
        rest = (os.environ if source is None else source).get("LD_LIBRARY_PATH")
        return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(libs), rest) if p)}


def blocking_folder(path: Path) -> Path | None:
    """The first folder on the way to ``path`` that other accounts cannot enter."""
    for folder in reversed([*path.parents]):
        try:
            mode = folder.stat().st_mode
        except OSError:
            return folder
        if not mode & stat.S_IXOTH:
            return folder
    return None


def out_of_reach() -> tuple[Path, Path] | None:
    """What of this Python other accounts cannot reach: ``(path, blocking folder)`` of the
    first of its interpreter, its ``site-packages`` and phalanx's package; ``None``: all."""
    package = Path(phalanx.__file__).resolve().parent
    for path in (Path(sys.executable).resolve(), *_site_dirs(), package):
        folder = blocking_folder(path / "-") if path.is_dir() else blocking_folder(path)
        if folder is not None:
            return path, folder
    return None


def ensure() -> PythonView:
    """Make (or make sure of) the view of this Python, for other accounts to run.

    Raises:
        PhalanxError: one line: it cannot be made here (not root, or mounts refused).
    """
    base = Path(sys.base_prefix).resolve()
    sites = [d.resolve() for d in _site_dirs()]
    key = hashlib.sha256("\n".join(map(str, [base, *sites])).encode()).hexdigest()[:12]
    view = PythonView(VIEWS / key)
    try:
        for folder in (VIEWS.parent, VIEWS, view.folder):
            folder.mkdir(exist_ok=True)
            os.chmod(folder, 0o755)
        with _locked(VIEWS / f".{key}.lock"):
            if not os.path.ismount(view.folder):
                _mount_tmpfs(view.folder)
            _make(view.folder, base, sites)
    except (OSError, PhalanxError) as exc:
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) else str(exc)
        raise PhalanxError(f"no view of it can be made at {view.folder} ({reason})") from None
    blocked = blocking_folder(view.python.resolve())
    if blocked is not None:
        raise PhalanxError(f"no view of it can be made: {blocked} is closed to other accounts")
    return view


def run_on_view() -> None:
    """Execute this process's command line again on the view's Python (never returns).

    Raises:
        PhalanxError: the view cannot be made (:func:`ensure`).
    """
    view = ensure()
    sys.stdout.flush()
    sys.stderr.flush()
    env = {**os.environ, **view.env()}
    os.execve(view.python, [str(view.python), *sys.orig_argv[1:]], env)


def _site_dirs() -> list[Path]:
    """The ``site-packages`` folders of this Python, in the order it reads them (the
    user's own first, where it reads that: ``pip install --user`` without a venv)."""
    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    found = [Path(p) for p in [*user, *site.getsitepackages()] if os.path.isdir(p)]
    return list({p.resolve(): p for p in found}.values())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock: two servers or supervisors making one view take turns."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _mount_tmpfs(folder: Path) -> None:
    """A small file system of the view's own at ``folder``: it holds the view's folders,
    links and files, one ``umount -R`` removes the whole view, and a restart empties it."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    flags = _MS_NOSUID | _MS_NODEV
    if libc.mount(b"phalanx-python", str(folder).encode(), b"tmpfs", flags, b"mode=755,size=16m"):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(folder))


def _make(folder: Path, base: Path, sites: list[Path]) -> None:
    venv = folder / "venv"
    own = venv / "lib" / _VERSION / "site-packages"
    for name in ("base", "packages", "source", "empty", "libpython", "venv", "venv/bin"):
        _open_folder(folder / name)
    for part in reversed([own, *own.parents]):
        if part.is_relative_to(venv):
            _open_folder(part)
    binds = [(base / name, folder / "base" / name) for name in ("bin", "lib", "include")]
    binds = [(source.resolve(), target) for source, target in binds if source.is_dir()]
    if (base / "lib" / _VERSION / "site-packages").is_dir():  # the base's: not phalanx's
        binds.append((folder / "empty", folder / "base" / "lib" / _VERSION / "site-packages"))
    binds += [(path, folder / "packages" / str(n)) for n, path in enumerate(sites)]
    moved: dict[Path, Path] = {}
    packages = _packages(folder, sites, moved)
    binds += list(moved.items())
    for source, target in binds:  # in order: base/lib's packages are covered once it is bound
        if not _shows(target, source):
            bind_readonly(source, target)
    _sync(own, packages)
    _sync(venv / "bin", _scripts(folder))
    _put(venv / "pyvenv.cfg", _pyvenv_cfg(folder))
    libs = (base / "lib").glob("libpython*.so*")
    _sync(folder / "libpython", {p.name: folder / "base" / "lib" / p.name for p in libs})


def _open_folder(path: Path) -> None:
    """A folder of the view's own: root's, every account enters and reads it."""
    path.mkdir(exist_ok=True)
    os.chmod(path, 0o755)


def _shows(target: Path, source: Path) -> bool:
    """Whether ``target`` is ``source`` bound (the same file on the same device)."""
    try:
        seen, real = target.stat(), source.stat()
    except OSError:
        return False
    return (seen.st_dev, seen.st_ino) == (real.st_dev, real.st_ino)


Entries = dict[str, Path | bytes]
"""A folder's content: per name, the path a link leads to, or a file's bytes."""


def _packages(folder: Path, sites: list[Path], moved: dict[Path, Path]) -> Entries:
    """The view's ``site-packages``: a link into ``packages/<n>`` per entry (the first
    folder's wins), or the text of a ``.pth`` file or finder with the folders out of
    reach it names moved to ``source/`` (noted in ``moved``: source → bind)."""
    entries: Entries = {}
    for n, site_dir in enumerate(sites):
        finders: set[str] = set()
        for name in sorted(os.listdir(site_dir)):
            if name in entries:
                continue
            entries[name] = folder / "packages" / str(n) / name
            if name.endswith(".pth"):
                read = (site_dir / name).read_text(errors="replace").splitlines()
                lines = [_moved_line(line, site_dir, folder, moved) for line in read]
                if lines != read:
                    entries[name] = ("\n".join(lines) + "\n").encode()
                finders |= {m.group(1) for line in lines if (m := _PTH_IMPORT.match(line))}
        for module in finders:  # an editable install's finder: its paths are in its code
            path = site_dir / f"{module}.py"
            if entries.get(path.name) != folder / "packages" / str(n) / path.name:
                continue
            text = path.read_text(errors="replace")
            fixed = _QUOTED_PATH.sub(lambda m: _moved_quote(m, sites, folder, moved), text)
            if fixed != text:
                entries[path.name] = fixed.encode()
    return entries


def _moved_line(line: str, site_dir: Path, folder: Path, moved: dict[Path, Path]) -> str:
    """A ``.pth`` line, a path out of reach replaced by its bind (as ``site`` reads it)."""
    if not line.strip() or line.startswith(("#", "import ", "import\t")):
        return line
    path = Path(os.path.abspath(site_dir / line.rstrip()))
    target = _source(path, [site_dir], folder, moved)
    return line if target is None else str(target)


def _moved_quote(
    match: re.Match[str], sites: list[Path], folder: Path, moved: dict[Path, Path]
) -> str:
    target = _source(Path(match.group(2)), sites, folder, moved)
    return match.group(0) if target is None else f"{match.group(1)}{target}{match.group(1)}"


def _source(path: Path, sites: list[Path], folder: Path, moved: dict[Path, Path]) -> Path | None:
    """Where the view shows ``path``, a folder or file out of other accounts' reach and
    outside the ``site-packages`` folders; ``None``: it stays as it is."""
    if not path.exists() or any(path.is_relative_to(s) for s in sites):
        return None
    if blocking_folder(path / "-" if path.is_dir() else path) is None:
        return None
    real = path.resolve()
    target = folder / "source" / hashlib.sha256(str(real).encode()).hexdigest()[:12]
    moved[real] = target
    return target


def _scripts(folder: Path) -> Entries:
    """The view's ``bin/``: ``python`` and phalanx's scripts, their ``#!`` naming it."""
    python = folder / "base" / "bin" / _VERSION
    entries: Entries = {name: python for name in ("python", "python3", _VERSION)}
    if sys.prefix == sys.base_prefix:
        return entries
    own_bin = Path(sys.prefix) / "bin"
    new = str(folder / "venv" / "bin").encode() + b"/"
    old = {str(own_bin).encode() + b"/", str(own_bin.resolve()).encode() + b"/"}
    for path in own_bin.iterdir():
        if path.name in entries or path.is_symlink() or not path.is_file():
            continue
        if path.stat().st_size > _SCRIPT_MAX:
            continue  # a program, not one of pip's scripts
        text = path.read_bytes()
        if not text.startswith(b"#!") or not any(o in text for o in old):
            continue  # not run by the environment's python (activate, …)
        for prefix in old:
            text = text.replace(prefix, new)
        entries[path.name] = text
    return entries


def _pyvenv_cfg(folder: Path) -> bytes:
    version = ".".join(map(str, sys.version_info[:3]))
    return (
        f"home = {folder / 'base' / 'bin'}\ninclude-system-site-packages = false\n"
        f"version = {version}\n"
    ).encode()


def _sync(folder: Path, entries: Entries) -> None:
    """Make ``folder`` hold exactly ``entries``."""
    for name, want in entries.items():
        _put(folder / name, want)
    for path in folder.iterdir():
        if path.name not in entries:
            path.unlink()


def _put(path: Path, want: Path | bytes) -> None:
    """Make ``path`` a link to ``want`` (a path) or a file of ``want`` (bytes), replaced
    at once: a job starting meanwhile never finds it half made."""
    if isinstance(want, Path):
        if path.is_symlink() and os.readlink(path) == str(want):
            return
    elif not path.is_symlink() and path.is_file() and path.read_bytes() == want:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    if isinstance(want, Path):
        tmp.symlink_to(want)
    else:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(want)
        os.chmod(tmp, 0o755 if want.startswith(b"#!") else 0o644)
    os.replace(tmp, path)
