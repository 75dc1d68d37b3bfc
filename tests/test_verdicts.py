"""Verdicts: each decided both ways (and undetermined) on traces built for it."""
import pytest

import decode_analyze
from helpers import ENGINE, REAL_TRACES, ROOT, ct_text, io_text, report


MIB = 1 << 20


def node_rows(tokens, turn=0):
    """One MUL_MAT_ID node per token: [(step, wall ms, majflt)]."""
    return [f"{turn},1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,{int(ms * 1e6)},{majflt}"
            for step, ms, majflt in tokens]


# ── io ──
# latencies 0.5, 1, 3, 1000, 1000, 1500 us; lanes 0,0,0,1,1,1 -> lane 1 busy 7x lane 0
def test_warmup_verdict(write):
    slow = [(step, 4.0, 0) for step in range(8)]
    fast = [(step, 1.0, 0) for step in range(8, 12)]
    r = report("compute", write(ct_text(node_rows(slow + fast))))
    assert r["warmup"] == {"tokens": 8, "first_mean": 4.0, "rest_mean": 1.0, "ratio": 4.0,
                           "from_turn_start": True}
    warm = [v for v in r["verdicts"] if v["id"] == "warmup"][0]
    assert warm["flagged"] and "4.00x the rest" in warm["text"]
    flat = report("compute", write(ct_text(node_rows([(s, 1.0, 0) for s in range(16)])),
                                   "flat.csv"))
    assert not [v for v in flat["verdicts"] if v["id"] == "warmup"][0]["flagged"]


def test_skip_drops_warmup(write):
    slow = [(step, 4.0, 0) for step in range(8)]
    fast = [(step, 1.0, 0) for step in range(8, 20)]
    r = report("compute", write(ct_text(node_rows(slow + fast))), "--skip", "8")
    assert r["tokens"] == 12 and r["ms_per_token"] == 1.0


def test_fault_bound_verdict(write):
    rows = node_rows([(1, 4.0, 9), (2, 6.0, 0)])  # faulting node: 4 of 10 ms = 40%
    verdict = report("compute", write(ct_text(rows)))["verdicts"][0]
    assert verdict["id"] == "fault_bound" and verdict["flagged"] and "40%" in verdict["text"]
    rows = node_rows([(1, 2.0, 9), (2, 8.0, 0)])  # 20%
    verdict = report("compute", write(ct_text(rows), "b.csv"))["verdicts"][0]
    assert verdict["id"] == "fault_bound" and not verdict["flagged"]


def test_router_verdict(write):
    rows = ["0,1,1,0,0,GET_ROWS,ffn_moe_weights-0,3000000,0",
            "0,1,1,1,0,MUL_MAT_ID,ffn_moe_up-0,7000000,0"]
    verdicts = {v["id"]: v for v in report("compute", write(ct_text(rows)))["verdicts"]}
    # the compute trace alone cannot tell routing from a wait for reads
    assert verdicts["router_wait"]["flagged"] is None
    assert verdicts["router_wait"]["text"].startswith(
        "router wait undetermined: routing nodes take 3.00 ms per token, 30% of compute (> 20%)")


def test_io_verdicts(reads):
    verdicts = {v["id"]: v for v in report("io", reads, "--adjacent", "--cache")["verdicts"]}
    assert verdicts["lanes_unbalanced"]["flagged"]  # lane 1: 3500 us vs lane 0: 4.5 us
    assert "latency_bound" in verdicts and "coalescing" in verdicts and "cache" in verdicts


def test_latency_bound_verdict(write):
    rows = [f"0,1,1,0,{i},0,0,0,{i * MIB},4096,4096,1000000" for i in range(5)]
    rows += ["0,1,1,0,9,0,0,0,99999999,4194304,4194304,1000000"]
    verdicts = {v["id"]: v for v in report("io", write(io_text(rows)))["verdicts"]}
    # median read 4 KiB moves 3.9 MiB/s; the 4096 KiB class moves 4000
    assert verdicts["latency_bound"]["flagged"]
    assert "median read is 4 KiB" in verdicts["latency_bound"]["text"]


