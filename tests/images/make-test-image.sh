#!/bin/sh
# The image phalanx's container tests run in: Debian bookworm (minbase) with python3 and
# Open MPI with mpi4py (the MPI jobs), made from the Debian mirror apt is configured with
# (no registry needed), imported into podman as phalanx-test-bookworm. Once per machine:
# nothing is done when the image exists and has what this recipe puts in (an image made
# by an older recipe, without mpirun, is made again).
set -eu
NAME=${PHALANX_TEST_IMAGE:-phalanx-test-bookworm}
HERE=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$HERE/../../src/phalanx/environments/containers/containers.conf}
if podman image exists "$NAME" &&
  podman run --rm --pull never "$NAME" test -x /usr/bin/mpirun 2>/dev/null; then exit 0; fi
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "make-test-image: no Debian mirror in /etc/apt/sources.list(.d)"; exit 1; }
root=$(mktemp -d /tmp/phalanx-test-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,openmpi-bin,python3-mpi4py bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
  { tail -5 "$root.log"; echo "make-test-image: debootstrap failed; see $root.log"; exit 1; }
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc \
  "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale
tar -C "$root" -c . | podman import --quiet - "$NAME" >/dev/null
rm -f "$root.log"
echo "make-test-image: $NAME imported"
