"""Known answers for `compute` on tiny hand-written traces (numbers worked out by hand)."""
import re

import pytest

from helpers import ct_text, report, run

# Two turns that both reach step 4 (a session file), one prefill batch, and a KV view with
# layer -1 between two layer-0 nodes. Walls in ms (x1e6 ns) so the sums are easy to check.
ROWS = [
    "0,0,3,0,-1,GET_ROWS,inp_embd,50000000,0",
    # turn 0 step 4: 1.0 + 2.0 + 0.5 + 4.0 = 7.5 ms, 13 faults
    "0,1,4,0,-1,GET_ROWS,inp_embd,1000000,0",
    "0,1,4,1,0,MUL_MAT,Qcur-0,2000000,3",
    "0,1,4,2,-1,VIEW,Kcur-0 (view),500000,0",
    "0,1,4,3,0,MUL_MAT_ID,ffn_moe_up-0,4000000,10",
    # turn 0 step 5: 1.0 + 3.0 + 0.5 + 6.0 = 10.5 ms, 20 faults
    "0,1,5,0,-1,GET_ROWS,inp_embd,1000000,0",
    "0,1,5,1,0,MUL_MAT,Qcur-0,3000000,0",
    "0,1,5,2,-1,VIEW,Kcur-0 (view),500000,0",
    "0,1,5,3,0,MUL_MAT_ID,ffn_moe_up-0,6000000,20",
    # turn 1 step 4 (same step as turn 0's first token): 2.0 + 1.0 + 1.0 + 2.0 = 6.0 ms
    "1,1,4,0,-1,GET_ROWS,inp_embd,2000000,0",
    "1,1,4,1,0,MUL_MAT,Qcur-0,1000000,0",
    "1,1,4,2,-1,VIEW,Kcur-0 (view),1000000,0",
    "1,1,4,3,0,MUL_MAT_ID,ffn_moe_up-0,2000000,0",
]


@pytest.fixture
def session(write):
    return write(ct_text(ROWS))


def by(rows, key):
    return {row[key]: row for row in rows}


def test_tokens_are_turn_phase_step(session):
    r = report("compute", session)
    assert r["phase"] == "decode"
    assert r["tokens"] == 3  # the reference says 2: it counts distinct steps only
    assert r["rows"] == 12 and r["nodes_per_token"] == 4
    assert r["ms_per_token"] == pytest.approx(24.0 / 3)
    assert r["majflt_per_token"] == pytest.approx(33 / 3)


def test_by_op(session):
    ops = by(report("compute", session)["by_op"], "op")
    assert [op["op"] for op in report("compute", session)["by_op"]] == \
        ["MUL_MAT_ID", "MUL_MAT", "GET_ROWS", "VIEW"]
    assert ops["MUL_MAT_ID"]["ms_per_token"] == pytest.approx(4.0)
    assert ops["MUL_MAT_ID"]["share"] == pytest.approx(0.5)
    assert ops["MUL_MAT_ID"]["majflt_per_token"] == pytest.approx(10.0)
    assert ops["MUL_MAT"]["ms_per_token"] == pytest.approx(2.0)
    assert ops["GET_ROWS"]["share"] == pytest.approx(4 / 24)
    assert ops["VIEW"]["count"] == 3 and ops["VIEW"]["nodes_per_token"] == 1


def test_per_op_node_statistics(session):
    mmid = by(report("compute", session)["by_op"], "op")["MUL_MAT_ID"]
    # single-node walls 4, 6, 2 ms: nearest rank p50 = sorted[floor(3*0.5)] = 4 ms
    assert mmid["avg_us"] == pytest.approx(4000)
    assert mmid["p50_us"] == pytest.approx(4000)
    assert mmid["p99_us"] == pytest.approx(6000)
    assert mmid["max_us"] == pytest.approx(6000)


def test_fault_attribution(session):
    faults = report("compute", session)["faults"]
    # faulting nodes: Qcur 2.0 (3 faults), ffn_moe_up 4.0 (10) and 6.0 (20) -> 12 ms of 24
    assert faults["majflt_per_token"] == pytest.approx(11.0)
    assert faults["ms_per_token"] == pytest.approx(4.0)
    assert faults["share"] == pytest.approx(0.5)
    first, second = faults["by_op"]
    assert first == pytest.approx({"op": "MUL_MAT_ID", "majflt_per_token": 10.0,
                                   "ms_per_token": 10 / 3, "share": 10 / 24})
    assert second["op"] == "MUL_MAT" and second["ms_per_token"] == pytest.approx(2 / 3)


def test_fault_text_has_total_and_explanation(session):
    out = run("compute", session).out
    assert "fault attribution" in out
    total = next(line for line in out.splitlines() if line.strip().startswith("TOTAL"))
    header = next(line for line in out.splitlines() if "majflt/tok" in line and "of compute" in line)
    assert re.split(r"\s{2,}", header.strip()) == ["op", "majflt/tok", "ms/tok", "of compute"]
    assert re.split(r"\s{2,}", total.strip()) == ["TOTAL", "11.0", "4.00", "50.0%"]
    assert "flash wait" in out


