"""Statistics: the one percentile rule over sorted parts, and the arrays that hold the values."""
from array import array

import pytest
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


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2), st.integers(0, 2**64 - 1)),
                max_size=30), st.integers(0, 30))
def test_a_token_tables_keys_start_a_byte_wide_and_widen_to_any_key(keys, cut):
    """Each key column holds its values exactly, as narrow as they allow (1 byte a token for a
    turn or a phase, 2 for most steps): a merged table is the table of all its keys."""
    first, later = decode_analyze.TokenTable(), decode_analyze.TokenTable()
    for key in keys[:cut]:
        first.append(key)
    for key in keys[cut:]:
        later.append(key)
    first.merge(later, range(len(first), len(first) + len(later)))
    for position, name in enumerate(decode_analyze.TokenTable.KEYS):
        column = first.columns[name]
        assert list(column) == [key[position] for key in keys]
        widest = max((key[position] for key in keys), default=0)
        assert column.itemsize == next(size for size in (1, 2, 4, 8) if widest < 1 << 8 * size)


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


def brute_force_p(base, new):
    """Two-sided exact p over every split of the pooled values (midranks for ties): twice the
    smaller tail of the rank sum."""
    from itertools import combinations
    pooled = list(base) + list(new)
    ranks, _ = decode_analyze.midranks(pooled)
    n1 = len(base)
    observed = sum(ranks[:n1])
    sums = [sum(ranks[i] for i in split) for split in combinations(range(len(pooled)), n1)]
    below = sum(total <= observed + 1e-9 for total in sums)
    above = sum(total >= observed - 1e-9 for total in sums)
    return min(1.0, 2 * min(below, above) / len(sums))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=6),
       st.lists(st.integers(0, 4), min_size=1, max_size=6))
def test_the_test_over_few_runs_is_exact_ties_or_not(base, new):
    """One rule for a diff's runs: 3 runs a side with a tie went to the normal approximation
    and gave p=0.047, below the 0.1 that 3+3 runs can reach at the most extreme."""
    p = decode_analyze.mann_whitney_p(base, new)
    assert p == pytest.approx(brute_force_p(base, new))
    assert p >= decode_analyze.least_p([len(base), len(new)]) - 1e-12


def test_three_runs_a_side_with_a_tie_never_go_below_their_least_p():
    assert decode_analyze.mann_whitney_p([1.0, 1.0, 2.0], [3.0, 4.0, 5.0]) == pytest.approx(0.1)


@given(st.lists(st.tuples(st.integers(0, 300), st.lists(st.integers(0, 2**32 - 1), max_size=5)),
                max_size=40), st.integers(0, 40))
def test_read_latencies_give_each_token_its_reads_in_order(stretches, cut):
    """A token's latencies, however its stretches come (rows out of order, a row read again
    after another, rows past a byte or two of index): in one fold or two merged."""
    first, later = decode_analyze.ReadLatencies(), decode_analyze.ReadLatencies()
    for row, latencies in stretches[:cut]:
        first.add(row, array(decode_analyze.WALL_32, latencies))
    for row, latencies in stretches[cut:]:
        later.add(row, array(decode_analyze.WALL_32, latencies))
    first.merge(later, range(301))
    for row in range(301):
        expected = [value for at, latencies in stretches if at == row for value in latencies]
        assert list(first.of(row)) == expected


@given(st.sets(st.tuples(st.integers(0, 2**40), st.integers(0, 1), st.integers(0, 2**70)),
               max_size=60),
       st.lists(st.tuples(st.integers(0, 2**41), st.integers(0, 3), st.integers(0, 2**71)),
                max_size=20),
       st.booleans())
@settings(max_examples=150, deadline=None)
def test_a_token_index_finds_every_key_it_holds_and_no_other(keys, others, shuffled):
    """Packed as few bits as the largest phase and step need (a key past them cannot be there),
    bisected in key order, a dict out of it: every held key is found at its row, any other is
    not, whatever the keys' size."""
    ordered = sorted(keys)
    if shuffled:
        ordered.reverse()
    rows = [{"turn": turn, "phase": phase, "step": step} for turn, phase, step in ordered]
    index = decode_analyze.TokenIndex(rows)
    assert [index.find(key) for key in ordered] == list(range(len(ordered)))
    assert [index.find(key) for key in others if key not in keys] == \
        [None] * len([key for key in others if key not in keys])


def test_a_session_of_a_million_steps_is_indexed_in_4_bytes_a_token():
    rows = [{"turn": 0, "phase": 1, "step": step} for step in range(0, 1 << 20, 64)]
    index = decode_analyze.TokenIndex(rows)
    assert index.packed.itemsize == 4 and index.by_key is None
    assert index.find((0, 1, 64 * 99)) == 99 and index.find((0, 1, 65)) is None
