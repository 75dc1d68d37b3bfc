"""Synthetic traces shaped like the engine's, for parity tests and the benchmark.

The node template is the real qwen3moe graph of ../shared/traces (names, ops, the -1 layers of
views and KV-cache copies, unnamed node_<N> nodes), repeated for as many layers as asked. Times
are deterministic pseudo-random; expert matmuls fault when `faults` is on. Nothing here is used
by the tool itself.
"""
import gzip
import random
from collections import OrderedDict

# (layer_is_set, op, name) for one qwen3moe layer; '{il}' is the layer index. None = unnamed.
QWEN3MOE_LAYER = [
    (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "attn_norm-{il}"),
    (1, "MUL_MAT", "Qcur-{il}"), (1, "RESHAPE", "Qcur-{il}"), (1, "RMS_NORM", "norm-{il}"),
    (1, "MUL", "Qcur_normed-{il}"), (1, "ROPE", "Qcur-{il}"), (1, "MUL_MAT", "Vcur-{il}"),
    (1, "RESHAPE", "Vcur-{il}"), (1, "MUL_MAT", "Kcur-{il}"), (1, "RESHAPE", "Kcur-{il}"),
    (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "Kcur_normed-{il}"), (1, "ROPE", "Kcur-{il}"),
    (0, "VIEW", "Kcur-{il} (view)"), (0, "SET_ROWS", "cache_k_l{il} (view)"),
    (0, "VIEW", "Vcur-{il} (view)"), (0, "SET_ROWS", "cache_v_l{il} (view)"),
    (0, "VIEW", "Qcur-{il} (view)"), (0, "PERMUTE", "Qcur-{il} (view) (permuted)"),
    (0, "VIEW", "cache_k_l{il} (view)"), (0, "PERMUTE", "cache_k_l{il} (view) (permuted)"),
    (0, "VIEW", "cache_v_l{il} (view)"), (0, "PERMUTE", "cache_v_l{il} (view) (permuted)"),
    (0, "FLASH_ATTN_EXT", None), (1, "RESHAPE", "kqv_out-{il}"), (0, "MUL_MAT", None),
    (1, "ADD", "ffn_inp-{il}"), (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "ffn_norm-{il}"),
    (1, "MUL_MAT", "ffn_moe_logits-{il}"), (1, "SOFT_MAX", "ffn_moe_probs-{il}"),
    (0, "RESHAPE", "ffn_moe_probs-{il} (reshaped)"), (1, "ARGSORT", "ffn_moe_argsort-{il}"),
    (1, "VIEW", "ffn_moe_topk-{il}"), (1, "GET_ROWS", "ffn_moe_weights-{il}"),
    (0, "RESHAPE", "ffn_moe_weights-{il} (reshaped)"), (1, "SUM_ROWS", "ffn_moe_weights_sum-{il}"),
    (1, "CLAMP", "ffn_moe_weights_sum_clamped-{il}"), (1, "DIV", "ffn_moe_weights_norm-{il}"),
    (0, "RESHAPE", "ffn_moe_weights_norm-{il} (reshaped)"),
    (0, "RESHAPE", "ffn_norm-{il} (reshaped)"),
    (1, "MUL_MAT_ID", "ffn_moe_gate-{il}"), (1, "MUL_MAT_ID", "ffn_moe_up-{il}"),
    (1, "GLU", "ffn_moe_swiglu-{il}"), (1, "MUL_MAT_ID", "ffn_moe_down-{il}"),
    (1, "MUL", "ffn_moe_weighted-{il}"), (0, "VIEW", "ffn_moe_weighted-{il} (view)"),
    (0, "VIEW", "ffn_moe_weighted-{il} (view)"), (1, "ADD", "ffn_moe_out-{il}"),
    (1, "ADD", "l_out-{il}"),
]
HEAD = [(-1, "GET_ROWS", "inp_embd")]
TAIL = [(-1, "RMS_NORM", "norm"), (-1, "MUL", "result_norm"), (-1, "MUL_MAT", "result_output")]

BASE_NS = {"MUL_MAT": 60000, "MUL_MAT_ID": 250000, "FLASH_ATTN_EXT": 40000, "GET_ROWS": 30000,
           "VIEW": 800, "RESHAPE": 700, "PERMUTE": 700}

COMPUTE_HEADER = "turn,phase,step,seq,layer,op,name,wall_ns,majflt"
IO_HEADER = "turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns"


def graph(n_layer):
    """One decode's nodes in order: [(layer, op, name)], unnamed nodes named node_<seq>."""
    nodes = list(HEAD)
    for il in range(n_layer):
        for has_layer, op, name in QWEN3MOE_LAYER:
            named = None if name is None else name.format(il=il)
            nodes.append((il if has_layer else -1, op, named))
    nodes.extend(TAIL)
    return [(layer, op, name if name is not None else f"node_{seq}")
            for seq, (layer, op, name) in enumerate(nodes)]


