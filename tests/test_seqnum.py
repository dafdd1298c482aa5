import pytest

from pyrofling.seqnum import seq14_add, seq14_delta, seq16_delta, seq_delta


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (5, 3, 2),
        (3, 5, -2),
        (0, 16383, 1),  # wrap forward
        (16383, 0, -1),
        (8191, 0, 8191),  # largest positive distance
        (8192, 0, -8192),  # half-way counts as older
        (100, 100, 0),
    ],
)
def test_seq14_delta_wraps(a: int, b: int, expected: int) -> None:
    assert seq14_delta(a, b) == expected


def test_seq14_delta_is_antisymmetric_except_half_way() -> None:
    for a in range(0, 16384, 97):
        for b in range(0, 16384, 89):
            d = seq14_delta(a, b)
            assert d == seq_delta(a, b, 14)  # the written-out form is the general one
            assert -8192 <= d <= 8191
            if d != -8192:
                assert seq14_delta(b, a) == -d
            assert seq14_add(b, d) == a


def test_seq16() -> None:
    assert seq16_delta(0, 65535) == 1
    assert seq16_delta(65535, 0) == -1
    assert seq16_delta(7, 7) == 0
    assert seq16_delta(0, 0x8000) == -0x8000  # exactly half-way counts as older, never forward
