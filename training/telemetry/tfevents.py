"""TensorBoard event files written with the standard library alone: scalars, read by TensorBoard as any
`tf.summary.scalar` (stdlib only: the tasks' reporter threads, the supervisor and a user's process may write
them; `tensorflow-cpu` ships no `tensorboard`, and graph-mode code cannot call `tf.summary.write` eagerly).

The format is TensorFlow's: a file named `events.out.tfevents.<time>.<host>.<pid>.<n>` holds TFRecords
(`uint64 length`, `uint32 masked crc32c(length)`, the bytes, `uint32 masked crc32c(bytes)`; masked =
((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32, crc32c = CRC-32C, Castagnoli), each an `Event` protobuf
(tensorflow/core/util/event.proto: 1 wall_time double, 2 step int64, 3 file_version string, 5 summary),
whose `Summary` (summary.proto) holds repeated `Value` {1 tag string, 2 simple_value float}. The first
record is `file_version: "brain.Event:2"`. Each `add_scalars` call appends its records with one write, so
a reader following the file sees whole records or the start of one (which TensorBoard reads again later).
Files are private from their first byte (0600).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Iterable

FILE_VERSION = b"brain.Event:2"
_MASK_DELTA = 0xA282EAD8
_counter = itertools.count()  # two writers of one process in one second get distinct names


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord around `data`."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 as protobuf writes it: a negative step takes ten bytes
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int | None = None, *, file_version: bytes | None = None,
           summary: bytes | None = None) -> bytes:
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)
    if step is not None:
        out += _varint(2 << 3 | 0) + _varint(step)
    if file_version is not None:
        out += _bytes_field(3, file_version)
    if summary is not None:
        out += _bytes_field(5, summary)
    return out


def scalar_event(wall_time: float, step: int, scalars: Iterable[tuple[str, float]]) -> bytes:
    """One `Event` holding a `Summary` of simple values (tag, value), serialised."""
    summary = b"".join(
        _bytes_field(1, _bytes_field(1, tag.encode("utf-8")) + _varint(2 << 3 | 5) + struct.pack("<f", value))
        for tag, value in scalars)
    return _event(wall_time, step, summary=summary)


def event_file_name(now: float | None = None) -> str:
    stamp = int(time.time() if now is None else now)
    return f"events.out.tfevents.{stamp}.{socket.gethostname()}.{os.getpid()}.{next(_counter)}"


class EventFileWriter:
    """Appends scalar events to a new event file in `directory` (created on the first write)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path: str | None = None
        self._fd: int | None = None

    def add_scalars(self, step: int, scalars: list[tuple[str, float]], wall_time: float | None = None) -> None:
        if not scalars:
            return
        now = time.time() if wall_time is None else wall_time
        data = record(scalar_event(now, step, scalars))
        if self._fd is None:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self.path = os.path.join(self.directory, event_file_name(now))
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            data = record(_event(now, file_version=FILE_VERSION)) + data
        os.write(self._fd, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
