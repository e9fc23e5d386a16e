"""The record cap and the helpers that keep long lists short in a person's words."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from streams.bounds import MAX_RECORD_BYTES, capped, names, rank_ranges, shorten


def test_the_cap_is_64_kib() -> None:
    assert MAX_RECORD_BYTES == 65_536


def test_rank_ranges_are_runs_then_a_count() -> None:
    assert rank_ranges([]) == ""
    assert rank_ranges([3]) == "3"
    assert rank_ranges([23, 16, 17, 18, 19, 20, 21, 22, 40]) == "16–23, 40"
    missing = list(range(16, 24)) + list(range(100, 16384, 2))
    text = rank_ranges(missing, limit=1)
    assert text == f"16–23 and {len(missing) - 8:,} others"


def test_names_show_the_first_and_count_the_rest() -> None:
    assert names([]) == ""
    assert names(["n2", "n1"]) == "n1, n2"
    assert names(["n0019", "n0017", "n0018", "n0020", "n0021"]) == "n0017, n0018, n0019 … (+2)"


def test_capped_evidence_says_how_many_more() -> None:
    lines = [f"line {i}" for i in range(16_404)]
    kept = capped(lines, 24, where="faultline incident X")
    assert kept[:24] == lines[:24] and kept[24] == "and 16,380 more (faultline incident X)"
    assert capped(lines[:3]) == lines[:3]
    assert len(shorten("x" * 5000)) == 2000


@given(st.sets(st.integers(0, 20_000), max_size=3000), st.integers(1, 20))
@example({0, 1, 2, 5}, 1)
def test_rank_ranges_count_every_rank_once(ranks: set[int], limit: int) -> None:
    text = rank_ranges(ranks, limit)
    shown, _, rest = text.partition(" and ")
    count = 0
    for part in filter(None, shown.split(", ")):
        a, _, b = part.partition("–")
        count += int(b or a) - int(a) + 1
    if rest:
        count += int(rest.split()[0].replace(",", ""))
    assert count == len(ranks)
    assert len(text) < 200
