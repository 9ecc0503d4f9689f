"""The NCCL line of each rank's log: the parser of NCCL's INFO output, and the variables.

No GPU is here, so NCCL never runs in these tests. The INFO texts below are
SAMPLES written for the test from NCCL's documented ``NCCL_DEBUG=INFO`` line
format (``host:pid:tid [cudaDev] NCCL INFO …``, the ``NET/IB : Using [0]dev:port``
and ``Using network X`` lines of its init, ``Channel … via P2P/…`` of its
connections), not output captured from a real run. ``phalanx.train.dist.init``
calls these functions only when the backend is nccl: that path is untested on a
GPU so far.
"""

from __future__ import annotations

from pathlib import Path

from phalanx.train.nccl import NcclPath, describe, finish_capture, parse_info, start_capture

# A sample: two nodes over InfiniBand, 8 GPUs each (rank 0's lines).
IB_SAMPLE = """\
n1:2211:2211 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.11<0>
n1:2211:2211 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)
n1:2211:2211 [0] NCCL INFO cudaDriverVersion 12080
NCCL version 2.27.3+cuda12.9
n1:2211:2290 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.1.0.11<0>
n1:2211:2290 [0] NCCL INFO Using network IB
n1:2211:2290 [0] NCCL INFO comm 0x5581c2d0 rank 0 nranks 16 cudaDev 0 - Init START
n1:2211:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
n1:2211:2290 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
n1:2211:2290 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:2211:2290 [0] NCCL INFO comm 0x5581c2d0 rank 0 nranks 16 - Init COMPLETE
"""

# A sample: no InfiniBand, so TCP sockets on the interface NCCL_SOCKET_IFNAME named.
SOCKET_SAMPLE = """\
box:71:71 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth1
box:71:71 [0] NCCL INFO Bootstrap : Using eth1:192.168.3.4<0>
box:71:90 [0] NCCL INFO NET/IB : No device found.
box:71:90 [0] NCCL INFO NET/Socket : Using [0]eth1:192.168.3.4<0>
box:71:90 [0] NCCL INFO Using network Socket
box:71:90 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct
"""


def test_infiniband_with_its_devices_and_the_peer_transports() -> None:
    path = parse_info(IB_SAMPLE)
    assert path == NcclPath(network="IB", devices=["mlx5_0:1", "mlx5_1:1"], peers=["P2P", "NET/IB"])
    line = describe("2.27.3", path)
    assert line == "phalanx: NCCL 2.27.3 · network IB (mlx5_0:1, mlx5_1:1) · peers P2P, NET/IB"


def test_sockets_on_the_named_interface() -> None:
    path = parse_info(SOCKET_SAMPLE)
    assert (path.network, path.devices, path.peers) == ("Socket", ["eth1"], ["SHM"])
    assert describe("2.21.5", path).endswith("· network Socket (eth1) · peers SHM")


def test_nothing_recognisable_says_so_and_a_users_nccl_debug_says_where_to_look() -> None:
    assert "not reported" in describe("2.27.3", parse_info("NCCL version 2.27.3\nnoise\n"))
    assert "NCCL_DEBUG is yours" in describe("2.27.3", None)


def test_capture_sets_its_variables_for_nccl_only_and_takes_them_back(tmp_path: Path) -> None:
    env = {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG_SUBSYS": "ALL"}
    capture = start_capture(env)
    assert capture is not None and capture.file.exists()
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == str(capture.file)
    # While captured, INIT and NET only: NCCL reads its environment once per process, so
    # a user's ALL (inert without NCCL_DEBUG) would log every later collective.
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    capture.file.write_text(SOCKET_SAMPLE)  # what NCCL would have written there
    path = finish_capture(env, capture)
    assert path is not None and path.network == "Socket"
    # What it set is gone and the user's value is back; no file remains.
    assert env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG_SUBSYS": "ALL"}
    assert not capture.file.exists()


def test_a_users_nccl_debug_or_file_is_left_exactly_as_it_is() -> None:
    for env in ({"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p"}):
        before = dict(env)
        assert start_capture(env) is None and env == before
        assert finish_capture(env, None) is None and env == before