def test_idle_lane_counts_as_unbalanced(write):
    # io_threads=2 in the preamble, but only lane 0 read
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,4096,4096,1000"])))
    assert [row["lane"] for row in r["by_lane"]] == [0, 1]
    assert {v["id"]: v for v in r["verdicts"]}["lanes_unbalanced"]["flagged"]


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_latency_bound_is_undetermined_with_one_size_class(name):
    r = report("io", REAL_TRACES[name])
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "latency_bound"]
    if len(r["by_size"]) == 1:
        assert verdict["flagged"] is None
        assert verdict["text"].startswith("latency-bound undetermined: every read is in one size "
                                          f"class ({r['by_size'][0]['label']}")
    else:  # gemma4: two classes; the median read (132 KiB) is in the faster one
        assert name == "gemma4-l4-io-serial.csv" and verdict["flagged"] is False
        assert "the median read is 132 KiB and its size class moves 100% of the best" in \
            verdict["text"]


def test_router_waits_for_reads_when_the_reads_can_account_for_it(half_read):
    """Router 3.5 ms per decoded token, reads estimated at 4 ms (8 ms on the busier lane of
    each of two reading tokens, over 4): all of it can be read wait, 47% of the decode."""
    p = report("report", *half_read)["pair"]
    (router,) = [v for v in p["verdicts"] if v["id"] == "router_wait"]
    assert router["flagged"] is True
    assert router["text"] == (
        "ROUTER WAITS FOR READS: routing nodes take 3.50 ms per decoded token; the reads, "
        "estimated at 4.00 ms (each layer's busiest lane), can account for 3.50 of them (100% of "
        "the router's time, >= 50%), 47% of the decode outside faulting nodes")


def test_router_wait_is_judged_in_ms_not_as_a_share_faults_dilute(write):
    """A fault-bound run: router 5 ms of 105 ms, but the 100 ms of faulting nodes are not the
    stake; reads of 4 ms account for 4 of the router's 5 ms, 80% of the 5 ms outside faults."""
    ct = ct_text([f"0,1,{step},0,0,GET_ROWS,ffn_moe_weights-0,5000000,0" for step in (1, 2)]
                 + [f"0,1,{step},1,0,MUL_MAT_ID,ffn_moe_up-0,100000000,9" for step in (1, 2)])
    io = io_text([f"0,1,{step},0,1,0,0,0,0,1048576,1048576,4000000" for step in (1, 2)])
    p = report("report", write(ct, "ct.csv"), write(io, "io.csv"))["pair"]
    (router,) = [v for v in p["verdicts"] if v["id"] == "router_wait"]
    assert router["flagged"] is True and "can account for 4.00 of them (80%" in router["text"]
    assert "80% of the decode outside faulting nodes" in router["text"]


def test_router_not_waiting_much_when_the_reads_are_small(write):
    ct = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1000000},0" for step in (1, 2)
                  for seq, (op, name, ms) in enumerate([("GET_ROWS", "ffn_moe_weights-0", 3),
                                                        ("MUL_MAT_ID", "ffn_moe_up-0", 7)])])
    io = io_text([f"0,1,{step},0,1,0,0,0,0,65536,65536,1000000" for step in (1, 2)])
    p = report("report", write(ct, "ct.csv"), write(io, "io.csv"))["pair"]
    (router,) = [v for v in p["verdicts"] if v["id"] == "router_wait"]
    assert router["flagged"] is False
    assert router["text"].startswith("router not waiting much: routing nodes take 3.00 ms per "
                                     "decoded token; the reads, estimated at 1.00 ms")
    assert "10% of the decode outside faulting nodes (<= 20%)" in router["text"]


def test_read_split(half_read):
    p = report("report", *half_read)["pair"]
    assert p["read_split"] == {"read": {"tokens": 2, "ms_per_token": 10.0},
                               "no_read": {"tokens": 2, "ms_per_token": 5.0},
                               "io_ms_per_token": 8.0, "slow_stretch": None}
    (split,) = [v for v in p["verdicts"] if v["id"] == "read_split"]
    assert split["flagged"] is False and split["text"] == (
        "reads do not split the tokens: the 2 tokens that read take 10.00 ms each, the 2 that "
        "read nothing 5.00 ms (2.00x; <= 2.0x)")


