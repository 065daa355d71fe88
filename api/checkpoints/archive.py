"""A whole checkpoint as one tar stream (GET .../checkpoints/{step}/archive): each file's header, then its bytes
in chunks as they are read, so a checkpoint of any size streams in constant memory (tarfile's own writer would
hold each file whole). Not compressed: the weights in it do not compress."""

from __future__ import annotations

import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

BLOCK = 512
CHUNK = 1 << 20


def tar_stream(top: str, files: Iterable[tuple[str, int, Callable[[], BinaryIO]]]) -> Iterator[bytes]:
    """A POSIX tar of `files` (name, size, open) under the directory `top`."""
    now = int(time.time())
    for name, size, open_file in files:
        info = tarfile.TarInfo(f"{top}/{name}")
        info.size, info.mode, info.mtime = size, 0o644, now
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        left = size
        with open_file() as handle:
            while left and (chunk := handle.read(min(CHUNK, left))):
                left -= len(chunk)
                yield chunk
        if left:  # the file shrank since it was listed: a checkpoint is written once, so this is damage
            raise OSError(f"{name} is shorter than its {size} bytes")
        if size % BLOCK:
            yield b"\0" * (BLOCK - size % BLOCK)
    yield b"\0" * (2 * BLOCK)