def preamble(kind, model="bench-moe.gguf", n_layer=48, extra=""):
    return (f"# {kind} v1\n# model={model} arch=qwen3moe n_layer={n_layer} n_threads=4 "
            f"io_threads=4 o_direct=1 overlap=0{extra}\n")


def compute_lines(n_layer=48, decode_tokens=300, prompt=64, turns=1, faults=True,
                  layers=False, seed=1, speed=1.0):
    """Yield the lines of a compute trace: per turn one prefill batch, then decode tokens.
    speed divides every node's time (a run on a slower or faster machine state)."""
    rng = random.Random(seed)
    nodes = graph(n_layer)
    yield preamble("compute_trace", n_layer=n_layer)
    yield COMPUTE_HEADER + "\n"
    for turn in range(turns):
        start = prompt + turn * 7
        tokens = [(0, start - 1)] + [(1, start + i) for i in range(decode_tokens)]
        for phase, step in tokens:
            scale = (20 if phase == 0 else 1) / speed
            if layers:
                yield from _layer_rows(turn, phase, step, n_layer, rng, scale, faults)
                continue
            prefix = f"{turn},{phase},{step},"
            for seq, (layer, op, name) in enumerate(nodes):
                ns = int(BASE_NS.get(op, 9000) * scale * (0.5 + rng.random()))
                faulting = faults and op == "MUL_MAT_ID" and rng.random() < 0.6
                flt = rng.randrange(0, 40) if faulting else 0
                yield f"{prefix}{seq},{layer},{op},{name},{ns},{flt}\n"


def one_row_lines(decode_tokens):
    """A compute trace of one row a token (a prefill batch, then `decode_tokens`): what a
    report's memory per token is measured on, since it has next to nothing else."""
    yield preamble("compute_trace", n_layer=1)
    yield COMPUTE_HEADER + "\n"
    yield "0,0,9,0,-1,LAYER,pre,1000000,0\n"
    for token in range(decode_tokens):
        yield f"0,1,{10 + token},0,-1,LAYER,pre,{1000000 + token % 977},{token % 3}\n"


def _layer_rows(turn, phase, step, n_layer, rng, scale, faults):
    """Layer granularity: pre, two rows per MoE layer (the router closes a segment), post."""
    segments = [(-1, "pre")]
    for il in range(n_layer):
        segments += [(il, f"blk.{il}"), (il, f"blk.{il}")]
    segments.append((-1, "post"))
    for seq, (layer, name) in enumerate(segments):
        ns = int(400000 * scale * (0.5 + rng.random()))
        flt = rng.randrange(0, 90) if faults and rng.random() < 0.5 else 0
        yield f"{turn},{phase},{step},{seq},{layer},LAYER,{name},{ns},{flt}\n"


SIZES = (65536, 131072, 262144, 1048576)


def io_lines(n_layer=48, decode_tokens=1000, prompt=64, reads_per_token=350, lanes=4,
             spec_share=0.1, seed=2, experts=128, speed=1.0):
    """Yield the lines of an io trace shaped like the streamer's: per token, layer after layer,
    the routed experts' slices (3 projections each, a fixed size and chunking per slice) read
    as O_DIRECT windows on the lanes; a few reads are speculative prefetches. speed divides
    every latency."""
    rng = random.Random(seed)
    yield preamble("io_trace", n_layer=n_layer)
    yield IO_HEADER + "\n"
    slice_bytes = 3 * 1048576
    layer_bytes = experts * slice_bytes
    # reads per expert = 3 projections x 2 chunks on average: this many experts per layer
    per_layer = reads_per_token / n_layer / 6
    tokens = [(0, prompt - 1)] + [(1, prompt + i) for i in range(decode_tokens)]
    for phase, step in tokens:
        for layer in range(n_layer):
            # a skewed choice: some experts are hot
            wanted = int(per_layer) + (rng.random() < per_layer - int(per_layer))
            chosen = set()
            while len(chosen) < wanted:
                chosen.add(min(experts - 1, int(rng.paretovariate(0.8)) - 1 + layer % 7))
            for expert in sorted(chosen):
                spec = 1 if rng.random() < spec_share else 0
                for proj in range(3):
                    size = SIZES[(layer + expert + proj) % len(SIZES)]
                    chunks = 1 + (expert + proj) % 3
                    base = (4096 + layer * layer_bytes + expert * slice_bytes
                            + proj * 1048576 + 96)
                    for chunk in range(chunks):
                        offset = base + chunk * size
                        aligned = offset - offset % 4096
                        read = (offset + size + 4095) // 4096 * 4096 - aligned
                        latency = int((90000 + read / 2000) * (0.6 + rng.random()) / speed)
                        yield (f"0,{phase},{step},{layer},{expert},{proj},{rng.randrange(lanes)},"
                               f"{spec},{offset},{size},{read},{latency}\n")