def split_pair(write, token_ms, reading, read_ms, overlap="0"):
    """A pair: decoded tokens of these ms (steps 1..n, one node each); the steps in `reading`
    read one 1 MiB expert of read_ms."""
    ct = ct_text(node_rows([(step, ms, 0) for step, ms in enumerate(token_ms, start=1)]))
    io = io_text([f"0,1,{step},0,1,0,0,0,0,1048576,1048576,{int(read_ms * 1e6)}"
                  for step in reading],
                 f"# io_trace v1\n# model=m.gguf io_threads=2 o_direct=1 overlap={overlap}\n")
    p = report("report", write(ct, "ct.csv"), write(io, "io.csv"))["pair"]
    (split,) = [v for v in p["verdicts"] if v["id"] == "read_split"]
    return p, split


def test_reads_split_the_tokens_when_their_own_reads_explain_it(write):
    # reading tokens 12 ms, the others 2 ms: a 10 ms difference, reads of 8 ms each (80%)
    _, split = split_pair(write, [12, 2, 12, 2, 12, 2], [1, 3, 5], 8)
    assert split["flagged"] is True
    assert split["text"] == (
        "READS SPLIT THE TOKENS: the 3 tokens that read take 12.00 ms each, the 3 that read "
        "nothing 2.00 ms (6.00x), a difference of 10.00 ms against their reads' own 8.00 ms "
        "(I/O estimate, 80% of it, >= 50%)")


def test_a_slow_stretch_is_not_reads_splitting_the_tokens(write):
    """The real gemma4 shape: slow tokens are one stretch that holds tokens that read nothing,
    and the reading tokens' own reads are a small part of the difference."""
    token_ms = [2, 2, 2, 2, 60, 60, 60, 60, 60, 60, 2, 2]
    p, split = split_pair(write, token_ms, [5, 6, 7, 9, 10], 3)
    assert p["read_split"]["slow_stretch"] == {
        "turn": 0, "first_step": 5, "last_step": 10, "tokens": 6, "without_reads": 1,
        "ms_per_token": 60.0}
    assert split["flagged"] is False
    assert split["text"] == (
        "the reads do not explain the split: the 5 tokens that read take 60.00 ms each, the 7 "
        "that read nothing 10.29 ms (5.83x), a difference of 49.71 ms against their reads' own "
        "3.00 ms (I/O estimate, 6% of it, < 50%); the slow tokens are one stretch, turn 0 steps "
        "5-10 (6 tokens, 60.00 ms each), 1 of which read nothing: something else slowed that "
        "stretch")


def test_one_token_that_read_nothing_is_no_split(write):
    """READS SPLIT THE TOKENS fired because 1 token of 64 was all cache hits."""
    token_ms = [12] * 63 + [2]
    p, split = split_pair(write, token_ms, range(1, 64), 8)
    assert p["read_split"]["no_read"]["tokens"] == 1
    assert split["flagged"] is None and split["text"] == (
        "read split undetermined: 63 tokens read, 1 read nothing; a group of 1 token (< 2 or 5% "
        "of them) is too few to tell a split")
    _, split = split_pair(write, [12] * 60 + [2] * 4, range(1, 61), 8)  # 4 of 64: 6%
    assert split["flagged"] is True


def test_read_split_is_undetermined_when_the_reads_ran_beside_compute(write):
    _, split = split_pair(write, [12, 2, 12, 2], [1, 3], 8, overlap="1")
    assert split["flagged"] is None
    assert split["text"].startswith("read split undetermined: the 2 tokens that read take 12.00")
    assert "overlap=1: the reads ran beside compute" in split["text"]


# ── what an io verdict could save, in a pair ──
def stakes_pair(write, decode_ms):
    """Two lanes, one read 8x the other's on each of 2 tokens (UNBALANCED lanes in io): the
    estimate 8 ms, its lower bound (lane-busy / 2) 4.5 ms, so even lanes save at most 3.5 ms."""
    ct = ct_text(node_rows([(1, decode_ms, 0), (2, decode_ms, 0)]))
    io = io_text([f"0,1,{step},0,{expert},0,{lane},0,{expert << 20},1048576,1048576,{ns}"
                  for step in (1, 2) for expert, lane, ns in ((1, 0, 1_000_000),
                                                              (2, 1, 8_000_000))])
    paths = write(ct, "ct.csv"), write(io, "io.csv")
    alone = {v["id"]: v for v in report("io", paths[1])["verdicts"]}
    assert alone["lanes_unbalanced"]["flagged"] is True
    pair = report("report", *paths)
    (lanes,) = [v for v in pair["pair"]["verdicts"] if v["id"] == "lanes_unbalanced"]
    shown = [v for v in decode_analyze.all_verdicts(pair)
             if v["id"] == "lanes_unbalanced"]
    assert shown == [lanes]  # the pair's say replaces io's
    return lanes


