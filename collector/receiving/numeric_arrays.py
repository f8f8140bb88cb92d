"""Stored all-int and all-double OTLP arrays (token ids, logprobs) back to Python lists from their wire bytes.

Read through protobuf's Python objects, every element of an `ArrayValue` is a message wrapper asked which value it
holds: ~0.5 us an element, ~40% of a training batch's read (20,000 spans, `benchmarks/trainer_throughput.py`). The
array's serialized bytes are the same information in a fixed shape: an int element is `0a <len> 18 <varint>`, a
double element `0a 09 21 <8 bytes>`. Here a regular expression cuts the bytes into int elements (its matches must
tile the whole array, or it is not all ints) and a cache maps each element's bytes to its int (token ids repeat);
doubles are one `struct` unpack. Anything else (strings, bools, mixed or nested arrays) returns None and is read
element by element as before. `lightning_otel.capture.otlp_encoding` is the writing side.
"""

from __future__ import annotations

import re
import struct

from opentelemetry.proto.common.v1.common_pb2 import ArrayValue

# One `ArrayValue.values` entry holding `AnyValue.int_value`: tag, length, int tag, varint (continuation bytes, last).
_INT_ELEMENT = re.compile(rb"\x0a[\x00-\x7f]\x18[\x80-\xff]{0,9}[\x00-\x7f]")
_DOUBLE_ELEMENT = 11  # 0a 09 21 + 8 bytes
_INT64_SIGN = 1 << 63


# Entries kept: a tokenizer's vocabulary (~150k-260k ids) fits; a stream of arbitrary ints cannot grow the
# collector past ~35 MB here (what is past the bound is decoded, not kept).
_CACHED_ELEMENTS = 1 << 18


class _ElementInts(dict[bytes, int]):
    """An int element's bytes to its int64; small values only (varints of up to 3 bytes), as token ids are."""

    def __missing__(self, element: bytes) -> int:
        if element[1] != len(element) - 2:  # the element holds more than its int: not ours to read this way
            raise ValueError("not a plain int element")
        value = 0
        for shift, byte in enumerate(element[3:]):
            value |= (byte & 0x7F) << (7 * shift)
        if value >= _INT64_SIGN:
            value -= 1 << 64
        if len(element) <= 6 and len(self) < _CACHED_ELEMENTS:  # varints of up to 3 bytes: ids below 2**21
            self[element] = value
        return value


_element_ints = _ElementInts()


def numeric_array_values(array: ArrayValue) -> list[int] | list[float] | None:
    """The array's values when every one is an int, or every one a double; else None (read it element by element)."""
    raw = array.SerializeToString()
    if len(raw) < 3:
        return None
    if raw[2] == 0x21:
        return _doubles(raw)
    elements = _INT_ELEMENT.findall(raw)
    # Matches never overlap, so lengths summing to the whole array mean they tile it: every element is an int.
    if sum(map(len, elements)) != len(raw):
        return None
    try:
        return list(map(_element_ints.__getitem__, elements))
    except ValueError:
        return None


def _doubles(raw: bytes) -> list[float] | None:
    count, rest = divmod(len(raw), _DOUBLE_ELEMENT)
    if rest or raw[0::_DOUBLE_ELEMENT] != b"\x0a" * count or raw[1::_DOUBLE_ELEMENT] != b"\x09" * count:
        return None
    if raw[2::_DOUBLE_ELEMENT] != b"\x21" * count:
        return None
    return list(struct.unpack("<" + "3xd" * count, raw))