def test_no_faults_no_fault_section(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,1000,0"]))
    assert "fault attribution" not in run("compute", path).out
    faults = report("compute", path)["faults"]
    assert faults == {"majflt_per_token": 0.0, "ms_per_token": 0.0, "share": 0.0, "by_op": []}


def test_layers_inferred_and_as_written(session):
    r = report("compute", session)
    inferred = {row["layer"]: row["ms_per_token"] for row in r["by_layer"]}
    written = {row["layer"]: row["ms_per_token"] for row in r["by_layer_column"]}
    # the VIEW (layer -1) runs between two layer-0 nodes, so it belongs to layer 0
    assert inferred == pytest.approx({-1: 4 / 3, 0: 20 / 3})
    assert written == pytest.approx({-1: 2.0, 0: 6.0})
    assert r["reattributed_ms_per_token"] == pytest.approx(2 / 3)
    text = run("compute", session, "--layers").out
    assert "outside every layer" in text and "0.67 ms/token re-attributed" in text


def test_token_distribution(session):
    r = report("compute", session)
    assert r["token_ms"] == pytest.approx({"p50": 7.5, "p90": 10.5, "p99": 10.5, "max": 10.5})
    assert r["slowest"][0] == {"turn": 0, "phase": 1, "step": 5, "ms": 10.5, "majflt": 20}
    assert [(t["turn"], t["step"]) for t in r["per_token"]] == [(0, 4), (0, 5), (1, 4)]


@pytest.mark.parametrize("argv, tokens, ms", [
    (("--phase", "all"), 4, 74 / 4),
    (("--phase", "prefill"), 1, 50.0),
    (("--turn", "1"), 1, 6.0),
    (("--turn", "0", "--turn", "1"), 3, 8.0),
    (("--steps", "5:"), 1, 10.5),
    (("--steps", ":4"), 2, 13.5 / 2),
    (("--steps", "4:4", "--turn", "0"), 1, 7.5),
    (("--skip", "1"), 1, 10.5),
])
def test_filters(session, argv, tokens, ms):
    r = report("compute", session, *argv)
    assert r["tokens"] == tokens
    assert r["ms_per_token"] == pytest.approx(ms)


def test_empty_selection_lists_what_the_file_has(session):
    result = run("compute", session, "--turn", "7")
    assert result.code == 1
    assert "no tokens match the selection (phase decode, turn 7)" in result.err
    assert "turn 0 decode: 2 token(s), steps 4-5" in result.err
    assert "turn 1 decode: 1 token(s), steps 4-4" in result.err


def test_falls_back_to_all_rows_without_decode(write):
    path = write(ct_text(["0,0,9,0,-1,GET_ROWS,inp_embd,3000000,0",
                          "0,0,9,1,0,MUL_MAT,Qcur-0,1000000,0"]))
    r = report("compute", path)
    assert r["phase"] == "all" and r["tokens"] == 1 and r["ms_per_token"] == pytest.approx(4.0)
    assert "no decode rows: all rows used" in run("compute", path).out


def test_top_limits_text_not_json(session):
    out = run("compute", session, "--top", "2").out
    assert "by op (2 of 4" in out
    assert "GET_ROWS" not in out.split("by op")[1].split("fault attribution")[0]
    assert len(report("compute", session, "--top", "2")["by_op"]) == 4


LAYER_ROWS = [
    # one token; blk.10 before blk.2 in the file, blk.2 twice (the router closes a segment)
    "0,1,7,0,-1,LAYER,pre,1000000,0",
    "0,1,7,1,10,LAYER,blk.10,2000000,5",
    "0,1,7,2,2,LAYER,blk.2,3000000,0",
    "0,1,7,3,2,LAYER,blk.2,4000000,1",
    "0,1,7,4,-1,LAYER,post,5000000,0",
    "0,1,7,5,-1,LAYER,odd,1000000,0",
]


def test_layer_granularity_segments(write):
    path = write(ct_text(LAYER_ROWS))
    r = report("compute", path)
    assert r["granularity"] == "layer"
    assert [s["name"] for s in r["segments"]] == ["pre", "blk.2", "blk.10", "post", "odd"]
    blk2 = r["segments"][1]
    assert blk2["ms_per_token"] == pytest.approx(7.0) and blk2["majflt_per_token"] == 1
    assert blk2["share"] == pytest.approx(7 / 16)
    out = run("compute", path).out
    assert "layer granularity" in out and "blk.10" in out


def test_node_trace_has_no_segments(session):
    assert report("compute", session)["segments"] == []


def test_json_keys_always_present(session):
    r = report("compute", session)
    for key in ("schema", "kind", "path", "meta", "phase", "tokens", "granularity", "rows",
                "nodes_per_token", "ms_per_token", "majflt_per_token", "by_op", "faults",
                "by_layer", "segments"):
        assert key in r
    assert r["schema"] == 3 and r["kind"] == "compute" and r["tool_version"]
    assert r["meta"] == {"model": "m.gguf", "arch": "qwen3moe", "n_layer": "2", "n_threads": "4"}


def test_zero_walls(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,0,0", "0,1,4,1,0,ADD,l_out-0,0,0"]))
    r = report("compute", path)
    assert r["ms_per_token"] == 0 and r["by_op"][0]["share"] is None
    assert "n/a" in run("compute", path).out


def test_huge_walls_are_exact(write):
    top = 2 ** 64 - 1
    rows = [f"0,1,4,0,0,MUL_MAT,Qcur-0,{top},{top}", "0,1,4,1,0,ADD,l_out-0,5,0",
            f"0,1,5,0,0,MUL_MAT,Qcur-0,{2 ** 40},0", "0,1,5,1,0,ADD,l_out-0,7,0"]
    r = report("compute", write(ct_text(rows)))
    mul_mat = r["by_op"][0]
    assert mul_mat["max_us"] == top / 1e3 and mul_mat["p50_us"] == top / 1e3
    assert mul_mat["avg_us"] == (top + 2 ** 40) / 2 / 1e3
    assert r["ms_per_token"] == (top + 5 + 2 ** 40 + 7) / 2 / 1e6
    assert r["slowest"][0]["majflt"] == top  # an exact integer in JSON
