"""A whole checkpoint as one tar stream (GET .../checkpoints/{step}/archive): each file's header, then its bytes
in chunks as they are read, so a checkpoint of any size streams in constant memory (tarfile's own writer would
hold each file whole). Not compressed: the weights in it do not compress. The headers are made first, so the
tar's exact length is known before its first byte: the response's Content-Length (a browser shows progress)."""

from __future__ import annotations

import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

BLOCK = 512
CHUNK = 1 << 20

Entry = tuple[str, int, Callable[[], BinaryIO]]  # name, size, open


def _padding(size: int) -> int:
    return -size % BLOCK


def tar_archive(top: str, files: Iterable[Entry]) -> tuple[int, Iterator[bytes]]:
    """The length and the bytes of a POSIX tar of `files` under the directory `top`."""
    now = int(time.time())
    entries: list[tuple[bytes, Entry]] = []
    for name, size, open_file in files:
        info = tarfile.TarInfo(f"{top}/{name}")
        info.size, info.mode, info.mtime = size, 0o644, now
        entries.append((info.tobuf(format=tarfile.PAX_FORMAT), (name, size, open_file)))
    length = sum(len(header) + size + _padding(size) for header, (_, size, _) in entries) + 2 * BLOCK
    return length, _stream(entries)


def _stream(entries: list[tuple[bytes, Entry]]) -> Iterator[bytes]:
    for header, (name, size, open_file) in entries:
        yield header
        left = size
        with open_file() as handle:
            while left and (chunk := handle.read(min(CHUNK, left))):
                left -= len(chunk)
                yield chunk
        if left:  # the file shrank since it was listed: a checkpoint is written once, so this is damage
            raise OSError(f"{name} is shorter than its {size} bytes")
        if _padding(size):
            yield b"\0" * _padding(size)
    yield b"\0" * (2 * BLOCK)


def file_chunks(handle: BinaryIO) -> Iterator[bytes]:
    """An open file's bytes in CHUNK pieces (iterating a binary file would split it at newlines), then closed."""
    with handle:
        while chunk := handle.read(CHUNK):
            yield chunk
