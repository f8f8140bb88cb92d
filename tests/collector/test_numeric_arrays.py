"""All-int and all-double arrays read from their wire bytes give what protobuf's objects give, element by element;
any other array is refused (None), so the caller reads it the slow way. Bounded hypothesis runs."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from lightning_otel.collector.receiving.numeric_arrays import numeric_array_values
from lightning_otel.collector.receiving.otlp_json import native_value

BOUNDED = settings(max_examples=300, deadline=None)
i64 = st.integers(-(2**63), 2**63 - 1)
token_ids = st.integers(0, 300_000)  # the cached range and past it
doubles = st.floats(allow_nan=True, allow_infinity=True)
elements = st.one_of(
    i64.map(lambda n: AnyValue(int_value=n)),
    doubles.map(lambda x: AnyValue(double_value=x)),
    st.text(max_size=12).map(lambda s: AnyValue(string_value=s)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.binary(max_size=12).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),  # no value set
)


def element_by_element(array: ArrayValue) -> list[object]:
    return [getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None for v in array.values]


def both_nan(a: object, b: object) -> bool:
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def same(left: list[object], right: list[object]) -> bool:
    pairs = zip(left, right, strict=True)
    return len(left) == len(right) and all(both_nan(a, b) or (a == b and type(a) is type(b)) for a, b in pairs)


@BOUNDED
@given(st.lists(st.one_of(i64, token_ids), min_size=1, max_size=300))
def test_int_arrays_read_as_protobuf_reads_them(values: list[int]) -> None:
    array = ArrayValue(values=[AnyValue(int_value=v) for v in values])
    assert numeric_array_values(array) == element_by_element(array) == values


@BOUNDED
@given(st.lists(doubles, min_size=1, max_size=300))
def test_double_arrays_read_as_protobuf_reads_them(values: list[float]) -> None:
    array = ArrayValue(values=[AnyValue(double_value=v) for v in values])
    read = numeric_array_values(array)
    assert read is not None and same(read, element_by_element(array))


@BOUNDED
@given(st.lists(elements, min_size=1, max_size=40))
def test_any_other_array_is_refused_or_read_exactly(values: list[AnyValue]) -> None:
    array = ArrayValue(values=values)
    read = numeric_array_values(array)
    kinds = {v.WhichOneof("value") for v in values}
    if kinds in ({"int_value"}, {"double_value"}):
        assert read is not None and same(read, element_by_element(array))
    else:
        assert read is None


def test_strings_that_look_like_int_elements_and_nested_arrays_are_refused() -> None:
    looks_like_ints = ArrayValue(values=[AnyValue(string_value="\x0a\x02\x18\x01" * 3)])
    nested = ArrayValue(values=[AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1)]))])
    mixed = ArrayValue(values=[AnyValue(int_value=1), AnyValue(double_value=1.0)])
    assert numeric_array_values(looks_like_ints) is None
    assert numeric_array_values(nested) is None
    assert numeric_array_values(mixed) is None
    assert numeric_array_values(ArrayValue()) is None


def test_native_values_of_every_array_shape() -> None:
    """The read the API serves: fast arrays and the element-by-element ones side by side, non-finite tagged."""
    ints = AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in (151_644, 0, -1, 2**63 - 1)]))
    floats = AnyValue(array_value=ArrayValue(values=[AnyValue(double_value=v) for v in (-0.5, math.inf)]))
    words = AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a"), AnyValue(int_value=2)]))
    nested = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="ids", value=ints)]))
    assert native_value(ints) == [151_644, 0, -1, 2**63 - 1]
    assert native_value(floats) == [-0.5, {"doubleValue": "Infinity"}]
    assert native_value(words) == ["a", 2]
    assert native_value(nested) == {"ids": [151_644, 0, -1, 2**63 - 1]}
