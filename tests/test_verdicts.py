"""Verdicts: each decided both ways (and undetermined) on traces built for it."""
import pytest

from helpers import ENGINE, REAL_TRACES, ct_text, io_text, report


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
                               "no_read": {"tokens": 2, "ms_per_token": 5.0}}
    (split,) = [v for v in p["verdicts"] if v["id"] == "read_split"]
    assert split["flagged"] is False and split["text"] == (
        "reads do not split the tokens: the 2 tokens that read take 10.00 ms of compute each, the "
        "2 that read nothing 5.00 ms (2.00x; <= 2.0x)")


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