def write(path, lines, compress=False):
    opener = gzip.open if compress else open
    with opener(path, "wt", newline="") as f:
        f.writelines(lines)
    return path


# A sweep whose costs are known.
# One small model (8 layers of 16 experts, top-4, an expert 3 x 256 KiB), one routing for every
# run (a seeded skew: some experts are hot), as the engine's repeats of one prompt read the same
# experts. A run's decode token takes compute + its flash I/O (its MiB at the lane count's ms per
# MiB) + cache management (a cost per lookup): the costs a calibration must give back.
SWEEP_LAYERS, SWEEP_EXPERTS, SWEEP_TOP_K, SWEEP_PROJ_BYTES = 8, 16, 4, 262144
SWEEP_EXPERT_MIB = 3 * SWEEP_PROJ_BYTES / 1048576


def sweep_routing(tokens, seed=7):
    """[(phase, step, [(layer, [experts])])]: the prefill batch, then each decoded token."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(SWEEP_EXPERTS)]
    routed = []
    for phase, step in [(0, 63)] + [(1, 64 + index) for index in range(tokens)]:
        layers = []
        for layer in range(SWEEP_LAYERS):
            chosen = []
            while len(chosen) < SWEEP_TOP_K:
                expert = (rng.choices(range(SWEEP_EXPERTS), weights)[0] + 3 * layer) \
                    % SWEEP_EXPERTS
                if expert not in chosen:
                    chosen.append(expert)
            layers.append((layer, chosen))
        routed.append((phase, step, layers))
    return routed


def sweep_misses(routed, cache_experts):
    """The routing with only the experts an LRU cache of `cache_experts` missed (0: no cache,
    every expert read), and the cache's resident MiB at the end."""
    held, missed = OrderedDict(), []
    for phase, step, layers in routed:
        kept = []
        for layer, experts in layers:
            read = []
            for expert in experts:
                if (layer, expert) in held:
                    held.move_to_end((layer, expert))
                    continue
                read.append(expert)
                if cache_experts:
                    held[layer, expert] = True
                    if len(held) > cache_experts:
                        held.popitem(last=False)
            kept.append((layer, read))
        missed.append((phase, step, kept))
    return missed, len(held) * SWEEP_EXPERT_MIB


