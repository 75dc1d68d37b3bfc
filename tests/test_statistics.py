"""Statistics: the one percentile rule over sorted parts, and the arrays that hold the values."""
from array import array

from hypothesis import given, settings, strategies as st

import decode_analyze


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**64 - 1), max_size=30), max_size=4),
       st.sampled_from(sorted(decode_analyze.PERCENTILES)))
def test_sorted_parts_percentile_is_that_of_the_whole(parts, name):
    merged = sorted(v for part in parts for v in part)
    sorted_parts = decode_analyze.SortedParts([sorted(part) for part in parts])
    num, den = decode_analyze.PERCENTILES[name]
    expected = merged[min(len(merged) - 1, len(merged) * num // den)] if merged else None
    assert sorted_parts.percentile(name) == expected
    if merged:
        assert sorted_parts.kth(0) == merged[0] and sorted_parts.kth(len(merged) - 1) == merged[-1]
    assert sorted_parts.count_below(2**63) == sum(v < 2**63 for v in merged)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(1, 64))
def test_sorted_parts_of_an_array_empties_it_into_the_same_order(values, chunk):
    wide = array("Q", values)
    original = decode_analyze.SORT_CHUNK
    decode_analyze.SORT_CHUNK = chunk  # several parts even from a few values
    try:
        parts = decode_analyze.sorted_parts(wide)
    finally:
        decode_analyze.SORT_CHUNK = original
    assert len(wide) == 0  # its memory went to the parts, not beside them
    assert sorted(v for part in parts.parts for v in part) == sorted(values)
    assert all(list(part) == sorted(part) for part in parts.parts)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.lists(st.integers(0, 2**64 - 1),
                                                                   max_size=40))
def test_extend_wide_keeps_every_value_and_widens_only_when_needed(first, then):
    values = decode_analyze.extend_wide(array(decode_analyze.WALL_32), first)
    values = decode_analyze.extend_wide(values, array("Q", then))
    assert list(values) == first + then
    assert values.itemsize == (4 if max(first + then, default=0) < 2**32 else 8)


def test_a_tokens_p99_without_a_sort_is_the_sorted_ones():
    # near the top the p99 is found by taking the largest away: the same value as sorting,
    # ties included, for every count of reads (1..399 and larger, where it sorts)
    import random
    from array import array
    from decode_analyze import percentile_index, token_p99
    rng = random.Random(26)
    for n in list(range(1, 400)) + [1000, 5000]:
        values = array("I", (rng.randrange(0, 50) for _ in range(n)))
        assert token_p99(values) == sorted(values)[percentile_index(n, 99, 100)] / 1e3, n
    assert token_p99(array("I")) is None
