"""The one GGUF header reader: metadata and tensor table, without touching the tensor data.

``gguf.GGUFReader`` builds a numpy view per metadata field, array item and tensor: seconds for a
151k-token vocabulary, and 24 ms for the demo model's rank-16 LoRA (210 tensors), which was two
thirds of a hot-swap (``bench/run.py --only swap``). This reads the header with ``struct`` from a
memory map (~2 ms for that LoRA) and works out where each tensor's bytes lie, so callers can check
that the file holds them. Used by the model-file and adapter checks (:mod:`clawdesk.gguf.files`,
:mod:`clawdesk.gguf.adapters`), the LoRA reader, ``clawdesk doctor``, the training base's architecture
and the streaming weight loader. Layout (GGUF v2/v3): magic, version, tensor count, key/value count, the key/values, the
tensor infos (name, dims, type, offset), padding to ``general.alignment``, then the data.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# GGUF value types -> struct format for the fixed-size ones (8 = string, 9 = array).
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
DEFAULT_ALIGNMENT = 32
MAGIC = b"GGUF"
VERSIONS = (2, 3)  # the GGUF versions this reader (and llama.cpp) knows
PREAMBLE_BYTES = 24  # magic, version, tensor count, key/value count


class HeaderError(ValueError):
    """The bytes are not a readable GGUF header (damaged, truncated, not GGUF or too new)."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # ggml order: the fastest-moving dimension first
    ggml_type: int  # gguf.GGMLQuantizationType id
    start: int  # byte offset of the data in the file
    n_elements: int
    n_bytes: int  # what the data needs
    n_present: int  # of those, how many bytes the file holds

    @property
    def shape(self) -> tuple[int, ...]:
        """torch order (the slowest-moving dimension first)."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    fields: dict[str, Any]  # scalars and strings as Python values; arrays as lists, or None when skipped
    tensors: list[TensorInfo]
    file_size: int
    array_lengths: dict[str, int]  # item count of every array field, read or skipped (a vocabulary's size)

    @property
    def data_end(self) -> int:
        """Where the last tensor's data ends (the file must be at least this long)."""
        return max((t.start + t.n_bytes for t in self.tensors), default=0)


def preamble_version(head: bytes) -> int | None:
    """The GGUF version in a file's first :data:`PREAMBLE_BYTES` bytes, or None when they are not a GGUF's."""
    if len(head) < PREAMBLE_BYTES or head[:4] != MAGIC:
        return None
    return struct.unpack_from("<I", head, 4)[0]


class _Cursor:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise HeaderError(f"a string of {n} bytes runs past the end of the file")
        self.pos += n
        try:
            return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HeaderError(f"a key or string is not UTF-8 ({exc})") from exc

    def value(self, kind: int, arrays: bool) -> Any:
        if kind in _FIXED:
            return self.unpack(_FIXED[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if item in _FIXED:  # read or skipped in one step (a vocabulary's scores, token types)
                fmt = "<" + str(count) + _FIXED[item][1]
                if self.pos + struct.calcsize(fmt) > len(self.buf):
                    raise HeaderError(f"an array of {count} items runs past the end of the file")
                values = list(struct.unpack_from(fmt, self.buf, self.pos)) if arrays else None
                self.pos += struct.calcsize(fmt)
                return values
            if count > len(self.buf):  # every item takes at least one byte
                raise HeaderError(f"an array claims {count} items")
            items = [self.value(item, arrays) for _ in range(count)]
            return items if arrays else None
        raise HeaderError(f"unknown metadata value type {kind}")


def read_header(path: Path, *, arrays: bool = False) -> GGUFHeader:
    """Parse ``path``'s GGUF header. Arrays are skipped (None) unless ``arrays``.

    Raises :class:`HeaderError` when it cannot be read as one, OSError when it cannot be opened.
    A tensor whose data the file does not (fully) hold is reported in ``n_present``, not raised.
    """
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        if size < PREAMBLE_BYTES:
            raise HeaderError(f"{size} bytes is too short for a GGUF header")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            r = _Cursor(buf)
            try:
                if r.unpack("4s") != MAGIC:
                    raise HeaderError("no GGUF magic")
                version = r.unpack("<I")
                if version not in VERSIONS:
                    raise HeaderError(f"GGUF version {version} (this reader knows 2 and 3)")
                n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
                if n_tensors > size or n_kv > size:
                    raise HeaderError(f"it claims {n_tensors} tensors and {n_kv} keys")
                fields: dict[str, Any] = {}
                lengths: dict[str, int] = {}
                for _ in range(n_kv):
                    key = r.string()
                    kind = r.unpack("<I")
                    if kind == _ARRAY:  # its item type (4 bytes), then its count
                        lengths[key] = struct.unpack_from("<Q", buf, r.pos + 4)[0]
                    fields[key] = r.value(kind, arrays)
                infos = []
                for _ in range(n_tensors):
                    name = r.string()
                    n_dims = r.unpack("<I")
                    if n_dims > 8:
                        raise HeaderError(f"tensor {name!r} claims {n_dims} dimensions")
                    dims = tuple(r.unpack("<Q") for _ in range(n_dims))
                    infos.append((name, dims, r.unpack("<I"), r.unpack("<Q")))
            except struct.error as exc:
                raise HeaderError(f"the header runs past the end of the file ({exc})") from exc
            end = r.pos
    alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        raise HeaderError(f"general.alignment is {alignment!r}")
    data_start = -(-end // alignment) * alignment
    tensors = []
    for name, dims, kind, offset in infos:
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError) as exc:
            raise HeaderError(f"tensor {name!r} has an unknown ggml type {kind}") from exc
        n_elements = 1
        for d in dims:
            n_elements *= d
        n_bytes = n_elements // block * type_size
        start = data_start + offset
        tensors.append(TensorInfo(name, dims, kind, start, n_elements, n_bytes, max(0, min(n_bytes, size - start))))
    return GGUFHeader(version, fields, tensors, size, lengths)
