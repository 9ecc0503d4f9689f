"""TensorBoard event files of scalars, written without TensorFlow or the tensorboard package.

``torch.utils.tensorboard`` imports the ``tensorboard`` package, which imports
TensorFlow whenever it is installed: 3–5 s and about 500 MB per rank, and
TensorFlow's start-up banner in a PyTorch job's log. Scalars need very little
of that, so this module writes them itself, using only the standard library.

An event file is a sequence of TFRecords::

    uint64  length of data          (little-endian)
    uint32  masked CRC-32C of the 8 length bytes
    bytes   data                    (a serialised ``tensorflow.Event``)
    uint32  masked CRC-32C of data

where ``masked(crc) = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``. The
first record is an event whose ``file_version`` is ``"brain.Event:2"``. The
protobuf messages are encoded by hand; only these fields are used::

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
              Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }
"""

from __future__ import annotations

import itertools
import math
import operator
import os
import socket
import struct
import threading
import time
from pathlib import Path

FILE_VERSION = "brain.Event:2"

# Protobuf wire types.
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            # 0x82F63B78: the Castagnoli polynomial 0x1EDC6F41, bit-reversed.
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``; one table lookup per byte, enough for small records."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC as TFRecord stores it (masked, so CRCs of data holding CRCs stay robust)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # a negative int64 is its two's complement: 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _key(field, _LENGTH) + _varint(len(payload)) + payload


def _float32(value: float) -> bytes:
    # What a C cast does: a finite double beyond float32's range becomes ±inf
    # (struct refuses to pack it).
    if math.isfinite(value) and abs(value) > _FLOAT32_MAX:
        value = math.copysign(math.inf, value)
    return struct.pack("<f", value)


def encode_event(
    wall_time: float,
    *,
    step: int | None = None,
    file_version: str | None = None,
    scalars: dict[str, float] | None = None,
) -> bytes:
    """A serialised ``Event``: the file version, or scalars (as ``simple_value``) at ``step``."""
    out = _key(1, _FIXED64) + struct.pack("<d", wall_time)
    if step is not None:
        out += _key(2, _VARINT) + _varint(operator.index(step))  # NumPy ints too
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _length_delimited(
                1,
                _length_delimited(1, tag.encode()) + _key(2, _FIXED32) + _float32(value),
            )
            for tag, value in scalars.items()
        )
        out += _length_delimited(5, summary)
    return out


_file_numbers = itertools.count()


class EventFileWriter:
    """Scalars into one new event file in ``folder``, buffered in memory.

    Buffered records are written ``flush_secs`` after the first of them (by a
    daemon timer thread), on :meth:`flush` and on :meth:`close`. The caller
    registers :meth:`close` to run at exit. Safe to use from several threads.
    Only the process that made the writer writes: a child forked with records
    still buffered does not write them a second time.
    """

    def __init__(self, folder: Path, flush_secs: float = 10.0) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        # TensorBoard's own naming, so tools that sort or parse the names work.
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}"
            f".{os.getpid()}.{next(_file_numbers)}"
        )
        self.path = folder / name
        self.flush_secs = flush_secs
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._timer: threading.Timer | None = None
        self._closed = False
        # Written at once, so the file exists from the first scalar on.
        with open(self.path, "xb") as f:
            f.write(tfrecord(encode_event(time.time(), file_version=FILE_VERSION)))

    def add_scalars(
        self, values: dict[str, float], step: int | None = None, wall_time: float | None = None
    ) -> None:
        """Buffer one event holding ``values`` (tag → number) at ``step``."""
        if not values:
            return
        now = time.time() if wall_time is None else wall_time
        record = tfrecord(encode_event(now, step=step, scalars=values))
        with self._lock:
            self._pending.append(record)
            if self._closed:  # logged by an exit handler that ran after ours: no buffering
                self._flush_locked()
            elif self._timer is None:
                self._timer = threading.Timer(self.flush_secs, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def add_scalar(
        self, tag: str, value: float, step: int | None = None, wall_time: float | None = None
    ) -> None:
        """Buffer one scalar; see :meth:`add_scalars`."""
        self.add_scalars({tag: value}, step, wall_time)

    def flush(self) -> None:
        """Append the buffered records to the file."""
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        """Flush and stop buffering: later scalars are written at once."""
        with self._lock:
            self._flush_locked()
            self._closed = True

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending or os.getpid() != self.pid:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        with open(self.path, "ab") as f:
            f.write(data)