def sweep_run(folder, name, compute_ms, lanes=4, ms_per_mib=1.5, cache_experts=0,
              management_ms_per_miss=0.0, tokens=48, overlap_factor=None):
    """Write NAME-ct.csv, NAME-io.csv and NAME.log of one run into `folder`; its decode
    ms per token. A cache's management costs management_ms_per_miss a miss, in the layer that
    missed. overlap_factor: the run overlapped, and its reads cost the decode that many times
    their time (below 1: hidden; above: the readers slowed compute), said as its stall."""
    missed, resident_mib = sweep_misses(sweep_routing(tokens), cache_experts)
    io_rows, walls, total_mib, io_ms, managed = [], [], 0.0, [], []
    for phase, step, layers in missed:
        token_ms = [0.0] * SWEEP_LAYERS
        layer_managing = [management_ms_per_miss * len(experts) if cache_experts else 0.0
                          for _, experts in layers]
        for layer, experts in layers:
            reads = [(expert, proj) for expert in experts for proj in range(3)]
            token_ms[layer] = len(reads) * SWEEP_PROJ_BYTES / 1048576 * ms_per_mib
            # round-robin on the lanes: the busiest one's reads take the layer's time
            read_ns = round(token_ms[layer] * 1e6 / max(1, -(-len(reads) // lanes)))
            for index, (expert, proj) in enumerate(reads):
                offset = 4096 * (1 + (layer * SWEEP_EXPERTS + expert) * 3 + proj) * 64
                io_rows.append(f"0,{phase},{step},{layer},{expert},{proj},{index % lanes},0,"
                               f"{offset},{SWEEP_PROJ_BYTES},{SWEEP_PROJ_BYTES},"
                               f"{read_ns}\n")
            total_mib += len(reads) * SWEEP_PROJ_BYTES / 1048576
        walls.append((phase, step, token_ms, layer_managing))
        if phase == 1:
            io_ms.append(sum(token_ms))
            managed.append(sum(layer_managing))
    ct = [f"0,{phase},{step},{seq},{layer},LAYER,{segment},{round(ns)},0\n"
          for phase, step, token_ms, layer_managing in walls
          for seq, (layer, segment, ns) in enumerate(sweep_segments(
              compute_ms * (20 if phase == 0 else 1),
              [read_ms * (overlap_factor or 1.0) for read_ms in token_ms], layer_managing))]
    head = (f" n_layer={SWEEP_LAYERS} n_threads=2 io_threads={lanes} o_direct=1 "
            f"overlap={0 if overlap_factor is None else 1}")
    model = "# model=sweep-moe.gguf arch=qwen3moe"
    write(f"{folder}/{name}-ct.csv", [f"# compute_trace v1\n{model}{head}\n",
                                      COMPUTE_HEADER + "\n", *ct])
    write(f"{folder}/{name}-io.csv", [f"# io_trace v1\n{model}{head}\n", IO_HEADER + "\n",
                                      *io_rows])
    flash = sum(io_ms) / tokens
    managing = sum(managed) / tokens
    waited = flash * (overlap_factor or 1.0)
    decode = compute_ms + waited + managing
    lines = [f"generation: {tokens} tokens, {decode / 1e3:.3f} s/token "
             f"({1e3 / decode:.3f} tok/s)\n",
             f"moe-stream: read {total_mib:.1f} MiB ({total_mib / tokens:.2f} MiB/token), "
             f"decode {decode / 1e3:.3f} s/token (compute {(decode - flash - managing) / 1e3:.3f} + cache mgmt "
             f"{managing / 1e3:.3f} + flash I/O {flash / 1e3:.3f} s/token, "
             f"{total_mib / tokens / flash * 1e3:.0f} MiB/s)\n"]
    if cache_experts:
        lines.append(f"moe-cache: {hit_pct(missed):.1f}% hit, resident {resident_mib:.1f} MiB\n")
    if overlap_factor is not None:
        lines.append(f"moe-overlap: stall {waited / 1e3:.3f} s/token (flash reads overlapped "
                     f"with FFN compute)\n")
    write(f"{folder}/{name}.log", lines)
    return decode


def sweep_segments(compute_ms, token_ms, managing):
    """A token's layer rows (pre, each layer's attention and MoE halves, post) in ns: compute
    spread over them, each layer's reads and management in its MoE half (it waits for them)."""
    share = compute_ms / (2 * SWEEP_LAYERS + 2)
    yield -1, "pre", share * 1e6
    for layer, (read_ms, managing_ms) in enumerate(zip(token_ms, managing)):
        yield layer, f"blk.{layer}", share * 1e6
        yield layer, f"blk.{layer}", (share + read_ms + managing_ms) * 1e6
    yield -1, "post", share * 1e6


def hit_pct(missed):
    demanded = SWEEP_TOP_K * SWEEP_LAYERS * len(missed)
    read = sum(len(experts) for _, _, layers in missed for _, experts in layers)
    return 100 * (demanded - read) / demanded


# A sweep with known costs and a busy machine's noise (issue 49): four quiet serial repeats, three
# more on a loaded machine (their compute 3-4x, their reads as fast), one 24x outlier, and one
# run of each change: caches of 16, 32 and 48 experts, 1, 2 and 8 lanes. The costs: 1.5 ms a MiB
# on 4 lanes, I/O as lanes ** -0.4, cached reads 1.3x the time a MiB, 0.2 ms of management a miss.
SWEEP_COSTS = {"ms_per_mib": 1.5, "lane_exponent": 0.4, "cached_rate_factor": 1.3,
               "management_ms_per_miss": 0.2}
BUSY_SWEEP = (
    ("serial-q1", 40.0, {}), ("serial-q2", 41.2, {}), ("serial-q3", 39.1, {}),
    ("serial-q4", 40.6, {}), ("serial-busy1", 130.0, {}), ("serial-busy2", 155.0, {}),
    ("serial-busy3", 142.0, {}), ("serial-outlier", 1800.0, {}),
    *((f"cache{experts}", compute, {"cache_experts": experts})
      for experts, compute in ((16, 40.3), (32, 39.7), (48, 40.9))),
    *((f"lanes{lanes}", compute, {"lanes": lanes})
      for lanes, compute in ((1, 40.4), (2, 39.4), (8, 40.8))))


def busy_sweep(folder, runs=BUSY_SWEEP):
    """Write the runs of BUSY_SWEEP into `folder`: {name: decode ms per token}."""
    costs = SWEEP_COSTS
    decodes = {}
    for name, compute, change in runs:
        lanes = change.get("lanes", 4)
        rate = costs["ms_per_mib"] * (4 / lanes) ** costs["lane_exponent"]
        experts = change.get("cache_experts", 0)
        decodes[name] = sweep_run(
            folder, name, compute, lanes=lanes,
            ms_per_mib=rate * (costs["cached_rate_factor"] if experts else 1.0),
            cache_experts=experts,
            management_ms_per_miss=costs["management_ms_per_miss"] if experts else 0.0,
            overlap_factor=change.get("overlap_factor"))
    return decodes
