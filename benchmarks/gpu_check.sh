#!/bin/sh
# `make gpu-check`: set up phalanx from this checkout, then run benchmarks/gpu_check.py.
#
# On a machine whose python3 already holds a CUDA build of torch (the GPU machine:
# /opt/torch/.venv, no network), it makes a venv in $PHALANX_GPU_VENV (default
# /tmp/phalanx-gpu-venv) that sees that python's packages (a .pth file adding its
# site-packages: `--system-site-packages` would name the base interpreter's, not a
# venv's), and installs phalanx there with `pip --no-index` from the wheels in .whl/
# (`make gpu-wheels` downloads them). Where ./.venv has phalanx already (a developer's
# machine), that one runs, unless BASE_PYTHON names the python to set up over.
# PYTHON=... runs gpu_check.py with that interpreter, set up already. Arguments go to gpu_check.py.
set -u
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then
  py="$PYTHON"
elif [ -z "${BASE_PYTHON:-}" ] && [ -x .venv/bin/phalanx ]; then
  py=.venv/bin/python
else
  base=${BASE_PYTHON:-python3}
  venv=${PHALANX_GPU_VENV:-/tmp/phalanx-gpu-venv}
  py="$venv/bin/python"
  if [ ! -x "$venv/bin/phalanx" ]; then
    echo "gpu-check: setting up $venv over $($base -c 'import sys; print(sys.executable)')"
    $base -m venv --without-pip "$venv" || exit 1
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    # addsitedir, not a plain path: the base's own .pth files must be read too.
    $base -c 'import site; print("import site; " + "; ".join(
      f"site.addsitedir({p!r})" for p in site.getsitepackages()))' >"$site/_gpu_base.pth"
    # The index of wheels here only: nothing else can be reached.
    $base -m pip --python "$py" install -q --no-index --find-links .whl -e . || {
      echo "gpu-check: installing with its requirements failed; installing the wheels alone"
      $base -m pip --python "$py" install -q --no-index --no-deps .whl/*.whl &&
        $base -m pip --python "$py" install -q --no-index --no-deps --no-build-isolation -e . ||
        exit 1
      $base -m pip --python "$py" check || true
    }
  fi
  PATH="$venv/bin:$PATH"
  export PATH
fi
exec "$py" benchmarks/gpu_check.py "$@"
