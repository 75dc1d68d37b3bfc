"""Compute: known answers on hand-written traces (worked out by hand), node categories, inferred
layers, speculative decoding and prefill framing."""
import re

import pytest

import decode_analyze
from decode_analyze import classify, infer_layers
from helpers import CT_48_LAYERS, REAL_TRACES, ct_text, report, run, shared_trace


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


LAYER_ROWS = [
    # one token; blk.10 before blk.2 in the file, blk.2 twice (the router closes a segment)
    "0,1,7,0,-1,LAYER,pre,1000000,0",
    "0,1,7,1,10,LAYER,blk.10,2000000,5",
    "0,1,7,2,2,LAYER,blk.2,3000000,0",
    "0,1,7,3,2,LAYER,blk.2,4000000,1",
    "0,1,7,4,-1,LAYER,post,5000000,0",
    "0,1,7,5,-1,LAYER,odd,1000000,0",
]


# One token: a dense layer 0, a MoE layer 1 with a shared expert, and the tail. Each node's
# wall is a distinct power of two (in us) so every category's sum is unambiguous.
GRAPH = [  # (layer, op, name, expected category)
    (-1, "GET_ROWS", "inp_embd", "embedding"),
    (0, "RMS_NORM", "norm-0", "norm"),
    (0, "MUL", "attn_norm-0", "norm"),
    (0, "MUL_MAT", "Qcur-0", "attention"),
    (-1, "VIEW", "Kcur_pos-0 (view)", "attention"),
    (-1, "SET_ROWS", "cache_k_l0 (view)", "attention"),
    (-1, "FLASH_ATTN_EXT", "node_6", "attention"),
    (-1, "MUL_MAT", "node_7", "attention"),  # inherits: the output projection
    (0, "ADD", "attn_out-0", "residual"),  # gemma4's residual add
    (0, "MUL_MAT", "ffn_gate-0", "dense_ffn"),
    (0, "MUL_MAT", "ffn_out-0", "dense_ffn"),
    (1, "MUL_MAT", "attn_out-1", "attention"),  # the projection, when a MUL_MAT
    (1, "MUL_MAT", "ffn_moe_logits-1", "router"),
    (1, "SUM_ROWS", "ffn_moe_weights_sum-1", "router"),  # exact match, not a prefix
    (1, "MUL_MAT_ID", "whatever-1", "experts"),  # the op decides
    (-1, "ADD", "node_15", "experts"),  # sum of expert outputs: inherits
    (1, "MUL_MAT", "ffn_up-1", "shared_expert"),  # dense helper inside a MoE layer
    (1, "ADD", "ffn_out-1", "experts"),  # the MoE output in a MoE layer
    (1, "ADD", "l_out-1", "residual"),
    (-1, "MUL", "result_norm", "output"),
    (-1, "TANH", "mystery_op", "other"),
    (-1, "SCALE", "", "other"),
]


@pytest.fixture
def graph(write):
    rows = [f'0,1,5,{seq},{layer},{op},"{name}",{1000 << seq},0'
            for seq, (layer, op, name, _) in enumerate(GRAPH)]
    return write(ct_text(rows))


def node_rows(tokens, turn=0):
    """One MUL_MAT_ID node per token: [(step, wall ms, majflt)]."""
    return [f"{turn},1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,{int(ms * 1e6)},{majflt}"
            for step, ms, majflt in tokens]


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
    assert r["slowest"][0] == {"turn": 0, "phase": 1, "step": 5, "ms": 10.5, "majflt": 20,
                               "faulting_ms": 6.0}  # its one faulting node
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


def test_layer_granularity_segments(write):
    path = write(ct_text(LAYER_ROWS, CT_48_LAYERS))
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
    assert r["schema"] == decode_analyze.SCHEMA and r["kind"] == "compute" and r["tool_version"]
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


def test_every_node_lands_in_its_category(graph):
    expected = {}
    for seq, (_, _, _, category) in enumerate(GRAPH):
        expected[category] = expected.get(category, 0) + (1000 << seq)
    got = {c["category"]: c for c in report("compute", graph)["by_category"]}
    assert {cat: row["ms_per_token"] for cat, row in got.items()} == pytest.approx(
        {cat: ns / 1e6 for cat, ns in expected.items()})
    total = sum(1000 << seq for seq in range(len(GRAPH)))
    assert got["experts"]["share"] == pytest.approx(expected["experts"] / total)
    assert got["attention"]["nodes_per_token"] == 6


def test_unclassified_names_are_listed(graph):
    unclassified = report("compute", graph)["unclassified"]
    assert [u["name"] for u in unclassified] == ["", "mystery_op"]
    assert unclassified[0]["ms_per_token"] == pytest.approx((1000 << 21) / 1e6)


@pytest.mark.parametrize("name, base", [
    ("Qcur-0 (view) (permuted)", "Qcur"), ("ffn_moe_out, part 0-3", "ffn_moe_out"),
    ("v_cache_view-0 (copy of Vcur-0)", "v_cache_view"), ("norm", "norm"),
    ("ffn_norm-0 (reshaped)", "ffn_norm"), ("kqv_out-12 (cont)", "kqv_out"), ("", ""),
])
def test_base_names(name, base):
    assert classify(name, "NONE")[0] == base  # its base name: classify strips it first


