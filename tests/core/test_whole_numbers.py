"""Numbers from forms, queries and headers: a number past what a column holds, a digit that
is not ASCII, or more digits than Python's int() reads (4,300) is refused, never a 500."""

from __future__ import annotations

import pytest

from core.validators import INT64_MAX, whole_number
from gateway.http import declared_length


@pytest.mark.parametrize("text", ["9" * 5000, "²", "٣", "-1", "1e3", "", " 1", str(INT64_MAX + 1)])
def test_what_is_not_a_whole_number_in_range_is_none(text: str) -> None:
    assert whole_number(text) is None


def test_whole_numbers_read_up_to_the_bound() -> None:
    assert whole_number("0") == 0 and whole_number(str(INT64_MAX)) == INT64_MAX
    assert whole_number("0" * 30 + "7") == 7  # leading zeros are not digits of the value
    assert whole_number("21", high=20) is None


def test_a_declared_length_of_thousands_of_digits_is_no_length() -> None:
    scope = {"headers": [(b"content-length", b"9" * 5000)]}
    assert declared_length(scope) is None
    assert declared_length({"headers": [(b"content-length", b"123")]}) == 123
    assert declared_length({"headers": []}) is None
