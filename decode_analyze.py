#!/usr/bin/env python3
"""decode-analyze: where a decoded token's time goes, and what its flash reads are made of.

Reads the two traces a traced BigMoeOnEdge decode writes: the compute trace (ct.csv: one row per
graph node, or per layer segment, per token) and the I/O trace (io.csv: one row per flash read).
Standard library only.

  compute CT     time per token by op, node category, layer and token; page faults; verdicts
  io IO          reads per token: latency, sizes, lanes, layers, experts, speculative reads
  report CT IO   both traces of one run side by side, I/O per decoded token

Tracing isolates every graph node behind a barrier (no operator fusion) and locks every read, so
a traced token is slower than an untraced one: its proportions are what to trust.
"""
import argparse
from bisect import bisect_left, bisect_right
import json
import os
import pickle
import re
import signal
import sys
import textwrap
from array import array
from collections import Counter, OrderedDict, defaultdict
from itertools import accumulate, chain, compress, groupby, repeat
from itertools import count as counter
from operator import add, gt, itemgetter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_io import Trace, TraceError, integers_ok, not_integer, plain_integer  # noqa: E402

SCHEMA = 1
NS_PER_MS = 1e6
MIB = 1 << 20
DECODE, PREFILL = 1, 0
PHASE_NAMES = {DECODE: "decode", PREFILL: "prefill"}

# ── node classification (../shared/spec/node-names.md) ─────────────────────────────────────────
# Base names, matched exactly after decorations and the -<il> suffix are stripped; a trailing
# '*' matches by prefix (the spec's own wildcards only). One edit here covers a new architecture.
CATEGORY_NAMES = {
    "embedding": "inp_tokens inp_embd embd inp_scaled inp_per_layer*",
    "norm": "attn_norm ffn_norm ffn_norm_1 ffn_norm_2 norm norm_w attn_post_norm ffn_post_norm "
            "layer_out_norm",
    "attention": "Qcur Kcur Vcur Qcur_normed Kcur_normed Vcur_normed Qcur_pos Kcur_pos Vcur_pos "
                 "wqkv q k v q_nope q_pe k_pe kv_cmpr kv kq kq_soft_max kq_mask kqv kqv_merged "
                 "kqv_merged_cont kqv_out kqv_mla fattn_mla __fattn__ k_cache_view v_cache_view "
                 "attn_out cache_k* cache_v*",
    "router": "ffn_moe_logits ffn_moe_logits_biased ffn_moe_probs ffn_moe_probs_biased "
              "ffn_moe_probs_masked ffn_moe_argsort ffn_moe_topk ffn_moe_group_topk "
              "ffn_moe_weights ffn_moe_weights_softmax ffn_moe_weights_sum "
              "ffn_moe_weights_sum_clamped ffn_moe_weights_norm ffn_moe_weights_scaled",
    "experts": "ffn_moe_gate_up ffn_moe_up ffn_moe_gate ffn_moe_swiglu ffn_moe_geglu ffn_moe_silu "
               "ffn_moe_gelu ffn_moe_swiglu_oai ffn_moe_down ffn_moe_weighted ffn_moe_out ffn_moe",
    "shared_expert": "ffn_shexp ffn_shexp_gate_inp ffn_shexp_gate ffn_shexp_out ffn_mlp",
    "dense_ffn": "ffn_up ffn_gate ffn_gate_par ffn_swiglu ffn_geglu ffn_silu ffn_gelu ffn_down "
                 "ffn_out",
    "output": "result_norm result_output",
    "residual": "ffn_inp l_out ffn_moe_combined out_scaled",
}
# Ops that decide the category whatever the node is called.
OP_CATEGORY = {"MUL_MAT_ID": "experts", "FLASH_ATTN_EXT": "attention"}
# One name, two meanings, told apart by the op (gemma4's residual add is called attn_out).
NAME_OP_CATEGORY = {("attn_out", "ADD"): "residual"}
# In a layer that routes to experts, the dense-FFN helper builds the shared expert, and ffn_out
# is the MoE output.
IN_MOE_LAYER = {"dense_ffn": "shared_expert"}
IN_MOE_LAYER_NAME = {"ffn_out": "experts"}
MOE_CATEGORIES = {"router", "experts"}

_EXACT = {name: cat for cat, names in CATEGORY_NAMES.items()
          for name in names.split() if not name.endswith("*")}
_PREFIX = [(name[:-1], cat) for cat, names in CATEGORY_NAMES.items()
           for name in names.split() if name.endswith("*")]
_DECORATION = re.compile(r" \((?:view|reshaped|permuted|transposed|cont|copy of )|, part ")
_LAYER_SUFFIX = re.compile(r"-\d+$")
_UNNAMED = re.compile(r"node_\d+$")
INHERIT = None  # category of an unnamed node: its nearest preceding named node's


def base_name(name):
    """'Qcur-0 (view) (permuted)' -> 'Qcur': decorations and the layer suffix stripped."""
    cut = _DECORATION.search(name)
    return _LAYER_SUFFIX.sub("", name[: cut.start()] if cut else name)


def classify(name, op):
    """(base name, category) of one node; category INHERIT for unnamed node_<N> nodes."""
    if op in OP_CATEGORY:
        return base_name(name), OP_CATEGORY[op]
    base = base_name(name)
    if _UNNAMED.match(base):
        return base, INHERIT
    category = NAME_OP_CATEGORY.get((base, op)) or _EXACT.get(base)
    if category is None:
        category = next((cat for prefix, cat in _PREFIX if base.startswith(prefix)), "other")
    return base, category


def infer_layers(layers):
    """Layer -1 nodes that execute between two nodes of the same layer belong to that layer."""
    inferred = list(layers)
    run_start = None
    previous = -1
    for i, layer in enumerate(layers):
        if layer == -1:
            if run_start is None:
                run_start = i
            continue
        if run_start is not None and previous == layer and previous != -1:
            inferred[run_start:i] = [layer] * (i - run_start)
        run_start, previous = None, layer
    return inferred


# ── selection ─────────────────────────────────────────────────────────────────────────────────
class Selection:
    """Which tokens a report covers. phase None = decode, or all when there is no decode."""

    def __init__(self, phase=None, turns=None, steps=(None, None), skip=0):
        self.phase, self.turns, self.steps, self.skip = phase, turns, steps, skip

    def admits(self, turn, phase, step, ordinal):
        """ordinal: the token's index among its turn's tokens of the same phase."""
        wanted = {"decode": DECODE, "prefill": PREFILL}.get(self.phase)
        if wanted is not None and phase != wanted:
            return False
        if self.turns and turn not in self.turns:
            return False
        low, high = self.steps
        if low is not None and step < low or high is not None and step > high:
            return False
        return ordinal >= self.skip


class TokenBook:
    """Every token seen (for the 'file contains' message) and the selected ones, in trace order.

    A token is one (turn, phase, step); its rows may come in several stretches. The token
    columns are validated here, once per stretch, rather than once per row by the reader.
    """

    def __init__(self, selection, trace):
        self.selection, self.trace = selection, trace
        self.by_text = {}  # (turn, phase, step) as written -> record, or False
        self.by_value = {}  # (turn, phase, step) -> record, or False
        self.ordinals = defaultdict(int)  # (turn, phase) -> tokens seen
        self.inventory = {}  # (turn, phase) -> [tokens, min step, max step]
        self.steps = defaultdict(list)  # (turn, phase) -> every step seen, selected or not
        self.selected = []  # [turn, phase, step, ns or reads, majflt or bytes], trace order

    def lookup(self, turn, phase, step, rows):
        """The record of this token if it is selected, else None."""
        record = self.by_text.get((turn, phase, step))
        if record is None:
            key = self._values(("turn", turn), ("phase", phase), ("step", step))
            if key is None:
                self.trace.skip_rows(rows, f"bad token columns {turn!r},{phase!r},{step!r}")
                return None
            record = self.by_value.get(key)
            if record is None:
                record = self.by_value[key] = self._decide(*key)
            self.by_text[turn, phase, step] = record
        return record or None

    def _values(self, *columns):
        if self.trace.skip_bad_rows and not all(plain_integer(text) for _, text in columns):
            return None
        return tuple(self.trace.check_key(column, text) for column, text in columns)

    def merge(self, later):
        """Add the book of the rows that follow this one's in the file."""
        for key, record in later.by_value.items():
            mine = self.by_value.get(key)
            if mine is None:
                self.by_value[key] = record
                if record:
                    self.selected.append(record)
            elif mine and record:
                mine[3] += record[3]
                mine[4] += record[4]
        for key, (count, low, high) in later.inventory.items():
            seen = self.inventory.setdefault(key, [0, low, high])
            seen[0] += count
            seen[1], seen[2] = min(seen[1], low), max(seen[2], high)
        for key, steps in later.steps.items():
            self.steps[key].extend(steps)

    def _decide(self, turn, phase, step):
        ordinal = self.ordinals[turn, phase]
        self.ordinals[turn, phase] = ordinal + 1
        seen = self.inventory.setdefault((turn, phase), [0, step, step])
        seen[0] += 1
        seen[1], seen[2] = min(seen[1], step), max(seen[2], step)
        self.steps[turn, phase].append(step)
        if not self.selection.admits(turn, phase, step, ordinal):
            return False
        record = [turn, phase, step, 0, 0]
        self.selected.append(record)
        return record

    def contents(self):
        """What the file holds, for an empty-selection error."""
        parts = []
        for (turn, phase), (count, low, high) in sorted(self.inventory.items()):
            name = PHASE_NAMES.get(phase, f"phase {phase}")
            parts.append(f"turn {turn} {name}: {count} token(s), steps {low}-{high}")
        return "; ".join(parts) or "no rows"


def token_runs(batch, pending, final=False):
    """Split a batch into runs of rows of one token.

    Returns (batch, runs, carry): runs are (turn, phase, step, start, end) over the returned
    batch. Unless `final`, the last run may continue in the next batch, so it is held back:
    `carry` holds its columns, to be passed as `pending` with the next batch.
    """
    if pending:
        batch = {name: pending[name] + column for name, column in batch.items()}
    turns, phases, steps = batch["turn"], batch["phase"], batch["step"]
    runs = []
    start = 0
    for step, run in groupby(steps):
        end = start + len(list(run))
        if turns[start:end].count(turns[start]) == end - start and \
                phases[start:end].count(phases[start]) == end - start:
            runs.append((turns[start], phases[start], step, start, end))
        else:  # rare: one step value shared by neighbouring turns or phases
            for (turn, phase), inner in groupby(zip(turns[start:end], phases[start:end])):
                inner_end = start + len(list(inner))
                runs.append((turn, phase, step, start, inner_end))
                start = inner_end
        start = end
    if final or not runs:
        return batch, runs, None
    held_start = runs.pop()[3]
    return batch, runs, {name: column[held_start:] for name, column in batch.items()}


