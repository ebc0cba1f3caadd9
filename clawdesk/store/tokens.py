"""Packing token-id lists into compact BLOBs (little-endian int32) and back."""

from __future__ import annotations

import array
import sys
from collections.abc import Sequence


def pack_ids(ids: Sequence[int]) -> bytes:
    arr = array.array("i", ids)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def unpack_ids(blob: bytes) -> list[int]:
    arr = array.array("i")
    arr.frombytes(blob)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()
