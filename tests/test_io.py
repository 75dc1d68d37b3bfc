"""Known answers for `io` on tiny hand-written traces (numbers worked out by hand)."""
import pytest

from helpers import io_text, report, run

MIB = 1 << 20
# turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns
ROWS = [
    "0,0,9,0,1,0,0,0,0,4096,4096,999000000",  # prefill: left out by default
    # token (0,1,10): extents [1000,2000) and [2000,3000) touch, [5000,5500) stands apart.
    # Judged on offset+read_bytes (the reference), all three would overlap: one run.
    "0,1,10,0,1,0,0,0,1000,1000,4096,100000",
    "0,1,10,0,2,0,0,0,2000,1000,4096,200000",
    "0,1,10,1,3,0,0,1,5000,500,4096,300000",
    # token (0,1,11): a 2 MiB read and a sub-KiB read inside it, zero latency
    "0,1,11,1,3,1,1,0,0,2097152,2097152,4000000",
    "0,1,11,1,4,0,1,0,0,512,512,0",
    # token (1,1,10): same step as turn 0's first token
    "1,1,10,0,1,0,1,0,10000000,65536,69632,1000000",
]
READ_BYTES = 3 * 4096 + 2097152 + 512 + 69632
REQ_BYTES = 1000 + 1000 + 500 + 2097152 + 512 + 65536


@pytest.fixture
def trace(write):
    return write(io_text(ROWS))


def test_totals(trace):
    r = report("io", trace)
    assert r["tokens"] == 3 and r["reads"] == 6 and r["reads_per_token"] == 2
    assert r["read_bytes"] == READ_BYTES and r["req_bytes"] == REQ_BYTES
    assert r["mib_per_token"] == pytest.approx(READ_BYTES / MIB / 3)
    assert r["busy_ms_per_token"] == pytest.approx(5.6 / 3)
    assert r["busy_mib_per_s"] == pytest.approx(READ_BYTES / MIB / 0.0056)
    assert r["waste_pct"] == pytest.approx((READ_BYTES - REQ_BYTES) / READ_BYTES * 100)
    assert r["waste_mib_per_token"] == pytest.approx((READ_BYTES - REQ_BYTES) / MIB / 3)


def test_latency_nearest_rank(trace):
    # sorted: 0, 100, 200, 300, 1000, 4000 us; p50 = sorted[floor(6*0.5)] = 300
    latency = report("io", trace)["latency_us"]
    assert latency == pytest.approx({"min": 0, "mean": 5600 / 6, "p50": 300, "p90": 4000,
                                     "p99": 4000, "p999": 4000, "max": 4000})


def test_size_buckets(trace):
    rows = report("io", trace)["by_size"]
    assert [(r["kib"], r["label"], r["reads"]) for r in rows] == [
        (0, "<1 KiB", 1), (4, "4-7 KiB", 3), (64, "64-127 KiB", 1), (2048, "2048-4095 KiB", 1)]
    sub_kib, small, mid, big = rows
    assert sub_kib["mib_per_s"] is None and sub_kib["us_per_read"] == 0  # all-zero latency
    assert small["mib"] == pytest.approx(12288 / MIB)
    assert small["mib_per_s"] == pytest.approx(12288 / MIB / 0.0006)
    assert small["us_per_read"] == pytest.approx(200)
    assert mid["mib_per_s"] == pytest.approx(69632 / MIB / 0.001)
    assert big["mib_per_s"] == pytest.approx(500.0)
    assert "n/a" in run("io", trace).out


def test_lanes(trace):
    lanes = report("io", trace)["by_lane"]
    assert [lane["lane"] for lane in lanes] == [0, 1]
    assert lanes[0]["mib_per_token"] == pytest.approx(12288 / MIB / 3)
    assert lanes[0]["busy_ms_per_token"] == pytest.approx(0.6 / 3)
    assert lanes[1]["mib_per_s"] == pytest.approx((READ_BYTES - 12288) / MIB / 0.005)
    assert lanes[1]["reads_per_token"] == pytest.approx(1.0)


def test_speculative(trace):
    spec = report("io", trace)["spec"]
    assert spec["reads"] == 1
    assert spec["mib_per_token"] == pytest.approx(4096 / MIB / 3)
    assert spec["share_of_bytes"] == pytest.approx(4096 / READ_BYTES)
    assert "speculative: 1 reads" in run("io", trace).out


def test_adjacency_on_requested_extents(trace):
    r = report("io", trace, "--adjacent")
    # runs: token (0,1,10) 2, token (0,1,11) 1 (overlap), token (1,1,10) 1
    assert r["adjacency"] == pytest.approx(
        {"reads_per_token": 2.0, "runs_per_token": 4 / 3, "coalesce_factor": 1.5})
    assert "coalescing factor 1.50" in run("io", trace, "--adjacent").out


def test_adjacency_key_present_without_the_flag(trace):
    adjacency = report("io", trace)["adjacency"]
    assert adjacency == {"reads_per_token": 2.0, "runs_per_token": None,
                         "coalesce_factor": None}
    assert "adjacency:" not in run("io", trace).out


def test_no_spec_reads_gives_zeros(write):
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,4096,4096,1000"])))
    assert r["spec"] == {"reads": 0, "mib_per_token": 0.0, "share_of_bytes": 0.0}


def test_all_zero_latency_and_bytes_are_undefined_not_a_crash(write):
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,0,0,0"])))
    assert r["busy_mib_per_s"] is None and r["waste_pct"] is None
    assert r["spec"]["share_of_bytes"] is None
    assert "n/a" in run("io", write(io_text(["0,1,1,0,0,0,0,0,0,0,0,0"]), "z.csv")).out


def test_per_read_token_wording(trace):
    out = run("io", trace).out
    assert "per read-token" in out and "served entirely from cache" in out


def test_prefill_selected_explicitly(trace):
    r = report("io", trace, "--phase", "prefill")
    assert r["tokens"] == 1 and r["latency_us"]["max"] == pytest.approx(999000)


def test_u64_values_are_exact(write):
    top = 2 ** 64 - 1
    r = report("io", write(io_text([f"0,1,1,0,0,0,0,0,{top},{top},{top},{top}"])))
    assert r["read_bytes"] == top and r["req_bytes"] == top
    assert r["latency_us"]["max"] == top / 1e3
    r = report("io", write(io_text([f"0,1,1,0,0,0,0,0,{top},{top},{top},{top}"]), "b.csv"),
               "--adjacent")
    assert r["adjacency"]["coalesce_factor"] == 1.0


def test_latencies_past_32_bits_among_small_ones_stay_exact(write):
    # Latencies are kept 4 bytes wide until one needs 8: the switch keeps every value.
    latencies = [1000, 2000, 2 ** 32, 3000, 2 ** 64 - 1, 4000]
    rows = [f"0,1,{step},0,0,0,{step % 2},0,{step * 4096},4096,4096,{latency}"
            for step, latency in enumerate(latencies)]
    r = report("io", write(io_text(rows)))
    ordered = sorted(latencies)
    assert r["latency_us"]["max"] == ordered[-1] / 1e3
    assert r["latency_us"]["p50"] == ordered[len(ordered) // 2] / 1e3
    assert r["latency_us"]["min"] == ordered[0] / 1e3