class SortedParts:
    """Several sorted arrays read as one sorted sequence, never merged: each process and
    phase sorts its own values, and ranks are found by bisecting every part."""

    def __init__(self, parts=()):
        self.parts = [part for part in parts if len(part)]

    def __len__(self):
        return sum(map(len, self.parts))

    def __add__(self, other):
        return SortedParts(self.parts + other.parts)

    def count_below(self, value):
        """How many values are < value."""
        return sum(bisect_left(part, value) for part in self.parts)

    def kth(self, k):
        """The k-th smallest value (0-based): the least v with more than k values <= v."""
        if len(self.parts) == 1:
            return self.parts[0][k]
        low = min(part[0] for part in self.parts)
        high = max(part[-1] for part in self.parts)
        while low < high:
            middle = (low + high) // 2
            if sum(bisect_right(part, middle) for part in self.parts) > k:
                high = middle
            else:
                low = middle + 1
        return low

    def rank(self, num, den):
        """Nearest-rank percentile num/den: the value at min(n-1, floor(n*num/den))."""
        n = len(self)
        return self.kth(min(n - 1, n * num // den)) if n else None

    def minimum(self):
        return min((part[0] for part in self.parts), default=None)

    def maximum(self):
        return max((part[-1] for part in self.parts), default=None)

    def total(self):
        return sum(map(sum, self.parts))


def sorted_array(values):
    """values sorted into the most compact array that holds them."""
    ordered = sorted(values)
    return array(WALL_32 if not ordered or ordered[-1] < 1 << 32 else "Q", ordered)


def ratio(numerator, denominator):
    """numerator/denominator, or None (printed n/a, JSON null) when undefined."""
    return numerator / denominator if denominator else None


def chosen_phases(selection, phases_present):
    """Phases a report covers, and its label: the default is decode, else everything."""
    if selection.phase == "decode":
        return {DECODE}, "decode"
    if selection.phase == "prefill":
        return {PREFILL}, "prefill"
    if selection.phase is None and DECODE in phases_present:
        return {DECODE}, "decode"
    return set(phases_present), "all"


def selected_tokens(trace, book, selection, phases_present):
    phases, label = chosen_phases(selection, phases_present)
    tokens = [t for t in book.selected if t[1] in phases]
    if not tokens:
        what = ", ".join([f"phase {selection.phase or 'decode'}"]
                         + selection_words(selection_dict(selection)))
        raise TraceError(trace.name, 0, f"no tokens match the selection ({what}); "
                                         f"the file has: {book.contents()}")
    return phases, label, tokens


# ── compute ───────────────────────────────────────────────────────────────────────────────────
SYNTHETIC_OPS = {"BMOE_DECODE", "BMOE_CALLBACK"}
COMPUTE_COLUMNS = ("turn", "phase", "step", "layer", "op", "name", "wall_ns", "majflt")


WALL_32 = next(code for code in "IL" if array(code).itemsize == 4)


class Plan:
    """One distinct token structure (its sequence of (op, name, layer)), with per-node sums.

    The tokens of a decode run share their graph, so sums are kept per node position and added
    at C speed with map(add, ...); the nodes are classified once per structure, at the end.
    """

    __slots__ = ("key", "ops", "names", "layers", "runs", "wall", "majflt", "fault_wall",
                 "history")

    def __init__(self, key, ops, names, layers):
        self.key, self.ops, self.names, self.layers = key, ops, names, layers
        n = len(ops)
        self.runs = 0
        self.wall, self.majflt, self.fault_wall = [0] * n, [0] * n, [0] * n
        # Every node's wall_ns, token after token, until finish() sorts them by op for the
        # exact per-op percentiles: 4 bytes a row while walls fit in 32 bits (4.29 s), 8 after.
        self.history = array(WALL_32)

    def add(self, walls, faults):
        self.wall = list(map(add, self.wall, walls))
        if any(faults):
            # Few nodes fault (the expert matmuls), so visit just those.
            majflt, fault_wall = self.majflt, self.fault_wall
            for position in compress(range(len(faults)), faults):
                majflt[position] += faults[position]
                fault_wall[position] += walls[position]
        try:
            self.history.extend(walls)
        except OverflowError:
            self.history = array("Q", self.history[:self.runs * len(self.ops)])
            self.history.extend(walls)
        self.runs += 1

    def merge(self, other):
        """Add another process's sums (after finish(): the walls are in op_walls by then)."""
        self.wall = list(map(add, self.wall, other.wall))
        self.majflt = list(map(add, self.majflt, other.majflt))
        self.fault_wall = list(map(add, self.fault_wall, other.fault_wall))
        self.runs += other.runs

    def op_positions(self):
        """{op: [node positions]} in this structure."""
        positions = defaultdict(list)
        for position, op in enumerate(self.ops):
            positions[op].append(position)
        return positions


    def nodes(self):
        """Per node position: (op, name, layer, inferred layer, base name, category)."""
        layers = [int(layer) for layer in self.layers]
        inferred = infer_layers(layers)
        named = [classify(name, op) for name, op in zip(self.names, self.ops)]
        moe_layers = {il for il, (_, cat) in zip(inferred, named) if cat in MOE_CATEGORIES}
        out = []
        previous = "other"
        for op, name, layer, il, (base, cat) in zip(self.ops, self.names, layers, inferred, named):
            if cat is INHERIT:
                cat = previous
            else:
                if il in moe_layers and il != -1:
                    cat = IN_MOE_LAYER_NAME.get(base) or IN_MOE_LAYER.get(cat, cat)
                previous = cat
            out.append((op, name, layer, il, base, cat))
        return out


SLOWEST = 5


class TokenFold:
    """What both folds share: batches cut into token runs, the run that may continue in the
    next batch held back, and the book of tokens. Subclasses fold runs in _fold() and
    close their sums in _finished()."""

    def __init__(self, selection, trace):
        self.book = TokenBook(selection, trace)
        self._pending = None

    def feed(self, batch):
        batch, runs, self._pending = token_runs(batch, self._pending)
        self._fold(batch, runs)

    def finish(self):
        if self._pending:
            batch, runs, _ = token_runs(self._pending, None, final=True)
            self._fold(batch, runs)
            self._pending = None
        self._finished()

    def detach(self):
        """Drop what cannot or need not travel to another process."""
        self.book.trace, self._pending = None, None


class ComputeFold(TokenFold):
    """Folds compute-trace batches into per-structure sums, kept per phase."""

    def __init__(self, selection, trace):
        super().__init__(selection, trace)
        self.plans = {}  # phase -> {structure: Plan}
        self.rows = defaultdict(int)  # phase -> rows
        self._last = {}  # phase -> the plan of its latest token
        self.op_walls = {}  # phase -> {op: sorted array of one node's wall_ns}, at finish

    def _finished(self):
        """Every node's wall_ns sorted by op (per phase), one op at a time so that only one
        op's values are ever unpacked; the plans' histories are then let go."""
        for phase, plans in self.plans.items():
            nodes = defaultdict(list)  # op -> [(history, position, width)]
            for plan in plans.values():
                for op, positions in plan.op_positions().items():
                    nodes[op].extend((plan.history, p, len(plan.ops)) for p in positions)
            walls = self.op_walls.setdefault(phase, {})
            for op, places in nodes.items():
                walls[op] = SortedParts([sorted_array(chain.from_iterable(
                    history[p::width] for history, p, width in places))])
            for plan in plans.values():
                plan.history = array(WALL_32)

    def detach(self):
        super().detach()
        self._last = {}

    def merge(self, later):
        """Add the fold of the rows that follow this one's in the file."""
        self.book.merge(later.book)
        for phase, plans in later.plans.items():
            mine = self.plans.setdefault(phase, {})
            for structure, plan in plans.items():
                if structure in mine:
                    mine[structure].merge(plan)
                else:
                    mine[structure] = plan
        for phase, rows in later.rows.items():
            self.rows[phase] += rows
        for phase, walls in later.op_walls.items():
            mine = self.op_walls.setdefault(phase, {})
            for op, values in walls.items():
                mine[op] = mine.get(op, SortedParts()) + values

    def _fold(self, batch, runs):
        ops, names, layers = batch["op"], batch["name"], batch["layer"]
        walls, faults = batch["wall_ns"], batch["majflt"]
        for turn, phase, step, start, end in runs:
            record = self.book.lookup(turn, phase, step, end - start)
            if record is None:
                continue
            columns = [ops[start:end], names[start:end], layers[start:end], walls[start:end],
                       faults[start:end]]
            plan = self._plan(record[1], *columns[:3])
            if plan is None:  # a bad layer value; seen once per structure, so checked here
                columns = self._without_bad_layers(columns)
                if not columns[0]:
                    continue
                plan = self._plan(record[1], *columns[:3])
            token_walls, token_faults = columns[3:]
            record[3] += sum(token_walls)
            record[4] += sum(token_faults)
            self.rows[record[1]] += len(token_walls)
            plan.add(token_walls, token_faults)

    def _without_bad_layers(self, columns):
        trace = self.book.trace
        good = [integers_ok([layer], -1) for layer in columns[2]]
        bad = columns[2][good.index(False)]
        if not trace.skip_bad_rows:
            trace.check_key("layer", bad, -1)
        trace.skip_rows(good.count(False), not_integer("layer", bad, -1))
        return [list(compress(column, good)) for column in columns]

    def _plan(self, phase, ops, names, layers):
        """The plan of this structure, or None when a layer value is bad.

        The structure's key is each column joined by newlines, which no field holds: two
        memcmp-able strings are cheaper to compare than thousands of fresh string objects,
        and most tokens repeat the previous token's graph."""
        key = ("\n".join(ops), "\n".join(names), "\n".join(layers))
        last = self._last.get(phase)
        if last is not None and last.key == key:
            return last
        plans = self.plans.setdefault(phase, {})
        plan = plans.get(key)
        if plan is None:
            if not integers_ok(layers, -1):
                return None
            plan = plans[key] = Plan(key, ops, names, layers)
        self._last[phase] = plan
        return plan


def read_compute(path, selection, skip_bad_rows=False, warn=None):
    """Stream a compute trace into a ComputeFold; returns (trace, fold)."""
    columns = dict(ints=("wall_ns", "majflt"),
                   strings=("turn", "phase", "step", "layer", "op", "name"),
                   drop=("op", SYNTHETIC_OPS))
    return read_trace(path, "compute", COMPUTE_COLUMNS, columns,
                      lambda trace: ComputeFold(selection, trace), selection, skip_bad_rows, warn)


def report_skipped(trace, warn):
    if trace.skipped and warn:
        warn(f"{trace.name}: skipped {trace.skipped} bad row(s) (first: {trace.first_skipped})")


def selection_dict(selection):
    low, high = selection.steps
    return {"phase": selection.phase or "default", "turns": sorted(selection.turns or []),
            "steps": [low, high], "skip": selection.skip}


def segment_order(name):
    """pre, blk.0 .. blk.N in numeric order, post, then anything else by name."""
    if name == "pre":
        return (0, 0, "")
    match = re.fullmatch(r"blk\.(\d+)", name)
    if match:
        return (1, int(match.group(1)), "")
    return (2, 0, "") if name == "post" else (3, 0, name)


def _fold_nodes(plans):
    """Add every plan's per-node sums into the report's tables."""
    sums = {"op": defaultdict(lambda: [0, 0, 0]), "fault": defaultdict(lambda: [0, 0]),
            "layer": defaultdict(lambda: [0, 0]), "layer_column": defaultdict(lambda: [0, 0]),
            "segment": defaultdict(lambda: [0, 0]), "category": defaultdict(lambda: [0, 0, 0]),
            "unclassified": defaultdict(int), "reattributed": 0}
    for plan in plans:
        runs = plan.runs
        for (op, name, layer, il, base, cat), ns, majflt, fault_ns in zip(
                plan.nodes(), plan.wall, plan.majflt, plan.fault_wall):
            entry = sums["op"][op]
            entry[0] += ns
            entry[1] += runs
            entry[2] += majflt
            if majflt:
                entry = sums["fault"][op]
                entry[0] += majflt
                entry[1] += fault_ns
            for table, key in (("layer", il), ("layer_column", layer), ("segment", name)):
                entry = sums[table][key]
                entry[0] += ns
                entry[1] += majflt
            if il != layer:
                sums["reattributed"] += ns
            entry = sums["category"][cat]
            entry[0] += ns
            entry[1] += majflt
            entry[2] += runs
            if cat == "other":
                sums["unclassified"][base] += ns
    return sums


def compute_report(trace, fold, selection):
    """The whole compute report as a plain dict (the JSON output; text is rendered from it)."""
    phases, label, tokens = selected_tokens(trace, fold.book, selection, fold.plans.keys())
    n_tokens = len(tokens)
    total_ns = sum(t[3] for t in tokens)
    total_majflt = sum(t[4] for t in tokens)
    plans = [plan for phase in phases for plan in fold.plans.get(phase, {}).values()]
    rows = sum(fold.rows[phase] for phase in phases)
    sums = _fold_nodes(plans)
    per_token = lambda value: value / n_tokens  # noqa: E731
    share = lambda ns: ratio(ns, total_ns)  # noqa: E731
    ms = lambda ns: ns / NS_PER_MS / n_tokens  # noqa: E731

    by_op = []
    for op, (ns, count, majflt) in sorted(sums["op"].items(), key=lambda kv: (-kv[1][0], kv[0])):
        walls = sum((fold.op_walls.get(phase, {}).get(op, SortedParts()) for phase in phases),
                    SortedParts())
        by_op.append({"op": op, "count": count, "ms_per_token": ms(ns), "share": share(ns),
                      "majflt_per_token": per_token(majflt), "nodes_per_token": per_token(count),
                      "avg_us": ns / count / 1e3, "p50_us": walls.rank(1, 2) / 1e3,
                      "p99_us": walls.rank(99, 100) / 1e3, "max_us": walls.maximum() / 1e3})
        del walls
    faulting_ns = sum(ns for _, ns in sums["fault"].values())
    faults = {
        "majflt_per_token": per_token(total_majflt), "ms_per_token": ms(faulting_ns),
        "share": share(faulting_ns),
        "by_op": [{"op": op, "majflt_per_token": per_token(majflt), "ms_per_token": ms(ns),
                   "share": share(ns)}
                  for op, (majflt, ns) in sorted(sums["fault"].items(),
                                                 key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))],
    }
    layer_rows = lambda table: [  # noqa: E731
        {"layer": layer, "ms_per_token": ms(ns), "majflt_per_token": per_token(majflt),
         "share": share(ns)} for layer, (ns, majflt) in sorted(table.items())]
    granularity = "layer" if plans and all(set(p.ops) == {"LAYER"} for p in plans) else "node"
    segments = [] if granularity == "node" else [
        {"name": name, "ms_per_token": ms(ns), "majflt_per_token": per_token(majflt),
         "share": share(ns)} for name, (ns, majflt) in sorted(sums["segment"].items(),
                                                              key=lambda kv: segment_order(kv[0]))]
    by_category = [] if granularity == "layer" else [
        {"category": cat, "ms_per_token": ms(ns), "share": share(ns),
         "majflt_per_token": per_token(majflt), "nodes_per_token": per_token(count)}
        for cat, (ns, majflt, count) in sorted(sums["category"].items(),
                                               key=lambda kv: (-kv[1][0], kv[0]))]
    unclassified = [{"name": name, "ms_per_token": ms(ns)}
                    for name, ns in sorted(sums["unclassified"].items(),
                                           key=lambda kv: (-kv[1], kv[0]))]
    report = {
        "schema": SCHEMA, "kind": "compute", "path": trace.name, "meta": trace.meta,
        "version": trace.version, "phase": label, "selection": selection_dict(selection),
        "tokens": n_tokens, "granularity": granularity, "rows": rows,
        "nodes_per_token": rows / n_tokens, "ms_per_token": ms(total_ns),
        "majflt_per_token": per_token(total_majflt),
        "by_op": by_op, "faults": faults,
        "by_layer": layer_rows(sums["layer"]),
        "by_layer_column": layer_rows(sums["layer_column"]),
        "reattributed_ms_per_token": ms(sums["reattributed"]),
        "segments": segments, "by_category": by_category, "unclassified": unclassified,
        "token_ms": ladder([t[3] / NS_PER_MS for t in tokens]),
        "slowest": [token_dict(t, "ms", "majflt", NS_PER_MS)
                    for t in sorted(tokens, key=lambda t: -t[3])[:SLOWEST]],
        "per_token": [token_dict(t, "ms", "majflt", NS_PER_MS) for t in tokens],
        "decodes": decode_positions(tokens, fold.book, lambda t: t[3] / NS_PER_MS, "ms"),
        "warmup": warmup(tokens, lambda t: t[3] / NS_PER_MS),
    }
    report["verdicts"] = compute_verdicts(report)
    return report


# ── verdicts and per-token views ─────────────────────────────────────────────────────────────
# Verdicts: one line each, only where the data supports a conclusion.
FAULT_BOUND_SHARE = 0.30  # faulting nodes' share of compute
ROUTER_SHARE = 0.20  # router category's share of compute
LATENCY_BOUND_KIB = 256  # median read below this ...
LATENCY_BOUND_RATE = 0.25  # ... and its bucket below this fraction of the best bucket's MiB/s
LANE_IMBALANCE = 1.5  # busiest lane's busy time over the least busy lane's
COALESCE_WORTH = 1.2  # coalescing factor
CACHE_WORTH = 0.20  # share of read bytes an LRU of half the footprint would serve


def verdict(verdict_id, flagged, text):
    return {"id": verdict_id, "flagged": flagged, "text": text}


def compute_verdicts(report):
    verdicts = []
    share = report["faults"]["share"]
    if share is not None and report["majflt_per_token"]:
        flagged = share > FAULT_BOUND_SHARE
        verdicts.append(verdict("fault_bound", flagged,
            f"{'FAULT-BOUND' if flagged else 'not fault-bound'}: nodes that took major faults "
            f"are {share:.0%} of compute ({'>' if flagged else '<='} "
            f"{FAULT_BOUND_SHARE:.0%}){': flash wait billed as compute' if flagged else ''}"))
    router = next((c for c in report["by_category"] if c["category"] == "router"), None)
    if router and router["share"] is not None and router["share"] > ROUTER_SHARE:
        verdicts.append(verdict("router_wait", True,
            f"ROUTER {router['share']:.0%} of compute (> {ROUTER_SHARE:.0%}): with expert "
            f"streaming this is mostly the wait for expert reads, billed to ffn_moe_weights / "
            f"ffn_moe_weights_norm after the top-k, not routing arithmetic"))
    verdicts += warmup_verdict(report["warmup"], "ms")
    return verdicts


def warmup_verdict(warm, unit):
    if warm["ratio"] is None:
        return []
    flagged = warm["ratio"] > WARMUP_RATIO
    return [verdict("warmup", flagged,
        f"{'WARM-UP' if flagged else 'no warm-up'}: the first {warm['tokens']} decode tokens of "
        f"each turn average {warm['first_mean']:.2f} {unit}, {warm['ratio']:.2f}x the rest "
        f"({'>' if flagged else '<='} {WARMUP_RATIO}x)")]


def ladder(values):
    """{p50, p90, p99, max} of values by nearest rank; None when there are none."""
    ordered = SortedParts([sorted(values)])
    return {"p50": ordered.rank(1, 2), "p90": ordered.rank(9, 10), "p99": ordered.rank(99, 100),
            "max": ordered.maximum()}


WARMUP_TOKENS = 8
WARMUP_RATIO = 1.5


def warmup(tokens, value):
    """Mean of the first WARMUP_TOKENS decode tokens of each turn vs the rest."""
    seen = defaultdict(int)
    first, rest = [], []
    for token in tokens:
        if token[1] != DECODE:
            continue
        (first if seen[token[0]] < WARMUP_TOKENS else rest).append(value(token))
        seen[token[0]] += 1
    first_mean = sum(first) / len(first) if first else None
    rest_mean = sum(rest) / len(rest) if rest else None
    return {"tokens": WARMUP_TOKENS, "first_mean": first_mean, "rest_mean": rest_mean,
            "ratio": None if first_mean is None or not rest_mean else first_mean / rest_mean}


def decode_positions(tokens, book, value, unit):
    """Decodes vs generated positions: a decode generates the positions up to the next decode
    of its turn (speculative decoding verifies a batch per step); a turn's last decode, one."""
    following = {}
    for (turn, phase), steps in book.steps.items():
        if phase == DECODE:
            ordered = sorted(set(steps))
            following.update(((turn, a), b) for a, b in zip(ordered, ordered[1:]))
    decodes = [t for t in tokens if t[1] == DECODE]
    positions = sum(following.get((t[0], t[2]), t[2] + 1) - t[2] for t in decodes)
    total = sum(value(t) for t in decodes)
    return {"decodes": len(decodes), "positions": positions,
            "speculative": positions > len(decodes),
            f"{unit}_per_decode": ratio(total, len(decodes)),
            f"{unit}_per_position": ratio(total, positions)}


def token_dict(token, value_name, count_name, scale):
    turn, phase, step, value, count = token
    return {"turn": turn, "phase": phase, "step": step, value_name: value / scale,
            count_name: count}


# ── io ────────────────────────────────────────────────────────────────────────────────────────
IO_COLUMNS = ("turn", "phase", "step", "layer", "expert", "lane", "spec", "offset", "req_bytes",
              "read_bytes", "latency_ns")


class IntCache(dict):
    """text -> int for columns of few distinct values: map(cache.__getitem__, column)."""

    def __missing__(self, text):
        value = self[text] = int(text)
        return value


class IoPhase:
    """The sums of one phase's selected reads, bounded by the model's shape, not the run's
    length: keyed by (layer, expert, size) and by (lane, size, spec, layer) as joined text."""

    def __init__(self):
        self.by_expert = Counter()  # "layer,expert,read_bytes" -> reads
        self.by_lane = Counter()  # "lane,read_bytes,spec,layer" -> reads
        self.lane_ns = {}  # "lane,read_bytes,spec,layer" -> latency_ns
        # spec -> latency_ns of each read; sorted into SortedParts by sort()
        self.latency = {"0": array("Q"), "1": array("Q")}
        self.req_bytes = 0
        self.runs = 0  # contiguous runs, with adjacent

    def add(self, layers, experts, lanes, specs, sizes, latencies):
        self.by_expert.update(map(",".join, zip(layers, experts, sizes)))
        keys = list(map(",".join, zip(lanes, sizes, specs, layers)))
        self.by_lane.update(keys)
        lane_ns = self.lane_ns
        get = lane_ns.get
        for key, latency in zip(keys, latencies):
            lane_ns[key] = get(key, 0) + latency
        if "1" in specs:
            self.latency["1"].extend(compress(latencies, map("1".__eq__, specs)))
            self.latency["0"].extend(compress(latencies, map("1".__ne__, specs)))
        else:
            self.latency["0"].extend(latencies)

    def sort(self):
        """Sort the latencies (in each process, so that the merge is a linear pass)."""
        for spec, latencies in self.latency.items():
            self.latency[spec] = SortedParts([sorted_array(latencies)])

    def merge(self, later):
        self.by_expert.update(later.by_expert)
        self.by_lane.update(later.by_lane)
        for key, ns in later.lane_ns.items():
            self.lane_ns[key] = self.lane_ns.get(key, 0) + ns
        for spec, latencies in later.latency.items():
            self.latency[spec] = self.latency[spec] + latencies
        self.req_bytes += later.req_bytes
        self.runs += later.runs


class ReadSequence:
    """What an extra cache would see: every selected read's item (a distinct (offset,
    read_bytes) extent), its size and its phase, in trace order, in compact arrays."""

    def __init__(self):
        self.item_of = {}  # (offset, read_bytes) -> item id
        self.next_id = counter()
        self.items, self.sizes, self.phases = array("Q"), array("Q"), array("b")

    def __getstate__(self):
        return {"item_of": self.item_of, "items": self.items, "sizes": self.sizes,
                "phases": self.phases}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.next_id = counter(len(self.item_of))

    def merge(self, later):
        """Append a later part of the trace, its item ids mapped onto this one's."""
        mine = {later_id: self.item_of.setdefault(extent, next(self.next_id))
                for extent, later_id in later.item_of.items()}
        self.items.extend(map(mine.__getitem__, later.items))
        self.sizes.extend(later.sizes)
        self.phases.extend(later.phases)

    def add(self, phase, offsets, sizes):
        extents = zip(offsets, sizes)
        self.items.extend(map(self.item_of.setdefault, extents, self.next_id))
        self.sizes.extend(sizes)
        self.phases.extend(repeat(phase, len(sizes)))


class IoFold(TokenFold):
    """Folds io-trace batches into an IoPhase per phase, plus the per-token sums."""

    def __init__(self, selection, trace, adjacent=False, cache=False):
        super().__init__(selection, trace)
        self.adjacent = adjacent
        self.sequence = ReadSequence() if cache else None
        self.phases = {}  # phase -> IoPhase
        self.sizes = IntCache()

    def _finished(self):
        for totals in self.phases.values():
            totals.sort()

    def merge(self, later):
        """Add the fold of the rows that follow this one's in the file."""
        self.book.merge(later.book)
        for phase, totals in later.phases.items():
            if phase in self.phases:
                self.phases[phase].merge(totals)
            else:
                self.phases[phase] = totals
        if self.sequence is not None:
            self.sequence.merge(later.sequence)

    def _fold(self, batch, runs):
        """Token sums and adjacency per token run; then each phase's selected rows of the batch
        are added at once, so that the per-read work stays inside C builtins."""
        sizes = list(map(self.sizes.__getitem__, batch["read_bytes"]))
        wanted, offsets = batch["req_bytes"], batch.get("offset")
        spans = defaultdict(list)  # phase -> [(start, end)] of its selected runs
        for turn, phase, step, start, end in runs:
            record = self.book.lookup(turn, phase, step, end - start)
            if record is None:
                continue
            totals = self.phases.get(record[1]) or self.phases.setdefault(record[1], IoPhase())
            record[3] += end - start
            record[4] += sum(sizes[start:end])
            totals.req_bytes += sum(wanted[start:end])
            if self.adjacent:
                totals.runs += contiguous_runs(offsets[start:end], wanted[start:end])
            if self.sequence is not None:
                self.sequence.add(record[1], offsets[start:end], sizes[start:end])
            spans[record[1]].append((start, end))
        columns = [batch[name] for name in ("layer", "expert", "lane", "spec", "read_bytes",
                                              "latency_ns")]
        for phase, phase_spans in spans.items():
            if len(phase_spans) > 1 or phase_spans[0] != (0, len(sizes)):
                keep = [False] * len(sizes)
                for start, end in phase_spans:
                    keep[start:end] = [True] * (end - start)
                self.phases[phase].add(*(list(compress(column, keep)) for column in columns))
            else:
                self.phases[phase].add(*columns)


def contiguous_runs(offsets, lengths):
    """How many runs the extents [offset, offset+length) form: sorted by offset, a run breaks
    where an extent starts after the furthest end so far (touching extents merge). The order
    of extents with equal offsets does not change the count."""
    if len(offsets) < 2:
        return len(offsets)
    pick = itemgetter(*sorted(range(len(offsets)), key=offsets.__getitem__))
    starts = pick(offsets)
    furthest = accumulate(map(add, starts, pick(lengths)), max)
    return 1 + sum(map(gt, starts[1:], furthest))


def read_io(path, selection, adjacent=False, skip_bad_rows=False, warn=None, cache=False):
    """Stream an io trace into an IoFold; returns (trace, fold)."""
    ints = ("offset", "req_bytes", "latency_ns") if adjacent or cache else \
        ("req_bytes", "latency_ns")
    columns = dict(ints=ints, keys=("expert", "lane", "spec", "read_bytes"),
                   signed_keys=("layer",), strings=("turn", "phase", "step"),
                   drop=("kind", {"wait"}))
    return read_trace(path, "io", IO_COLUMNS, columns,
                      lambda trace: IoFold(selection, trace, adjacent, cache), selection,
                      skip_bad_rows, warn)


def key_values(trace, keys, columns):
    """[(int, ...)] for joined keys ("lane,read_bytes,spec,layer"), every field checked at C
    speed column by column; a bad one raises TraceError naming its first line."""
    keys = list(keys)
    fields = ",".join(keys).split(",")
    width = len(columns)
    floors = [-1 if column == "layer" else 0 for column in columns]
    if len(fields) != width * len(keys):  # a bad value with a comma in it (it was quoted)
        for key in keys:
            for column, text, floor in zip(columns, key.split(","), floors):
                trace.check_key(column, text, floor)
    converted = []
    for position, (column, floor) in enumerate(zip(columns, floors)):
        texts = fields[position::width]
        if not integers_ok(texts, floor):
            for text in texts:
                trace.check_key(column, text, floor)
        converted.append(map(IntCache().__getitem__, texts))
    return list(zip(*converted))


def size_bucket(read_bytes):
    """KiB bucket: the largest power of two <= read_bytes // 1024 (0 under 1 KiB)."""
    kib = read_bytes // 1024
    return 1 << (kib.bit_length() - 1) if kib else 0


def bucket_label(kib):
    if kib == 0:
        return "<1 KiB"
    return f"{kib} KiB" if kib == 1 else f"{kib}-{2 * kib - 1} KiB"


def io_report(trace, fold, selection):
    """The whole io report as a plain dict (the JSON output; text is rendered from it)."""
    phases, label, tokens = selected_tokens(trace, fold.book, selection, fold.phases.keys())
    n_tokens = len(tokens)
    per_token = lambda value: value / n_tokens  # noqa: E731
    mib_per_s = lambda nbytes, ns: ratio(nbytes / MIB, ns / 1e9)  # noqa: E731
    chosen = [fold.phases[phase] for phase in phases if phase in fold.phases]
    tables = io_tables(trace, chosen)
    by_size, by_lane, by_spec, by_layer, read_sizes = (tables[name] for name in (
        "size", "lane", "spec", "layer", "read_size"))
    reads = sum(entry[0] for entry in by_lane.values())
    read_bytes = sum(entry[1] for entry in by_lane.values())
    busy_ns = sum(entry[2] for entry in by_lane.values())
    req_bytes = sum(totals.req_bytes for totals in chosen)
    runs = sum(totals.runs for totals in chosen)
    latency = {spec: sum((t.latency[spec] for t in chosen), SortedParts()) for spec in "01"}
    every = latency["0"] + latency["1"]
    for lane in range(meta_int(trace.meta, "io_threads")):
        by_lane.setdefault(lane, [0, 0, 0])  # a lane that never read is the most idle of all
    report = {
        "schema": SCHEMA, "kind": "io", "path": trace.name, "meta": trace.meta,
        "version": trace.version, "phase": label, "selection": selection_dict(selection),
        "tokens": n_tokens,
        "reads": reads, "read_bytes": read_bytes, "req_bytes": req_bytes,
        "reads_per_token": per_token(reads), "mib_per_token": per_token(read_bytes / MIB),
        "busy_ms_per_token": per_token(busy_ns / NS_PER_MS),
        "busy_mib_per_s": mib_per_s(read_bytes, busy_ns),
        "waste_pct": None if not read_bytes else (read_bytes - req_bytes) / read_bytes * 100,
        "waste_mib_per_token": per_token((read_bytes - req_bytes) / MIB),
        "median_read_bytes": weighted_median(read_sizes),
        "latency_us": latency_ladder(every),
        "latency_hist": latency_histogram(every),
        "by_size": [{"kib": kib, "label": bucket_label(kib), "reads": count, "mib": nbytes / MIB,
                     "mib_per_s": mib_per_s(nbytes, ns), "us_per_read": ns / count / 1e3}
                    for kib, (count, nbytes, ns) in sorted(by_size.items())],
        "by_lane": [{"lane": lane, "reads_per_token": per_token(count),
                     "mib_per_token": per_token(nbytes / MIB),
                     "busy_ms_per_token": per_token(ns / NS_PER_MS),
                     "mib_per_s": mib_per_s(nbytes, ns)}
                    for lane, (count, nbytes, ns) in sorted(by_lane.items())],
        "spec": {"reads": by_spec[1][0], "mib_per_token": per_token(by_spec[1][1] / MIB),
                 "share_of_bytes": ratio(by_spec[1][1], read_bytes)},
        "demand_vs_spec": [
            {"kind": kind, "reads": by_spec[flag][0],
             "mib_per_token": per_token(by_spec[flag][1] / MIB),
             "share_of_bytes": ratio(by_spec[flag][1], read_bytes),
             "p50_us": scaled(latency[str(flag)].rank(1, 2), 1e3),
             "p99_us": scaled(latency[str(flag)].rank(99, 100), 1e3)}
            for kind, flag in (("demand", 0), ("speculative", 1))],
        "by_layer": [{"layer": layer, "reads_per_token": per_token(count),
                      "mib_per_token": per_token(nbytes / MIB),
                      "mean_latency_us": ns / count / 1e3}
                     for layer, (count, nbytes, ns) in sorted(by_layer.items())],
        "hot_experts": tables["experts"][:HOT_EXPERTS],
        "adjacency": {"reads_per_token": per_token(reads),
                      "runs_per_token": per_token(runs) if fold.adjacent else None,
                      "coalesce_factor": ratio(reads, runs) if fold.adjacent else None},
        "reuse": reuse(fold.sequence, phases) if fold.sequence is not None else None,
        "token_mib": ladder([t[4] / MIB for t in tokens]),
        "token_reads": ladder([t[3] for t in tokens]),
        "heaviest": [io_token(t) for t in sorted(tokens, key=lambda t: -t[4])[:SLOWEST]],
        "per_token": [io_token(t) for t in tokens],
    }
    report["verdicts"] = io_verdicts(report)
    return report


HOT_EXPERTS = 10


def io_token(token):
    turn, phase, step, reads, nbytes = token
    return {"turn": turn, "phase": phase, "step": step, "mib": nbytes / MIB, "reads": reads}


def io_tables(trace, chosen):
    """Fold the phases' keyed sums into the report's tables: [reads, bytes, latency_ns] by
    size bucket, lane, spec and layer; reads by read size; hot (layer, expert) pairs."""
    tables = {name: defaultdict(lambda: [0, 0, 0]) for name in ("size", "lane", "spec", "layer")}
    tables["spec"][0], tables["spec"][1] = [0, 0, 0], [0, 0, 0]
    read_sizes = Counter()
    experts = defaultdict(lambda: [0, 0])
    for totals in chosen:
        lane_keys = key_values(trace, totals.by_lane, ("lane", "read_bytes", "spec", "layer"))
        for (key, count), (lane, size, spec, layer) in zip(totals.by_lane.items(), lane_keys):
            ns = totals.lane_ns[key]
            read_sizes[size] += count
            for name, group in (("size", size_bucket(size)), ("lane", lane), ("spec", spec),
                                ("layer", layer)):
                entry = tables[name][group]
                entry[0] += count
                entry[1] += count * size
                entry[2] += ns
        expert_keys = key_values(trace, totals.by_expert, ("layer", "expert", "read_bytes"))
        for count, (layer, expert, size) in zip(totals.by_expert.values(), expert_keys):
            entry = experts[layer, expert]
            entry[0] += count
            entry[1] += count * size
    tables["read_size"] = read_sizes
    tables["experts"] = [{"layer": layer, "expert": expert, "reads": count, "mib": nbytes / MIB}
                         for (layer, expert), (count, nbytes) in
                         sorted(experts.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    return tables


def meta_int(meta, key):
    value = meta.get(key, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 4 else 0


def scaled(value, scale):
    return None if value is None else value / scale


def weighted_median(counts):
    """Nearest-rank median of values given as {value: count}; None when there are none."""
    total = sum(counts.values())
    rank = total // 2
    for value in sorted(counts):
        rank -= counts[value]
        if rank < 0:
            return value
    return None


LADDER = (("p50", 1, 2), ("p90", 9, 10), ("p99", 99, 100), ("p999", 999, 1000))


def latency_ladder(latencies):
    """min, mean, p50, p90, p99, p99.9 and max of the latencies (SortedParts), in us."""
    if not len(latencies):
        return {name: None for name in ("min", "mean", "p50", "p90", "p99", "p999", "max")}
    ladder_us = {"min": latencies.minimum() / 1e3,
                 "mean": latencies.total() / len(latencies) / 1e3}
    ladder_us.update((name, latencies.rank(num, den) / 1e3) for name, num, den in LADDER)
    ladder_us["max"] = latencies.maximum() / 1e3
    return ladder_us


def latency_histogram(latencies):
    """log2 buckets in us: [0, 1), then [2^k, 2^(k+1)); the non-empty ones, in order.

    Counted by bisecting the sorted latencies at each bucket's upper edge."""
    buckets = []
    below, low_us, n = 0, 0, len(latencies)
    while below < n:
        high_us = max(1, low_us * 2)
        upto = latencies.count_below(high_us * 1000)
        if upto > below:
            buckets.append({"lo_us": low_us, "hi_us": high_us, "count": upto - below})
        below, low_us = upto, high_us
    return buckets


CACHE_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)


def reuse(sequence, phases):
    """Footprint, re-reads and the LRU curve of the selected reads (see lru_hit_bytes)."""
    items, sizes = sequence.items, sequence.sizes
    if len(set(sequence.phases)) > 1:
        keep = [phase in phases for phase in sequence.phases]
        items, sizes = array("Q", compress(items, keep)), array("Q", compress(sizes, keep))
    first_size = dict(zip(reversed(items), reversed(sizes)))  # item -> its size
    footprint = sum(first_size.values())
    total = sum(sizes)
    reread = total - footprint
    # A cache as large as the footprint never evicts: every re-read hits.
    simulated = [fraction for fraction in CACHE_FRACTIONS if fraction != 1]
    hits = dict(zip(simulated, lru_hits(items, sizes, [footprint * f for f in simulated])))
    hits[1] = reread
    curve = [{"fraction": fraction, "cache_mib": footprint * fraction / MIB,
              "hit_share": ratio(hits[fraction], total)} for fraction in CACHE_FRACTIONS]
    return {"unique_mib": footprint / MIB, "reread_mib": reread / MIB, "lru": curve}


PARALLEL_MIN_READS = 200_000


def lru_hits(items, sizes, capacities):
    """lru_hit_bytes for each capacity; on a long sequence, half of them in a child process."""
    def simulate(part):
        return [lru_hit_bytes(items, sizes, capacity) for capacity in part]
    if len(items) < PARALLEL_MIN_READS or len(capacities) < 2 or not hasattr(os, "fork"):
        return simulate(capacities)
    half = len(capacities) // 2
    child = Forked(simulate, capacities[half:])
    try:
        mine = simulate(capacities[:half])
        theirs = child.result()
    except BaseException:
        child.cancel()
        raise
    return mine + (theirs if theirs is not None else simulate(capacities[half:]))


def lru_hit_bytes(items, sizes, capacity):
    """Bytes an LRU cache of `capacity` bytes, fed these reads in order, would have served.

    Simulated: a hit moves the item to the front; a miss inserts it and evicts from the back
    until the cache fits. What stays is always the longest prefix of the recency stack that
    fits, so an item hits iff the bytes of the distinct other items read since its previous
    read, plus its own, are <= capacity (its stack distance); first reads miss.
    """
    cache = OrderedDict()
    used = hit_bytes = 0
    touch, evict = cache.move_to_end, cache.popitem
    for item, size in zip(items, sizes):
        if item in cache:
            touch(item)
            hit_bytes += size
            continue
        cache[item] = size
        used += size
        while used > capacity:
            used -= evict(last=False)[1]
    return hit_bytes


def io_verdicts(report):
    verdicts = []
    median = report["median_read_bytes"]
    rates = [(row["mib_per_s"], row) for row in report["by_size"] if row["mib_per_s"]]
    if median is not None and rates:
        median_kib = median / 1024
        best_rate, best = max(rates, key=lambda pair: pair[0])
        home = next(row for row in report["by_size"] if row["kib"] == size_bucket(median))
        fraction = ratio(home["mib_per_s"] or 0, best_rate)
        flagged = median_kib < LATENCY_BOUND_KIB and fraction < LATENCY_BOUND_RATE
        verdicts.append(verdict("latency_bound", flagged,
            f"{'LATENCY-BOUND reads' if flagged else 'reads not latency-bound'}: the median "
            f"read is {median_kib:.0f} KiB and its size class moves {fraction:.0%} of the best "
            f"class's MiB/s ({best['label']}; flagged below {LATENCY_BOUND_KIB} KiB and "
            f"{LATENCY_BOUND_RATE:.0%})"))
    busy = [row["busy_ms_per_token"] for row in report["by_lane"]]
    if len(busy) > 1:
        spread = ratio(max(busy), min(busy))
        flagged = spread is None or spread > LANE_IMBALANCE
        verdicts.append(verdict("lanes_unbalanced", flagged,
            f"{'UNBALANCED lanes' if flagged else 'lanes balanced'}: the busiest lane is busy "
            f"{num(spread, '.2f', 'infinitely many')}x as long as the least busy "
            f"({'>' if flagged else '<='} {LANE_IMBALANCE}x)"))
    factor = report["adjacency"]["coalesce_factor"]
    if factor is not None:
        flagged = factor > COALESCE_WORTH
        verdicts.append(verdict("coalescing", flagged,
            f"{'coalescing WORTHWHILE' if flagged else 'coalescing not worthwhile'}: perfect "
            f"merging would issue {factor:.2f}x fewer requests ({'>' if flagged else '<='} "
            f"{COALESCE_WORTH}x)"))
    reuse_ = report["reuse"]
    if reuse_ is not None:
        half = next(point for point in reuse_["lru"] if point["fraction"] == 0.5)
        if half["hit_share"] is not None:
            flagged = half["hit_share"] > CACHE_WORTH
            verdicts.append(verdict("cache", flagged,
                f"{'cache WORTHWHILE' if flagged else 'cache not worthwhile'}: an extra LRU of "
                f"half the footprint ({half['cache_mib']:.1f} MiB) would serve "
                f"{half['hit_share']:.0%} of the bytes read ({'>' if flagged else '<='} "
                f"{CACHE_WORTH:.0%})"))
    return verdicts


# ── two processes for a large file ────────────────────────────────────────────────────────────
# A plain file this large is folded in two halves at once, split at a token boundary: the
# child process folds the second half and sends its fold back to be merged. Folds are sums,
# so merging is adding; --skip needs every earlier token of a turn, so it reads in one piece.
PARALLEL_MIN_BYTES = 8 << 20
SPLIT_SCAN_LINES = 1 << 16


def read_trace(path, kind, required, columns, make_fold, selection, skip_bad_rows, warn):
    """Fold a trace of `kind`; returns (trace, fold)."""
    with Trace(path, skip_bad_rows, warn) as trace:
        trace.require(kind, required)
        split = split_point(trace) if selection.skip == 0 and hasattr(os, "fork") else None
        child = Forked(fold_part, path, split, columns, make_fold, skip_bad_rows) if split \
            else None
        try:
            if child:
                trace.limit(split)
            fold = fold_batches(trace, make_fold(trace), columns)
            if child:
                merge_child(trace, fold, child, warn, columns, make_fold, split)
                child = None
        finally:
            if child:
                child.cancel()
    report_skipped(trace, warn)
    return trace, fold


def fold_batches(trace, fold, columns):
    for batch in trace.batches(**columns):
        fold.feed(batch)
    fold.finish()
    return fold


def split_point(trace):
    """A byte offset near the middle of the rows where a new token starts, or None."""
    if trace.body_start is None or not all(c in trace.columns for c in TOKEN_COLUMNS):
        return None
    size = os.path.getsize(trace.path)
    if size - trace.body_start < PARALLEL_MIN_BYTES:
        return None
    positions = [trace.columns.index(c) for c in TOKEN_COLUMNS]
    with open(trace.path, "rb") as f:
        f.seek(trace.body_start + (size - trace.body_start) // 2)
        f.readline()  # the rest of a line cut in the middle
        first = None
        for _ in range(SPLIT_SCAN_LINES):
            offset, line = f.tell(), f.readline()
            if not line:
                return None
            fields = line.rstrip(b"\r\n").split(b",")
            if b'"' in line or len(fields) != len(trace.columns):
                continue
            key = [fields[p] for p in positions]
            if first is None:
                first = key
            elif key != first:
                return offset
    return None


TOKEN_COLUMNS = ("turn", "phase", "step")


class Forked:
    """function(*args) run in a forked child process; result() is what it returned, or None
    if the child could not be started or died (the caller then does the work itself)."""

    def __init__(self, function, *args):
        self.pid = None
        try:
            read_end, write_end = os.pipe()
            self.pid = os.fork()
        except OSError:
            return
        if self.pid:
            os.close(write_end)
            self.reader = os.fdopen(read_end, "rb")
            return
        os.close(read_end)
        status = 1
        try:
            with os.fdopen(write_end, "wb") as out:
                pickle.dump(function(*args), out, pickle.HIGHEST_PROTOCOL)
            status = 0
        finally:
            os._exit(status)  # never the parent's exit handlers or buffered output

    def result(self):
        if not self.pid:
            return None
        try:
            data = self.reader.read()
        finally:
            self.reader.close()
            os.waitpid(self.pid, 0)
        return pickle.loads(data) if data else None

    def cancel(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.reader.close()


def fold_part(path, split, columns, make_fold, skip_bad_rows):
    """In the child: fold the rows from `split` on; what it returns travels back pickled."""
    said = []
    try:
        with Trace(path, skip_bad_rows, said.append, byte_range=(split, None)) as trace:
            fold = fold_batches(trace, make_fold(trace), columns)
            fold.detach()
            return "ok", (fold, trace.skipped, trace.first_skipped, said)
    except TraceError as problem:
        return "error", (problem.path, problem.line, problem.message, said)


def merge_child(trace, fold, child, warn, columns, make_fold, split):
    status, payload = child.result() or ("failed", None)
    if status == "error":
        path, line, message, said = payload
        for message_said in said:
            warn(message_said)
        raise TraceError(path, line, message)
    if status != "ok":  # the child died: fold its half here
        with Trace(trace.path, trace.skip_bad_rows, warn, byte_range=(split, None)) as rest:
            other = fold_batches(rest, make_fold(rest), columns)
            skipped, first_skipped, said = rest.skipped, rest.first_skipped, []
    else:
        other, skipped, first_skipped, said = payload
    for message in said:
        warn(message)
    trace.skipped += skipped
    trace.first_skipped = trace.first_skipped or first_skipped
    fold.merge(other)


# ── the pair ──────────────────────────────────────────────────────────────────────────────────
PAIR_META = ("model", "arch", "n_layer")


def pair_report(compute, io):
    """Both reports of one traced run, and what only the pair can tell: I/O per decoded
    token (the compute trace knows every token, including those that read nothing), side by
    side with compute per layer."""
    warnings = pair_warnings(compute, io)
    tokens = {(t["turn"], t["phase"], t["step"]) for t in compute["per_token"]}
    readers = {(t["turn"], t["phase"], t["step"]) for t in io["per_token"]}
    if not readers & tokens:
        warnings.append("the traces share no token (turn, phase, step): not one run's pair")
    elif readers - tokens:
        warnings.append(f"{len(readers - tokens)} token(s) of the io trace are not among the "
                        f"compute trace's: their reads are still counted")
    n = len(tokens)
    per_decoded = io["tokens"] / n  # io figures are per read-token; these are per token
    categories = {c["category"]: c for c in compute["by_category"]}
    io_layers = {row["layer"]: row for row in io["by_layer"]}
    compute_layers = {row["layer"]: row for row in compute["by_layer"]}
    by_layer = [{"layer": layer,
                 "compute_ms_per_token": compute_layers.get(layer, {}).get("ms_per_token", 0.0),
                 "majflt_per_token": compute_layers.get(layer, {}).get("majflt_per_token", 0.0),
                 "reads_per_token": io_layers.get(layer, {}).get("reads_per_token", 0.0)
                 * per_decoded,
                 "mib_per_token": io_layers.get(layer, {}).get("mib_per_token", 0.0)
                 * per_decoded}
                for layer in sorted(set(compute_layers) | set(io_layers))]
    pair = {
        "tokens": n, "tokens_without_reads": len(tokens - readers),
        "compute_ms_per_token": compute["ms_per_token"],
        "faulting_ms_per_token": compute["faults"]["ms_per_token"],
        # A layer-granularity trace has no per-node detail to classify.
        "experts_ms_per_token": categories.get("experts", {}).get("ms_per_token", 0.0)
        if categories else None,
        "router_ms_per_token": categories.get("router", {}).get("ms_per_token", 0.0)
        if categories else None,
        "io_reads_per_token": io["reads"] / n,
        "io_mib_per_token": io["read_bytes"] / MIB / n,
        "io_busy_ms_per_token": io["busy_ms_per_token"] * per_decoded,
        "by_layer": by_layer, "warnings": warnings,
    }
    pair["verdicts"] = pair_verdicts(compute, pair)
    return {"schema": SCHEMA, "kind": "report", "compute": compute, "io": io, "pair": pair}


def pair_warnings(compute, io):
    warnings = []
    for key in PAIR_META:
        left, right = compute["meta"].get(key), io["meta"].get(key)
        if left is not None and right is not None and left != right:
            warnings.append(f"{key} differs: {left!r} in the compute trace, {right!r} in the io "
                            f"trace")
    left, right = compute["meta"].get("trace_id"), io["meta"].get("trace_id")
    if left is not None and right is not None and left != right:
        warnings.append(f"trace_id differs ({left} vs {right}): the files are from two runs")
    return warnings


def pair_verdicts(compute, pair):
    router = next((v for v in compute["verdicts"] if v["id"] == "router_wait"), None)
    if router is None:
        return []
    return [verdict("router_wait_vs_io", True,
        f"routing nodes take {pair['router_ms_per_token']:.2f} ms per token while the read "
        f"lanes are busy {pair['io_busy_ms_per_token']:.2f} ms per token: the router time is "
        f"the wait for these reads")]


def read_pair(args, warn):
    selection = selection_from(args)
    trace, fold = read_compute(args.compute_path, selection, args.skip_bad_rows, warn)
    compute = compute_report(trace, fold, selection)
    trace, fold = read_io(args.io_path, selection, True, args.skip_bad_rows, warn, cache=True)
    io = io_report(trace, fold, selection)
    report = pair_report(compute, io)
    for message in report["pair"]["warnings"]:
        warn(message)
    return report


# ── text rendering ────────────────────────────────────────────────────────────────────────────
BAR_WIDTH = 20
OP_BAR_WIDTH = 12  # the by-op table is wide already


def safe(text):
    """Trace strings are untrusted: control characters (an ANSI escape, a newline in a node
    name) are shown as escapes, never sent to the terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


TEXT_WIDTH = 100


def wrap(text, indent="  "):
    """Prose lines folded to TEXT_WIDTH columns, continuation lines indented."""
    return textwrap.wrap(text, TEXT_WIDTH, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [""]


def num(value, spec, missing="n/a"):
    """format(value, spec), or 'n/a' for an undefined figure."""
    return missing if value is None else format(value, spec)


def pct(fraction, spec="5.1f"):
    return "n/a" if fraction is None else format(fraction * 100, spec) + "%"


def bar(fraction, width=BAR_WIDTH):
    filled = int(round(max(0.0, min(1.0, fraction or 0.0)) * width))
    return "#" * filled + "." * (width - filled)


def header_lines(report, keys):
    meta = report["meta"]
    line = " ".join(f"{key}={safe(meta.get(key, '?'))}" for key in keys)
    lines = [line]
    picked = [f"phase {report['phase']}"] + selection_words(report["selection"])
    return lines, ", ".join(picked)


def selection_words(selection):
    words = []
    if selection["turns"]:
        words.append("turn " + ",".join(map(str, selection["turns"])))
    low, high = selection["steps"]
    if low is not None or high is not None:
        words.append(f"steps {'' if low is None else low}:{'' if high is None else high}")
    if selection["skip"]:
        words.append(f"first {selection['skip']} token(s) of each turn skipped")
    return words


def render_compute(report, top=12, show_layers=False, ascii_only=False):
    lines, picked = header_lines(report, ("model", "arch", "n_layer", "n_threads"))
    lines[0] = lines[0].replace("n_threads=", "threads=")
    fallback = " (no decode rows: all rows used)" if report["phase"] == "all" and \
        report["selection"]["phase"] == "default" else ""
    lines.append(f"tokens={report['tokens']} ({picked}){fallback}  "
                 f"{report['granularity']} granularity  "
                 f"nodes/token={report['nodes_per_token']:.0f}  "
                 f"measured compute={report['ms_per_token']:.2f} ms/token  "
                 f"majflt={report['majflt_per_token']:.1f}/token")
    if report["granularity"] == "layer":
        lines += [""] + wrap("note: one barrier per layer, so these absolutes sit close to an "
                             "untraced run; there is no per-op detail inside a segment.", "    ")
        lines += render_segments(report)
        lines += render_tokens(report, "ms", "ms", ascii_only)
        lines += render_verdicts(report)
        return "\n".join(lines) + "\n"
    lines += [""] + wrap("note: every node was isolated and synchronized to be measured; the "
                         "barriers inflate the absolutes. Trust the proportions.", "    ")
    lines += render_by_op(report, top)
    lines += render_faults(report)
    lines += render_categories(report)
    if show_layers:
        lines += render_layers(report)
    lines += render_tokens(report, "ms", "ms", ascii_only)
    lines += render_verdicts(report)
    return "\n".join(lines) + "\n"


def render_by_op(report, top):
    ops = report["by_op"]
    shown = ops[:top]
    lines = ["", f"by op ({len(shown)} of {len(ops)}, slowest first; us = one node's wall time)",
             f"{'op':<16}{'ms/token':>9}{'share':>7}{'majflt/tok':>11}{'nodes/tok':>10}"
             f"{'avg us':>9}{'p50 us':>9}{'p99 us':>9}{'max us':>10}"]
    for op in shown:
        lines.append(f"{safe(op['op']):<16}{op['ms_per_token']:9.2f}{pct(op['share'], '6.1f'):>7}"
                     f"{op['majflt_per_token']:11.1f}{op['nodes_per_token']:10.1f}"
                     f"{op['avg_us']:9.1f}{op['p50_us']:9.1f}{op['p99_us']:9.1f}"
                     f"{op['max_us']:10.1f}  {bar(op['share'], OP_BAR_WIDTH)}")
    return lines


def render_faults(report):
    faults = report["faults"]
    if not faults["by_op"]:
        return []
    lines = ["", "fault attribution: nodes that took major page faults (flash reads billed "
                 "as compute)"]
    for op in faults["by_op"][:8]:
        lines.append(f"  {safe(op['op']):<16}{op['majflt_per_token']:9.1f} majflt/tok  in "
                     f"{op['ms_per_token']:8.2f} ms/tok ({pct(op['share'], '.1f')} of compute)")
    lines.append(f"  {'TOTAL':<16}{faults['majflt_per_token']:9.1f} majflt/tok  in "
                 f"{faults['ms_per_token']:8.2f} ms/tok ({pct(faults['share'], '.1f')} of compute)")
    lines.append("  ^ the time of faulting nodes is mostly flash wait, not arithmetic: take it "
                 "out before calling the model compute-bound.")
    return lines


def render_categories(report):
    rows = report["by_category"]
    if not rows:
        return []
    lines = [""] + wrap("by node category (names classified as in llama.cpp; unnamed node_<N> "
                        "nodes take the category of the named node before them)", "") + [
             f"  {'category':<14}{'ms/token':>9}{'share':>7}{'majflt/tok':>11}{'nodes/tok':>10}"]
    for row in rows:
        lines.append(f"  {row['category']:<14}{row['ms_per_token']:9.2f}"
                     f"{pct(row['share'], '6.1f'):>7}{row['majflt_per_token']:11.1f}"
                     f"{row['nodes_per_token']:10.1f}  {bar(row['share'])}")
    if report["unclassified"]:
        names = ", ".join(f"{safe(u['name']) or '(empty)'} {u['ms_per_token']:.2f}"
                          for u in report["unclassified"][:UNCLASSIFIED_SHOWN])
        lines += wrap(f"  unclassified base names, ms/token (extend CATEGORY_NAMES): {names}")
    return lines


UNCLASSIFIED_SHOWN = 5
SPARK_WIDTH = 64
SPARK_UNICODE = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-=+*#@"


def sparkline(values, ascii_only=False, width=SPARK_WIDTH):
    """One character per token (per group of tokens, the group's maximum, past `width`),
    scaled from 0 to the largest value."""
    if not values:
        return ""
    group = -(-len(values) // width)
    peaks = [max(values[i:i + group]) for i in range(0, len(values), group)]
    levels = SPARK_ASCII if ascii_only else SPARK_UNICODE
    top = max(peaks) or 1
    return "".join(levels[min(len(levels) - 1, int(peak / top * len(levels)))] for peak in peaks)


def render_tokens(report, value, unit, ascii_only):
    """Per-token distribution, the slowest tokens and a sparkline of the run."""
    dist = report[f"token_{value}"]
    name = "heaviest" if "heaviest" in report else "slowest"
    per_token = [t[value] for t in report["per_token"]]
    group = -(-len(per_token) // SPARK_WIDTH)
    lines = ["", f"per token ({unit}): p50 {dist['p50']:.2f}  p90 {dist['p90']:.2f}  "
                 f"p99 {dist['p99']:.2f}  max {dist['max']:.2f}",
             f"  run  |{sparkline(per_token, ascii_only)}|  (trace order"
             f"{f', max of every {group} tokens' if group > 1 else ''}; 0 to {dist['max']:.2f})",
             *wrap(f"  {name}: " + ", ".join(
                 f"turn {t['turn']} step {t['step']} {t[value]:.2f}"
                 + (f" ({t['majflt']} majflt)" if t.get("majflt") else "")
                 for t in report[name]))]
    reads = report.get("token_reads")
    if reads:
        lines.insert(2, f"per token (reads): p50 {reads['p50']}  p90 {reads['p90']}  "
                        f"p99 {reads['p99']}  max {reads['max']}")
    decodes = report.get("decodes")
    if decodes and decodes["speculative"]:
        lines.append(f"  speculative decoding: {decodes['decodes']} decodes covering "
                     f"{decodes['positions']} positions: "
                     f"{num(decodes[f'{value}_per_decode'], '.2f')} {unit} per decode, "
                     f"{num(decodes[f'{value}_per_position'], '.2f')} {unit} per generated "
                     f"position")
    return lines


def render_verdicts(report):
    if not report["verdicts"]:
        return []
    return ["", "verdicts"] + [line for v in report["verdicts"] for line in wrap(f"  {v['text']}")]


def render_layers(report):
    rows = report["by_layer"]
    peak = max((row["ms_per_token"] for row in rows), default=0) or 1
    lines = [""] + wrap("by layer (layer -1: outside every layer, i.e. embeddings and output "
                        "head; nodes with no layer index that run inside a layer are counted in "
                        f"it, {report['reattributed_ms_per_token']:.2f} ms/token re-attributed)",
                        "")
    lines.append(f"  {'layer':>5}{'ms/token':>10}{'share':>7}{'majflt/tok':>11}")
    for row in rows:
        lines.append(f"  {row['layer']:>5}{row['ms_per_token']:10.2f}"
                     f"{pct(row['share'], '6.1f'):>7}{row['majflt_per_token']:11.1f}  "
                     f"{bar(row['ms_per_token'] / peak)}")
    return lines


def render_segments(report):
    rows = report["segments"]
    peak = max((row["ms_per_token"] for row in rows), default=0) or 1
    lines = ["", f"{'segment':<12}{'ms/token':>9}{'share':>7}{'majflt/tok':>11}"]
    for row in rows:
        lines.append(f"{safe(row['name']):<12}{row['ms_per_token']:9.2f}"
                     f"{pct(row['share'], '6.1f'):>7}{row['majflt_per_token']:11.1f}  "
                     f"{bar(row['ms_per_token'] / peak)}")
    return lines


def render_io(report, ascii_only=False):
    lines, picked = header_lines(report, ("model", "io_threads", "o_direct", "overlap"))
    per = "per read-token"
    lines.append(f"read-tokens={report['tokens']} ({picked}; tokens that read: a token served "
                 f"entirely from cache has no rows)")
    lines.append(f"reads={report['reads']} ({report['reads_per_token']:.1f} {per})  "
                 f"read={report['mib_per_token']:.2f} MiB {per}")
    lines.append(f"lane-busy bandwidth={num(report['busy_mib_per_s'], '.0f')} MiB/s over all "
                 f"lanes ({report['busy_ms_per_token']:.1f} ms lane-busy {per})")
    lines.append(f"alignment waste={num(report['waste_pct'], '.1f')}% "
                 f"({report['waste_mib_per_token']:.2f} MiB {per} read but not wanted)")
    lines += render_latency(report)
    lines += render_sizes(report)
    lines += ["", "by lane (a lane busy far less than the others is waiting for work: the "
                  "drive is not the limit there)",
              f"  {'lane':>4}{'reads/tok':>11}{'MiB/tok':>10}{'busy ms/tok':>13}{'MiB/s':>8}"]
    for row in report["by_lane"]:
        lines.append(f"  {row['lane']:>4}{row['reads_per_token']:11.1f}{row['mib_per_token']:10.2f}"
                     f"{row['busy_ms_per_token']:13.2f}{num(row['mib_per_s'], '.0f'):>8}")
    lines += render_demand_spec(report)
    lines += render_io_layers(report)
    adjacency = report["adjacency"]
    if adjacency["runs_per_token"] is not None:
        lines += ["", "adjacency: requested extents, merged where they touch or overlap",
                  f"  {adjacency['reads_per_token']:.1f} reads/token span "
                  f"{adjacency['runs_per_token']:.1f} contiguous runs/token",
                  f"  coalescing factor {num(adjacency['coalesce_factor'], '.2f')}: perfectly "
                  f"coalesced, that many times fewer requests for the same bytes"]
    lines += render_reuse(report["reuse"])
    lines += render_tokens(report, "mib", "MiB", ascii_only)
    lines += render_verdicts(report)
    return "\n".join(lines) + "\n"


HIST_WIDTH = 40


def render_sizes(report):
    lines = ["", "by read size (bucket: largest power of two <= KiB read)",
             f"  {'size':<14}{'reads':>9}{'MiB':>10}{'MiB/s':>9}{'us/read':>10}"]
    for row in report["by_size"]:
        lines.append(f"  {row['label']:<14}{row['reads']:>9}{row['mib']:10.1f}"
                     f"{num(row['mib_per_s'], '9.0f'):>9}{row['us_per_read']:10.1f}")
    return lines


def render_latency(report):
    latency = report["latency_us"]
    lines = ["", "per-read latency (us): " + "  ".join(
        f"{name} {num(latency[key], '.1f')}" for name, key in (
            ("min", "min"), ("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"),
            ("p99.9", "p999"), ("max", "max")))]
    hist = report["latency_hist"]
    peak = max((row["count"] for row in hist), default=0) or 1
    lines.append(f"  {'us':>21} : {'count':<9}distribution")
    for row in hist:
        stars = "*" * int(round(row["count"] / peak * HIST_WIDTH))
        lines.append(f"  {row['lo_us']:>9} -> {row['hi_us'] - 1:<9}: {row['count']:<9}"
                     f"|{stars:<{HIST_WIDTH}}|")
    return lines


def render_demand_spec(report):
    spec = report["spec"]
    if not spec["reads"]:
        return []
    lines = ["", f"speculative: {spec['reads']} reads, {spec['mib_per_token']:.2f} MiB per "
                 f"read-token ({pct(spec['share_of_bytes'], '.1f')} of bytes read)",
             f"  {'':<12}{'reads':>9}{'MiB/tok':>10}{'share':>8}{'p50 us':>10}{'p99 us':>10}"]
    for row in report["demand_vs_spec"]:
        lines.append(f"  {row['kind']:<12}{row['reads']:>9}{row['mib_per_token']:10.2f}"
                     f"{pct(row['share_of_bytes'], '7.1f'):>8}{num(row['p50_us'], '10.1f'):>10}"
                     f"{num(row['p99_us'], '10.1f'):>10}")
    return lines


def render_io_layers(report):
    lines = ["", "by layer", f"  {'layer':>5}{'reads/tok':>11}{'MiB/tok':>10}{'mean us':>10}"]
    for row in report["by_layer"]:
        lines.append(f"  {row['layer']:>5}{row['reads_per_token']:11.1f}"
                     f"{row['mib_per_token']:10.2f}{row['mean_latency_us']:10.1f}")
    hot = report["hot_experts"]
    if hot:
        lines += wrap("  hottest (layer, expert) by bytes read: " + ", ".join(
            f"({row['layer']}, {row['expert']}) {row['mib']:.1f} MiB" for row in hot))
    return lines


def render_reuse(reuse_):
    if reuse_ is None:
        return []
    lines = ["", f"re-reads: footprint {reuse_['unique_mib']:.1f} MiB of distinct extents, "
                 f"{reuse_['reread_mib']:.1f} MiB read again",
             "  an extra LRU cache of      would have served"]
    for point in reuse_["lru"]:
        label = f"{point['fraction']:g}" if point["fraction"] == 1 else \
            f"1/{round(1 / point['fraction'])}"
        lines.append(f"  {label:>4} footprint {point['cache_mib']:9.1f} MiB  "
                     f"{pct(point['hit_share'], '6.1f')} of bytes read")
    return lines


def render_pair(report, top=12, ascii_only=False):
    compute, io, pair = report["compute"], report["io"], report["pair"]
    meta = {**io["meta"], **compute["meta"]}
    picked = ", ".join([f"phase {compute['phase']}"] + selection_words(compute["selection"]))
    lines = [" ".join(f"{key}={safe(meta.get(key, '?'))}" for key in (
        "model", "arch", "n_layer", "n_threads", "io_threads", "o_direct", "overlap")),
        f"compute: {safe(compute['path'])}   io: {safe(io['path'])}",
        f"tokens={pair['tokens']} (from the compute trace; {picked}), "
        f"{pair['tokens_without_reads']} of them read nothing"]
    lines += [f"warning: {safe(message)}" for message in pair["warnings"]]
    lines += ["", "per decoded token",
              f"  compute {pair['compute_ms_per_token']:.2f} ms, of which faulting nodes "
              f"{pair['faulting_ms_per_token']:.2f} ms, " + (
                  "routed experts and router n/a (a layer-granularity trace)"
                  if pair["experts_ms_per_token"] is None else
                  f"routed experts {pair['experts_ms_per_token']:.2f} ms, router "
                  f"{pair['router_ms_per_token']:.2f} ms"),
              f"  flash: {pair['io_reads_per_token']:.1f} reads, "
              f"{pair['io_mib_per_token']:.2f} MiB, "
              f"lanes busy {pair['io_busy_ms_per_token']:.2f} ms",
              "", "by layer, per decoded token (compute by inferred layer)",
              f"  {'layer':>5}{'compute ms':>12}{'majflt':>9}{'reads':>9}{'MiB':>9}"]
    for row in pair["by_layer"]:
        lines.append(f"  {row['layer']:>5}{row['compute_ms_per_token']:12.2f}"
                     f"{row['majflt_per_token']:9.1f}{row['reads_per_token']:9.1f}"
                     f"{row['mib_per_token']:9.2f}")
    if compute["granularity"] == "layer":
        lines += render_segments(compute)
    else:
        lines += render_by_op(compute, top) + render_faults(compute) + render_categories(compute)
    lines += render_tokens(compute, "ms", "ms", ascii_only)
    lines += ["", f"flash reads (per read-token: {io['tokens']} tokens read)"]
    lines += render_latency(io)[1:]
    lines += render_sizes(io)
    lines += render_demand_spec(io) + render_reuse(io["reuse"])
    verdicts = compute["verdicts"] + io["verdicts"] + pair["verdicts"]
    lines += render_verdicts({"verdicts": verdicts})
    return "\n".join(lines) + "\n"


# ── command line ──────────────────────────────────────────────────────────────────────────────
EPILOG = """\
examples:
  decode-analyze report ct.csv io.csv           one run's two traces on one screen
  decode-analyze compute ct.csv --layers        compute by op, category, layer and token
  decode-analyze compute ct.csv --turn 2 --skip 8   one session turn, warm-up left out
  decode-analyze io io.csv --adjacent --cache   reads, plus merging and caching what-ifs
  decode-analyze io io.csv --format json        the whole report as one JSON object
  zcat ct.csv.gz | decode-analyze compute -     stdin ('-'); gzip files also read directly

exit status: 0 ok, 1 bad or unreadable input, 2 usage, 130 interrupted, 141 output closed.
"""


def steps_range(text):
    """'A:B', inclusive; either side may be empty."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return (int(low) if low else None, int(high) if high else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B (either side optional), got {text!r}")


def non_negative(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def build_parser():
    parser = argparse.ArgumentParser(
        prog="decode-analyze", description=__doc__, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="{compute,io,report}",
                                     required=True)

    def subcommand(name, help_text, description, paths=(("path", "the trace file"),)):
        sub = commands.add_parser(name, help=help_text, description=description,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  epilog=EPILOG)
        for path, what in paths:
            sub.add_argument(path, help=f"{what} ('-' for stdin; gzip is detected)")
        sub.add_argument("--format", choices=("text", "json"), default="text",
                         help="text tables (default) or the report as one JSON object")
        sub.add_argument("--phase", choices=("decode", "prefill", "all"),
                         help="rows to use (default: decode, or all rows when there are "
                              "no decode rows)")
        sub.add_argument("--turn", type=non_negative, action="append", metavar="N",
                         help="only this session turn (repeatable)")
        sub.add_argument("--steps", type=steps_range, metavar="A:B",
                         help="only tokens whose step is in A..B, inclusive (A: or :B too)")
        sub.add_argument("--skip", type=non_negative, default=0, metavar="N",
                         help="drop the first N tokens of each turn (warm-up)")
        sub.add_argument("--ascii", action="store_true",
                         help="plain ASCII sparklines (no Unicode block characters)")
        sub.add_argument("--skip-bad-rows", action="store_true",
                         help="skip malformed rows (counted on stderr) instead of stopping")
        return sub

    compute = subcommand("compute", "where compute time goes: by op, faults, layers",
                         "Where a token's compute time goes, from a compute trace (ct.csv).")
    compute.add_argument("--top", type=non_negative, default=12, metavar="N",
                         help="how many ops the by-op table lists (default 12; JSON has all)")
    compute.add_argument("--layers", action="store_true", help="also print the by-layer table")
    io_parser = subcommand("io", "what the reads are made of: latency, sizes, lanes, layers",
                           "What the flash reads are made of, from an io trace (io.csv).")
    io_parser.add_argument("--adjacent", action="store_true",
                           help="count contiguous runs per token: the most merging could save")
    io_parser.add_argument("--cache", action="store_true",
                           help="re-reads and what an extra LRU cache would have served")
    pair = subcommand("report", "both traces of one run, on one screen",
                      "The compute and io traces of one run together: I/O per decoded token "
                      "(counting tokens that read nothing), compute and reads side by side per "
                      "layer, the most useful tables of both, and the verdicts.",
                      paths=(("compute_path", "the compute trace (ct.csv)"),
                             ("io_path", "the io trace (io.csv)")))
    pair.add_argument("--top", type=non_negative, default=8, metavar="N",
                      help="how many ops the by-op table lists (default 8)")
    return parser


class Warnings:
    """Collects warnings for stderr (and the JSON report), each said once."""

    def __init__(self, stream):
        self.stream, self.said = stream, []

    def __call__(self, message):
        if message not in self.said:
            self.said.append(message)
            print(f"decode-analyze: warning: {safe(message)}", file=self.stream)


def selection_from(args):
    return Selection(phase=args.phase, turns=set(args.turn) if args.turn else None,
                     steps=args.steps or (None, None), skip=args.skip)


def run(args, out, warn):
    if args.command == "report" and args.compute_path == args.io_path == "-":
        raise TraceError("<stdin>", 0, "stdin can carry only one of the two traces")
    selection = selection_from(args)
    if args.command == "report":
        report = read_pair(args, warn)
        render = lambda r: render_pair(r, args.top, args.ascii)  # noqa: E731
    elif args.command == "compute":
        trace, fold = read_compute(args.path, selection, args.skip_bad_rows, warn)
        report = compute_report(trace, fold, selection)
        render = lambda r: render_compute(r, args.top, args.layers, args.ascii)  # noqa: E731
    else:
        trace, fold = read_io(args.path, selection, args.adjacent, args.skip_bad_rows, warn,
                              args.cache)
        report = io_report(trace, fold, selection)
        render = lambda r: render_io(r, args.ascii)  # noqa: E731
    report.setdefault("warnings", list(warn.said))
    if args.format == "json":
        out.write(json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    else:
        out.write(render(report))
    out.flush()


def main(argv=None, out=None, err=None):
    """Run the CLI; returns the exit status (0 ok, 1 bad input, 2 usage, 130 interrupted)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    warn = Warnings(err)
    try:
        run(args, out, warn)
    except TraceError as problem:
        print(f"decode-analyze: {safe(problem)}", file=err)
        return 1
    except BrokenPipeError:
        # The reader (head, less) went away: stop quietly, and keep Python from complaining
        # about the unflushable stdout at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141
    except KeyboardInterrupt:
        return 130
    return 0


def run_and_exit():
    """The command line's entry point: main(), then exit without tearing down the heap.

    Freeing every plan, array and dict one by one at interpreter exit is time the user
    waits for and nothing needs; the output is flushed first."""
    status = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        status = 141
    os._exit(status)


if __name__ == "__main__":
    run_and_exit()