def test_an_io_verdict_at_stake_in_the_decode_stays_flagged(write):
    lanes = stakes_pair(write, 20)  # 3.5 of 20 ms: 17.5%
    assert lanes["flagged"] is True
    assert lanes["text"].endswith("; evening the lanes could save at most 3.50 ms of the 20.00 "
                                  "ms decode per token (17.5%, >= 5%)")


def test_an_io_verdict_not_at_stake_is_not_flagged(write):
    lanes = stakes_pair(write, 200)  # 3.5 of 200 ms: 1.75%
    assert lanes["flagged"] is False
    assert lanes["text"] == (
        "lanes unbalanced not at stake: the busiest lane is busy 8.00x as long as the least busy "
        "(> 1.5x); but evening the lanes could save at most 3.50 ms of the 200.00 ms decode per "
        "token (1.8%, < 5% of it)")


def test_outliers_are_named_with_their_share(write):
    walls = [16.5] * 126 + [716.0, 612.0]
    rows = [f"0,1,{100 + i},0,0,MUL_MAT,Qcur-0,{int(ms * 1e6)},0" for i, ms in enumerate(walls)]
    r = report("compute", write(ct_text(rows)))
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "outliers"]
    share = (716 + 612) / sum(walls)
    assert verdict["flagged"] is True
    assert verdict["text"] == (
        f"OUTLIER TOKENS: 2 token(s) >= 10x the median (16.50 ms) hold {share:.0%} of the time "
        f"(>= 10%): turn 0 step 226 716.00 ms, turn 0 step 227 612.00 ms; the mean token is "
        f"{sum(walls) / len(walls) / 16.5:.2f}x the median")


def test_no_outliers_on_a_steady_run():
    r = report("compute", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"])
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "outliers"]
    assert verdict["flagged"] is False


@pytest.mark.parametrize("selection", [["--steps", "4:"], ["--skip", "4"]])
def test_the_warmup_verdict_is_undetermined_past_a_turns_start(write, selection):
    """--steps 4: or --skip 4 starts the selection at the turn's fifth decode token: its first 8
    tokens are no warm-up, whatever their times (they would have read as one: 4 ms against 1)."""
    slow = [(step, 1.0, 0) for step in range(4)] + [(step, 4.0, 0) for step in range(4, 12)]
    fast = [(step, 1.0, 0) for step in range(12, 30)]
    path = write(ct_text(node_rows(slow + fast)))
    whole = {v["id"]: v for v in report("compute", path)["verdicts"]}["warmup"]
    assert whole["flagged"] is not None  # from the turn's start: decided
    cut = {v["id"]: v for v in report("compute", path, *selection)["verdicts"]}["warmup"]
    assert cut["flagged"] is None
    assert cut["text"].startswith("warm-up undetermined: the selection starts past the first")


def test_a_slow_stretch_from_the_start_is_no_warm_up():
    """rep4 of the 48-layer repeats (a 24x outlier run) was called both WARM-UP and SLOW
    STRETCH: its stretch starts 6 tokens into the decode, one slow episode; rep5's slow first
    tokens, with no stretch, stay a warm-up."""
    repeats = ROOT / "tests" / "data" / "l48-repeats"
    found = {v["id"]: v for v in report(
        "compute", repeats / "qwen3moe-l48-e128-serial-rep4-ct.csv")["verdicts"]}
    assert found["slow_stretch"]["flagged"] is True
    assert found["warmup"]["flagged"] is None
    assert "the slow stretch (turn 0 steps 70-86) starts 6 tokens into the decode and lasts past " \
           "its first 16: one slow episode, not a warm-up" in found["warmup"]["text"]
    other = {v["id"]: v for v in report(
        "compute", repeats / "qwen3moe-l48-e128-serial-rep5-ct.csv")["verdicts"]}
    assert other["warmup"]["flagged"] is True and "slow_stretch" not in other