def test_classify_is_exact_not_prefix():
    assert classify("ffn_moe_weights_sum_clamped-3", "CLAMP")[1] == "router"
    assert classify("ffn_moe_weights_sumX-3", "CLAMP")[1] == "other"
    assert classify("cache_v_l7 (view)", "SET_ROWS")[1] == "attention"
    assert classify("inp_per_layer_selected", "GET_ROWS")[1] == "embedding"


def test_layers_are_inferred_only_between_nodes_of_one_layer():
    assert infer_layers([-1, 0, -1, -1, 0, -1, 1, -1]) == [-1, 0, 0, 0, 0, -1, 1, -1]


def test_layer_table_uses_inferred_layers(graph):
    layers = {row["layer"]: row["ms_per_token"] for row in report("compute", graph)["by_layer"]}
    # nodes 4-7 (layer -1) run between layer-0 nodes; 15 between layer-1 nodes
    layer0 = sum(1000 << seq for seq in range(1, 11))
    assert layers[0] == pytest.approx(layer0 / 1e6)


@pytest.mark.parametrize("name", ["qwen3moe-l4-ct-node.csv", "gemma4-l4-ct-node.csv"])
def test_real_graphs_leave_little_unclassified(name):
    r = report("compute", shared_trace(name))
    other = sum(c["share"] for c in r["by_category"] if c["category"] == "other")
    assert other < 0.05
    categories = {c["category"] for c in r["by_category"]}
    assert {"attention", "router", "experts", "norm", "embedding", "output"} <= categories


def test_gemma4_dense_layer_and_shared_expert():
    r = report("compute", shared_trace("gemma4-l4-ct-node.csv"))
    categories = {c["category"]: c for c in r["by_category"]}
    # layer 0 is dense (ffn_gate/up/geglu/ffn_out); layers 1-3 have a shared expert
    assert categories["dense_ffn"]["nodes_per_token"] == 4
    assert categories["shared_expert"]["nodes_per_token"] > 0


def test_speculative_decoding_positions(write):
    # decodes at steps 10, 13, 14 of turn 0 (verify batches of 3, 1) and 20 of turn 1
    rows = node_rows([(10, 6.0, 0), (13, 2.0, 0), (14, 2.0, 0)]) + node_rows([(20, 2.0, 0)], 1)
    r = report("compute", write(ct_text(rows)))
    assert r["decodes"] == {"decodes": 4, "positions": 6, "speculative": True,
                            "ms_per_decode": 3.0, "ms_per_position": 2.0}
    out = " ".join(run("compute", write(ct_text(rows), "b.csv")).out.split())
    assert "speculative decoding: 4 decodes generated 6 positions: 3.00 ms per decode, 2.00 ms " \
        "per generated position" in out


def test_plain_decoding_is_not_speculative(write):
    r = report("compute", write(ct_text(node_rows([(5, 1.0, 0), (6, 1.0, 0)]))))
    assert r["decodes"]["speculative"] is False and r["decodes"]["positions"] == 2


def test_sparkline():
    assert decode_analyze.sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert decode_analyze.sparkline([0, 1, 2, 4], ascii_only=True) == "_-+@"
    assert decode_analyze.sparkline(list(range(200)), width=50) == \
        decode_analyze.sparkline([max(range(i, i + 4)) for i in range(0, 200, 4)], width=50)


def test_ascii_flag(write):
    path = write(ct_text(node_rows([(1, 1.0, 0), (2, 3.0, 0)])))
    assert "▁" not in run("compute", path, "--ascii").out
    assert "  run |-@|" in run("compute", path, "--ascii").out


def test_prefill_is_per_batch_and_per_prompt_token():
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"], "--phase", "prefill")
    assert r["prefill"]["batches"] == 1 and r["prefill"]["prompt_tokens"] == 64
    assert r["prefill"]["ms_per_prompt_token"] == pytest.approx(r["ms_per_token"] / 64)
    out = run("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"], "--phase", "prefill").out
    assert "batches=1 (phase prefill)" in out
    assert f"1 batch(es) of 64 prompt tokens: {r['ms_per_token']:.2f} ms per batch" in out


# ── the engine's layer-trace shape ──
@pytest.mark.parametrize("name", ["qwen3moe-l4-ct-layers.csv", "gemma4-l4-ct-layers.csv"])
def test_the_last_layers_tail_in_post_is_detected_on_real_layer_traces(name):
    """tests/data/README.md: a MoE layer has two blk.N rows per token, the last layer's MoE
    tail lands in post."""
    r = report("compute", REAL_TRACES[name])
    assert r["tail_in_post"] == {"layer": 3, "segments_per_token": 1.0, "others_per_token": 2.0}
    out = run("compute", REAL_TRACES[name]).out
    assert "post (layer -1) holds layer 3's MoE tail: blk.3 has 1 segment(s) per token" in \
        " ".join(out.split())


def test_no_tail_in_post_when_the_last_layer_has_its_segments(write):
    rows = [f"0,1,{step},{seq},-1,LAYER,{name},1000000,0" for step in (1, 2)
            for seq, name in enumerate(["pre", "blk.0", "blk.0", "blk.1", "blk.1", "post"])]
    assert report("compute", write(ct_text(rows)))["tail_in_post"] is None
    assert report("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"])["tail_in_post"] is None
