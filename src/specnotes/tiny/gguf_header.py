"""The one reader of a GGUF file's header (``read_header``): its version, metadata and tensor table, checked field
by field, without numpy, the ``gguf`` package or the tensor data.

The layout (ggml's docs/gguf.md, little-endian): the magic ``GGUF``, a uint32 version (2 or 3), uint64 counts of
tensors and of metadata pairs; each pair a key (uint64 length, UTF-8 bytes, at most 65,535), a uint32 value type and
the value (a string: uint64 length and bytes; an array: uint32 element type, uint64 count, the elements); then each
tensor's name, uint32 dimension count (1 to 4), uint64 dimensions, uint32 type and uint64 offset into the data,
which starts at the next multiple of ``general.alignment`` (32 unless it says).

Every count and length is checked against what the bytes left in the file can hold before anything is read or
allocated, so a declared 2^63 − 1 pairs or a 2^62-byte key is a ``BadArgument`` naming the file, the field, the
value and its range, never an allocation or an IndexError; so is a truncated header.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from specnotes import validate

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 (32-bit counts) is no longer written by anyone
MAX_KEY_BYTES = 65535  # gguf.md: a key is at most 2^16 - 1 bytes
MAX_NAME_BYTES = 64  # gguf.md: a tensor name is at most 64 bytes (GGML_MAX_NAME)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_TENSORS = 1 << 20  # far past any model (DeepSeek-V3: 1,025 tensors per expert group, ~92k in all)
MAX_PAIRS = 1 << 16  # metadata pairs (a model has tens)
MAX_TYPE = 1023  # a ggml tensor type's id (39 in 2025); the reader needs no table of them
# value type -> (struct format, bytes); 8 is a string, 9 an array
SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4), 6: ("f", 4), 7: ("B", 1),
           10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
STRING, ARRAY, BOOL = 8, 9, 7


@dataclass(frozen=True)
class Header:
    """A GGUF file's header: ``metadata`` (key → value: an int, float, bool, str or list of them) and
    ``tensors`` (name → (dimensions in ggml's order, type, offset)), ``data_start`` the first byte of the data."""

    path: Path
    version: int
    metadata: dict
    tensors: dict
    data_start: int


class _Bytes:
    """A header's bytes (a file mapped into memory, or bytes), read in order, never past their end: every read and
    every count is checked against what is left first."""

    def __init__(self, buf, where: str):
        self.buf, self.pos, self.size, self.where = buf, 0, len(buf), where

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.size - self.pos:
            raise validate.BadArgument(f"{self.where}: {what} needs {n:,} bytes at byte {self.pos:,}, but the file "
                                       f"has {self.left:,} left: a truncated or corrupt GGUF header")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def scalar(self, kind: int, what: str):
        fmt, n = SCALARS[kind]
        (value,) = struct.unpack("<" + fmt, self.take(n, what))
        if kind == BOOL:
            if value > 1:
                raise validate.BadArgument(f"{self.where}: {what} must be a bool (0 or 1), got {value}")
            return bool(value)
        return value

    def count(self, what: str, each: int, most: int | None = None) -> int:
        """A uint64 count of items of at least ``each`` bytes: at most ``most`` and what the file has left."""
        n = self.scalar(10, what)
        if most is not None and n > most:
            raise validate.BadArgument(f"{self.where}: {what} must be an integer in [0, {most:,}], got {n:,}")
        if n > self.left // each:
            raise validate.BadArgument(f"{self.where}: {what} must be an integer in [0, {self.left // each:,}], got "
                                       f"{n:,}: the {self.left:,} bytes left hold no more at {each} byte"
                                       f"{'s' * (each > 1)} each (a truncated or corrupt GGUF header)")
        return n

    def string(self, what: str, most: int | None = None, text: bool = False) -> str:
        raw = self.take(self.count(f"{what}'s length", 1, most), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            if text:
                raise validate.BadArgument(f"{self.where}: {what} must be UTF-8 text, got {validate.shown(raw)}") \
                    from None
            return raw.decode("utf-8", "surrogateescape")  # a token's bytes need not be UTF-8: kept as they are

    def value(self, kind: int, what: str):
        if kind in SCALARS:
            return self.scalar(kind, what)
        if kind == STRING:
            return self.string(what)
        if kind != ARRAY:
            raise validate.BadArgument(f"{self.where}: {what}'s value type must be an integer in [0, 12] (gguf.md's "
                                       f"types), got {kind}")
        element = self.scalar(4, f"{what}'s element type")
        if element not in SCALARS and element != STRING:
            raise validate.BadArgument(f"{self.where}: {what}'s element type must be one of 0-8, 10-12 (arrays of "
                                       f"arrays are not read), got {element}")
        size = SCALARS[element][1] if element in SCALARS else 8
        n = self.count(f"{what}'s element count", size)
        if element == STRING:
            return [self.string(f"{what}[{i}]") for i in range(n)]
        values = list(struct.unpack(f"<{n}{SCALARS[element][0]}", self.take(n * size, what)))
        if element == BOOL and any(v > 1 for v in values):
            raise validate.BadArgument(f"{self.where}: {what} must hold bools (0 or 1)")
        return [bool(v) for v in values] if element == BOOL else values


def read_header(path) -> Header:
    """The header of the GGUF file at ``path``, every field checked (``parse_header``); a path that is not a file,
    or a file that does not start with GGUF's magic bytes, is a BadArgument saying so."""
    path = Path(path)
    if not path.is_file():
        raise validate.BadArgument(f"no model file at {path}")
    with open(path, "rb") as f:
        head = f.read(4)
        if head != MAGIC:
            raise validate.BadArgument(f"{path} is not a GGUF file: it starts with {head!r}, not {MAGIC!r}. "
                                       "llama-server reads GGUF; convert a Hugging Face checkpoint with llama.cpp's "
                                       "convert_hf_to_gguf.py")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:  # nothing is read until it is used
            return parse_header(buf, path)


def parse_header(buf, path) -> Header:
    """A GGUF header from its bytes (``buf``: bytes, or a file mapped into memory) → ``Header``; anything else a
    BadArgument that names the file (``path``) and the field: not GGUF, a version other than 2 or 3, a count or
    length past what the bytes hold or past its bound (``MAX_PAIRS``, ``MAX_TENSORS``, ``MAX_KEY_BYTES``,
    ``MAX_NAME_BYTES``, ``MAX_DIMS``, ``MAX_TYPE``), a key or tensor named twice, a bool other than 0 or 1, an
    alignment that is not a power of two, a tensor whose data would start past the end."""
    where = f"GGUF file {path}"
    b = _Bytes(buf, where)
    if b.take(min(4, b.size), "the magic") != MAGIC:
        raise validate.BadArgument(f"{path} is not a GGUF file: it starts with {bytes(buf[:4])!r}, not {MAGIC!r}")
    version = b.scalar(4, "version")
    if version not in VERSIONS:
        raise validate.BadArgument(f"{where}: version must be 2 or 3 (a little-endian GGUF), got {version}")
    n_tensors = b.count("tensor count", 32, MAX_TENSORS)  # a tensor's entry: at least 32 bytes
    n_pairs = b.count("metadata pair count", 13, MAX_PAIRS)  # a pair: at least 8 + 4 + 1 bytes
    metadata: dict = {}
    for i in range(n_pairs):
        key = b.string(f"metadata key {i}", MAX_KEY_BYTES, text=True)
        if key in metadata:
            raise validate.BadArgument(f"{where}: metadata key {key!r} appears twice")
        metadata[key] = b.value(b.scalar(4, f"{key}'s value type"), key)
    tensors: dict = {}
    for i in range(n_tensors):
        name = b.string(f"tensor {i}'s name", MAX_NAME_BYTES, text=True)
        if name in tensors:
            raise validate.BadArgument(f"{where}: tensor {name!r} appears twice")
        n_dims = b.scalar(4, f"tensor {name!r}'s dimension count")
        if not 1 <= n_dims <= MAX_DIMS:
            raise validate.BadArgument(f"{where}: tensor {name!r}'s dimension count must be an integer in "
                                       f"[1, {MAX_DIMS}], got {n_dims}")
        dims = tuple(b.scalar(10, f"tensor {name!r}'s dimension {d}") for d in range(n_dims))
        if math.prod(dims) >= 1 << 63:
            raise validate.BadArgument(f"{where}: tensor {name!r} has {validate.shown(math.prod(dims))} elements, "
                                       "past 2^63 - 1")
        kind = b.scalar(4, f"tensor {name!r}'s type")
        if kind > MAX_TYPE:
            raise validate.BadArgument(f"{where}: tensor {name!r}'s type must be an integer in [0, {MAX_TYPE}], "
                                       f"got {kind}")
        tensors[name] = (dims, kind, b.scalar(10, f"tensor {name!r}'s offset"))
    align = metadata.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        raise validate.BadArgument(f"{where}: general.alignment must be a power of two, got {validate.shown(align)}")
    start = -(-b.pos // align) * align
    for name, (_, _, offset) in tensors.items():
        if offset % align or start + offset > b.size:
            raise validate.BadArgument(f"{where}: tensor {name!r}'s offset must be a multiple of {align} within the "
                                       f"{max(b.size - start, 0):,} bytes of data, got {offset:,}")
    return Header(Path(path), version, metadata, tensors, start)