@pytest.mark.parametrize("pair", [
    ("examples/session-ct.csv", "examples/session-io.csv"),
    ("tests/data/synthetic/faults-ct.csv", "tests/data/synthetic/faults-io.csv"),
    ("tests/data/sweep/qwen3moe-l4-greedy-cache2mb-ct.csv",
     "tests/data/sweep/qwen3moe-l4-greedy-cache2mb-io.csv")])
def test_a_pairs_verdicts_are_judged_once(pair):
    """A pair weighs lanes, coalescing and the cache in the decode, and judges the router's
    wait and memory pressure with its reads; its io and compute parts no longer keep a
    second, hidden judgement of them ("cache WORTHWHILE" in the JSON's io verdicts where the
    pair's said the cache was not at stake)."""
    r = report("report", *(ROOT / path for path in pair))
    io_ids = [v["id"] for v in r["io"]["verdicts"]]
    pair_ids = [v["id"] for v in r["pair"]["verdicts"]]
    assert not set(io_ids) & set(pair_ids)
    assert not set(io_ids) & set(decode_analyze.AT_STAKE)
    assert set(decode_analyze.AT_STAKE) & set(pair_ids)  # they are judged, by the pair
    compute_ids = [v["id"] for v in r["compute"]["verdicts"]]
    assert not set(compute_ids) & {*pair_ids, "router_wait"}  # the pair's too
    assert decode_analyze.all_verdicts(r) == \
        r["compute"]["verdicts"] + r["io"]["verdicts"] + r["pair"]["verdicts"]


@pytest.mark.parametrize("verdict_id", sorted(decode_analyze.THRESHOLDS))
def test_a_threshold_verdict_at_its_limit(verdict_id):
    """The table's one rule: a strict threshold's limit itself is calm ("<= 30%"), an inclusive
    one's flagged (">= 10%"); just past it is flagged, just short calm, and a figure that
    cannot be had (None) is flagged."""
    threshold = decode_analyze.THRESHOLDS[verdict_id]
    limit = threshold.limit
    assert decode_analyze.past(verdict_id, limit) is not threshold.strict
    assert decode_analyze.past(verdict_id, limit * 1.001)
    assert not decode_analyze.past(verdict_id, limit * 0.999)
    assert decode_analyze.past(verdict_id, None)
    shown = threshold.shown.format(limit)
    flagged = decode_analyze.threshold_verdict(verdict_id, True, "evidence", "7%", ": why")
    calm = decode_analyze.threshold_verdict(verdict_id, False, "evidence")
    strict = threshold.strict
    assert flagged["text"] == f"{threshold.flagged}: evidence (7%, {'>' if strict else '>='} " \
                              f"{shown}): why"
    assert calm["text"] == f"{threshold.calm}: evidence ({'<=' if strict else '<'} {shown})"
    assert (flagged["flagged"], calm["flagged"]) == (True, False)


@pytest.mark.parametrize("verdict_id", sorted(decode_analyze.THRESHOLDS))
def test_the_readme_states_each_threshold_the_table_declares(verdict_id):
    threshold = decode_analyze.THRESHOLDS[verdict_id]
    verdicts = " ".join((ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8").split())
    said = verdicts[verdicts.index(f"`{verdict_id}`"):][:200]
    number = threshold.shown.format(threshold.limit).rstrip("x")
    assert f"{'>' if threshold.strict else '≥'} {number}" in said, said


def test_a_pairs_cache_stake_is_the_judged_saving_per_decoded_token():
    """The judged cache's most saved is per read-token (5 here); the pair weighs it per decoded
    token (12), as its what-if is: 1.461 ms x 5 / 12 = 0.61 ms of the 31 ms decode."""
    r = report("report", ROOT / "tests/data/synthetic/stretch-ct.csv",
               ROOT / "tests/data/synthetic/stretch-io.csv")
    most = r["io"]["reuse"]["judged"]["ms_per_token_saved"]["max"]
    at_most = most * r["io"]["tokens"] / r["pair"]["tokens"]
    stake = next(v["text"] for v in r["pair"]["verdicts"] if v["id"] == "cache")
    assert (r["io"]["tokens"], r["pair"]["tokens"]) == (5, 12)
    assert f"that cache could save at most {at_most:.2f} ms of the " in stake
