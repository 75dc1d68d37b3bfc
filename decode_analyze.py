#!/usr/bin/env python3
"""decode-analyze: where a decoded token's time goes, and what its flash reads are made of.

Reads the two traces a traced BigMoeOnEdge decode writes: the compute trace (ct.csv: one row per
graph node, or per layer segment, per token) and the I/O trace (io.csv: one row per flash read).
Standard library only.

  compute CT         where compute goes: by op, node category, layer and token; page faults
  io IO              the flash reads: latency, sizes, alignment, lanes, layers, experts, speculation
  report CT IO       both traces of one run on one screen, I/O per decoded token
  diff BASE NEW...   before and after: runs (A1 A2 vs B1 B2) compared, tested over runs
  summary RUN...     a sweep of settings, one row a configuration (repeats: n, mean ±sd)
  timeline CT [IO]   v2 traces: each decode's wall, reads, waits and overlap, measured

Every field of the JSON reports, and what it holds: docs/json.md.

Tracing isolates every graph node behind a barrier (no operator fusion) and locks every read, so
a traced token is slower than an untraced one: its proportions are what to trust.

Map of this file. The foundations come first; then one part per report, each holding its
records, its fold, its report, its verdicts and its text and Markdown sections, in that order;
then what every report is written as. trace_io.py reads the files, checks every integer, states
the fold contract and splits a large file between processes. Each section calls only the
sections above it:

  units         unit_named (what a figure is counted in, from its name), num
  records       Record: every JSON object's fields, declared once; KINDS, every kind of report
                (its record and layout, registered by its part); a run's meta read
  tokens        Selection (which tokens a report covers), TokenBook, TokenFold (the fold base)
  statistics    SortedParts and percentile_index (the one percentile rule), Ratio and per (a
                per-token figure keeps its total: made per another count, it is divided once),
                PerToken, ratio, mann_whitney_p
  rendering     Column and table_lines (every text table), json_chunks (JSON made as it is
                written); the layout's pieces (Section, Block, View); the sections every report
                shares (header, engine, caveats)
  verdicts      verdict: a one-line conclusion; THRESHOLDS, the verdicts that compare one
                figure with a limit (threshold_verdict); verdict_blocks
  compute       CATEGORY_NAMES and classify_graph (node categories), TokenGraph, ComputeFold,
                compute_report, its verdicts (judged in analyze_compute), its Kind (record and
                layout)
  io            PhaseReads, IoFold (each layer's busiest lane and slowest read), ExpertLookups
                and ExpertCache (the engine's cache, every size in one pass), TokenModel (a
                token's flash I/O and cache management at any setting), WhatIf (what each
                setting would buy, per a token its view chooses: the model's band, never
                narrower than the machine's spread; a calibration only where it validated
                itself, unused_because), best_changes,
                io_report, io_findings; Clock, the one reader of v2 rows as intervals (the
                stall, the timeline, Perfetto)
  pair          pair_report: both traces of one run, per decoded token, with one set of
                settings (with_run_settings: the io half's, which joined the compute preamble's)
                and the engine's split, decided once (engine_split): decode = compute + cache
                management (the log's; no trace times it) + flash I/O (logged_flash_io: the
                log's where it agrees with the trace, else the I/O estimate; the what-if takes
                the same part), or + the stall when overlapped; the pair's verdicts weigh it;
                its what-if made per decoded token from the io half's totals
  timeline      v2 traces on one clock: decode spans, unions of intervals
  engine        the engine's own end-of-run lines (NAME.log) beside the tool's figures
  settings      KNOWN_SETTINGS (the values each setting takes: --set's and a preamble's),
                merged_settings: what a preamble lacks (--set, the log's, the trace's) joined,
                every word that yields on one fact in one warning
  runs          run_table (the one table of runs: summary's rows, diff's sides, the fit's
                configurations), Sample (what a pair gives a fit), repeats_of (outliers, a
                loaded level by compute), calibration: the token model's costs fitted on one
                model's runs and validated leave-one-out, against the defaults on the same runs
                (summary's, diff's sides)
  diff          DiffView (one run, checked), DiffSide (its runs), diff_report (every NEW side
                against BASE's, tested over runs), the regression gate; its text the answer
                first (moved_together: rows that moved as one, a line)
  summary       summary_runs (runs found and paired), one row per run, repeats grouped,
                a loaded row flagged (flagged_loaded)
  outputs       each Kind's layout drawn by text_of and markdown_of (its first view the text's,
                the rest folded); csv_chunks (tidy CSV); write_output: whole or not at all,
                never over an input; a long read's progress on a terminal (trace_io.Progress)
  pictures      Perfetto (export_perfetto) and SVG (svg_of)
  command line  COMMANDS (the registry), parser_of, analyze_* (read, sum up, judge; a pair's
                settings settled by its io half, what the reads show first: shown_by_reads),
                run_report (one run of diff or summary, read the one way), main
"""
import argparse
import codecs
import csv
import json
import heapq
import math
import operator
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import textwrap
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, OrderedDict, defaultdict, namedtuple
from collections.abc import Sequence
from contextlib import ExitStack
from functools import lru_cache, partial
from io import StringIO
from math import comb, erfc, fsum, sqrt
from itertools import accumulate, chain, compress, filterfalse, groupby, islice, repeat
from operator import add, attrgetter, ge, gt, itemgetter, le, mod, neg, not_, sub

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_io  # noqa: E402
from trace_io import (HOLD_ROWS, KEPT_VALUES, Columns, Drop, Reading, Trace,  # noqa: E402
                      TraceError, default_jobs, display_name, fold_file)

SCHEMA = 7  # of the JSON report: 2 added the I/O ranges, tool_version, undetermined verdicts;
# 3 the per-token samples: op_us_by_token, category_us_by_token, lane_bytes_by_token; 4 the
# engine's split: the busiest-lane I/O estimate, decode and compute per token in the pair;
# 5 the what-ifs (`what_if`) and the --cache curve on whole experts; 6 the engine's log
# (`engine`), the settings the preamble lacks (`settings`) and the run's own cache (`run_cache`);
# 7 diff over runs: `sides`, each figure's runs and spread, its test's n and unit, the drift
# check and the gate (its per-token series gone); compute `slow_stretch`
TOOL_VERSION = "0.5.0"
NS_PER_MS = 1e6
MIB = 1 << 20
DECODE, PREFILL = 1, 0
PHASE_NAMES = {DECODE: "decode", PREFILL: "prefill"}
SLOWEST = 5  # tokens named as the slowest (compute) or heaviest (io)
MAX_JOBS = 8


# ── units: what a figure is counted in, from its name ────────────────────────────────────────────
# A figure's name states its unit: a measure first (`faulting_ms_per_token` is in ms, though it
# names nodes), else what it counts (`reads_per_token`). CSV's unit column and diff's rows
# take it from here; a name that states none (`layer`, `lane`, a setting's value) is no figure.
MEASURE_WORDS = {"ms": "ms", "us": "us", "ns": "ns", "mib": "MiB", "kib": "KiB",
                 "bytes": "bytes", "pct": "%", "share": "fraction", "fraction": "fraction",
                 "ratio": "x", "factor": "x"}
COUNT_WORDS = {"majflt": "faults", "faults": "faults", "reads": "reads", "rereads": "reads",
               "runs": "runs", "tokens": "tokens", "experts": "experts",
               "evictions": "experts", "lookups": "lookups", "nodes": "nodes",
               "decodes": "decodes", "positions": "positions", "batches": "batches",
               "lanes": "lanes", "rows": "rows", "segments": "segments", "layers": "layers",
               "misses": "lookups", "k": "experts"}  # top_k: experts a token picks


def unit_named(name):
    """The unit a figure's name (a JSON field, or a diff row's words) states, or ''."""
    lowered = name.lower()
    if "mib/s" in lowered or "mib_per_s" in lowered:
        return "MiB/s"
    words = re.findall(r"[a-z0-9]+", lowered.replace("_", " "))
    for unit_words in (MEASURE_WORDS, COUNT_WORDS):
        for word in words:
            if word in unit_words:
                return unit_words[word]
    return ""


def counted(count, noun):
    """'1 lane', '4 lanes': a count and its noun, plural but for one."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def times(value, spec):
    """'2.50x', or 'n/a' (never 'n/ax') for an undefined ratio."""
    return "n/a" if value is None else f"{format(value, spec)}x"


def num(value, spec, missing="n/a"):
    """format(value, spec), or 'n/a' for an undefined figure."""
    return missing if value is None else format(value, spec)


# ── records: every JSON object a report holds, declared once ─────────────────────────────────────
# Each object a report holds is a Record: its fields in order. The report functions build
# every object through its Record, which refuses a field that is missing or not declared;
# `--format json` writes them as they are (json_chunks). What each field holds is said once,
# in docs/json.md, a section a Record; a test keeps its sections and fields the declared ones
# and walks real reports against them. A field's shape, when it holds more than a value, is
# another Record, ListOf(Record) or MapOf(Record): an object whose keys are data (ops, lanes).
ListOf = namedtuple("ListOf", "record")
MapOf = namedtuple("MapOf", "record")
# A figure, declared once where its Record declares its field: Shown says how it shows in a
# table (its column head and its format: digits, "%" a share, "text" an untrusted name, None
# as it is) and by what words `diff` compares it ("ms per token"; of a field that holds a
# record, {its field: words}); samples: what diff tests it on (a per_token field, or "op": the
# per-op samples). per: its denominator, TOTAL when it is a count over the whole selection (diff
# divides it by the tokens) and PER_TOKEN when it is per token of its own trace (a pair
# rescales it to per decoded token). Its unit is the one its name states (unit_named).
Shown = namedtuple("Shown", "header format diff samples", defaults=(None, None, None, None))
PER_TOKEN, TOTAL = "token", "total"
Field = namedtuple("Field", "name shape shown per")
COMPARED = "compared"  # of a list field: diff compares its rows by their key (Record.key)


class Record:
    """One kind of JSON object. Calling it with every field as a keyword builds the object (a
    dict, in the declared order). `later` fields may be left out, to be added after the object
    is built: the verdicts, judged from the finished report, and a written report's warnings.
    A table's row names its row by `key` (a field), and says in `by` what its rows are, for
    diff's titles ("by op"). per_token: the names of the fields that are per token of their
    trace (what a pair rescales)."""

    def __init__(self, name, fields, later=(), key=None, by=None):
        self.name, self.key, self.by = name, key, by
        # A field is its name, or (name, ...) with, in any order, its shape (a Record, ListOf
        # or MapOf), how it is Shown, and its denominator or COMPARED: told apart by their types.
        self.fields = []
        for name, *parts in ((entry,) if isinstance(entry, str) else entry for entry in fields):
            typed = {type(part): part for part in parts}
            shape = typed.get(Record) or typed.get(ListOf) or typed.get(MapOf)
            self.fields.append(Field(name, shape, typed.get(Shown), typed.get(str)))
        self.names = [field.name for field in self.fields]
        self.later = self.names if later is all else later
        self._built = [name for name in self.names if name not in self.later]
        self.per_token = {field.name for field in self.fields if field.per == PER_TOKEN}

    def __call__(self, **values):
        given = list(values)
        if given == self._built:
            return values  # given in the declared order: the object already (one per token)
        if sorted(set(given) - set(self.later)) != sorted(self._built):
            raise AssertionError(f"{self.name}: fields {sorted(given)} are not "
                                 f"{sorted(self._built)}")
        return {name: values[name] for name in self.names if name in values}

    def __repr__(self):
        return f"Record({self.name})"

    def field(self, name):
        return self.fields[self.names.index(name)]

    def shown(self):
        """The fields a table shows, in their order."""
        return [field for field in self.fields if field.shown and field.shown.header is not None]


# Every kind of report, registered once, at the end of its own part: the Record it is built
# through (docs/json.md walks them) and the layout its text and Markdown are drawn by.
Kind = namedtuple("Kind", "record layout")
KINDS = {}


VALUE = None  # a field that holds a number, a string, a list of them, or null
SELECTION = Record("selection", ("phase", "turns", "steps", "skip"))
VERDICT = Record("verdict", ("id", "flagged", "text"))
TOKEN_SPREAD = Record("token spread", ("p50", "p90", "p99", "max"))

# A report's verdicts are judged from it once it is built; a command's report ends with the
# warnings the run said on stderr (a pair's halves have none of their own).
WARNINGS = "warnings"
# The engine's log is the run's, so a command's report holds it, never a pair's halves.
LATER = ("engine", "verdicts", "warnings")
REPORT_HEAD = ("schema", "tool_version", "kind")
SETTING = Record("setting", ("value", "source"))
TRACE_HEAD = ("path", ("meta", MapOf(VALUE)), ("settings", MapOf(SETTING)), "version", "phase",
    ("selection", SELECTION))

ENGINE_TOLERANCE = 0.10  # the engine's figure and the tool's agree within this share of it

# The engine's figures shown beside the tool's and never compared, each with its word in the
# table and why. The moe-stream line's compute is the decode less the flash I/O and the cache
# management, so its rounding is theirs summed (0.000 stands for up to 1.5 ms), and the compute
# trace's time holds the cache management it books apart. No trace times the management: the
# tool's is the log's own (the engine split's part).
Uncompared = namedtuple("Uncompared", "word why")
UNCOMPARED = {"compute_ms_per_token": Uncompared(
                  "remainder", "a remainder: decode - flash I/O - cache mgmt"),
              "cache_mgmt_ms_per_token": Uncompared(
                  "the log's", "no trace times it: the tool's is the log's own")}
# A log's cache figures where its cache is not the run's (log_cache_stands)
SET_ASIDE = Uncompared("set aside", "the log's cache is not the run's (the trace refutes it, or "
                                    "a declaration overrules it): its figures weigh nothing")

ENGINE_FIGURE = Record("engine figure", (("engine", Shown("engine", 3)),
    ("tool", Shown("tool", 3)), ("ratio", Shown("ratio", 3)), ("agrees", Shown("agrees")), "note"))
ENGINE_TURN = Record("engine turn", ("turn", "trace_turn", "generated", "tool_generated",
    "cache_hit_pct", "read_mib", "tool_read_mib", "tool_cache_hit_pct", "ms_per_token",
    "tool_ms_per_token", "differs"))
ENGINE_UNREAD = Record("engine line unread", ("line", "lead", ("figures", VALUE)))
ENGINE = Record("engine", ("log", ("figures", MapOf(ENGINE_FIGURE)),
    ("turns", ListOf(ENGINE_TURN)), ("unread", ListOf(ENGINE_UNREAD))))
ENGINE_FIELD = ("engine", ENGINE)

FIGURE = Record("what-if figure", (("point", PER_TOKEN), ("min", PER_TOKEN), ("max", PER_TOKEN)))


def inner_record(field):
    """The Record a field holds (alone, in a list or in a map), or None for values."""
    return getattr(field.shape, "record", field.shape)


# ── records: a report read back: its meta, its parts, its numbers ────────────────────────────────
def meta_int(meta, key):
    """A small whole number from the preamble (io_threads, cache_mb), else 0."""
    value = meta.get(key, "")
    return int(value) if value.isascii() and value.isdigit() and len(value) < 4 else 0


def meta_number(meta, key):
    """A plain decimal number from the meta (cache_mb=1.9 from a log), else None."""
    value = meta.get(key, "")
    return float(value) if PLAIN_DECIMAL.fullmatch(value) else None


PLAIN_DECIMAL = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,6})?")


# The engine settings a run has one value of, in every half of a pair and every output
RUN_SETTINGS = ("io_threads", "o_direct", "overlap", "cache", "cache_mb", "prefetch", "ngram")


def cache_in_settings(meta):
    """Whether the run's settings (preamble, log, --set) give it a cache: cache=1 or a
    cache_mb above 0 (one that served nothing, 0% hit, is a cache still: it manages)."""
    return meta.get("cache") == "1" or (meta_number(meta, "cache_mb") or 0) > 0


def meta_flag(meta, key):
    """A 0/1 preamble key as an int, None when absent or anything else."""
    return {"0": 0, "1": 1}.get(meta.get(key))


def overlapped(meta):
    """Whether the run read beside compute: its one overlap setting, as the settings that
    stand left it in the meta (a pair's io half holds the run's)."""
    return meta.get("overlap") == "1"


FIGURE_LIMIT = 1e15  # no figure of a real run comes near; past it, a saved report was edited
FIGURE_LEAST = 1e-9  # nor is a fit's figure this small but 0 (1e-320 MiB gave an infinite rate)


def report_halves(report):
    """{part: its report}: a pair's compute and io reports, or the report itself."""
    kind = report["kind"]
    return {"compute": report["compute"], "io": report["io"]} if kind == "report" \
        else {kind: report}


def whole_decode(report):
    """Whether a report (or a pair's half) is of every decoded token: what the log sums."""
    selection = report["selection"]
    return report["phase"] == "decode" and not selection["turns"] and \
        selection["steps"] == [None, None] and not selection["skip"]


def figure_value(value, limit=FIGURE_LIMIT):
    """A number from a report, or None; anything else (a string, 1e400, a figure no run
    reaches, whose delta or ratio would overflow) is not a report this tool wrote."""
    if value is None:
        return value
    if type(value) is not int and not isinstance(value, float):  # a Ratio is a float
        raise ValueError(f"{value!r:.40} is not a number")
    if not abs(value) <= limit:
        raise ValueError(f"{value!r:.40} is out of range")
    return value


# ── tokens: selection, the book of tokens, the fold base ─────────────────────────────────────────
class Selection:
    """Which tokens a report covers. phase None = decode, or all when there is no decode."""

    def __init__(self, phase=None, turns=None, steps=(None, None), skip=0):
        self.phase, self.turns, self.steps, self.skip = phase, turns, steps, skip
        self.may_be_empty = False

    def paired(self):
        """A pair's io selection: the compute trace's phase (decode by default) even where the
        io trace has no row of it (a cache that held every expert after prefill reads nothing
        in decode: its prefill's reads are not decode's)."""
        paired = Selection(self.phase, self.turns, self.steps, self.skip)
        paired.may_be_empty = True  # and its default, decode, even where absent
        return paired

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

    @property
    def whole_decode(self):
        """Whether it takes every decoded token: a log's count of them (its figures' den) is its."""
        return whole_decode({"phase": self.phase or "decode", "selection": self.as_dict()})

    @property
    def splittable(self):
        """Whether a file may be read in parts: --skip needs every earlier token of a turn."""
        return self.skip == 0

    def as_dict(self):
        low, high = self.steps
        return SELECTION(phase=self.phase or "default", turns=sorted(self.turns or []),
                         steps=[low, high], skip=self.skip)


def describe_selection(selection):
    """Words for a selection dict (Selection.as_dict), for headers and errors."""
    words = []
    if selection["turns"]:
        words.append("turn " + ",".join(map(str, selection["turns"])))
    low, high = selection["steps"]
    if low is not None or high is not None:
        words.append(f"steps {'' if low is None else low}:{'' if high is None else high}")
    if selection["skip"]:
        words.append(f"first {selection['skip']} token(s) of each turn skipped")
    return words


def summing_record(name, fields, doc, keys=()):
    """A small record class with __slots__: `keys` are set by the constructor, in order, and
    `fields` start at 0; add(*amounts) adds to the fields in order, merge(other) adds another
    record's fields."""
    def __init__(self, *key_values):
        for key, value in zip(keys, key_values):
            setattr(self, key, value)
        for field in fields:
            setattr(self, field, 0)

    def add(self, *amounts):
        for field, amount in zip(fields, amounts):
            setattr(self, field, getattr(self, field) + amount)

    def merge(self, other):
        self.add(*(getattr(other, field) for field in fields))
    # Pickled into and out of child processes: the class must be found by its name here.
    return type(name, (), {"__slots__": keys + fields, "__doc__": doc, "__module__": __name__,
                           "__init__": __init__, "add": add, "merge": merge})


def group_sums(entries, keys, sums):
    """{table: {group: sums record}}, the one group-by of the node and read tables: each
    (of, amounts) entry's amounts added to its group in every table, `keys` {table: of -> its
    group there}."""
    totals = {name: {} for name in keys}  # tuples, then a record a group: add() an entry cost more
    for of, amounts in entries:
        for name, key in keys.items():
            table, group = totals[name], key(of)
            summed = table.get(group)
            table[group] = amounts if summed is None else tuple(map(add, summed, amounts))
    tables = {name: defaultdict(sums) for name in keys}
    for name, table in totals.items():
        for group, summed in table.items():
            tables[name][group].add(*summed)
    return tables


WALL_32 = next(code for code in "IL" if array(code).itemsize == 4)


# The widths an array of unsigned ints takes, narrowest first; past the last, a list.
WIDTHS = ("B", "H", WALL_32, "Q")


def widened(values):
    """`values` one step wider: 1 byte -> 2 -> 4 -> 8 -> a list."""
    if values.typecode == "Q":
        return values.tolist()
    return array(WIDTHS[WIDTHS.index(values.typecode) + 1], values)


def extend_wide(values, more):
    """`values`, an array of unsigned ints 4 bytes wide (WALL_32) until one needs 8 ("Q"), and
    a list past that (a sum of a token's reads can pass 2^64 when each is legal), extended by
    `more` (a list or an array): returns the sequence that holds them all, exactly."""
    if isinstance(more, array) and isinstance(values, array) and more.typecode == values.typecode:
        values.extend(more)  # of one width: every value fits
        return values
    if isinstance(more, array):
        more = more.tolist()
    elif not isinstance(more, list):
        more = list(more)
    if not isinstance(values, array):
        values.extend(more)  # a list holds any value
        return values
    try:  # fromlist() takes all of them or none, at a third of extend()'s cost
        values.fromlist(more)
    except OverflowError:
        return extend_wide(widened(values), more)
    return values


# A token costs bytes, not objects: a long traced session has hundreds of thousands of tokens, and
# a Python object a token (a record, a dict entry keyed by a tuple) is 100-1,500 bytes of it.
# Each selected token is a row of a TokenTable, each figure a column: an array of unsigned ints
# a byte wide, widened a step (WIDTHS) when a value needs it and to a list past 2^64 (sums stay
# exact): a count that stays small (faults, reads) costs a byte a token.
def zeros(count):
    """An array of `count` zeros, a byte each."""
    return array("B", bytes(count))


def put(values, index, value):
    """values[index] = value, in `values` widened as far as it needs: returns the sequence."""
    while True:
        try:
            values[index] = value
            return values
        except OverflowError:
            values = widened(values)


class TokenTable:
    """The selected tokens of a fold, a row each in trace order: their (turn, phase, step) and
    the sums the fold keeps (a column each, made on first use with every row at 0)."""

    KEYS = ("turn", "phase", "step")

    def __init__(self):  # keys start a byte wide: a turn, a phase, most steps need no more
        self.columns = {name: array("B") for name in self.KEYS}

    def __len__(self):
        return len(self.columns["turn"])

    def append(self, key):
        """A new row for the token `key` (turn, phase, step), its sums at 0; its number."""
        row = len(self)
        for name, column in self.columns.items():
            column.append(0)  # fits any width; a key is put in as wide as it needs
            if name in self.KEYS:
                self.columns[name] = put(column, row, key[self.KEYS.index(name)])
        return row

    def column(self, name):
        """The column `name`, every row's value (made on first use, all 0)."""
        column = self.columns.get(name)
        if column is None:
            column = self.columns[name] = zeros(len(self))
        return column

    def add(self, name, row, amount):
        try:  # the usual case, once a token run: no tuple, no loop
            self.columns[name][row] += amount
        except (KeyError, OverflowError):  # a new column, or a value past its width
            self.add_each(name, (row,), (amount,))

    def add_each(self, name, rows, amounts):
        """Add each amount to its row of the column `name`."""
        column = self.column(name)
        for row, amount in zip(rows, amounts):
            try:
                column[row] += amount
            except OverflowError:
                column = self.columns[name] = put(column, row, column[row] + amount)

    def extended(self, name, values):
        """Append `values` to the column `name` (the rows of a later fold)."""
        self.columns[name] = extend_wide(self.column(name), values)

    def merge(self, later, remap):
        """Add a later fold's table: its row r is this table's remap[r], a row of this table
        (a token both hold: the sums add) or the next new one (appended in order)."""
        mine = len(self)
        fresh = [row for row, at in enumerate(remap) if at >= mine]
        shared = [row for row, at in enumerate(remap) if at < mine]
        for name in later.columns:
            self.column(name)  # before any column grows: made with this table's rows
        for name in list(self.columns):
            theirs = later.columns.get(name) or zeros(len(later))
            if not shared:
                self.extended(name, theirs)
                continue
            self.extended(name, [theirs[row] for row in fresh])
            if name not in self.KEYS:
                self.add_each(name, [remap[row] for row in shared],
                              [theirs[row] for row in shared])

    def values(self, name, spans):
        """The column `name` over rows `spans` (ranges), as one sequence."""
        column = self.column(name)
        if spans == [range(len(self))]:
            return column
        taken = column[:0]
        for span in spans:
            taken = extend_wide(taken, column[span.start:span.stop])
        return taken


class StepIndex:
    """Every step seen of one (turn, phase), sorted, and each one's row in the table (-1: not
    selected): what the book finds a token by. While each step is the one before + 1 and
    each row too (a decode as the engine writes it, in one process or merged), both are
    ranges, a few integers in all; else arrays, 8 bytes a token."""

    __slots__ = ("steps", "rows")

    def __init__(self):
        self.steps, self.rows = range(0), range(0)

    def find(self, step):
        """(where the step is or would go, its row or None when it is not there)."""
        at = bisect_left(self.steps, step)
        found = at < len(self.steps) and self.steps[at] == step
        return at, self.rows[at] if found else None

    def insert(self, at, step, row):
        steps, rows = self.steps, self.rows
        if isinstance(steps, range) and at == len(steps) and row >= 0 and \
                (not steps or (step, row) == (steps.stop, rows.stop)):
            self.steps = range(steps.start if steps else step, step + 1)
            self.rows = range(rows.start if rows else row, row + 1)
            return
        self._held()
        try:
            self.steps.insert(at, step)
        except OverflowError:
            self.steps = widened(self.steps)
            self.steps.insert(at, step)
        self.rows.insert(at, row)

    def set_row(self, at, row):
        self._held()
        self.rows[at] = row

    def _held(self):
        """Arrays from now on: a step out of order, a gap, or a token not selected."""
        if isinstance(self.steps, range):
            try:
                steps = array(WALL_32, self.steps)
            except OverflowError:  # steps past 2^32 (the reader holds them below 2^64)
                steps = array("Q", self.steps)
            self.steps, self.rows = steps, array("i", self.rows)

    def following(self, step):
        """The next step seen after `step`, or None."""
        at = bisect_right(self.steps, step)
        return self.steps[at] if at < len(self.steps) else None


class TokenBook:
    """Every token seen (for the 'file contains' message, the warm-up and the positions) and
    the selected ones' rows, in trace order. A token is one (turn, phase, step); its rows may
    come in several runs. With `new_token(turn, phase, step)`, each selected token also has a
    record (records[row], with merge(other)): the timeline's spans."""

    def __init__(self, selection, new_token=None):
        self.selection, self.new_token = selection, new_token
        self.table = TokenTable()
        self.index = {}  # (turn, phase) -> StepIndex
        self.records = [] if new_token else None
        self._last = (None, None)  # the latest (turn, phase, step) as written, and its row

    def lookup(self, run):
        """This run's token's row if it is selected, else None (a row may be 0: test `is
        None`). Runs of one token follow each other: the latest answer is kept."""
        text = (run.turn, run.phase, run.step)
        last, row = self._last
        if text != last:  # the reader has checked the values: int() cannot fail
            row = self._row_of(int(run.turn), int(run.phase), int(run.step))
            self._last = (text, row)
        return row

    def _steps(self, turn, phase):
        """The StepIndex of a (turn, phase), made when first seen."""
        return self.index.get((turn, phase)) or self.index.setdefault((turn, phase),
                                                                      StepIndex())

    def _row_of(self, turn, phase, step):
        index = self._steps(turn, phase)
        at, row = index.find(step)
        if row is None:
            ordinal = len(index.steps)
            row = self._new_row((turn, phase, step)) \
                if self.selection.admits(turn, phase, step, ordinal) else -1
            index.insert(at, step, row)
        return None if row < 0 else row

    def _new_row(self, key):
        if self.records is not None:
            self.records.append(self.new_token(*key))
        return self.table.append(key)

    def merge(self, later):
        """Add the book of the rows that follow this one's in the file; returns, for each of
        its rows, the row it is here."""
        mine, added = len(self.table), 0
        remap = array("i")
        for turn, phase, step in zip(*(later.table.columns[name] for name in TokenTable.KEYS)):
            index = self._steps(turn, phase)
            at, row = index.find(step)
            if row is None or row < 0:  # new here (or, with another selection, not chosen)
                if row is None:
                    index.insert(at, step, mine + added)
                else:
                    index.set_row(at, mine + added)
                row, added = mine + added, added + 1
            remap.append(row)
        for (turn, phase), theirs in later.index.items():  # the steps seen and not selected
            index = self._steps(turn, phase)
            for step in compress(theirs.steps, [row < 0 for row in theirs.rows]):
                at, row = index.find(step)
                if row is None:
                    index.insert(at, step, -1)
        self.table.merge(later.table, remap)
        if self.records is not None:
            for row, at in enumerate(remap):
                if at >= mine:
                    self.records.append(later.records[row])
                else:
                    self.records[at].merge(later.records[row])
        return remap

    def contents(self):
        """What the file holds, for an empty-selection error."""
        parts = []
        for (turn, phase), index in sorted(self.index.items()):
            parts.append(f"turn {turn} {PHASE_NAMES[phase]}: {len(index.steps)} token(s), steps "
                         f"{min(index.steps)}-{max(index.steps)}")
        return "; ".join(parts) or "no rows"

    def steps_of(self, phase):
        """{turn: its StepIndex} of a phase: every step seen of each turn."""
        return {turn: index for (turn, of), index in self.index.items() if of == phase}


class Tokens:
    """The tokens a report covers: rows of a fold's table (those of its phases), in trace
    order, as spans of rows; values(name) gives a column over them."""

    def __init__(self, table, phases):
        self.table = table
        self.spans = [range(start, start + count) for phase, count, start in
                      self._runs(table.columns["phase"]) if phase in phases]
        self.count = sum(map(len, self.spans))

    @staticmethod
    def _runs(phases):
        start = 0
        for phase, rows in groupby(phases):
            count = sum(1 for _ in rows)
            yield phase, count, start
            start += count

    def __len__(self):
        return self.count

    def values(self, name):
        return self.table.values(name, self.spans) if self.spans else []

    def rows(self):
        return chain.from_iterable(self.spans)


class TokenRows(Sequence):
    """A report's `per_token`: a dict a token, each made when it is read (`row_of(table, row)`)
    and never all held at once; JSON writes it as the list it reads as."""

    def __init__(self, tokens, row_of, figures=None):
        self.table, self.row_of = tokens.table, row_of
        self.figures = figures or {}  # a dict's figure -> (its column, the unit it is over)
        # the rows in order: a range when they are one span, else 4 bytes a token
        self.order = array("i", tokens.rows()) if len(tokens.spans) > 1 else \
            next(iter(tokens.spans), range(0))
        self.count = len(tokens)

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.count))]
        if not -self.count <= index < self.count:
            raise IndexError(index)
        return self.row_of(self.table, self.order[index % self.count])

    def __iter__(self):
        row_of, table = self.row_of, self.table
        return (row_of(table, row) for row in self.order)

    def figure(self, name):
        """Every token's figure `name` as its dict holds it, read from its column (an array,
        no dict made): the column over its unit, or (unit None) the column's integers."""
        column, unit = self.figures[name]
        values = self.table.column(column)
        if unit is not None:
            return array("d", (values[row] / unit for row in self.order))
        picked = map(values.__getitem__, self.order)
        return array(values.typecode, picked) if isinstance(values, array) else list(picked)

    def keys(self):
        """Each token's (turn, phase, step), in order, without making its dict."""
        return zip(*(map(self.table.columns[name].__getitem__, self.order)
                     for name in TokenTable.KEYS))

    def __eq__(self, other):
        return isinstance(other, (list, TokenRows)) and list(self) == list(other)

    def __repr__(self):
        return f"TokenRows({self.count} tokens)"


def token_figure(per_token, name):
    """Each token's figure `name`: from the columns of a TokenRows that has it, else from the
    dicts (a saved report's list)."""
    if isinstance(per_token, TokenRows) and name in per_token.figures:
        return per_token.figure(name)
    return [token[name] for token in per_token]


def row_token(row):
    """A per_token row's (turn, phase, step)."""
    return (row["turn"], row["phase"], row["step"])


def token_keys(per_token):
    """Each per_token row's (turn, phase, step), in order."""
    return per_token.keys() if isinstance(per_token, TokenRows) else map(row_token, per_token)


class TokenFold:
    """The base of both folds (the fold contract is in trace_io's docstring): each batch's
    token runs are looked up in the book of tokens and folded by the subclass's _fold();
    _finished() closes the sums."""

    def __init__(self, selection, new_token=None):
        self.book = TokenBook(selection, new_token)
        self.table = self.book.table

    def feed(self, batch):
        self._fold(batch, batch.runs)

    def finish(self):
        self._finished()

    def detach(self):
        pass

    def _fold(self, batch, runs):
        raise NotImplementedError

    def _finished(self):
        raise NotImplementedError


def chosen_phases(selection, phases_present):
    """Phases a report covers, and its label: the default is decode, else everything."""
    if selection.phase == "decode":
        return {DECODE}, "decode"
    if selection.phase == "prefill":
        return {PREFILL}, "prefill"
    if selection.phase is None and (DECODE in phases_present or selection.may_be_empty):
        return {DECODE}, "decode"
    return set(phases_present), "all"


def selected_tokens(trace, book, selection, phases_present):
    """(phases, label, Tokens) of the selection; an empty one is an error."""
    phases, label = chosen_phases(selection, phases_present)
    tokens = Tokens(book.table, phases)
    if not len(tokens) and not selection.may_be_empty:
        what = ", ".join([f"phase {selection.phase or 'decode'}"]
                         + describe_selection(selection.as_dict()))
        raise TraceError(trace.name, 0, f"no tokens match the selection ({what}); "
                                         f"the file has: {book.contents()}")
    return phases, label, tokens


# ── statistics ───────────────────────────────────────────────────────────────────────────────────
# Percentiles are exact: the value at index min(n-1, floor(n*q)) of the sorted values (0-based).
PERCENTILES = {"p50": (1, 2), "p90": (9, 10), "p99": (99, 100), "p999": (999, 1000)}
def percentile_index(n, num, den):
    """The 0-based index, among n sorted values, of percentile num/den."""
    return min(n - 1, n * num // den)


def deviation(value, median):
    """How many times away from the median a figure is, either way (inf from a zero one)."""
    if not median or not value:
        return 1.0 if value == median else float("inf")
    return max(value / median, median / value)


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

    def percentile(self, name):
        """The percentile `name` (a key of PERCENTILES), or None when there are no values."""
        n = len(self)
        return self.kth(percentile_index(n, *PERCENTILES[name])) if n else None

    def minimum(self):
        return min((part[0] for part in self.parts), default=None)

    def maximum(self):
        return max((part[-1] for part in self.parts), default=None)

    def total(self):
        return sum(map(sum, self.parts))


# Values sorted at once: until stored, each is a ~36-byte int object, so a chunk is a
# transient of 0.6 MB (2.4 MB at 1 << 16, where one-row tokens' report grew 6 bytes a token
# more); a percentile bisects each part, cheap at a few hundred
SORT_CHUNK = 1 << 14


def sorted_parts(values):
    """values (all below 2^64) as SortedParts: sorted SORT_CHUNK at a time into the most
    compact arrays that hold them, so that a million walls never stand as int objects at
    once. An array is emptied from its end as its parts are made, so that the values are
    never held twice (a large array gives its memory back as it shrinks)."""
    iterator = None if isinstance(values, array) else iter(values)
    parts = []
    while True:
        if iterator is None:
            chunk = values[-SORT_CHUNK:]
            del values[-SORT_CHUNK:]
        else:
            chunk = list(islice(iterator, SORT_CHUNK))
        if not chunk:
            return SortedParts(parts)
        ordered = sorted(chunk)
        parts.append(array(WALL_32 if ordered[-1] < 1 << 32 else "Q", ordered))


def sorted_column(values):
    """A TokenTable's column as SortedParts, sorted SORT_CHUNK at a time (never a Python int a
    token held), the column left as it is; a list column (a sum past 2^64) sorted whole."""
    return sorted_parts(iter(values)) if isinstance(values, array) else \
        SortedParts([sorted(values)])


def spread_of(values, unit=None):
    """{p50, p90, p99, max} of a column of integers (a TokenTable's), each divided by `unit`:
    exact."""
    ordered = sorted_column(values)
    value = (lambda v: v) if unit is None else (lambda v: scaled(v, unit))
    return TOKEN_SPREAD(p50=value(ordered.percentile("p50")), p90=value(ordered.percentile("p90")),
                        p99=value(ordered.percentile("p99")), max=value(ordered.maximum()))


def compact(values):
    """An iterable of integers as the narrowest sequence that holds them (extend_wide), built
    SORT_CHUNK at a time so that they never all stand as int objects."""
    iterator, held = iter(values), array(WALL_32)
    for chunk in iter(lambda: list(islice(iterator, SORT_CHUNK)), []):
        held = extend_wide(held, chunk)
    return held


def percentile_summary(values):
    """{p50, p90, p99, max} of a list of numbers; None each when there are none."""
    ordered = SortedParts([sorted(values)])
    return TOKEN_SPREAD(p50=ordered.percentile("p50"), p90=ordered.percentile("p90"),
                        p99=ordered.percentile("p99"), max=ordered.maximum())


def weighted_percentile(counts, name):
    """Percentile `name` of values given as {value: count}; None when there are none."""
    total = sum(counts.values())
    if not total:
        return None
    rank = percentile_index(total, *PERCENTILES[name])
    for value in sorted(counts):
        rank -= counts[value]
        if rank < 0:
            return value
    return None


class Ratio(float):
    """A figure that keeps the total it was divided from, and what it was divided by: the
    float num / den, which a report holds and prints as any float. A figure made per another
    denominator (an io trace's per read-token, a pair's per decoded token) is divided once
    more from the total, never multiplied back from the first quotient (per)."""

    __slots__ = ("num", "den")

    def __new__(cls, num, den):
        figure = super().__new__(cls, num / den)
        figure.num, figure.den = num, den
        return figure

    def __reduce__(self):
        return Ratio, (self.num, self.den)


def per(value, den, factor):
    """A per-token figure made per `den` tokens: a Ratio from its total, divided once; a
    figure that does not know its total (read back from JSON, or not a sum over tokens) times
    `factor`, its own tokens over den; None stays None."""
    if isinstance(value, Ratio) and den:
        return Ratio(value.num, den)
    return None if value is None else value * factor


class PerToken:
    """Totals turned into per-token figures for one report: Ratios, that keep their total."""

    def __init__(self, tokens, total_ns):
        self.tokens, self.total_ns = tokens, total_ns

    def count(self, value):  # no token (a pair's io with no decode row): nothing a token
        return Ratio(value, self.tokens) if self.tokens else 0.0

    def ms(self, wall_ns):
        return Ratio(wall_ns / NS_PER_MS, self.tokens) if self.tokens else 0.0

    def share(self, wall_ns):
        return ratio(wall_ns, self.total_ns)


# Both samples at most this many pairs (n1 * n2): the exact distribution of U, ties or not (the
# runs of a diff's sides: one rule, so that p never goes below the least the runs can give).
EXACT_PAIRS = 2500
EXACT_TIED_WORK = 4_000_000  # with ties, the exact count's steps (n^2 n1^2): 20 runs a side


def mann_whitney_p(base, new):
    """Two-sided p-value of the Mann-Whitney U test that `base` and `new` (lists of numbers)
    come from one distribution; None when a side is empty. Exact where n1 * n2 <=
    EXACT_PAIRS, ties included (their midranks) for sides of up to 20 runs; otherwise the
    normal approximation with the tie correction and a 0.5 continuity correction (the
    defaults of scipy.stats.mannwhitneyu)."""
    n1, n2 = len(base), len(new)
    if not n1 or not n2:
        return None
    ranks, tie_term = midranks(list(base) + list(new))
    u_base = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = max(u_base, n1 * n2 - u_base)
    if n1 * n2 <= EXACT_PAIRS and not tie_term:
        return min(1.0, 2 * exact_u_tail(round(u), n1, n2))
    if n1 * n2 <= EXACT_PAIRS and (n1 + n2) ** 2 * n1 ** 2 <= EXACT_TIED_WORK:
        return exact_p(ranks, n1)
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every value equal
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / sqrt(variance)
    return min(1.0, erfc(z / sqrt(2)))


def midranks(values):
    """(1-based ranks, ties sharing their mean rank; the sum of t^3 - t over tie groups)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_term = 0
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and values[order[end]] == values[order[start]]:
            end += 1
        for i in order[start:end]:
            ranks[i] = (start + end + 1) / 2
        tied = end - start
        tie_term += tied ** 3 - tied
        start = end
    return ranks, tie_term


def exact_u_tail(u, n1, n2):
    """P(U >= u) when every ordering of n1 + n2 distinct values is equally likely. The counts
    of U are the coefficients of the Gaussian binomial [n1+n2 choose n1] in q, the product
    of (1 - q^(n2+i)) / (1 - q^i) for i = 1..n1, built here one factor at a time."""
    top = n1 * n2
    counts = [1] + [0] * top
    for i in range(1, n1 + 1):
        shift = n2 + i
        for k in range(top, shift - 1, -1):  # times (1 - q^shift)
            counts[k] -= counts[k - shift]
        for k in range(i, top + 1):  # divided by (1 - q^i): exact, the result is a polynomial
            counts[k] += counts[k - i]
    return sum(counts[u:]) / sum(counts)


def exact_p(ranks, n1):
    """2 min(P(R <= r), P(R >= r)): R the rank sum of n1 values drawn from the pooled ranks,
    every split equally likely, r the first n1's (the untied test's two tails, so that p is
    never below 2 / C(n, n1)). Ranks are doubled to integers (a midrank is a whole or a
    half); ways[k] counts, for each doubled sum, the subsets of k ranks that make it, built one
    rank at a time."""
    doubled = [round(2 * rank) for rank in ranks]
    ways = [Counter({0: 1})] + [Counter() for _ in range(n1)]
    for count, value in enumerate(doubled, 1):
        for k in range(min(n1, count), 0, -1):
            into = ways[k]
            for total, many in ways[k - 1].items():
                into[total + value] += many
    observed = sum(doubled[:n1])
    below = sum(many for total, many in ways[n1].items() if total <= observed)
    above = sum(many for total, many in ways[n1].items() if total >= observed)
    return min(1.0, 2 * min(below, above) / comb(len(ranks), n1))


def ratio(numerator, denominator):
    """numerator/denominator, or None (printed n/a, JSON null) when undefined."""
    return numerator / denominator if denominator else None


def scaled(value, scale):
    return None if value is None else value / scale


def mean_of(values):
    return fsum(values) / len(values) if values else None


def median_of(values):
    """The middle value (the mean of the two middle ones for an even count); None for none:
    a fit's costs, over a few runs, where no one run is the median."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return None if not ordered else ordered[middle] if len(ordered) % 2 else \
        (ordered[middle - 1] + ordered[middle]) / 2


def sd_of(values):
    """The sample standard deviation (n - 1); None for fewer than two values."""
    if len(values) < 2:
        return None
    mean = mean_of(values)
    return sqrt(fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


# ── rendering ────────────────────────────────────────────────────────────────────────────────────
TEXT_WIDTH = 100  # every line of the text output fits a terminal and a bug report
BAR_WIDTH = 20
OP_BAR_WIDTH = 10  # the by-op table is wide already
HIST_WIDTH = 40
UNCLASSIFIED_SHOWN = 5
FAULT_OPS_SHOWN = 8
SPARK_WIDTH = 64
SPARK_UNICODE = "▁▂▃▄▅▆▇█"
SPARK_ASCII = "_.-=+*#@"
COMPACT_LAYERS = 12  # more layers than this are shown compactly unless --layers
STANDS_OUT = 1.25  # a layer whose figure is this far from the median (either way) is shown
STANDOUTS_SHOWN = 6  # at most, the furthest first (--layers: all)


def safe(text):
    """Trace strings are untrusted: control characters (an ANSI escape, a newline in a node
    name) are shown as escapes, never sent to the terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


class OutputError(Exception):
    """The report could not be written (a full disk, a closed stdout, a figure JSON cannot
    hold)."""


def json_chunks(report, ascii_only=False):
    """The report as JSON text, in chunks as it is made (a per-token list is never held whole as
    text), an object's fields a line each, a list of numbers (a per-token series) or a table row
    of plain values on one line: a saved report, and its diff, are read row by row. Trace strings
    are untrusted: besides what JSON escapes, every character that is not printable (DEL, C1
    controls, line and paragraph separators, bidi overrides, zero-width marks) is written as a
    \\u escape; with ascii_only, every non-ASCII character is. A figure that is NaN or infinite
    is an OutputError: JSON holds neither, and one that became so is the tool's to say in a line."""
    dumps = partial(json.dumps, ensure_ascii=ascii_only, allow_nan=False)

    def dump(value):  # a number as json.dumps writes it, without its call (most values)
        if type(value) is int:
            return int.__repr__(value)
        if isinstance(value, float) and value - value == 0:  # finite: NaN, inf are refused
            return float.__repr__(value)
        return dumps(value)

    def escaped(pieces):
        chunk = "".join(pieces).replace("\x7f", "\\u007f")
        return chunk if chunk.isascii() else _NON_ASCII.sub(
            lambda match: match.group() if match.group().isprintable()
            else json.dumps(match.group())[1:-1], chunk)
    pieces, size = [], 0
    try:
        for piece in chain(json_pieces(report, dump, "\n"), ["\n"]):
            pieces.append(piece)
            size += len(piece)
            if size >= 1 << 16:
                yield escaped(pieces)
                pieces, size = [], 0
        yield escaped(pieces)
    except ValueError as problem:
        raise OutputError(f"the report holds a figure that is not finite ({problem}): an input "
                          f"holds a value no run gives") from None


def json_pieces(value, dump, newline, in_list=False):
    """The pieces of `value` as JSON, indented one space a level (newline: the line break and
    the indent of the value's own line)."""
    if isinstance(value, array):  # a per-token series held compactly: written a slice at a time
        written = repr if value.typecode in "fd" else str  # as json.dumps writes each
        yield "["
        for start in range(0, len(value), 4096):
            numbers = ", ".join(map(written, value[start:start + 4096]))
            if "n" in numbers:  # nan, inf: what allow_nan=False refuses
                raise ValueError(f"Out of range float values are not JSON compliant: {numbers}")
            yield (", " if start else "") + numbers
        yield "]"
        return
    if isinstance(value, TokenRows) and not value:
        value = []  # no token
    if not isinstance(value, (list, dict, TokenRows)):
        yield dump(value)
        return
    is_object = isinstance(value, dict)
    members = list(value.values()) if is_object else value
    flat = not any(isinstance(member, (list, dict, array, TokenRows)) for member in members)
    if not value or flat and (in_list or not is_object):  # empty, a series, a table row
        yield dump(value)
        return
    inner = newline + " "
    items = value.items() if is_object else ((None, member) for member in value)
    yield "{" if is_object else "["
    for index, (key, member) in enumerate(items):
        head = ("," if index else "") + inner + ("" if key is None else dump(str(key)) + ": ")
        if isinstance(member, (list, dict, array, TokenRows)):
            yield head
            yield from json_pieces(member, dump, inner, in_list=not is_object)
        else:  # a value: its line whole, without a generator of its own (most members)
            yield head + dump(member)
    yield newline + ("}" if is_object else "]")


def wrap(text, indent="  "):
    """Prose lines folded to TEXT_WIDTH columns, continuation lines indented. A line that
    fits, with nothing textwrap would change (trailing or unprintable white space), is kept
    as it is: most lines fit, and textwrap's pass was a fifth of a small report's time."""
    if len(text) <= TEXT_WIDTH and text.isprintable() and not text.endswith(" "):
        return [text] if text.strip() else [""]
    return textwrap.wrap(text, TEXT_WIDTH, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [""]


def wrap_items(prefix, items, indent="    ", separator=","):
    """`prefix` then the items, separated, folded between items only."""
    lines, line = [], prefix
    for i, item in enumerate(items):
        piece = item + (separator if i < len(items) - 1 else "")
        if len(line) + 1 + len(piece) > TEXT_WIDTH and line.strip():
            lines.append(line)
            line = indent + piece
        else:
            line = f"{line} {piece}" if line else piece
    return lines + [line]


def fit(text, width=TEXT_WIDTH):
    """A single entry (a path) kept whole on its line: shortened in the middle if need be."""
    text = safe(text)
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return text[:half] + "…" + text[-(width - 1 - half):]


def pct(fraction, spec=".1f"):
    return "n/a" if fraction is None else format(fraction * 100, spec) + "%"


def bar(fraction, width=BAR_WIDTH):
    filled = int(round(max(0.0, min(1.0, fraction or 0.0)) * width))
    return "#" * filled + "." * (width - filled)


# A table is data: its columns, each a header, where its value comes from (a row key, or a
# function of the row), how the value is written and which way it aligns. table_lines() draws
# every table of the text output from these definitions.
# width: a bar column's width (Markdown draws a bar as a code span, text as the format says).
Column = namedtuple("Column", "header key format align width", defaults=(">", None))


def formatter(form):
    """How a value is written in a Shown format: digits (int), "%" a share, another format
    spec ("d"), or None as it is."""
    if form is None:
        return str
    if form == "%":
        return pct
    spec = f".{form}f" if isinstance(form, int) else form
    return lambda value: num(value, spec)


def column(header, key, format=str, align=">"):
    return Column(header, key, format, align)


def text_column(header, key):
    return Column(header, key, safe, "<")


def bar_column(key, width=BAR_WIDTH):
    return Column("", key, lambda fraction: bar(fraction, width), "<", width)


def value_of(col, row):
    return row[col.key] if isinstance(col.key, str) else col.key(row)


def cell(col, row):
    return col.format(value_of(col, row))


NAME_WIDTH_LEAST = 12  # a name column is never elided below this
NAME_SHOWN_MOST = 60  # a trace's name in prose is elided past this (the JSON has it whole)


def table_lines(columns, rows, indent="  "):
    """The header and one line per row, each column as wide as its widest cell; past
    TEXT_WIDTH, the widest name columns are narrowed and their long names elided in the middle
    (the JSON has them whole)."""
    heads = [safe(col.header) for col in columns]  # a preamble key or a file name heads some
    cells = [[cell(col, row) for col in columns] for row in rows]
    widths = [max([len(head)] + [len(line[i]) for line in cells]) for i, head in enumerate(heads)]
    names = [i for i, col in enumerate(columns) if col.align == "<" and col.width is None]
    excess = len(indent) + sum(widths) + 2 * (len(widths) - 1) - TEXT_WIDTH
    while excess > 0 and names:
        widest = max(names, key=widths.__getitem__)
        narrower = max(NAME_WIDTH_LEAST, widths[widest] - excess, len(heads[widest]))
        if narrower >= widths[widest]:
            break
        excess -= widths[widest] - narrower
        widths[widest] = narrower
        for line in cells:
            line[widest] = fit(line[widest], narrower)

    def line(values):
        text = "  ".join(f"{value:{col.align}{width}}"
                         for value, col, width in zip(values, columns, widths))
        return (indent + text).rstrip()
    return [line(heads)] + [line(values) for values in cells]


def shown_column(field):
    """A figure's column, as its declaration shows it (Shown: its head and its format)."""
    header, form = field.shown.header, field.shown.format
    if form == "text":
        return text_column(header, field.name)
    return column(header, field.name, formatter(form))


def table_of(record, *then):
    """The columns of a table of `record`s: each shown field in its order, then `then`."""
    return tuple(map(shown_column, record.shown())) + then


def bar_table(record, rows):
    """A table of `record`'s rows with a bar of each row's ms/token over the largest's."""
    peak = max((row["ms_per_token"] for row in rows), default=0) or 1
    return table_of(record, bar_column(lambda row: row["ms_per_token"] / peak))


def selection_text(report):
    return ", ".join([f"phase {report['phase']}"] + describe_selection(report["selection"]))


# ── rendering: layouts, every report's sections declared once ────────────────────────────────────
# A layout is the ordered sections of one kind of report. A section is a function that draws
# it from the report and the view, a list of Blocks (empty when this report has nothing for
# it), and whether Markdown folds its table away. A Block is an optional heading (the one place
# a section's title is written) and its parts. The text and Markdown renderers walk the same
# layout and differ only in how they draw each kind of part, so that a section added here
# appears in both.
Section = namedtuple("Section", "draw fold", defaults=(False,))
# gap: a blank line before it in text (the header and the lines right under it have none).
# A block with a heading and no parts is a divider: the block after it follows without a gap.
Block = namedtuple("Block", "heading parts gap", defaults=((), True))
# paths: (label, path, detail) each; the detail (diff's "(io trace, 128 io tokens)") is shown
# beside the path.
Header = namedtuple("Header", "command paths meta keys")
# logical lines; hang: the wrap's indent; clip: text cuts a line at the width (a legend: a line
# a run), where Markdown keeps it whole
Prose = namedtuple("Prose", "lines hang clip", defaults=("  ", False))
Items = namedtuple("Items", "prefix items")  # one logical line of items, folded between items
Bullets = namedtuple("Bullets", "items")  # one logical line each (the verdicts)
# Lines aligned in text (the what-if's settings); a bulleted list in Markdown, where spaces that
# align columns collapse
Listed = namedtuple("Listed", "lines hang")
# shown: the rows text shows (Markdown folds the rest away); compact: many layers shown as
# their summary and the layers that stand out, unless the view asks for all.
Grid = namedtuple("Grid", "columns rows indent shown compact", defaults=("  ", None, False))
Spark = namedtuple("Spark", "values")  # one character per token (or per group of tokens)
# A part the text shows with --full only, `instead` (a part, or None) without it, the part's
# name in the line that ends the text ("--full adds: ..."); Markdown and JSON always have it.
Full = namedtuple("Full", "name part instead", defaults=(None,))
# What the command line asks of the drawing: ops in the by-op table, every layer, ASCII only,
# the method prose, every table.
View = namedtuple("View", "top layers ascii wide explain full",
                  defaults=(12, False, False, False, False, False))

NODE_CAVEAT = ("note: each node was measured behind a barrier, which inflates the absolutes: "
               "trust the proportions.")
LAYER_CAVEAT = ("note: one barrier per layer, so these absolutes sit close to an untraced run; "
                "there is no per-op detail inside a segment.")


# ── rendering: the sections every command shares ─────────────────────────────────────────────────
ENGINE_SPLIT = ("decode_ms_per_token", "compute_ms_per_token", "cache_mgmt_ms_per_token",
                "flash_io_ms_per_token")


def engine_split_of(report, limit):
    """{figure: ms} of the engine's split its log gave (the stall too, when it did); None
    without the whole split."""
    figures = (report.get("engine") or {}).get("figures") or {}
    held = {name: figure_value(figures[name].get("engine"), limit) for name in
            (*ENGINE_SPLIT, "stall_ms_per_token") if isinstance(figures.get(name), dict)}
    return held if all(held.get(name) is not None for name in ENGINE_SPLIT) else None


def header_section(header_of):
    """The section that says what produced the report, from which files, the run's preamble:
    header_of(report) is the Header of its kind, joined here by the engine's log and the
    settings the preamble lacked, each with where it came from."""
    def header_blocks(report, view):
        header = header_of(report)
        engine = report.get("engine")
        if engine:
            header = header._replace(paths=header.paths + [("engine log", engine["log"], "")])
        settings = {}
        for half in report_halves(report).values():  # the io trace's preamble is shown as such
            settings.update((key, setting) for key, setting in (half.get("settings") or {}).items()
                            if setting["source"] != "io trace")
        shown = {key: f"{setting['value']} ({setting['source']})"
                 for key, setting in settings.items()}
        # a cache, prefetch or n-gram setting the preamble names shows with the rest: each
        # changes what the figures mean (the engine's own preambles name none of them)
        keys = header.keys + tuple(key for key in ("cache", "cache_mb", "prefetch", "ngram")
                                   if key in header.meta and key not in shown
                                   and key not in header.keys)
        header = header._replace(meta={**header.meta, **shown}, keys=keys + tuple(
            key for key in shown if key not in keys))
        return [Block(None, [header], gap=False)]
    return header_blocks


AGREEMENT = {True: "yes", False: "NO", None: "-"}


def engine_blocks(report, view):
    """The engine's own figures beside the tool's, and a session's turns."""
    engine = report.get("engine")
    if not engine:
        return []
    rows = [{"figure": name, **figure,
             "agrees": AGREEMENT[figure["agrees"]] if not figure["note"] else
             SET_ASIDE.word if figure["note"] == SET_ASIDE.why else
             UNCOMPARED[name].word if name in UNCOMPARED else "not alike"}
            for name, figure in engine["figures"].items()]
    table = (text_column("figure", "figure"), *table_of(ENGINE_FIGURE))
    odd = [row for row in rows if row["agrees"] in ("NO", "not alike")]  # what to look at
    agreeing = sum(row["agrees"] == "yes" for row in rows)
    unread = [name for line in engine.get("unread") or () for name in line["figures"]]
    words = [f"  {agreeing} of {len(rows) + len(unread)} agree with the tool's"
             + (f", {len(odd)} differ{'s' if len(odd) == 1 else ''} (above)" if odd else "")
             + "; the rest the tool derives or lacks: " + ", ".join(
                 row["figure"] for row in rows if row["agrees"] != "yes" and row not in odd)]
    selected = [half["selection"] for half in report_halves(report).values()
                if not whole_decode(half)]
    if selected and not any(row["tool"] is not None for row in rows):
        chosen = selected[0]
        words = ["  none compared: the log sums every decoded token of the run, the traces' "
                 "figures are of " + ", ".join(describe_selection(chosen) + [
                     f"phase {chosen['phase']}"] * (chosen["phase"] in ("prefill", "all")))
                 + ("" if report["kind"] == "compute" or chosen["phase"] in ("prefill", "all")
                    else " (the log's per-token figures are taken as the run's averages)")]
    words += [f"  line {line['line']} of the log ({line['lead']}) not understood: "
             f"{', '.join(line['figures'])} unread" for line in engine.get("unread") or ()]
    parts = [Full("every engine figure", Grid(table, rows), Grid(table, odd) if odd else None),
             Prose(words)] if rows or unread else []
    # a turn --turn left out is in the traces, unread: its log line alone
    absent = "not selected (--turn)" if any(
        half["selection"]["turns"] for half in report_halves(report).values()) else \
        "not in the traces"
    turns = []
    for turn in engine["turns"]:
        traced = turn["trace_turn"] is not None

        def beside(name, spec):
            return f" (traced {num(turn['tool_' + name], spec)})" if traced else ""
        counted = turn.get("tool_generated") in (None, turn["generated"])  # said if it differs
        turns.append(
            f"  turn {turn['turn']}" + (f" (trace {turn['trace_turn']})" if traced else "")
            + f": {turn['generated']} generated" + ("" if counted else
                                                    f" (traced {turn['tool_generated']})")
            + f", hit {turn['cache_hit_pct']}%{beside('cache_hit_pct', '.1f')}, read "
            f"{turn['read_mib']} MiB{beside('read_mib', '.1f')}" + (
                f", {turn['ms_per_token']:.2f} ms/token{beside('ms_per_token', '.2f')}"
                if turn["ms_per_token"] else "")
            + (f"; {absent}" if not traced else "" if turn["differs"] is None else
               f"; DIFFERS: {', '.join(turn['differs'])}" if turn["differs"] else "; agrees"))
    notes = [f"  {name}: {figure['note']}" for name, figure in engine["figures"].items()
             if figure["note"] and name not in UNCOMPARED and figure["note"] != SET_ASIDE.why]
    aside = [name for name, figure in engine["figures"].items()
             if figure["note"] == SET_ASIDE.why]
    notes += [f"  {', '.join(aside)}: {SET_ASIDE.why}"] if aside else []
    return [Block(f"the engine's own figures (ms, MiB, % as named; agrees: within "
                  f"{ENGINE_TOLERANCE:.0%} or the engine's rounding)",
                  parts + ([Prose(notes + turns, "    ")] if notes or turns else []))]


def heads(texts):
    """A verdict's head: its text up to the colon ("no warm-up", "cache undetermined")."""
    return [head.replace(" undetermined", "") for head, _, _ in
            (text.partition(":") for text in texts)]


def caveat_blocks(report, view):
    """How far the compute trace's absolutes can be trusted, by its granularity."""
    layered = report_halves(report)["compute"]["granularity"] == "layer"
    return [Block(None, [Prose([LAYER_CAVEAT if layered else NODE_CAVEAT], "    ")])]


def layout(*sections):
    """The Sections of a layout: each a draw function, or a Section (one that folds)."""
    return tuple(section if isinstance(section, Section) else Section(section)
                 for section in sections)


def engine_split_text(split, runs=1):
    """decode = compute + cache mgmt + flash I/O (and the stall), as the engine's log says:
    in the whole ms it prints (s/token to 3 decimals; to 0.01 one log's split did not add up,
    3.00 = 0.00 + 0.00 + 2.36), its finer flash I/O (from its MiB/s) beside; several runs'
    means to 0.01."""
    stall = split.get("stall_ms_per_token")
    flash = split["flash_io_ms_per_token"]
    spec = ".0f" if runs == 1 else ".2f"
    words = (f"decode {split['decode_ms_per_token']:{spec}} = compute "
            f"{split['compute_ms_per_token']:{spec}} + cache mgmt "
            f"{split['cache_mgmt_ms_per_token']:{spec}} + flash I/O ")
    words += f"{round(flash):.0f} ms (whole ms, as printed; flash I/O {flash:.2f} from MiB/s)" \
        if runs == 1 else f"{flash:.2f} ms (means of the logs' figures)"
    return words + ("" if stall is None else f"; stall {stall:{spec}} ms")


# ── verdicts ─────────────────────────────────────────────────────────────────────────────────────
# One line each, with the figures it rests on. flagged: True (said in capitals), False (the calm
# statement, with its threshold) or None (undetermined: the data cannot decide, and says why).
def verdict(verdict_id, flagged, text):
    return VERDICT(id=verdict_id, flagged=flagged, text=text)


# The threshold verdicts, declared once: a figure flagged when it is past its limit (`strict`:
# above it, else at or above it), said in its flagged words or its calm ones, then its evidence
# and the comparison with the limit, "(> 30%)". The verdicts that weigh several figures, or
# that can be undetermined, are written out where they are judged.
Threshold = namedtuple("Threshold", "limit shown strict flagged calm")
FAULT_BOUND_SHARE, WARMUP_RATIO, OUTLIER_SHARE = 0.30, 1.5, 0.10
THRESHOLDS = {
    "fault_bound": Threshold(FAULT_BOUND_SHARE, "{:.0%}", True,  # of compute
                             "FAULT-BOUND", "not fault-bound"),
    "warmup": Threshold(WARMUP_RATIO, "{}x", True,  # the first tokens' mean over the rest's
                        "WARM-UP", "no warm-up"),
    "outliers": Threshold(OUTLIER_SHARE, "{:.0%}", False,  # the outliers' share of the time
                          "OUTLIER TOKENS", "no outlier tokens"),
    "lanes_unbalanced": Threshold(1.5, "{}x", True,  # the busiest lane's busy over the least's
                                  "UNBALANCED lanes", "lanes balanced"),
    "coalescing": Threshold(1.2, "{}x", True,  # the coalescing factor
                            "coalescing WORTHWHILE", "coalescing not worthwhile"),
    "cache": Threshold(0.20, "{:.0%}", True,  # the lookups a cache of half the footprint serves
                       "cache WORTHWHILE", "cache not worthwhile"),
    "io_bound": Threshold(0.20, "{:.0%}", True,  # a pair: what the reads cost, of the decode
                          "I/O-BOUND", "not I/O-bound"),
}


def past(verdict_id, figure):
    """Whether `figure` is past the verdict's limit; None (a figure that cannot be had, as a
    lane that never read) is."""
    threshold = THRESHOLDS[verdict_id]
    return figure is None or (gt if threshold.strict else ge)(figure, threshold.limit)


def threshold_verdict(verdict_id, flagged, evidence, shown="", after=""):
    """"HEAD: evidence (shown, > limit)after", or its calm words and "<=" when not flagged."""
    threshold = THRESHOLDS[verdict_id]
    words, sign = (threshold.flagged, ">" if threshold.strict else ">=") if flagged else \
        (threshold.calm, "<=" if threshold.strict else "<")
    limit = threshold.shown.format(threshold.limit)
    return verdict(verdict_id, flagged,
                   f"{words}: {evidence} ({shown + ', ' if shown else ''}{sign} {limit}){after}")


def all_verdicts(report):
    """The verdicts a report shows: a pair's router verdict is its own (it has the reads),
    not the compute trace's."""
    if report["kind"] != "report":
        return report["verdicts"]
    compute, io, pair = report["compute"], report["io"], report["pair"]
    own = {v["id"] for v in pair["verdicts"]}  # the pair's (an older saved report: io's too)
    return ([v for v in compute["verdicts"] if v["id"] not in own | {"router_wait"}]
            + [v for v in io["verdicts"] if v["id"] not in own] + pair["verdicts"])


def verdict_blocks(report, view):
    """The flagged verdicts, each with its evidence (the undetermined and calm ones come after
    the best changes: calm_blocks); with --explain the undetermined ones too, each in full."""
    verdicts = sorted((v for v in all_verdicts(report)
                       if v["flagged"] or (view.explain and v["flagged"] is None)),
                      key=lambda v: not v["flagged"])  # flagged first
    return [Block("verdicts", [Bullets([v["text"] for v in verdicts])])] if verdicts else []


def calm_blocks(report, view):
    """The verdicts that could not be made and the calm ones, a line each by their heads
    ("no warm-up"); with --explain the calm ones with their evidence and threshold."""
    verdicts = all_verdicts(report)
    undetermined = [v["text"] for v in verdicts if v["flagged"] is None]
    calm = [v["text"] for v in verdicts if v["flagged"] is False]
    if view.explain:
        return [Block("calm", [Bullets(calm)])] if calm else []
    lines = [f"  {label}: {'; '.join(heads(texts))} (--explain: {why})" for label, texts, why in (
        ("undetermined", undetermined, "why each could not be told"),
        ("calm", calm, "each with its evidence")) if texts]
    return [Block("the other verdicts", [Prose(lines, "    ")])] if lines else []


# ── compute: its records ─────────────────────────────────────────────────────────────────────────
MS_PER_TOKEN = ("ms_per_token", Shown("ms/token", 2, "ms per token"), PER_TOKEN)
SHARE = ("share", Shown("share", "%"))
MAJFLT_PER_TOKEN = ("majflt_per_token", Shown("majflt/tok", 1), PER_TOKEN)
NODES_PER_TOKEN = ("nodes_per_token", Shown("nodes/tok", 1), PER_TOKEN)

OP_ROW = Record("op row", (("op", Shown("op", "text")), ("count", TOTAL),
    ("ms_per_token", Shown("ms/token", 2, "ms per token", samples="op"), PER_TOKEN), SHARE,
    ("majflt_per_token", Shown("majflt/tok", 1, "major faults per token"), PER_TOKEN),
    NODES_PER_TOKEN, ("avg_us", Shown("avg us", 1)), ("p50_us", Shown("p50 us", 1)),
    ("p99_us", Shown("p99 us", 1)), ("max_us", Shown("max us", 1))), key="op", by="by op")
FAULT_ROW = Record("fault row", (("op", Shown("op", "text")),
    ("majflt_per_token", Shown("majflt/tok", 1), PER_TOKEN),
    ("ms_per_token", Shown("ms/tok", 2), PER_TOKEN), ("share", Shown("of compute", "%"))))
FAULTS = Record("faults", (("majflt_per_token", PER_TOKEN),
    ("ms_per_token", Shown(diff="faulting nodes' ms per token"), PER_TOKEN), "share",
    ("by_op", ListOf(FAULT_ROW))))
GROUP_FIGURES = (MS_PER_TOKEN, SHARE, MAJFLT_PER_TOKEN)
LAYER_ROW = Record("layer row", (("layer", Shown("layer")), *GROUP_FIGURES), key="layer",
    by="by layer")
SEGMENT_ROW = Record("segment row", (("name", Shown("segment", "text")), *GROUP_FIGURES),
    key="name", by="by segment")
CATEGORY_ROW = Record("category row", (("category", Shown("category", "text")), MS_PER_TOKEN,
    SHARE, MAJFLT_PER_TOKEN, NODES_PER_TOKEN), key="category", by="by node category")
UNCLASSIFIED_ROW = Record("unclassified row", ("name", "ms_per_token"))
COMPUTE_TOKEN = Record("compute token", ("turn", "phase", "step", "ms", "majflt", "faulting_ms"))
DECODES = Record("decodes", ("decodes", "positions", "speculative", "ms_per_decode",
    ("ms_per_position", Shown(diff="ms per generated position"))))
PREFILL_BATCHES = Record("prefill", ("batches", "prompt_tokens", "ms_per_batch",
    "ms_per_prompt_token"))
WARMUP = Record("warmup", ("tokens", "first_mean", "rest_mean", "ratio", "from_turn_start"))
TAIL_IN_POST = Record("tail in post", ("layer", "segments_per_token", "others_per_token"))
STRETCH_GROUP = Record("stretch group", ("name", "ms_per_token", "others_ms_per_token", "ratio"))
COMPUTE_STRETCH = Record("compute slow stretch", ("turn", "first_step", "last_step", "tokens",
    "ms_per_token", "others_ms_per_token", "share", ("slowed", ListOf(STRETCH_GROUP))))
COMPUTE_REPORT = Record("compute report", (*REPORT_HEAD, *TRACE_HEAD, "tokens", "granularity",
    ("rows", TOTAL), ("nodes_per_token", Shown(diff="nodes per token"), PER_TOKEN),
    ("ms_per_token", Shown(diff="ms per token", samples="ms"), PER_TOKEN),
    ("majflt_per_token", Shown(diff="major faults per token", samples="majflt"), PER_TOKEN),
    ("by_op", ListOf(OP_ROW), COMPARED), ("faults", FAULTS),
    ("by_layer", ListOf(LAYER_ROW), COMPARED), ("by_layer_column", ListOf(LAYER_ROW)),
    "reattributed_ms_per_token", ("segments", ListOf(SEGMENT_ROW), COMPARED),
    ("tail_in_post", TAIL_IN_POST), ("by_category", ListOf(CATEGORY_ROW), COMPARED),
    ("unclassified", ListOf(UNCLASSIFIED_ROW)),
    ("token_ms", TOKEN_SPREAD, Shown(diff={"p50": "token ms p50", "p99": "token ms p99"})),
    ("slowest", ListOf(COMPUTE_TOKEN)), ("per_token", ListOf(COMPUTE_TOKEN)), ("decodes", DECODES),
    ("prefill", PREFILL_BATCHES), ("warmup", WARMUP), ("slow_stretch", COMPUTE_STRETCH),
    ("op_us_by_token", MapOf(VALUE)), ("category_us_by_token", MapOf(VALUE)), ENGINE_FIELD,
    ("verdicts", ListOf(VERDICT)), WARNINGS), later=LATER)


# ── compute: node classification (../shared/spec/node-names.md) ──────────────────────────────────
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
SEGMENT_OP = "LAYER"  # a layer trace's every row: a segment (pre, blk.N, post)
# Ops that decide the category whatever the node is called.
OP_CATEGORY = {"MUL_MAT_ID": "experts", "FLASH_ATTN_EXT": "attention"}
# One name, two meanings, told apart by the op (gemma4's residual add is called attn_out).
NAME_OP_CATEGORY = {("attn_out", "ADD"): "residual"}
# In a layer that routes to experts, the dense-FFN helper builds the shared expert, and ffn_out
# is the MoE output.
IN_MOE_LAYER = {"dense_ffn": "shared_expert"}
IN_MOE_LAYER_NAME = {"ffn_out": "experts"}
MOE_CATEGORIES = {"router", "experts"}
NO_LAYER = -1

_EXACT = {name: cat for cat, names in CATEGORY_NAMES.items()
          for name in names.split() if not name.endswith("*")}
_PREFIX = [(name[:-1], cat) for cat, names in CATEGORY_NAMES.items()
           for name in names.split() if name.endswith("*")]
_DECORATION = re.compile(r" \((?:view|reshaped|permuted|transposed|cont|copy of )|, part ")
_LAYER_SUFFIX = re.compile(r"-\d+$")
_UNNAMED = re.compile(r"node_\d+$")

# One node of a token graph, classified.
Node = namedtuple("Node", "op name layer inferred_layer base category")


@lru_cache(maxsize=1 << 14)  # a long token repeats its names; a graph is classified once
def classify(name, op):
    """(base name, category) of one node on its own; category None for an unnamed node_<N>."""
    # 'Qcur-0 (view) (permuted)' -> 'Qcur': decorations and the layer suffix stripped
    cut = _DECORATION.search(name)
    base = _LAYER_SUFFIX.sub("", name[: cut.start()] if cut else name)
    if op in OP_CATEGORY:
        return base, OP_CATEGORY[op]
    if _UNNAMED.match(base):
        return base, None
    category = NAME_OP_CATEGORY.get((base, op)) or _EXACT.get(base)
    if category is None:
        category = next((cat for prefix, cat in _PREFIX if base.startswith(prefix)), "other")
    return base, category


def infer_layers(layers):
    """Layer -1 nodes that execute between two nodes of the same layer belong to that layer."""
    inferred = list(layers)
    run_start = None
    previous = NO_LAYER
    for i, layer in enumerate(layers):
        if layer == NO_LAYER:
            if run_start is None:
                run_start = i
            continue
        if run_start is not None and previous == layer:
            inferred[run_start:i] = [layer] * (i - run_start)
        run_start, previous = None, layer
    return inferred


def last_layer_start(layers):
    """Where the rows of the last layer of `layers` (ints) begin: its first row, after the
    layer -1 rows before it; len(layers) when no row has a layer."""
    last = next((layer for layer in reversed(layers) if layer != NO_LAYER), None)
    if last is None:
        return len(layers)
    start = len(layers)
    while start and layers[start - 1] in (last, NO_LAYER):
        start -= 1
    while layers[start] != last:
        start += 1
    return start


def classify_graph(ops, names, layers, previous="other"):
    """Every node of one token's graph, in order, as a Node. Beyond classify(): an unnamed
    node takes the category of the nearest named node before it, and in a layer that routes to
    experts the dense-FFN names are the shared expert and ffn_out is the experts' output.
    `previous`: what an unnamed first node inherits (the graph's earlier rows, if any)."""
    inferred = infer_layers(layers)
    named = [classify(name, op) for name, op in zip(names, ops)]
    moe_layers = {il for il, (_, cat) in zip(inferred, named)
                  if cat in MOE_CATEGORIES and il != NO_LAYER}
    nodes = []
    for op, name, layer, il, (base, category) in zip(ops, names, layers, inferred, named):
        if category is None:
            category = previous
        else:
            if il in moe_layers:
                category = IN_MOE_LAYER_NAME.get(base) or IN_MOE_LAYER.get(category, category)
            previous = category
        nodes.append(Node(op, name, layer, il, base, category))
    return nodes


def compact_layer_lines(columns, rows, full):
    """The by-layer table, or for many layers a compact view of it: a summary line (min,
    median, max of each figure), the layers that stand out (a figure over STANDS_OUT times
    the median, or under it by as much), and runs of layers whose lines read the same folded
    into one line (`0-46`)."""
    if full or len(rows) <= COMPACT_LAYERS:
        return table_lines(columns, rows)
    figures = [col for col in columns[1:] if isinstance(col.key, str)]
    medians = {col.key: sorted(row[col.key] for row in rows)[len(rows) // 2] for col in figures}
    summary = [f"{col.header} {cell(col, {col.key: min(row[col.key] for row in rows)})}"
               f"/{cell(col, {col.key: medians[col.key]})}"
               f"/{cell(col, {col.key: max(row[col.key] for row in rows)})}" for col in figures]
    distance = {id(row): max(deviation(row[col.key], medians[col.key]) for col in figures)
                for row in rows}
    shown = [row for row in rows if row["layer"] == NO_LAYER or distance[id(row)] > STANDS_OUT]
    hidden = max(0, len(shown) - STANDOUTS_SHOWN)
    if hidden:  # keep the layers furthest from the median, in layer order
        keep = {id(row) for row in sorted(shown, key=lambda r: -distance[id(r)])
                [:STANDOUTS_SHOWN]}
        shown = [row for row in shown if id(row) in keep]
    runs = []  # (first row, first layer, last layer) of consecutive layers that read alike
    for row in shown:
        if runs:
            first, low, high = runs.pop()
            if high == row["layer"] - 1 and all(cell(col, row) == cell(col, first)
                                                for col in figures):
                runs.append((first, low, row["layer"]))
                continue
            runs.append((first, low, high))
        runs.append((row, row["layer"], row["layer"]))
    merged = [{**first, "layer": f"{low}-{high}" if high != low else low}
              for first, low, high in runs]
    lines = wrap_items(f"  {len(rows)} layers, min/median/max:", summary)
    if not merged:
        return lines + ["  no layer stands out (all within "
                        f"{STANDS_OUT}x of the median); --layers shows them all"]
    most = f"; the {STANDOUTS_SHOWN} furthest of {len(shown) + hidden}" if hidden else ""
    return lines + wrap(f"  layers that stand out (beyond {STANDS_OUT}x of a median{most}; "
                        f"--layers: all):") + table_lines(columns, merged)


# ── compute: the fold ────────────────────────────────────────────────────────────────────────────
COMPUTE_COLUMNS = ("turn", "phase", "step", "layer", "op", "name", "wall_ns", "majflt")
SYNTHETIC_OPS = {"BMOE_DECODE", "BMOE_CALLBACK"}  # v2 rows that are not graph nodes


# A compute token's columns in its fold's TokenTable: its summed wall time and major faults, the
# wall time of its faulting nodes, and (complete after the fold's finish) its wall time per op
# and per node category: the samples `diff` tests and the SVG stacks.
COMPUTE_SUMS = ("wall_ns", "majflt", "faulting_ns")
OP_COLUMN, CATEGORY_COLUMN = "op ", "category "  # + the op's or the category's name


# A layer trace keeps each segment's wall for its slowest tokens only (what a slow stretch's
# segments are told by): this many a graph and process, 4 bytes a segment each.
KEPT_SLOW_TOKENS = 4096


def slow_segments(graph, table):
    """{row: (segment names, their walls)} of the graph's slowest members, from its history
    (a layer trace); {} for a node trace."""
    if not graph.members or any(op != SEGMENT_OP for op in graph.ops):
        return {}
    width, names, members = len(graph.ops), tuple(graph.names), graph.members
    walls = table.column("wall_ns")
    slowest = heapq.nlargest(KEPT_SLOW_TOKENS, range(len(members)),
                             key=lambda i: walls[members[i]])
    return {members[index]: (names, graph.history[index * width:(index + 1) * width])
            for index in slowest}


class TokenGraph:
    """One distinct token graph (its sequence of (op, name, layer)), with per-node sums.

    The tokens of a decode run share their graph, so sums are kept per node position (walls
    summed from the history at finish, faults as they come); the nodes are classified once per
    graph, at the end.
    """

    __slots__ = ("key", "ops", "names", "layers", "tokens", "wall_ns", "majflt",
                 "fault_wall_ns", "history", "members")

    def __init__(self, key, ops, names, layers):
        self.key, self.ops, self.names, self.layers = key, ops, names, layers
        n = len(ops)
        self.tokens = 0
        self.wall_ns, self.majflt, self.fault_wall_ns = [0] * n, [0] * n, [0] * n
        # Every node's wall_ns, token after token, until ComputeFold sorts them by op for the
        # exact per-op percentiles: 4 bytes a row while walls fit in 32 bits (4.29 s), 8 after.
        self.history = array(WALL_32)
        self.members = array("i")  # the token (its row) of each history entry, until finish

    def add(self, row, walls, faults):
        # wall_ns is summed from the history at finish, at C speed per position.
        if any(faults):
            # Few nodes fault (the expert matmuls), so visit just those.
            majflt, fault_wall_ns = self.majflt, self.fault_wall_ns
            for position in compress(range(len(faults)), faults):
                majflt[position] += faults[position]
                fault_wall_ns[position] += walls[position]
        self.history = extend_wide(self.history, walls)
        self.members.append(row)
        self.tokens += 1

    def merge(self, other):
        """Add another process's sums (after finish(): the walls are in op_walls by then)."""
        self.wall_ns = list(map(add, self.wall_ns, other.wall_ns))
        self.majflt = list(map(add, self.majflt, other.majflt))
        self.fault_wall_ns = list(map(add, self.fault_wall_ns, other.fault_wall_ns))
        self.tokens += other.tokens

    def group_positions(self):
        """{(op, category): [node positions]} in this graph."""
        positions = defaultdict(list)
        nodes = classify_graph(self.ops, self.names, [int(layer) for layer in self.layers])
        for position, node in enumerate(nodes):
            positions[node.op, node.category].append(position)
        return positions

    def node_sums(self):
        """(Node, wall_ns, majflt, fault_wall_ns, nodes) for each node position."""
        nodes = classify_graph(self.ops, self.names, [int(layer) for layer in self.layers])
        return zip(nodes, self.wall_ns, self.majflt, self.fault_wall_ns, repeat(self.tokens))


NodeTotals = summing_record("NodeTotals", ("wall_ns", "majflt", "fault_wall_ns", "nodes"),
                            doc="One distinct node's sums over the pieces of long tokens.")


class LooseNodes:
    """The nodes of tokens too long to keep as a TokenGraph (a token over HOLD_ROWS rows comes
    in pieces): classified as they come and summed per distinct node, so that memory is
    bounded by the model's graph, not by the token's length.

    A piece can end inside a layer, and a layer's nodes are classified together (the layer -1
    nodes inside it, whether it routes to experts): the rows of a piece's last layer are held
    until the token's next piece or its end (`held`), with the category an unnamed node there
    would inherit, so that the figures are those of the same rows in one graph."""

    HOLD_MOST = 4 * HOLD_ROWS  # held rows of one unfinished layer at most (a real one: ~100)

    def __init__(self):
        self.sums = {}  # Node -> NodeTotals
        self.walls = defaultdict(list)  # op -> [wall_ns of each node], until finish
        self.op_walls = {}  # op -> sorted array, at finish
        self.held = None  # (row, ops, names, layers, walls, faults, inherited category)

    def holds(self, row):
        return self.held is not None and self.held[0] == row

    def add(self, table, row, columns):
        """A run of one token's rows (columns: ops, names, layers, walls, faults): all but its
        last layer's are summed."""
        previous = "other"
        ops, names, layers, walls, faults = columns
        layers = [int(layer) for layer in layers]
        if self.holds(row):
            _, *earlier, previous = self.held
            ops, names, layers, walls, faults = (list(before) + list(now) for before, now in
                                                 zip(earlier, (ops, names, layers, walls,
                                                               faults)))
        elif self.held is not None:
            self.flush(table)
        self.held = None
        columns = (ops, names, layers, walls, faults)
        cut = last_layer_start(layers) if len(layers) < self.HOLD_MOST else len(layers)
        previous = self._sum(table, row, [column[:cut] for column in columns], previous)
        if cut < len(layers):
            self.held = (row, *(column[cut:] for column in columns), previous)

    def flush(self, table):
        """Sum the held rows: their token has ended."""
        if self.held is not None:
            (row, *columns, previous), self.held = self.held, None
            self._sum(table, row, columns, previous)

    def _sum(self, table, row, columns, previous):
        """Classify and sum rows (columns: ops, names, layers, walls, faults; `previous`: the
        category an unnamed first node inherits); returns the category an unnamed node after
        them would inherit."""
        ops, names, layers, walls, faults = columns
        nodes = classify_graph(ops, names, layers, previous)
        for node, wall_ns, majflt in zip(nodes, walls, faults):
            table.add(OP_COLUMN + node.op, row, wall_ns)
            table.add(CATEGORY_COLUMN + node.category, row, wall_ns)
            totals = self.sums.get(node)
            if totals is None:
                totals = self.sums[node] = NodeTotals()
            totals.add(wall_ns, majflt, wall_ns if majflt else 0, 1)
            self.walls[node.op].append(wall_ns)
        named = [node.category for node, (_, category) in zip(nodes, map(classify, names, ops))
                 if category is not None]
        return named[-1] if named else previous

    def finish(self, table):
        self.flush(table)
        self.op_walls = {op: sorted_parts(walls) for op, walls in self.walls.items()}
        self.walls.clear()

    def merge(self, later):
        for node, totals in later.sums.items():
            self.sums.setdefault(node, NodeTotals()).merge(totals)

    def node_sums(self):
        return ((node, totals.wall_ns, totals.majflt, totals.fault_wall_ns, totals.nodes)
                for node, totals in self.sums.items())


class ComputeFold(TokenFold):
    """Folds compute-trace batches into per-graph sums, kept per phase."""

    def __init__(self, selection):
        super().__init__(selection)
        for name in COMPUTE_SUMS:
            self.table.column(name)
        self.slow_segments = {}  # row -> (segment names, walls): a layer trace's slowest tokens
        self.graphs = {}  # phase -> {graph key: TokenGraph}
        self.loose = {}  # phase -> LooseNodes
        self.rows = defaultdict(int)  # phase -> rows
        self._last = {}  # phase -> the graph of its latest token
        self.op_walls = {}  # phase -> {op: SortedParts of one node's wall_ns}, at finish

    def _fold(self, batch, runs):
        ops, names, layers = batch["op"], batch["name"], batch["layer"]
        walls, faults = batch["wall_ns"], batch["majflt"]
        table = self.table
        for run in runs:
            row = self.book.lookup(run)
            if row is None:
                continue
            start, end = run.start, run.end
            token_walls, token_faults = walls[start:end], faults[start:end]
            table.add("wall_ns", row, sum(token_walls))
            majflt = sum(token_faults)
            if majflt:  # the faulting nodes' time: the SVG's own band
                table.add("majflt", row, majflt)
                table.add("faulting_ns", row, sum(compress(token_walls, token_faults)))
            phase = table.columns["phase"][row]
            self.rows[phase] += end - start
            columns = (ops[start:end], names[start:end], layers[start:end])
            loose = self.loose.get(phase)
            if end - start >= HOLD_ROWS or loose is not None and loose.holds(row):
                loose = loose or self.loose.setdefault(phase, LooseNodes())
                loose.add(table, row, (*columns, token_walls, token_faults))
            else:
                self._graph(phase, *columns).add(row, token_walls, token_faults)

    def _graph(self, phase, ops, names, layers):
        """The TokenGraph of this token. Its key is each column joined by newlines, which no
        field holds: two memcmp-able strings are cheaper to compare than thousands of fresh
        string objects, and most tokens repeat the previous token's graph."""
        key = ("\n".join(ops), "\n".join(names), "\n".join(layers))
        last = self._last.get(phase)
        if last is not None and last.key == key:
            return last
        graphs = self.graphs.setdefault(phase, {})
        graph = graphs.get(key)
        if graph is None:
            graph = graphs[key] = TokenGraph(key, ops, names, layers)
        self._last[phase] = graph
        return graph

    def _finished(self):
        """Every node's wall_ns sorted by op (per phase), and each token's wall time per op,
        one op at a time so that only one op's values are ever unpacked; the graphs'
        histories are then let go."""
        for phase in set(self.graphs) | set(self.loose):
            graphs = self.graphs.get(phase, {})
            loose = self.loose.get(phase, LooseNodes())
            loose.finish(self.table)
            places = defaultdict(list)  # op -> [(graph, category, [positions])]
            for graph in graphs.values():
                for (op, category), positions in graph.group_positions().items():
                    places[op].append((graph, category, positions))
            walls = self.op_walls.setdefault(phase, {})
            for op in set(places) | set(loose.op_walls):
                columns = []
                for graph, category, positions in places.get(op, ()):
                    width = len(graph.ops)
                    graph_columns = [graph.history[p::width] for p in positions]
                    for position, column in zip(positions, graph_columns):
                        graph.wall_ns[position] = sum(column)
                    walls_of_members = compact(map(sum, zip(*graph_columns)))
                    for name in (OP_COLUMN + op, CATEGORY_COLUMN + category):
                        self.table.add_each(name, graph.members, walls_of_members)
                    columns.extend(graph_columns)
                walls[op] = sorted_parts(chain.from_iterable(columns)) + \
                    loose.op_walls.get(op, SortedParts())
            loose.op_walls = {}
            for graph in graphs.values():
                self.slow_segments.update(slow_segments(graph, self.table))
                graph.history, graph.members = array(WALL_32), array("i")

    def detach(self):
        self._last = {}

    def merge(self, later):
        remap = self.book.merge(later.book)
        for row, segments in later.slow_segments.items():
            self.slow_segments.setdefault(remap[row], segments)
        for phase, graphs in later.graphs.items():
            mine = self.graphs.setdefault(phase, {})
            for key, graph in graphs.items():
                if key in mine:
                    mine[key].merge(graph)
                else:
                    mine[key] = graph
        for phase, loose in later.loose.items():
            self.loose.setdefault(phase, LooseNodes()).merge(loose)
        for phase, rows in later.rows.items():
            self.rows[phase] += rows
        for phase, walls in later.op_walls.items():
            mine = self.op_walls.setdefault(phase, {})
            for op, values in walls.items():
                mine[op] = mine.get(op, SortedParts()) + values


COMPUTE_READ = Columns("compute", COMPUTE_COLUMNS, ints=("wall_ns", "majflt"),
                       keys=("turn", "phase", "step", "layer"), strings=("op", "name"),
                       drop=Drop("op", SYNTHETIC_OPS))


def in_parts_if_it_may(reading):
    """The reading, in one process when its selection needs every earlier token of a turn."""
    return reading if reading.selection.splittable else reading._replace(jobs=1)


# ── compute: the report ──────────────────────────────────────────────────────────────────────────
NodeSums = summing_record("NodeSums", ("wall_ns", "majflt", "nodes"),
                          doc="Wall time, major faults and node count of a group of nodes.")


# The compute report's tables: each groups the nodes by one of their fields.
NODE_GROUPS = {"op": attrgetter("op"), "layer": attrgetter("inferred_layer"),
               "layer_column": attrgetter("layer"), "segment": attrgetter("name"),
               "category": attrgetter("category")}


def ordered_by(table, key):
    """The (name, value) pairs of a dict, ordered by key(name, value)."""
    return sorted(table.items(), key=lambda pair: key(*pair))


def by_slowest(table):
    return ordered_by(table, lambda name, sums: (-sums.wall_ns, name))


def group_rows(record, name_key, ordered, per):
    """A `record` row (layer, segment or category) for each (name, NodeSums) of `ordered`."""
    rows = []
    for name, sums in ordered:
        figures = {name_key: name, "ms_per_token": per.ms(sums.wall_ns),
                   "share": per.share(sums.wall_ns), "majflt_per_token": per.count(sums.majflt)}
        if "nodes_per_token" in record.names:
            figures["nodes_per_token"] = per.count(sums.nodes)
        rows.append(record(**figures))
    return rows


def compute_report(trace, fold, selection, settings):
    """The whole compute report as a plain dict (the JSON output; text is rendered from it),
    without its verdicts; `settings` the report's (the settings joined to the preamble)."""
    phases, label, tokens = selected_tokens(trace, fold.book, selection,
                                           set(fold.graphs) | set(fold.loose))
    total_ns = sum(tokens.values("wall_ns"))
    total_majflt = sum(tokens.values("majflt"))
    graphs = [graph for phase in phases for graph in fold.graphs.get(phase, {}).values()]
    loose = [fold.loose[phase] for phase in phases if phase in fold.loose]
    rows = sum(fold.rows[phase] for phase in phases)
    # Per-node sums, (Node, wall_ns, majflt, fault_wall_ns, nodes) each, added into groups:
    # {table: {group: NodeSums}} (NODE_GROUPS, and the faulting nodes' time by op)
    node_sums = list(chain(*(graph.node_sums() for graph in graphs),
                           *(part.node_sums() for part in loose)))
    tables = group_sums(((node, (wall_ns, majflt, nodes))
                         for node, wall_ns, majflt, _, nodes in node_sums), NODE_GROUPS, NodeSums)
    tables.update(group_sums(((node, (fault_wall_ns, majflt, nodes))
                              for node, _, majflt, fault_wall_ns, nodes in node_sums if majflt),
                             {"fault": attrgetter("op")}, NodeSums))
    unclassified = defaultdict(int)  # the unclassified base names' wall_ns
    for node, wall_ns, *_ in node_sums:
        if node.category == "other":
            unclassified[node.base] += wall_ns
    per = PerToken(len(tokens), total_ns)
    ops = set(chain(*(graph.ops for graph in graphs), *(node.op for part in loose
                                                        for node in part.sums)))
    granularity = "layer" if ops == {SEGMENT_OP} else "node"

    def segment_order(name, _):  # pre, blk.0 .. blk.N in numeric order, post, then the rest
        match = re.fullmatch(r"blk\.(\d+)", name)
        return (0, 0, "") if name == "pre" else (1, int(match.group(1)), "") if match else \
            (2, 0, "") if name == "post" else (3, 0, name)
    segments = ordered_by(tables["segment"], segment_order)
    # The engine's layer-trace shape: the routing node closes a MoE layer's first segment, but
    # the last layer's MoE tail lands in `post`, so its `blk.N` has fewer segments per token
    # than the other layers'
    blocks = {int(name[4:]): sums.nodes for name, sums in segments
              if name.startswith("blk.") and name[4:].isdigit()}
    tail = None
    if granularity == "layer" and len(blocks) > 1 and "post" in tables["segment"]:
        last = max(blocks)
        others = sorted(nodes for layer, nodes in blocks.items() if layer != last)
        typical = others[len(others) // 2]
        if blocks[last] < typical:
            tail = TAIL_IN_POST(layer=last, segments_per_token=blocks[last] / len(tokens),
                                others_per_token=typical / len(tokens))
    faulting_ns = sum(sums.wall_ns for sums in tables["fault"].values())
    faults = FAULTS(majflt_per_token=per.count(total_majflt), ms_per_token=per.ms(faulting_ns),
                    share=per.share(faulting_ns), by_op=[
                        FAULT_ROW(op=op, majflt_per_token=per.count(sums.majflt),
                                  ms_per_token=per.ms(sums.wall_ns), share=per.share(sums.wall_ns))
                        for op, sums in ordered_by(tables["fault"], lambda op, sums: (
                            -sums.majflt, -sums.wall_ns, op))])
    op_walls = [fold.op_walls.get(phase, {}) for phase in phases]
    by_op = []
    for op, sums in by_slowest(tables["op"]):
        walls = sum((phase_walls.get(op, SortedParts()) for phase_walls in op_walls),
                    SortedParts())
        by_op.append(OP_ROW(op=op, count=sums.nodes, ms_per_token=per.ms(sums.wall_ns),
                            share=per.share(sums.wall_ns),
                            majflt_per_token=per.count(sums.majflt),
                            nodes_per_token=per.count(sums.nodes),
                            avg_us=sums.wall_ns / sums.nodes / 1e3,
                            p50_us=walls.percentile("p50") / 1e3,
                            p99_us=walls.percentile("p99") / 1e3, max_us=walls.maximum() / 1e3))
    return COMPUTE_REPORT(
        schema=SCHEMA, tool_version=TOOL_VERSION, kind="compute", path=trace.name,
        meta=trace.meta, settings=settings, version=trace.version, phase=label,
        selection=selection.as_dict(), tokens=len(tokens), granularity=granularity, rows=rows,
        nodes_per_token=per.count(rows), ms_per_token=per.ms(total_ns),
        majflt_per_token=per.count(total_majflt), by_op=by_op, faults=faults,
        by_layer=group_rows(LAYER_ROW, "layer", sorted(tables["layer"].items()), per),
        by_layer_column=group_rows(LAYER_ROW, "layer", sorted(tables["layer_column"].items()),
                                   per),
        # the wall moved to an inferred layer
        reattributed_ms_per_token=per.ms(sum(wall_ns for node, wall_ns, *_ in node_sums
                                             if node.inferred_layer != node.layer)),
        segments=[] if granularity == "node" else group_rows(SEGMENT_ROW, "name", segments, per),
        tail_in_post=tail,
        by_category=[] if granularity == "layer" else
        group_rows(CATEGORY_ROW, "category", by_slowest(tables["category"]), per),
        unclassified=[UNCLASSIFIED_ROW(name=name, ms_per_token=per.ms(wall_ns))
                      for name, wall_ns in ordered_by(unclassified, lambda name, ns: (-ns, name))],
        **token_views(tokens, fold.book),
        slow_stretch=compute_stretch(tokens, total_ns, {  # a layer trace's segments' walls
            name: sums.wall_ns for name, sums in tables["segment"].items()}
            if granularity == "layer" else None, fold.slow_segments),
        op_us_by_token=us_by_token(tokens, OP_COLUMN, sorted(tables["op"])),
        category_us_by_token={} if granularity == "layer" else
        us_by_token(tokens, CATEGORY_COLUMN, sorted(tables["category"])))


# A token this many times the first quartile token is slow; this many slow tokens in a row (one
# turn) are a stretch; a group (node category, or a layer trace's segment) this many times its
# ms per token outside the stretch slowed with it.
STRETCH_FACTOR = 3
STRETCH_TOKENS = 8
STRETCH_SLOWED = 2


def compute_stretch(tokens, total_ns, segment_totals, segments):
    """The longest run of consecutive slow tokens of one turn, when it holds STRETCH_TOKENS at
    least: where it starts and ends, what its tokens take against the others', and which
    groups slowed (the COMPUTE_STRETCH), or None. segments: {row: a layer trace's segment
    walls} of its slowest tokens."""
    walls = tokens.values("wall_ns")
    if len(walls) < 2 * STRETCH_TOKENS:
        return None
    slow = STRETCH_FACTOR * sorted_column(walls).kth(len(walls) // 4)
    turns, steps = tokens.values("turn"), tokens.values("step")
    best = longest_run(bytearray(slow and wall_ns >= slow for wall_ns in walls), turns)
    if len(best) < STRETCH_TOKENS:
        return None
    rows = list(islice(tokens.rows(), best.start, best.stop))
    within_ns, others = sum(walls[best.start:best.stop]), len(walls) - len(best)
    # the groups whose ms per token in the stretch is STRETCH_SLOWED x theirs outside it at
    # least, the most added ms first; None unknown
    groups_ns, others_ns = group_walls(tokens, rows, segment_totals, segments)
    slowed = None if groups_ns is None else []
    for name, wall_ns in (groups_ns or {}).items():
        within = wall_ns / len(best) / NS_PER_MS
        outside = ratio(others_ns.get(name, 0), others * NS_PER_MS)
        grown = ratio(within, outside)
        if grown is None or grown >= STRETCH_SLOWED:
            slowed.append(STRETCH_GROUP(name=name, ms_per_token=within,
                                        others_ms_per_token=outside, ratio=grown))
    return COMPUTE_STRETCH(
        turn=turns[best.start], first_step=steps[best.start], last_step=steps[best.stop - 1],
        tokens=len(best), ms_per_token=fsum(walls[best.start:best.stop]) / len(best) / NS_PER_MS,
        others_ms_per_token=fsum(chain(walls[:best.start], walls[best.stop:])) / others /
        NS_PER_MS if others else None,
        share=ratio(within_ns, total_ns),
        slowed=slowed and sorted(slowed, key=lambda row: (
            row["others_ms_per_token"] - row["ms_per_token"], row["name"])))


def longest_run(flags, turns):
    """The longest range of consecutive indexes flagged and of one turn (the first of the
    longest; empty when none is flagged): a slow stretch, in compute and in the pair."""
    best = current = range(0)
    for index, (flagged, turn) in enumerate(zip(flags, turns)):
        if not flagged:
            current = range(0)
            continue
        same_turn = current and turns[current.start] == turn
        current = range(current.start if same_turn else index, index + 1)
        best = max(best, current, key=len)
    return best


def group_walls(tokens, inside, segment_totals, segments):
    """({group: ns} of the stretch's tokens (rows `inside`), of the others): node categories,
    or a layer trace's segments (the others' as the segments' totals less the stretch's);
    (None, None) when a stretch token's segments were not kept."""
    if segment_totals is None:
        table, within, others = tokens.table, {}, {}
        for name in [name for name in table.columns if name.startswith(CATEGORY_COLUMN)]:
            column = table.columns[name]
            inside_ns = sum(map(column.__getitem__, inside))
            if inside_ns:
                group = name[len(CATEGORY_COLUMN):]
                within[group] = inside_ns
                others[group] = sum(tokens.values(name)) - inside_ns
        return within, others
    if any(row not in segments for row in inside):
        return None, None
    within = defaultdict(int)
    for names, walls in map(segments.__getitem__, inside):
        for name, wall_ns in zip(names, walls):
            within[name] += wall_ns
    return within, {name: segment_totals.get(name, 0) - wall_ns for name, wall_ns in
                    within.items()}


def us_by_token(tokens, prefix, groups):
    """{group: its wall time in each token, in whole µs, in per_token's order}, of the ops
    (the samples `diff` tests a by-op change with, kept in the JSON report so that a saved
    one has them) or of the node categories (what the SVG stacks)."""
    return {group: compact(round(ns / 1e3) for ns in tokens.values(prefix + group))
            for group in groups}


def token_views(tokens, book):
    """The per-token part of the compute report: distribution, slowest, every token, the
    speculative decodes and the warm-up."""
    table = tokens.table
    slowest = heapq.nlargest(SLOWEST, tokens.rows(), key=table.column("wall_ns").__getitem__)
    # Prefill batches and the prompt tokens they hold: a batch's step is the prompt's last
    # position, so it holds step + 1 prompt tokens (the decode of its turn starts there).
    # Decodes and the positions they generate: a decode generates those up to the next decode
    # of its turn (speculative decoding verifies a batch per step); a turn's last decode, one.
    indexes = book.steps_of(DECODE)
    batches = prompt = total = decodes = positions = decode_total = 0
    for phase, turn, step, value in token_columns(tokens, "wall_ns"):
        if phase == PREFILL:  # floats summed in trace order, as sum() adds them
            batches, prompt, total = batches + 1, prompt + step + 1, total + value / NS_PER_MS
        elif phase == DECODE:
            following = indexes[turn].following(step)
            decodes, decode_total = decodes + 1, decode_total + value / NS_PER_MS
            positions += (step + 1 if following is None else following) - step
    return {
        "token_ms": spread_of(tokens.values("wall_ns"), NS_PER_MS),
        "slowest": [compute_token_row(table, row) for row in slowest],
        "per_token": TokenRows(tokens, compute_token_row, COMPUTE_TOKEN_FIGURES),
        "decodes": DECODES(decodes=decodes, positions=positions, speculative=positions > decodes,
                           ms_per_decode=ratio(decode_total, decodes),
                           ms_per_position=ratio(decode_total, positions)),
        "prefill": PREFILL_BATCHES(batches=batches, prompt_tokens=prompt,
                                   ms_per_batch=ratio(total, batches),
                                   ms_per_prompt_token=ratio(total, prompt)),
        "warmup": warmup(tokens, book, "wall_ns", NS_PER_MS),
    }


def token_columns(tokens, name):
    """(phase, turn, step, value of the column `name`) of each token, in trace order."""
    return zip(*(tokens.values(column) for column in ("phase", "turn", "step", name)))


# The per_token figures read straight from the columns (TokenRows.figure): name -> (its column,
# the unit it is over; None: the integer as it is)
COMPUTE_TOKEN_FIGURES = {"ms": ("wall_ns", NS_PER_MS), "majflt": ("majflt", None)}


def compute_token_row(table, row):
    """A compute token's per_token dict, from its row."""
    columns = table.columns
    return COMPUTE_TOKEN(turn=columns["turn"][row], phase=columns["phase"][row],
                         step=columns["step"][row], ms=columns["wall_ns"][row] / NS_PER_MS,
                         majflt=columns["majflt"][row],
                         faulting_ms=columns["faulting_ns"][row] / NS_PER_MS)


WARMUP_TOKENS = 8


def warmup(tokens, book, name, unit):
    """Mean of the first WARMUP_TOKENS decode tokens of each turn vs the rest, and whether
    those are the turn's first decode tokens (the book has every step seen). Figures: the
    column `name` over `unit`."""
    seen = defaultdict(int)
    first = bytearray()  # of each token: 1 among its turn's first decode tokens, 2 after, 0 not
    starts = {turn: min(index.steps) for turn, index in book.steps_of(DECODE).items()}
    from_start = True
    for phase, turn, step, _ in token_columns(tokens, name):
        if phase != DECODE:
            first.append(0)
            continue
        if not seen[turn] and step != starts.get(turn, step):
            from_start = False
        first.append(1 if seen[turn] < WARMUP_TOKENS else 2)
        seen[turn] += 1
    values = tokens.values(name)
    first_mean, rest_mean = (
        ratio(fsum(value / unit for value, kind in zip(values, first) if kind == wanted),
              first.count(wanted)) for wanted in (1, 2))
    return WARMUP(tokens=WARMUP_TOKENS, first_mean=first_mean, rest_mean=rest_mean,
                  ratio=None if first_mean is None or not rest_mean else first_mean / rest_mean,
                  from_turn_start=from_start)


def generated_positions(compute):
    """The positions a compute report's tokens generated, as the engine counts its tokens: a
    speculative decode's (it verifies several), else one a token. What a pair's what-if and
    the engine's figures are per."""
    decodes = compute["decodes"]
    return decodes["positions"] if decodes["speculative"] else compute["tokens"]


# Memory pressure: what the verdict says and what the what-if proposes no cache past.
MEMORY_PRESSURE_FAULTS = 100  # major faults per token: pages evicted and read again every token
STEADY_FAULTING = 0.9  # ... or faults on this share of the decode tokens past each turn's warm-up
STEADY_TOKENS = 8  # at least this many such tokens: fewer say nothing of a steady state


# Whether pages are evicted and read again, and the decode tokens past each turn's first
# WARMUP_TOKENS and how many of those took major faults: decided once a run (memory_pressure)
Pressure = namedtuple("Pressure", "flagged steady faulting")


def memory_pressure(compute):
    """Pages are evicted and read again: many faults a token, or faults on (nearly) every
    decode token once the warm-up is past, whatever their count (a 64 MiB limit gave 48 a
    token and a 19x slower run). A warm cache of weights faults in its first tokens only. The
    tokens are counted, never held (a long session has hundreds of thousands), in one pass."""
    seen, steady, faulting = Counter(), 0, 0
    per_token = compute["per_token"] if compute["phase"] == "decode" else ()
    for (turn, _, _), majflt in zip(token_keys(per_token), token_figure(per_token, "majflt")):
        seen[turn] += 1
        if seen[turn] > WARMUP_TOKENS:
            steady, faulting = steady + 1, faulting + bool(majflt)
    flagged = compute["majflt_per_token"] >= MEMORY_PRESSURE_FAULTS or (
        steady >= STEADY_TOKENS and faulting >= STEADY_FAULTING * steady)
    return Pressure(flagged, steady, faulting)


# ── compute: its verdicts ────────────────────────────────────────────────────────────────────────
ROUTER_SHARE = 0.20  # router category's share of compute (a pair: its read wait's, of the decode)

OUTLIER_FACTOR = 10  # a token this many times the median token is an outlier


def warmup_verdict(report):
    """Whether each turn's first decode tokens are slower than the rest: not where a flagged
    slow stretch starts among the first twice as many and lasts past them: that is one slow
    episode, the stretch, and its slowness seen again is no warm-up (rep4 of the 48-layer
    repeats, a 24x outlier run, was called both)."""
    warm, stretch = report["warmup"], report["slow_stretch"]
    head = (f"the first {warm['tokens']} decode tokens of each turn average "
            f"{warm['first_mean']:.2f} ms, {warm['ratio']:.2f}x the rest")
    flagged = past("warmup", warm["ratio"])
    window = 2 * warm["tokens"]
    if flagged and stretch is not None and (stretch["share"] or 0) >= OUTLIER_SHARE:
        before = sum(1 for token in report["per_token"] if token["phase"] == DECODE and
                     token["turn"] == stretch["turn"] and token["step"] < stretch["first_step"])
        if before < window <= before + stretch["tokens"]:
            return verdict("warmup", None,
                f"warm-up undetermined: {head}, but the slow stretch (turn {stretch['turn']} "
                f"steps {stretch['first_step']}-{stretch['last_step']}) starts "
                f"{counted(before, 'token')} into the decode and lasts past its first {window}: "
                f"one slow episode, not a warm-up")
    return threshold_verdict("warmup", flagged, head)


def memory_verdict(report, pressure=None):
    """Pages of the weights do not stay in memory: named, its cost as a lower bound (the
    faulting nodes' time: every op slows), and the remedies the run's mode allows. pressure:
    the run's Pressure, where its caller has it."""
    faults = report["majflt_per_token"]
    if not faults:
        return None  # no fault at all: fault_bound is not judged either
    flagged, steady, faulting = pressure or memory_pressure(report)
    meta = report["meta"]  # what relieves it, by the run's mode (the log's settings too)
    limit = meta_number(meta, "mem_limit_mb")
    larger = f"a larger memory limit (it had {limit:g} MiB)" if limit else \
        "more memory (a larger limit)"
    size = f"cache_mb={meta['cache_mb']}: " if meta.get("cache_mb") else ""
    remedies = f"a smaller expert cache ({size}it holds RAM the weights need); {larger}; no " \
        f"larger cache" if cache_in_settings(meta) else \
        f"{larger}; no expert cache (it would take RAM the weights need)" \
        if meta.get("moe_stream") == "1" else \
        f"if the experts were mmapped (no --moe-stream), stream them: --moe-stream; with a " \
        f"cache, a smaller one; {larger}"
    if not flagged:
        return verdict("memory_pressure", False,
            f"no memory pressure: {faults:.1f} major faults per token (< "
            f"{MEMORY_PRESSURE_FAULTS}), and not on {STEADY_FAULTING:.0%} of the tokens past "
            f"the warm-up")
    return verdict("memory_pressure", True,
        f"MEMORY PRESSURE: {faults:.1f} major faults per token"
        + (f", on {faulting} of the {steady} decode tokens past the warm-up" if steady
           else "") + f": pages of the weights are dropped and read again, so at least "
        f"{report['faults']['ms_per_token']:.2f} ms per token (the faulting nodes', "
        f"{num(report['faults']['share'], '.0%')} of compute) is lost, more as every op slows. "
        f"Remedies: {remedies}")


def stretch_verdict(report):
    """A contiguous stretch of slow tokens is one event (not scattered outliers): where it
    starts and ends, and what slowed in it."""
    stretch = report["slow_stretch"]
    if stretch is None or (stretch["share"] or 0) < OUTLIER_SHARE:
        return None
    groups = stretch["slowed"]
    kind = "segment" if report["granularity"] == "layer" else "category"
    every = groups and len(groups) == len(set(report["category_us_by_token"]) or
                                          {row["name"] for row in report["segments"]})
    named = ", ".join(f"{g['name']} {times(g['ratio'], '.0f')}" for g in (groups or ())[:SLOWEST])
    left = len(groups or ()) - SLOWEST
    named += f" and {left} more" if left > 0 else ""
    slowed = f"every {kind} ({named})" if every else named or (
        f"no one {kind} alone" if groups is not None else
        f"its {kind}s unknown (kept for the {KEPT_SLOW_TOKENS} slowest tokens only)")
    return verdict("slow_stretch", True,
        f"SLOW STRETCH: turn {stretch['turn']} steps {stretch['first_step']}-"
        f"{stretch['last_step']} ({stretch['tokens']} tokens in a row) take "
        f"{stretch['ms_per_token']:.2f} ms each, "
        f"{times(ratio(stretch['ms_per_token'], stretch['others_ms_per_token']), '.1f')} the "
        f"other tokens ({num(stretch['others_ms_per_token'], '.2f')} ms), {stretch['share']:.0%} "
        f"of the time: one stretch, not scattered outliers; slowed in it: {slowed}")


def outlier_verdict(report):
    median = report["token_ms"]["p50"]
    if not median or len(report["per_token"]) < 2:
        return None
    walls = token_figure(report["per_token"], "ms")
    outliers = sorted((at for at, ms in enumerate(walls) if ms >= OUTLIER_FACTOR * median),
                      key=lambda at: -walls[at])
    total = sum(walls)
    share = ratio(sum(walls[at] for at in outliers), total) or 0.0
    mean_ratio = total / len(walls) / median
    if not outliers or not past("outliers", share):
        return threshold_verdict("outliers", False,
            f"the slowest token is {report['token_ms']['max'] / median:.1f}x the median "
            f"({median:.2f} ms); tokens >= {OUTLIER_FACTOR}x the median hold {share:.0%} of "
            f"the time")
    named = ", ".join(f"turn {t['turn']} step {t['step']} {t['ms']:.2f} ms"
                      for t in map(report["per_token"].__getitem__, outliers[:SLOWEST]))
    more = f" and {len(outliers) - SLOWEST} more" if len(outliers) > SLOWEST else ""
    return threshold_verdict("outliers", True,
        f"{len(outliers)} token(s) >= {OUTLIER_FACTOR}x the median ({median:.2f} ms) hold "
        f"{share:.0%} of the time",
        after=f": {named}{more}; the mean token is {mean_ratio:.2f}x the median")


# ── compute: its text and Markdown sections ──────────────────────────────────────────────────────
COMPUTE_KEYS = ("model", "arch", "n_layer", "n_threads")


def trace_header(keys):
    """The Header of a report of one trace (compute, io) whose preamble shows `keys`."""
    return lambda report: Header(report["kind"], [("trace", report["path"], "")],
                                 report["meta"], keys)


def compute_headline(report):
    """What a token costs, framed for the run: per decode and per generated position when a
    decode covers several positions, per batch and per prompt token for prefill."""
    fallback = " (no decode rows: all rows used)" if report["phase"] == "all" and \
        report["selection"]["phase"] == "default" else ""
    decodes, prefill = report["decodes"], report["prefill"]
    unit, units = ("batch", "batches") if report["phase"] == "prefill" else ("token", "tokens")
    lines = [f"{units}={report['tokens']} ({selection_text(report)}){fallback}  "
             f"{report['granularity']} granularity  nodes/{unit}={report['nodes_per_token']:.0f}"]
    if report["phase"] == "prefill":
        lines.append(f"prefill: {prefill['batches']} batch(es) of {prefill['prompt_tokens']} "
                     f"prompt tokens: {num(prefill['ms_per_batch'], '.2f')} ms per batch, "
                     f"{num(prefill['ms_per_prompt_token'], '.3f')} ms per prompt token")
    elif decodes["speculative"]:
        lines.append(f"speculative decoding: {decodes['decodes']} decodes generated "
                     f"{decodes['positions']} positions: {num(decodes['ms_per_decode'], '.2f')} "
                     f"ms per decode, {num(decodes['ms_per_position'], '.2f')} ms per generated "
                     f"position")
    else:
        lines.append(f"decode wall {report['ms_per_token']:.2f} ms per token (every node's "
                     f"time, waits for reads included)")
    lines.append(f"major faults {report['majflt_per_token']:.1f} per {unit}")
    return lines


def segment_blocks(report, view):
    compute = report_halves(report)["compute"]
    if compute["granularity"] != "layer":
        return []
    rows = compute["segments"]
    table = Grid(bar_table(SEGMENT_ROW, rows), rows, indent="")
    if len(rows) > COMPACT_LAYERS:  # the by-layer table has them, compacted, layer by layer
        spread = percentile_summary([row["ms_per_token"] for row in rows])
        least = min(row["ms_per_token"] for row in rows)
        table = Full("every segment", table, Prose([
            f"  {len(rows)} segments, ms/token min/median/max {least:.2f}/{spread['p50']:.2f}/"
            f"{spread['max']:.2f}"]))
    # the layer table beside it says the tail note once (a compute report has no such table)
    note = tail_note(compute) if report["kind"] == "compute" else []
    return [Block("by segment", [table, *note])]


def tail_note(compute):
    """What the engine's layer-trace shape means for layer -1 and the last layer."""
    tail = compute["tail_in_post"]
    if tail is None:
        return []
    return [Prose([f"  post (layer -1) holds layer {tail['layer']}'s MoE tail: blk."
                   f"{tail['layer']} has {tail['segments_per_token']:.0f} segment(s) per token "
                   f"where the other layers have {tail['others_per_token']:.0f} (the engine "
                   f"writes the last layer's routing and experts into post): read "
                   f"{tail['layer']} and -1 together"])]


def op_blocks(report, view):
    compute = report_halves(report)["compute"]
    if compute["granularity"] == "layer":
        return []
    ops = compute["by_op"]
    return [Block(f"by op ({len(ops[:view.top])} of {len(ops)}, slowest first; us = one node's "
                  f"wall time)", [Grid(table_of(OP_ROW, bar_column("share", OP_BAR_WIDTH)), ops,
                                       indent="", shown=view.top)])]


def pair_op_blocks(report, view):
    """report's by-op table: its slowest ops in a line (the categories below say more of a
    pair); the table with --full."""
    ops = report["compute"]["by_op"]
    slowest = ", ".join(f"{row['op']} {row['ms_per_token']:.2f} ms ({pct(row['share'])})"
                        for row in ops[:OPS_IN_A_LINE])
    return [block._replace(parts=[Full("every op", *block.parts, Prose(
        [f"  of {len(ops)}, the slowest: {slowest}"], "    "))])
        for block in op_blocks(report, view)]


OPS_IN_A_LINE = 3


def fault_blocks(report, view):
    compute = report_halves(report)["compute"]
    faults = compute["faults"]
    if compute["granularity"] == "layer" or not faults["by_op"]:
        return []
    rows = faults["by_op"][:FAULT_OPS_SHOWN]
    rows += [{"op": "TOTAL", **faults}] if len(faults["by_op"]) > 1 else []
    return [Block("fault attribution: nodes that took major page faults (their time is mostly "
                  "flash wait billed as compute, not arithmetic)",
                  [Grid(table_of(FAULT_ROW), rows)])]


def category_blocks(report, view):
    compute = report_halves(report)["compute"]
    rows = compute["by_category"]
    if not rows:
        return []
    parts = [Grid(table_of(CATEGORY_ROW, bar_column("share")), rows)]
    if compute["unclassified"]:
        parts.append(Items("  unclassified base names, ms/token (extend CATEGORY_NAMES):",
                           [f"{fit(u['name'], NAME_SHOWN_MOST) or '(empty)'} "
                            f"{u['ms_per_token']:.2f}"
                            for u in compute["unclassified"][:UNCLASSIFIED_SHOWN]]))
    return [Block("by node category (llama.cpp's names; a node_<N> is of the named node's "
                  "before it)", parts)]


def compute_layer_blocks(report, view):
    """compute --layers only, in every format."""
    if not view.layers:
        return []
    rows = report["by_layer"]
    return [Block("by layer (layer -1: outside every layer, i.e. embeddings and output head; "
                  "nodes with no layer index that run inside a layer are counted in it, "
                  f"{report['reattributed_ms_per_token']:.2f} ms/token re-attributed)",
                  [Grid(bar_table(LAYER_ROW, rows), rows)])]


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


def token_block(report, value, unit):
    """Per-token distribution, the slowest (heaviest) tokens and a sparkline of the run."""
    dist = report[f"token_{value}"]
    name = "heaviest" if "heaviest" in report else "slowest"
    per_token = token_figure(report["per_token"], value)
    group = -(-len(per_token) // SPARK_WIDTH)
    each = f"each mark the max of {group} tokens, " if group > 1 else ""
    parts = []
    reads = report.get("token_reads")
    if reads:
        parts.append(Prose([f"per token (reads): p50 {reads['p50']}  p90 {reads['p90']}  "
                            f"p99 {reads['p99']}  max {reads['max']}"], ""))
    parts += [Spark(per_token),
              Prose([f"      (trace order; {each}scaled 0 to {dist['max']:.2f} {unit})"]),
              Items(f"  {name}:", [f"turn {t['turn']} step {t['step']} {t[value]:.2f}"
                                   + (f" ({t['majflt']} majflt)" if t.get("majflt") else "")
                                   for t in report[name]])]
    return Block(f"per token ({unit}): p50 {dist['p50']:.2f}  p90 {dist['p90']:.2f}  "
                 f"p99 {dist['p99']:.2f}  max {dist['max']:.2f}", parts)


def compute_token_blocks(report, view):
    return [token_block(report_halves(report)["compute"], "ms", "ms")]


COMPUTE_SECTIONS = (segment_blocks, op_blocks, fault_blocks, category_blocks)

KINDS["compute"] = Kind(COMPUTE_REPORT, layout(
    header_section(trace_header(COMPUTE_KEYS)),
    lambda report, view: [Block(None, [Prose(compute_headline(report), "")], gap=False)],
    verdict_blocks,
    calm_blocks, engine_blocks, caveat_blocks, *COMPUTE_SECTIONS,
    Section(compute_layer_blocks, fold=True), compute_token_blocks))


# ── io: its records ──────────────────────────────────────────────────────────────────────────────
RANGE = Record("range", ("min", "max", "estimate"))

LATENCY = Record("latency", (("min", Shown("min", 1)),
    ("mean", Shown("mean", 1, "read latency us, mean", "latency_mean_us")),
    ("p50", Shown("p50", 1, "read latency us, p50")), ("p90", Shown("p90", 1)),
    ("p99", Shown("p99", 1, "read latency us, p99", "latency_p99_us")),
    ("p999", Shown("p99.9", 1)), ("max", Shown("max", 1))))
HISTOGRAM_ROW = Record("histogram row", ("lo_us", "hi_us", "count"))
SIZE_ROW = Record("size row", ("kib", ("label", Shown("size", "text")),
    ("reads", Shown("reads", None, "reads per token"), TOTAL),
    ("mib", Shown("MiB", 1, "MiB per token"), TOTAL), ("mib_per_s", Shown("MiB/s", 0)),
    ("us_per_read", Shown("us/read", 1, "us per read"))), key="label", by="by read size")
MIB_PER_TOKEN = ("mib_per_token", Shown("MiB/tok", 2, "MiB per token"),
                 PER_TOKEN)
LANE_ROW = Record("lane row", (("lane", Shown("lane")),
    ("reads_per_token", Shown("reads/tok", 1), PER_TOKEN), MIB_PER_TOKEN,
    ("busy_ms_per_token", Shown("busy ms/tok", 2, "lane-busy ms per token"), PER_TOKEN),
    ("mib_per_s", Shown("MiB/s", 0))), key="lane", by="by lane")
SPEC = Record("spec", (("reads", TOTAL),
    ("mib_per_token", Shown(diff="speculative MiB per token"), PER_TOKEN), "share_of_bytes"))
KIND_ROW = Record("read kind row", (("kind", Shown("", "text")), ("reads", Shown("reads"), TOTAL),
    MIB_PER_TOKEN, ("share_of_bytes", Shown("share", "%")), ("p50_us", Shown("p50 us", 1)),
    ("p99_us", Shown("p99 us", 1))), key="kind", by=", demand and speculative")
IO_LAYER_ROW = Record("io layer row", (("layer", Shown("layer")),
    ("reads_per_token", Shown("reads/tok", 1, "reads per token"), PER_TOKEN), MIB_PER_TOKEN,
    ("mean_latency_us", Shown("mean us", 1)),
    ("busy_ms_per_token", Shown("busy ms/tok", 2, "lane-busy ms per token"), PER_TOKEN)),
    key="layer", by="by layer")
EXPERT_ROW = Record("expert row", ("layer", "expert", "reads", "mib"))
ADJACENCY = Record("adjacency", (("reads_per_token", PER_TOKEN), ("runs_per_token", PER_TOKEN),
    ("coalesce_factor", Shown(diff="reads per contiguous run"))))
LRU_POINT = Record("LRU point", ("fraction", ("experts", Shown("experts")),
    ("cache_mib", Shown("MiB", 1)), ("hit_share", Shown("would have served", "%"))))
RUN_CACHE_TURN = Record("run cache turn", ("turn", "decode_tokens", "decode_misses",
    "prefill_lookups", "decode_hit_share", "hit_share", "hit_share_most"))
RUN_CACHE = Record("run cache", ("detected", "top_k", "layers", "decode_lookups", "lookups",
    "decode_hit_share", "hit_share", "hit_share_most", "verify_decodes", "rereads", "evictions",
    ("turns", ListOf(RUN_CACHE_TURN))))

# What a what-if setting changes: each setting holds the figures it changes (so every field may
# be absent); a figure's head is the words around its value in the text ("hit {}").
WHAT_IF_FIGURE_FIELDS = (("experts", FIGURE), ("experts_share", Shown("{} of the experts", "%")),
    ("hit_share", FIGURE, Shown("hit {}", "%")),
    ("reads_per_token", FIGURE, Shown("{} reads/tok", 1), PER_TOKEN),
    ("mib_per_token", FIGURE, Shown("{} MiB/tok", 2), PER_TOKEN),
    ("evictions", FIGURE, Shown("{} evictions", "d")),
    ("rereads", FIGURE, Shown("{} re-reads", "d")), ("resident_mib", Shown("resident {} MiB", 1)),
    ("io_wall_ms_per_token", FIGURE, Shown("I/O {} ms", 2), PER_TOKEN),
    ("flash_io_ms_per_token", FIGURE, Shown("{} ms", 2), PER_TOKEN),
    ("cache_mgmt_ms_per_token", FIGURE, Shown("{} ms", 2), PER_TOKEN),
    ("speculative_mib_per_token", FIGURE,
     Shown("{} MiB/tok speculative", 2), PER_TOKEN),
    ("useful_share", FIGURE, Shown("{} routed then or next", "%")))
WHAT_IF_FIGURES = Record("what-if figures", WHAT_IF_FIGURE_FIELDS,
                         later=all)
WHAT_IF_BASELINE = Record("what-if baseline", ("tokens", ("mib_per_token", PER_TOKEN),
    "io_threads", "o_direct", "overlap", "expert_bytes", ("io_wall_ms_per_token", PER_TOKEN),
    ("io_part_ms_per_token", PER_TOKEN), ("flash_io_ms_per_token", PER_TOKEN),
    ("cache_mgmt_ms_per_token", PER_TOKEN), ("noise_ms_per_token", PER_TOKEN)))
BAND = Record("calibrated band", ("half_ms", "decode_share", "known", "errors_of", "validated"))
WHAT_IF_SETTING = Record("what-if setting", ("setting", "value", ("figures", WHAT_IF_FIGURES),
    ("ms_per_token_saved", FIGURE), ("model_ms_per_token_saved", FIGURE), "method", "fits",
    ("band", BAND), "narrow_with"))
REUSE = Record("reuse", ("lookups", "experts", "expert_mib", "unique_mib", "reread_mib",
    ("lru", ListOf(LRU_POINT)), ("judged", WHAT_IF_SETTING)))
CALIBRATED = Record("calibrated what-if", ("runs", "model", "inside", "checked",
    "median_band_share", "used", "not_used_because"))
WHAT_IF = Record("what if", ("schema", ("baseline", WHAT_IF_BASELINE), ("calibrated", CALIBRATED),
    ("settings", ListOf(WHAT_IF_SETTING))))
IO_TOKEN = Record("io token", ("turn", "phase", "step", "mib", "reads", "io_ms", "busy_ms",
    "latency_mean_us", "latency_p99_us"))
IO_REPORT = Record("io report", (*REPORT_HEAD, *TRACE_HEAD, "tokens", "reads", "read_bytes",
    "req_bytes", ("reads_per_token", Shown(diff="reads per token", samples="reads"), PER_TOKEN),
    ("mib_per_token", Shown(diff="MiB per token", samples="mib"), PER_TOKEN), "lanes",
    ("io_wall_ms_per_token", RANGE, PER_TOKEN, Shown(diff={
        "estimate": ("I/O wall ms per token, estimated", "io_ms"),
        "min": "I/O wall ms per token, all lanes at once",
        "max": "I/O wall ms per token, one read at a time"})),
    ("throughput_mib_per_s", RANGE), ("slowest_reads_ms_per_token", PER_TOKEN),
    ("busy_ms_per_token", Shown(diff="lanes busy ms per token (summed over lanes)",
                                samples="busy_ms"), PER_TOKEN),
    ("busy_mib_per_s", Shown(diff="lane-busy MiB/s")), "waste_pct",
    ("waste_mib_per_token", Shown(diff="alignment waste MiB per token"), PER_TOKEN),
    "median_read_bytes", ("latency_us", LATENCY), ("latency_hist", ListOf(HISTOGRAM_ROW)),
    ("by_size", ListOf(SIZE_ROW), COMPARED), ("by_lane", ListOf(LANE_ROW), COMPARED),
    ("spec", SPEC), ("demand_vs_spec", ListOf(KIND_ROW), COMPARED),
    ("by_layer", ListOf(IO_LAYER_ROW), COMPARED), ("hot_experts", ListOf(EXPERT_ROW)),
    ("adjacency", ADJACENCY), ("run_cache", RUN_CACHE), ("reuse", REUSE), ("what_if", WHAT_IF),
    ("token_mib", TOKEN_SPREAD), ("token_reads", TOKEN_SPREAD), ("heaviest", ListOf(IO_TOKEN)),
    ("per_token", ListOf(IO_TOKEN)), ("lane_bytes_by_token", MapOf(VALUE)), ENGINE_FIELD,
    ("verdicts", ListOf(VERDICT)), WARNINGS), later=LATER)


# ── io: the fold ─────────────────────────────────────────────────────────────────────────────────
IO_COLUMNS = ("turn", "phase", "step", "layer", "expert", "lane", "spec", "offset", "req_bytes",
              "read_bytes", "latency_ns")


# An io token's columns in its fold's TokenTable (and, with --svg, LANE_COLUMN + each lane's
# bytes); its read latencies are kept in ReadLatencies, for its p99.
IO_SUMS = ("reads", "read_bytes", "busy_ns", "io_ns", "slowest_ns")
LANE_COLUMN = "lane "


class IoToken:
    """The token whose reads are being folded: its I/O estimate's open layer, its latencies
    and lanes until it is sealed into the table (when another token's reads come). A token
    whose reads come again after another's starts a new layer there, in one process or
    several (a file is cut between tokens)."""

    __slots__ = ("row", "closed_ns", "open_layer", "open_lanes", "latencies", "lane_bytes",
                 "slowest")

    def __init__(self, row):
        self.row = row
        self.latencies = array(WALL_32)  # each read's latency_ns: the token's p99, for diff
        self.lane_bytes = {}  # lane as written -> bytes (--svg)
        # The I/O estimate: the layers whose reads are all in, and the last one seen, which the
        # token's next run of rows may continue ({lane: latency_ns}).
        self.closed_ns, self.open_layer, self.open_lanes = 0, None, {}
        self.slowest = {}  # layer -> its slowest read's latency_ns: no lane count goes below

    def add_layers(self, layers, lanes, latencies):
        """A run of the token's reads, for its I/O estimate: the engine issues a layer's reads
        across its lanes and the layer is done when its busiest lane is, so a layer costs its
        busiest lane's summed latency."""
        by_layer = {} if self.open_layer is None else {self.open_layer: self.open_lanes}
        current = lane_ns = get = None
        slowest, top = self.slowest, 0
        # A token's reads come layer after layer: the layer's lanes are looked up only where
        # the layer changes (a third cheaper than a (layer, lane) key per read), whatever
        # the order. (Folding PhaseReads' per-key sums into this loop made it slower: a
        # loop's cost grows with the columns it unpacks.)
        for layer, lane, latency_ns in zip(layers, lanes, latencies):
            if layer != current:
                if top > slowest.get(current, 0):
                    slowest[current] = top
                lane_ns = by_layer.setdefault(layer, {})
                get, current, top = lane_ns.get, layer, slowest.get(layer, 0)
            lane_ns[lane] = get(lane, 0) + latency_ns
            if latency_ns > top:
                top = latency_ns
        if top > slowest.get(current, 0):
            slowest[current] = top
        self.open_layer = current  # the run's last row's layer, which the next run may go on
        self.open_lanes = by_layer.pop(current)
        self.closed_ns += sum(map(max, map(dict.values, by_layer.values())))

    @property
    def io_ns(self):
        return self.closed_ns + max(self.open_lanes.values(), default=0)

    def add_lanes(self, lanes, sizes):
        # One pass: cheaper than a compress() per lane, even with four lanes.
        lane_bytes = self.lane_bytes
        get = lane_bytes.get
        for lane, size in zip(lanes, sizes):
            lane_bytes[lane] = get(lane, 0) + size

    def seal(self, table, latencies):
        """Its figures into the table, its latencies into the ReadLatencies."""
        table.add("io_ns", self.row, self.io_ns)
        table.add("slowest_ns", self.row, sum(self.slowest.values()))
        for lane, size in self.lane_bytes.items():
            table.add(LANE_COLUMN + str(int(lane)), self.row, size)
        latencies.add(self.row, self.latencies)


class ReadLatencies:
    """Each token's read latencies, 4 bytes a read in one array: where a token's are (its
    first stretch by row; a token read again after another, every stretch)."""

    def __init__(self):
        self.values = array(WALL_32)
        self.first = zeros(0)  # row -> 1 + the start of its first stretch, 0 none yet
        self.sizes = zeros(0)  # row -> the first stretch's length
        self.more = {}  # row -> [(start, length)] of its later stretches

    def add(self, row, latencies):
        start = len(self.values)
        self.values = extend_wide(self.values, latencies)
        self._place(row, start, len(latencies))

    def of(self, row):
        """The token's latencies."""
        if row >= len(self.first) or not self.first[row]:
            return []
        start = self.first[row] - 1
        held = self.values[start:start + self.sizes[row]]
        for start, length in self.more.get(row, ()):
            held = extend_wide(held, self.values[start:start + length])
        return held

    def merge(self, later, remap):
        """A later fold's latencies, its rows made this fold's (remap)."""
        offset = len(self.values)
        self.values = extend_wide(self.values, later.values)
        for row, at in enumerate(remap):
            if row < len(later.first) and later.first[row]:
                for start, length in [(later.first[row] - 1, later.sizes[row]),
                                      *later.more.get(row, ())]:
                    self._place(at, offset + start, length)

    def _place(self, row, start, length):
        if row >= len(self.first):  # 0 fits any width: no array to make or convert
            self.first.extend(repeat(0, row + 1 - len(self.first)))
            self.sizes.extend(repeat(0, row + 1 - len(self.sizes)))
        if self.first[row]:
            self.more.setdefault(row, []).append((start, length))
            return
        self.first, self.sizes = put(self.first, row, start + 1), put(self.sizes, row, length)


Span = namedtuple("Span", "start end")  # [start, end): of rows, or of time in ns


class IntCache(dict):
    """text -> int for columns of few distinct values: map(cache.__getitem__, column). A
    trace of many distinct values makes it start over, not grow without bound."""

    def __missing__(self, text):
        if len(self) >= KEPT_VALUES:
            self.clear()
        value = self[text] = int(text)
        return value


# A spec flag's text as a compress() selector: b"1" -> 1 for the speculative reads, or for the
# demand reads b"0" -> 1
IS_SPECULATIVE, IS_DEMAND = bytes.maketrans(b"01", b"\0\1"), bytes.maketrans(b"01", b"\1\0")


class PhaseReads:
    """The sums of one phase's selected reads, bounded by the model's shape, not the run's
    length: keyed by (layer, expert, size) and by (lane, size, spec, layer) as joined text."""

    def __init__(self):
        self.by_expert = Counter()  # "layer,expert,read_bytes" -> reads
        self.by_lane = Counter()  # "lane,read_bytes,spec,layer" -> reads
        self.lane_ns = Counter()  # "lane,read_bytes,spec,layer" -> latency_ns
        # spec -> latency_ns of each read; sorted into SortedParts by sort()
        self.latency = {"0": array(WALL_32), "1": array(WALL_32)}
        self.req_bytes = 0
        self.runs = Coalesced(0, 0, 0)  # contiguous runs of requested extents, with adjacent

    def add(self, layers, experts, keys, specs, sizes, latencies):
        """The phase's selected rows of a batch; `keys`: their "lane,read_bytes,spec,layer"."""
        self.by_expert.update(map(",".join, zip(layers, experts, sizes)))
        self.by_lane.update(keys)
        lane_ns = self.lane_ns
        get = lane_ns.get
        for key, latency_ns in zip(keys, latencies):
            lane_ns[key] = get(key, 0) + latency_ns
        latency = self.latency
        flags = "".join(specs).encode()  # the reader let through "0" and "1" alone
        if b"1" in flags:  # bytes as compress()'s selectors: a third of a map()'s cost
            latency["1"] = extend_wide(latency["1"],
                                       list(compress(latencies, flags.translate(IS_SPECULATIVE))))
            latency["0"] = extend_wide(latency["0"],
                                       list(compress(latencies, flags.translate(IS_DEMAND))))
        else:
            latency["0"] = extend_wide(latency["0"], latencies)

    def sort(self):
        """Sort the latencies (in each process, so that the merge is a linear pass)."""
        for spec, latencies in self.latency.items():
            self.latency[spec] = sorted_parts(latencies)

    def merge(self, later):
        self.by_expert.update(later.by_expert)
        self.by_lane.update(later.by_lane)
        self.lane_ns.update(later.lane_ns)
        for spec, latencies in later.latency.items():
            self.latency[spec] = self.latency[spec] + latencies
        self.req_bytes += later.req_bytes
        self.add_runs(later.runs)

    def add_runs(self, runs):
        self.runs = Coalesced(*map(add, self.runs, runs))


class ExpertLookups:
    """What the engine's expert cache would see, for the cache what-if: one lookup per (token,
    layer, expert) the router demanded, in trace order, with the bytes its projections read
    (read_bytes) and asked for (req_bytes). The engine caches whole experts, so an expert's
    second projection in a token is part of the same lookup, not a hit. Speculative reads are
    not lookups (the engine's hit % counts the router's); they are kept per token run for the
    prefetch what-if. Bounded by the run's tokens x experts, not its reads."""

    def __init__(self):
        self.item_of = {}  # (layer, expert) as written -> item, numbered in order of first use
        self.items = array("B")  # each lookup's item (widened by extend_wide, as the rest)
        self.read_bytes = array(WALL_32)  # each lookup's summed read_bytes
        self.req_bytes = array(WALL_32)  # ... and req_bytes
        self.token_starts = array("B")  # each token run's first lookup
        self.token_phases = array("B")  # each token run's phase
        self.token_turns, self.token_steps = array("B"), array("B")  # ... its key (widened)
        self.speculative = []  # (token run, item) of each speculatively read expert
        self.token = None  # the token whose run is being added to: its (turn, phase, step)
        self.open_read, self.open_req, self.open_spec = {}, {}, {}

    def add(self, token, layers, experts, specs, sizes, wanted):
        """A run of one token's (turn, phase, step) reads (its rows can span batches)."""
        if token != self.token:
            self.flush()
            self.token = token
        keys = zip(layers, experts)
        if "1" in specs:
            demanded = list(map("1".__ne__, specs))
            self.open_spec.update(dict.fromkeys(compress(keys, map(not_, demanded))))
            keys, sizes, wanted = (compress(values, demanded)
                                   for values in (zip(layers, experts), sizes, wanted))
        read, req = self.open_read, self.open_req
        read_get, req_get = read.get, req.get
        for key, size, want in zip(keys, sizes, wanted):
            read[key] = read_get(key, 0) + size
            req[key] = req_get(key, 0) + want

    def flush(self):
        """Close the open token run: its lookups join the sequence."""
        if self.token is None:
            return
        run = len(self.token_phases)
        turn, phase, step = self.token
        self.token_starts = extend_wide(self.token_starts, [len(self.items)])
        self.token_phases.append(phase)
        self.token_turns = extend_wide(self.token_turns, [turn])
        self.token_steps = extend_wide(self.token_steps, [step])
        self.items = extend_wide(self.items, self._numbered(list(self.open_read)))
        self.read_bytes = extend_wide(self.read_bytes, list(self.open_read.values()))
        self.req_bytes = extend_wide(self.req_bytes, list(self.open_req.values()))
        self.speculative += [(run, item) for item in self._numbered(list(self.open_spec))]
        self.token = None
        self.open_read, self.open_req, self.open_spec = {}, {}, {}

    def _numbered(self, keys):
        """Each key's item, numbering those never seen."""
        item_of = self.item_of
        for key in filterfalse(item_of.__contains__, keys):
            item_of[key] = len(item_of)
        return list(map(item_of.__getitem__, keys))

    def merge(self, later):
        """Append a later part of the trace (both closed), its items numbered as this one's."""
        self.flush()
        later.flush()
        renumbered = self._numbered(sorted(later.item_of, key=later.item_of.__getitem__))
        runs, lookups = len(self.token_phases), len(self.items)
        self.token_starts = extend_wide(self.token_starts,
                                        [start + lookups for start in later.token_starts])
        self.token_phases += later.token_phases
        self.token_turns = extend_wide(self.token_turns, later.token_turns)
        self.token_steps = extend_wide(self.token_steps, later.token_steps)
        self.items = extend_wide(self.items, list(map(renumbered.__getitem__, later.items)))
        self.read_bytes = extend_wide(self.read_bytes, later.read_bytes)
        self.req_bytes = extend_wide(self.req_bytes, later.req_bytes)
        self.speculative += [(run + runs, renumbered[item]) for run, item in later.speculative]


def aligned_bytes(starts, ends, alignment):
    """Bytes of the windows [start, end) widened to `alignment` boundaries at both ends: each
    window's length plus start % alignment before it and -end % alignment after it (summed by
    C builtins: a run per read can be millions)."""
    widths = repeat(alignment)
    return sum(ends) - sum(starts) + sum(map(mod, starts, widths)) + \
        sum(map(mod, map(neg, ends), widths))


def sorted_extents(offsets, lengths):
    """The extents [offset, offset+length) by offset: (their starts, the furthest end so far
    at each). A run breaks where an extent starts after the furthest end before it; the order
    of extents with equal offsets does not change the runs."""
    pick = itemgetter(*sorted(range(len(offsets)), key=offsets.__getitem__))
    starts, lengths = (pick(offsets), pick(lengths)) if len(offsets) > 1 else (offsets, lengths)
    return starts, accumulate(map(add, starts, lengths), max)


def run_count(offsets, lengths):
    """How many runs the extents form, merged where they touch or overlap (--adjacent)."""
    if len(offsets) < 2:
        return Coalesced(len(offsets), 0, 0)
    starts, furthest = sorted_extents(offsets, lengths)
    return Coalesced(1 + sum(map(gt, starts[1:], furthest)), 0, 0)


def coalesced(offsets, lengths):
    """Runs of the extents [offset, offset+length), merged where they touch or overlap: (how
    many, their bytes, their bytes read in O_DIRECT windows of O_DIRECT_ALIGNMENT): what the
    coalesce what-if reads."""
    if not offsets:
        return Coalesced(0, 0, 0)
    starts, furthest = sorted_extents(offsets, lengths)
    furthest = list(furthest)
    breaks = [True] + list(map(gt, starts[1:], furthest))  # where each run starts
    run_starts = list(compress(starts, breaks))
    run_ends = list(compress(furthest, breaks[1:] + [True]))
    return Coalesced(len(run_starts), sum(run_ends) - sum(run_starts),
                     aligned_bytes(run_starts, run_ends, O_DIRECT_ALIGNMENT))


Coalesced = namedtuple("Coalesced", "runs bytes aligned_bytes")
O_DIRECT_ALIGNMENT = 4096  # the engine's O_DIRECT window: 65536 asked at any offset, 69632 read


class IoFold(TokenFold):
    """Folds io-trace batches into a PhaseReads per phase, plus the per-token sums."""

    SUMMED = ("layer", "expert", "keys", "spec", "read_bytes", "latency_ns")

    def __init__(self, selection, adjacent=False, lookups=False, per_lane=False):
        super().__init__(selection)
        for name in IO_SUMS:
            self.table.column(name)
        self.latencies = ReadLatencies()
        self.open = None  # the IoToken being read
        self.per_lane = per_lane
        # --adjacent counts the runs; the what-if (lookups) also sums their bytes
        self.adjacent = (coalesced if lookups else run_count) if adjacent else None
        self.lookups = ExpertLookups() if lookups else None
        self.phases = {}  # phase -> PhaseReads
        self.sizes = IntCache()

    def _fold(self, batch, runs):
        """Token sums and adjacency per token run; then each phase's selected rows of the batch
        are added at once, so that the per-read work stays inside C builtins."""
        sizes = list(map(self.sizes.__getitem__, batch["read_bytes"]))
        wanted = list(map(self.sizes.__getitem__, batch["req_bytes"]))
        offsets, lanes = batch.get("offset"), batch["lane"]
        layers, latencies, experts = batch["layer"], batch["latency_ns"], batch["expert"]
        keys = list(map(",".join, zip(lanes, batch["read_bytes"], batch["spec"], layers)))
        spans = defaultdict(list)  # phase -> [Span] of the batch's rows of its selected runs
        table = self.table
        for run in runs:
            row = self.book.lookup(run)
            if row is None:
                continue
            token = self.open
            if token is None or token.row != row:
                self._seal()
                token = self.open = IoToken(row)
            start, end = run.start, run.end
            phase = table.columns["phase"][row]
            reads = self.phases.get(phase) or self.phases.setdefault(phase, PhaseReads())
            table.add("reads", row, end - start)
            table.add("read_bytes", row, sum(sizes[start:end]))
            table.add("busy_ns", row, sum(latencies[start:end]))
            token.add_layers(layers[start:end], lanes[start:end], latencies[start:end])
            token.latencies = extend_wide(token.latencies, latencies[start:end])
            if self.per_lane:  # a loop over every read, for the SVG alone
                token.add_lanes(lanes[start:end], sizes[start:end])
            reads.req_bytes += sum(wanted[start:end])
            if self.adjacent:
                reads.add_runs(self.adjacent(offsets[start:end], wanted[start:end]))
            if self.lookups is not None:
                self.lookups.add((table.columns["turn"][row], phase, table.columns["step"][row]),
                                 layers[start:end], experts[start:end], batch["spec"][start:end],
                                 sizes[start:end], wanted[start:end])
            phase_spans = spans[phase]
            if phase_spans and phase_spans[-1].end == start:  # the runs of a batch abut
                phase_spans[-1] = Span(phase_spans[-1].start, end)
            else:
                phase_spans.append(Span(start, end))
        self._add_phases(spans, [keys if name == "keys" else batch[name]
                                 for name in self.SUMMED])

    def _add_phases(self, spans, columns):
        """Each phase's selected rows of the batch (its spans), at once."""
        first, *_ = columns
        rows = len(first)
        for phase, phase_spans in spans.items():
            if phase_spans != [Span(0, rows)]:
                keep = [False] * rows
                for start, end in phase_spans:
                    keep[start:end] = [True] * (end - start)
                self.phases[phase].add(*(list(compress(column, keep)) for column in columns))
            else:
                self.phases[phase].add(*columns)

    def _seal(self):
        if self.open is not None:
            self.open.seal(self.table, self.latencies)
            self.open = None

    def _finished(self):
        self._seal()
        for reads in self.phases.values():
            reads.sort()
        if self.lookups is not None:
            self.lookups.flush()

    def merge(self, later):
        self.latencies.merge(later.latencies, self.book.merge(later.book))
        for phase, reads in later.phases.items():
            if phase in self.phases:
                self.phases[phase].merge(reads)
            else:
                self.phases[phase] = reads
        if self.lookups is not None:
            self.lookups.merge(later.lookups)


# req_bytes, of few distinct values (an expert's projection sizes), is a key: text to an int by
# IntCache costs less than parsing it
IO_READ = Columns("io", IO_COLUMNS, ints=("latency_ns",),
                  keys=("turn", "phase", "step", "layer", "expert", "lane", "spec", "read_bytes",
                        "req_bytes"),
                  drop=Drop("kind", {"wait"}))
IO_READ_EXTENTS = IO_READ._replace(ints=("offset",) + IO_READ.ints)  # adjacency


CACHE_TABLE = (column("expert cache", lambda point: "all experts" if point["fraction"] == 1 else
                      f"1/{round(1 / point['fraction'])} of them"), *table_of(LRU_POINT))


# ── io: v2 rows, read as intervals on the run's one clock, and by kind ───────────────────────────
# A v2 trace stamps every row with start_ns/end_ns on the steady clock, the same clock in both
# files of a run; its io rows are of two kinds, `read` and `wait`. The stall, the timeline and
# Perfetto read them here alone, so that a row is one interval [start, end) to each of them, and
# one that ends before it starts is counted and taken as empty (a span never runs backwards).
Intervals = namedtuple("Intervals", "starts ends")  # [start, end) each, as two sequences


class Clock:
    """Reads the rows' Intervals; `backwards`: how many rows read so far end before they
    start (each taken as empty: its end is its start)."""

    def __init__(self):
        self.backwards = 0

    def intervals(self, rows, start=0, end=None):
        """The Intervals of rows[start:end] ({column: values}, start_ns and end_ns among
        them)."""
        starts, ends = rows["start_ns"][start:end], rows["end_ns"][start:end]
        backwards = sum(map(gt, starts, ends))
        if backwards:
            self.backwards += backwards
            ends = list(map(max, starts, ends))
        return Intervals(starts, ends)

    def by_kind(self, rows):
        """{"read": Intervals, "wait": Intervals} of an io batch's rows."""
        timed, kinds = self.intervals(rows), rows["kind"]
        if "wait" not in kinds:
            return {"read": timed, "wait": Intervals((), ())}
        split = {}
        for kind in ("read", "wait"):
            chosen = list(map(kind.__eq__, kinds))  # once for both ends
            split[kind] = Intervals(*(list(compress(values, chosen)) for values in timed))
        return split

    def merge(self, later):
        self.backwards += later.backwards


# ── io: the overlap's stall, from a v2 trace's wait rows ─────────────────────────────────────────
class WaitFold(TokenFold):
    """The `wait` rows of a v2 io trace (a compute thread waiting for an expert to be ready;
    latency_ns its length): under overlap=1, the stall the run measured, token by token."""

    def __init__(self, selection):
        super().__init__(selection)
        self.table.column("waited_ns")  # each token's: how long compute threads waited
        self.waits = 0

    def _fold(self, batch, runs):
        kinds, latencies = batch["kind"], batch["latency_ns"]
        self.waits += kinds.count("wait")
        for run in runs:
            row = self.book.lookup(run)
            if row is not None:
                self.table.add("waited_ns", row, sum(compress(
                    latencies[run.start:run.end], map("wait".__eq__, kinds[run.start:run.end]))))

    def _finished(self):
        pass

    def merge(self, later):
        self.book.merge(later.book)
        self.waits += later.waits


IO_WAITS = Columns("io", ("turn", "phase", "step", "latency_ns", "kind"), ints=("latency_ns",),
                   keys=("turn", "phase", "step"), strings=("kind",))


def with_trace_stall(path, reading):
    """The reading with the stall its io trace measured, when the engine's log gave none: an
    overlap=1 v2 trace's wait rows, summed over the selected tokens that read or waited
    (`measured`: stall_ms_per_token per such token, and `stall_tokens`: how many; `tokens`
    stays the log's generated tokens)."""
    measured = reading.measured or {}
    if "stall_ms_per_token" in measured or trace_io.read_once(path):
        return reading  # a pipe's head would be gone (weighed_io says the stall needs a file)
    with Trace(path) as trace:
        if "kind" not in trace.columns or not overlapped(trace.meta):
            return reading
    quiet = reading._replace(warn=None)  # the reads' own pass says what is wrong with the file
    _, fold = fold_file(path, IO_WAITS, lambda: WaitFold(reading.selection),
                        in_parts_if_it_may(quiet))
    phases, _ = chosen_phases(reading.selection, set(fold.table.columns["phase"]))
    tokens = Tokens(fold.table, phases)
    if not fold.waits or not len(tokens):
        return reading  # a fork that writes no wait rows has not measured the stall
    waited_ms = sum(tokens.values("waited_ns")) / NS_PER_MS
    return reading._replace(measured={**measured, "stall_ms_per_token": waited_ms / len(tokens),
                                      "stall_tokens": len(tokens)})


# ── io: the expert cache what-if ─────────────────────────────────────────────────────────────────
CACHE_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1)  # the --cache curve: of the distinct experts


class ExpertCache:
    """The engine's expert cache, for every capacity at once: whole experts, LRU, capacity in
    experts. Under LRU with items of one size, a lookup hits a cache of C experts iff its stack
    distance (the distinct experts looked up since its previous lookup, itself included) is <=
    C; one pass over the lookups gives every distance (each item's latest lookup is a mark in
    an ascending list: the marks after an item's own are the distinct items used since).

    Every lookup counts towards the hit share, prefill ones too (the engine's hit % does);
    bytes count for the tokens of `phases` (the report's) alone."""

    def __init__(self, lookups, phases):
        items, read_bytes = lookups.items, lookups.read_bytes
        self.lookups = len(items)
        sizes = Counter(lookups.req_bytes)  # an expert: its projections' req_bytes, the mode
        self.expert_bytes = max(sizes, key=sizes.__getitem__, default=0)
        numbered = len(lookups.item_of) + 1  # speculatively read experts are numbered too
        hits, saved = [0] * numbered, [0] * numbered  # by distance
        self.counted_bytes = 0
        last, marks = {}, []
        ends = chain(islice(lookups.token_starts, 1, None), [len(items)])
        for start, end, phase in zip(lookups.token_starts, ends, lookups.token_phases):
            counted = phase in phases
            if counted:
                self.counted_bytes += sum(read_bytes[start:end])
            for index in range(start, end):
                item = items[index]
                previous = last.get(item)
                if previous is not None:
                    at = bisect_left(marks, previous)
                    distance = len(marks) - at
                    del marks[at]
                    hits[distance] += 1
                    if counted:
                        saved[distance] += read_bytes[index]
                marks.append(index)
                last[item] = index
        self.distinct = len(last)  # the experts looked up: one read only speculatively is not
        self.hits = list(accumulate(hits[:self.distinct + 1]))
        self.saved_bytes = list(accumulate(saved[:self.distinct + 1]))

    def capacity(self, mib):
        """Experts a cache of `mib` MiB holds: whole experts, as the engine counts them. A
        whole size is the engine's --cache-mb, the experts that fit; a fractional one is a
        resident MiB as its log prints it (to 0.1, or twice that), the whole count nearest
        it: a 1 MiB cache of 192 KiB experts holds 5, 0.94 MiB, printed 0.9 (4.8 experts)."""
        if not self.expert_bytes:
            return 0
        experts = mib * MIB / self.expert_bytes
        return int(experts) if mib == int(mib) else round(experts)

    def at(self, capacity):
        """CacheOutcome of a cache of `capacity` experts (0: no cache)."""
        held = max(0, min(capacity, self.distinct))
        hits = self.hits[held] if held else 0
        misses = self.lookups - hits
        return CacheOutcome(
            experts=max(0, capacity), hit_share=ratio(hits, self.lookups),
            saved_bytes=self.saved_bytes[held] if held else 0,
            evictions=misses - held if held else 0, rereads=misses - self.distinct,
            resident_bytes=held * self.expert_bytes)


CacheOutcome = namedtuple("CacheOutcome",
                          "experts hit_share saved_bytes evictions rereads resident_bytes")


def cache_curve(cache, lookups, cached):
    """The --cache table: re-reads, and the LRU at fractions of the distinct experts (none
    for a run that had a cache: its trace holds the misses alone)."""
    firsts = {}
    for item, size in zip(lookups.items, lookups.read_bytes):
        firsts.setdefault(item, size)
    footprint = sum(firsts.values())
    curve = []
    for fraction in () if cached else CACHE_FRACTIONS:
        outcome = cache.at(max(1, round(cache.distinct * fraction)))
        curve.append(LRU_POINT(fraction=fraction, experts=outcome.experts,
                               cache_mib=outcome.experts * cache.expert_bytes / MIB,
                               hit_share=outcome.hit_share))
    return REUSE(lookups=cache.lookups, experts=cache.distinct,
                 expert_mib=cache.expert_bytes / MIB, unique_mib=footprint / MIB,
                 reread_mib=(sum(lookups.read_bytes) - footprint) / MIB, lru=curve, judged=None)


# ── io: what a cached run's own trace says of its cache ──────────────────────────────────────────
# A run with a cache traces its misses alone: a decode token shows, in a layer, fewer experts
# than the router picked (k), and a token served entirely from cache shows nothing. With k the
# most any decode (token, layer) demands, a turn's decode lookups are its decode tokens (from
# its steps: the first decode is the prefill's step + 1) x the layers x k; those not traced hit.
CacheCounts = summing_record(
    "CacheCounts", ("decode_tokens", "decode_lookups", "decode_misses", "prefill", "unseen"),
    doc="A turn's decode tokens, their lookups and misses, its prefill lookups, and the "
        "lookups of verify decodes its trace cannot tell hit or not.")


def own_cache(lookups, cache, own_mib):
    """The io report's `run_cache`, from the demanded experts of every token (None when no
    decode token demanded any); its re-reads and evictions from the ExpertCache of its
    lookups traced, and the run's cache_mb (own_mib, None when unknown)."""
    layer_of = {item: layer for (layer, _), item in lookups.item_of.items()}
    demand = TokenDemand(lookups, layer_of)
    if not demand.layers:
        return None
    top_k = demand.top_k()
    short = sum(1 for layers, least in zip(demand.layer_counts, demand.least)
                if layers < len(demand.layers) or least < top_k)
    batches = sum(1 for spanned, most in zip(demand.spanned, demand.most)
                  if spanned != 1 and most > top_k)
    if batches:  # speculative decoding: the engine looks an expert up once a verify batch
        demanded = dict(demanded_tokens(lookups))  # each token's items, for its layers
        decoded = {(turn, phase, step): Counter(map(layer_of.__getitem__, items))
                   for (turn, phase, step), items in demanded.items() if phase == DECODE}
        shape = Counter(layer_of.values())  # layer -> experts seen
        turns = verify_counts(decoded, demand.positions(decoded), demanded, (top_k, shape),
                              held_by_layer(lookups, layer_of, cache, own_mib))
    else:
        turns = demand.turn_counts(len(demand.layers) * top_k)
    return RUN_CACHE(detected=short >= 2, top_k=top_k, layers=len(demand.layers),
                     verify_decodes=batches, **cache_totals(turns),
                     rereads=cache.lookups - cache.distinct,
                     evictions=max(0, cache.lookups - cache.capacity(own_mib)) if own_mib
                     else None)


def token_runs(lookups):
    """(start, end, phase, (turn, step)) of each token run of the lookups, in trace order."""
    ends = chain(islice(lookups.token_starts, 1, None), [len(lookups.items)])
    return zip(lookups.token_starts, ends, lookups.token_phases,
               zip(lookups.token_turns, lookups.token_steps))


def demanded_tokens(lookups):
    """((turn, phase, step), its distinct items) of each token of the lookups, its runs
    joined, in key order: one token at a time where the runs come in key order (as the engine
    writes them), else through a dict of every token, sorted."""
    columns = (lookups.token_turns, lookups.token_phases, lookups.token_steps)
    # whether the runs' keys never go down, compared a pair at a time, never all held
    if not all(map(le, zip(*columns), zip(*(islice(column, 1, None) for column in columns)))):
        demanded = defaultdict(set)
        for start, end, phase, (turn, step) in token_runs(lookups):
            demanded[turn, phase, step].update(lookups.items[start:end])
        yield from sorted(demanded.items())
        return
    def key_of(run):
        _, _, phase, (turn, step) = run
        return turn, phase, step
    for (turn, phase, step), group in groupby(token_runs(lookups), key=key_of):
        items = set()
        for start, end, *_ in group:
            items.update(lookups.items[start:end])
        yield (turn, phase, step), items


class TokenDemand:
    """What each decode token of the lookups demanded, in key order, 16 bytes a token: its
    layers with experts demanded, the most and fewest experts of one layer, the positions it
    generates (up to the next decode's step; 0: a turn's last, not known); and each turn's
    step bounds and lookups, for the turns' cache counts."""

    def __init__(self, lookups, layer_of):
        self.layer_counts, self.most, self.least = array("I"), array("I"), array("I")
        self.spanned = array(WALL_32)
        self.layers = set()
        self.bounds = {}  # (turn, phase) -> (lowest step, highest step)
        self.counts = defaultdict(CacheCounts)  # turn -> its misses and prefill lookups
        before = None  # the (turn, step) of the decode before, whose positions this one ends
        for (turn, phase, step), items in demanded_tokens(lookups):
            low, high = self.bounds.get((turn, phase), (step, step))
            self.bounds[turn, phase] = (min(low, step), max(high, step))
            if phase != DECODE:
                self.counts[turn].add(0, 0, 0, len(items), 0)
                continue
            self.counts[turn].add(0, 0, len(items), 0, 0)
            if before is not None:
                self._spans(before, turn, step)
            before = (turn, step)
            per_layer = Counter(map(layer_of.__getitem__, items))
            self.layers.update(per_layer)
            self.layer_counts.append(len(per_layer))
            self.most.append(max(per_layer.values(), default=0))  # 0: speculative reads only
            self.least.append(min(per_layer.values(), default=0))
        if before is not None:
            self._spans(before, None, None)

    def _spans(self, before, turn, step):
        """The decode `before`'s positions: up to this decode's step in its turn, else 0."""
        before_turn, before_step = before
        self.spanned = extend_wide(self.spanned,
                                   [step - before_step if turn == before_turn else 0])

    def positions(self, decodes):
        """{(turn, phase, step): positions, None for a turn's last} of each decode, `decodes`
        their keys in key order."""
        return {key: spanned or None for key, spanned in zip(decodes, self.spanned)}

    def top_k(self):
        """The model's k: the most experts a decode (token, layer) demands, among decodes of
        one position. A speculative decode verifies several positions (up to the next
        decode's step) and demands up to k of each, so its count is k only over its positions
        (at least); a turn's last decode, of positions unknown, tells k where nothing else
        does."""
        single = spread = last = 0
        for most, spanned in zip(self.most, self.spanned):
            if spanned == 1:
                single = max(single, most)
            elif spanned:
                spread = max(spread, -(-most // spanned))
            else:
                last = max(last, most)
        return single or spread or last

    def turn_counts(self, per_token):
        """{turn: CacheCounts}, a decode token's lookups being `per_token`: a turn's decode
        tokens run from its prefill's step + 1 (else its first decode) to its last decode."""
        for turn, sums in self.counts.items():
            if (turn, DECODE) in self.bounds:
                first, last = self.bounds[turn, DECODE]
                _, prefilled = self.bounds.get((turn, PREFILL), (None, None))
                first = prefilled + 1 if prefilled is not None and prefilled < first else first
                tokens = last - first + 1
                sums.add(tokens, tokens * per_token, 0, 0, 0)
        return dict(sorted(self.counts.items()))


def held_by_layer(lookups, layer_of, cache, own_mib):
    """{(turn, phase, step): {layer: experts}} that an LRU of the run's own size, fed its
    misses in trace order, holds of each layer as each decode reaches it, less those the
    decode read (held by the model, not by the engine); None when the size is unknown."""
    capacity = cache.capacity(own_mib) if own_mib else 0
    if not capacity:
        return None
    held, by_layer, at_start = OrderedDict(), Counter(), {}
    for start, end, phase, (turn, step) in token_runs(lookups):
        key = (turn, phase, step)
        first = key not in at_start
        if first:  # a layer it read no expert of: as the decode starts
            at_start[key], begun = Counter(by_layer), set()
        for item in lookups.items[start:end]:
            layer = layer_of[item]
            if first and layer not in begun:  # as the engine reaches the layer
                begun.add(layer)
                at_start[key][layer] = by_layer[layer]
            if item in held:
                held.move_to_end(item)
                at_start[key][layer] -= first
                continue
            held[item] = None
            by_layer[layer] += 1
            if len(held) > capacity:
                evicted, _ = held.popitem(last=False)
                by_layer[layer_of[evicted]] -= 1
    return at_start


def verify_counts(decoded, positions, demanded, model, held):
    """{turn: CacheCounts} of a run decoded in verify batches: a batch's layer holds its
    misses and hits its trace cannot show. A batch picks k at least, so a layer that read
    fewer than k hit the rest; one that read m may have hit more, up to k x positions (no more
    than the layer's experts; a turn's last decode: as many as the longest) less m, and no
    more than an LRU of its size held of the layer (`held`: None, size unknown): those are
    `unseen`. model: (k, {layer: experts})."""
    top_k, shape = model
    longest = max(filter(None, positions.values()), default=1)  # what a last decode may span
    counts = defaultdict(CacheCounts)
    for (turn, phase, step), items in demanded.items():
        if phase != DECODE:
            counts[turn].add(0, 0, 0, len(items), 0)
            continue
        misses = decoded[turn, phase, step]
        certain = unseen = 0
        for layer, experts in shape.items():
            read = misses.get(layer, 0)
            surely = max(0, top_k - read)
            spanned = positions[turn, phase, step] or longest  # a last one's: unknown
            most = min(experts, top_k * spanned) - read
            if held is not None:
                most = min(most, held[turn, phase, step][layer])
            certain, unseen = certain + surely, unseen + max(0, most - surely)
        counts[turn].add(positions[turn, phase, step] or 1, len(items) + certain, len(items),
                         0, unseen)
    return dict(sorted(counts.items()))


def cache_totals(turns):
    """The run cache's lookups, hit shares and turns, from {turn: CacheCounts}."""
    whole = CacheCounts()
    for counts in turns.values():
        whole.merge(counts)
    return dict(decode_lookups=whole.decode_lookups,
                lookups=whole.decode_lookups + whole.prefill, **cache_shares(whole),
                turns=[RUN_CACHE_TURN(turn=turn, decode_tokens=counts.decode_tokens,
                                      decode_misses=counts.decode_misses,
                                      prefill_lookups=counts.prefill, **cache_shares(counts))
                       for turn, counts in turns.items()])


def recounted(run_cache, decoded):
    """The run cache over every decoded token: decoded {turn: decode tokens} the compute
    trace or the log knows, where a turn's last tokens were served whole from cache and its
    io trace, which ends at its last read, does not show them (69 of gemma4's 128)."""
    if not run_cache or run_cache["verify_decodes"]:  # a verify run's decodes are its batches
        return run_cache
    per_token = run_cache["layers"] * run_cache["top_k"]
    turns = {}
    for row in run_cache["turns"]:
        counts = CacheCounts()
        tokens = max(row["decode_tokens"], decoded.get(row["turn"], 0))
        counts.add(tokens, tokens * per_token, row["decode_misses"], row["prefill_lookups"], 0)
        turns[row["turn"]] = counts
    return {**run_cache, **cache_totals(turns)}


def cache_contradiction(report, reading, cache):
    """What the log says of the run's cache, where its word stood in the report's settings,
    that its trace (a run_cache seen) refutes, or None: a cache that served lookups (1% or
    more), or one that holds every expert the trace looks up (it would never read one again),
    where no decode token is short of its experts; or no cache (no moe-cache line) where
    tokens are. A declared cache is the user's word, and a log's word that yielded to a
    stronger one was said where it yielded."""
    own, hit, settings = report["run_cache"], (reading.measured or {}).get("hit_pct"), \
        report["settings"]
    logged = {key: settings[key]["value"] for key in CACHE_KEYS
              if (settings.get(key) or {}).get("source") == "log"}
    if not own or not logged or (settings.get("cache") or {}).get("source") == "declared":
        return None
    # a preamble's cache (cache=1, cache_mb above 0) may have served none: a trace of every
    # lookup cannot refute it
    preamble_cache = any(ran_a_cache(key, report["meta"].get(key)) and key not in logged
                         for key in CACHE_KEYS)
    if not own["detected"] and hit and hit >= 1 and not preamble_cache:
        return (f"the engine's log says a cache served {hit:g}% of the lookups, but every "
                f"decode token of the trace reads all of its experts: no cache ran here")
    held = holds_every_expert(own, cache, logged.get("cache_mb"))
    if held:
        return (f"the engine's log says cache_mb={logged['cache_mb']}, which holds all "
                f"{held}: no cache of that size ran here")
    if own["detected"] and logged.get("cache") == "0":  # a preamble's no cache settles it
        return ("the engine's log shows no cache (no moe-cache line), but decode tokens of the "
                "trace read fewer experts than the router picks: a cache ran here")
    return None


def holds_every_expert(own, cache, size):
    """Words for a cache of `size` (cache_mb's text, or None) that holds every expert the
    trace looks up while the trace reads some again (such a cache never does), else None."""
    mib = size and meta_number({"cache_mb": size}, "cache_mb")
    if not mib or own["detected"] or not own["rereads"] or cache.capacity(mib) < cache.distinct:
        return None
    return (f"{cache.distinct} experts the trace looks up, but the trace reads "
            f"{own['rereads']} of them again")


def lanes_read(io):
    """The lanes an io report's reads ran on: those of its lane table that read (a named lane
    that never read is an idle row), whose rate the trace measured; its lanes without a read."""
    rows = io.get("by_lane")  # a saved report's may hold anything: then its lanes
    read = sum(1 for row in rows if isinstance(row, dict) and row.get("reads_per_token")) \
        if isinstance(rows, list) else 0
    return read or io["lanes"]


def had_cache(io):
    """Whether the run had a cache: its trace shows one, or its settings name one (a cache
    that served nothing, 0% hit, traces every lookup, and managed all the same)."""
    return ran_cached(io) or cache_in_settings(io["meta"])


def ran_cached(io):
    """Whether an io report's run had a cache: its trace shows one, and its settings do not
    say none (cache=0 or cache_mb=0: a router that picks fewer experts than k by design)."""
    own = io.get("run_cache") if io else None
    return bool(own and own["detected"]) and io["meta"].get("cache") != "0" and \
        meta_number(io["meta"], "cache_mb") != 0


CACHE_KEYS = ("cache", "cache_mb")  # the run's cache: one fact, two keys


# What a log says of its run's cache: its moe-cache line's figures (the cache it managed),
# each set aside with its cache where the run's cache is not the log's (log_cache_stands)
LOG_CACHE_FIGURES = ("cache_mgmt_ms_per_token", "hit_pct", "resident_mib", "evictions", "rereads")


def log_cache_stands(figures, io):
    """Whether a log's figures (names) speak of the run's cache as the settings that stand
    do: a moe-cache line of a run that had a cache, or a moe-stream line without one of a run
    that had none. Where they do not (the trace refuted the log, or a declaration overruled
    it), the log's cache figures weigh nothing: its management is another cache's."""
    if "hit_pct" in figures or "resident_mib" in figures:
        return had_cache(io)
    return "read_mib" not in figures or not had_cache(io)


def fact_keys(key):
    """The keys of the fact a setting is of: both cache keys for either, else the key."""
    return CACHE_KEYS if key in CACHE_KEYS else (key,)


def declared_cache(settings):
    """{key: value} of the cache keys --set declares, of the reading's Settings."""
    return {setting.key: setting.value for setting in settings
            if setting.source == "declared" and setting.key in CACHE_KEYS}


def declared_no_cache(settings):
    """Whether --set says the run had no cache: cache=0, or cache_mb=0."""
    declared = declared_cache(settings)
    return declared.get("cache") == "0" or meta_number(declared, "cache_mb") == 0


def ran_a_cache(key, value):
    """What a cache key's value says of the run: True a cache (cache=1, cache_mb above 0),
    False none, None when it cannot be read."""
    if key == "cache" or value is None:
        return {"1": True, "0": False}.get(value)
    number = meta_number({key: value}, key)
    return None if number is None else number > 0


def other_cache_key(key, value, meta):
    """The other cache key of `meta` whose value says otherwise of the run's cache than
    key=value does (cache_mb=64 against cache=0), or None: the run's cache is one fact."""
    cached = ran_a_cache(key, value) if key in CACHE_KEYS else None
    return next((other for other in CACHE_KEYS if cached is not None and other != key
                 and ran_a_cache(other, meta.get(other)) not in (None, cached)), None)


def declared_cache_warning(name, settings, signs=()):
    """The one word on the run's cache a declaration settles, or None when nothing says
    otherwise: the declared cache keys (or `no cache`), then the log's cache keys that say
    otherwise (of `settings`, Settings), and `signs` (the trace's, each in words)."""
    declared = declared_cache(settings)
    others = list(dict.fromkeys([f"{setting.key}={setting.value} (log)" for setting in settings
                                 if setting.source == "log" and setting.key in CACHE_KEYS and (
                                     declared.get(setting.key, setting.value) != setting.value
                                     or other_cache_key(setting.key, setting.value, declared))]
                                + list(signs)))
    if not declared or not others:
        return None
    what = "no cache" if declared_no_cache(settings) else \
        " ".join(f"{key}={value}" for key, value in declared.items())
    return f"{name}: {what}, as declared, though {'; '.join(others)}: the declaration stands"


def cache_shares(counts):
    hits = counts.decode_lookups - counts.decode_misses
    lookups = counts.decode_lookups + counts.prefill
    return {"decode_hit_share": ratio(hits, counts.decode_lookups),
            "hit_share": ratio(hits, lookups),
            "hit_share_most": ratio(hits + counts.unseen, lookups + counts.unseen)}


# ── io: what each engine setting would buy ───────────────────────────────────────────────────────
# A decoded token is its compute and its I/O part. The I/O part of a serial run is the MiB it
# reads at its lane count's ms per MiB (with a cache, that rate times the cached reads' factor:
# a cached run's reads are slower a MiB) plus the cache's management, a cost a miss; of an
# overlapped run, the serial part times the overlap factor (below 1: the reads hidden; above:
# the readers slowed compute down). A setting changes the I/O part alone, so its saving is the
# run's own I/O part less the part at the setting, and the run's compute, which a busy machine
# inflates tenfold, is set aside. Each coefficient is fitted on the user's runs (summary
# --calibration-out), or else is one of DEFAULT_COSTS, what real runs of the engine showed.
ENGINE_MS_ROUNDING = 0.5  # the engine prints s/token to 3 decimals
COST = Record("calibration cost", ("value", "min", "max", "n", "residual"))


def cost_of(values, lows=None, highs=None):
    """A COST over the runs' values (each allowing [low, high]), or None without any."""
    if not values:
        return None
    value = median_of(values)
    return COST(value=value, min=min(lows or values), max=max(highs or values), n=len(values),
                residual=max(abs(one - value) for one in values))


def known_cost(value, low, high):
    """A COST known from real runs rather than fitted on the user's (n 0)."""
    return COST(value=value, min=low, max=high, n=0, residual=0.0)


def management_cost(runs):
    """Cache management a miss over runs' (management ms a token, as a log prints it: to 1 ms,
    so +- ENGINE_MS_ROUNDING; misses a token): a COST, None without a run."""
    return cost_of([ms / misses for ms, misses in runs],
                   [max(0.0, ms - ENGINE_MS_ROUNDING) / misses for ms, misses in runs],
                   [(ms + ENGINE_MS_ROUNDING) / misses for ms, misses in runs])


def misses_of(mib, expert_mib):
    """A cached run's misses a token: the MiB it read, an expert each (0 unknown)."""
    return mib / expert_mib if expert_mib else 0.0


DEFAULT_COSTS = {
    # I/O goes as lanes ** -exponent: real runs read at 207 / 594 / 964 us a read on 1 / 4 / 8
    # lanes (0.24 from 4 to 1 lane, 0.30 from 4 to 8), and a 48-layer run at 433 MiB/s on 1
    # lane against 855 on 4 (0.49)
    "lane_exponent": known_cost(0.37, 0.2, 0.55),
    # a cached run's reads, a MiB, over the same run's without a cache: a 48-layer model's at
    # 64, 256 and 512 MiB 1.3-1.45x, the 4-layer sweep's (../shared/traces/sweep) 0.84-1.09x
    "cached_rate_factor": known_cost(1.3, 0.84, 1.55),
    # its cache management follows the bytes it misses: 23, 18 and 11 ms a token at 0, 17 and
    # 39% hit of 384 lookups is 0.060, 0.057 and 0.047 ms a miss of the shared models' 0.1875
    # MiB experts; a model of larger experts moves more a miss (one of 4x larger experts paid
    # 2-3x the management a miss said)
    "management_ms_per_mib": known_cost(0.055 / 0.1875, 0.045 / 0.1875, 0.062 / 0.1875)}
# More lanes than any measured may be slower: the 48-layer sweep's 8 lanes read 98 ms a token
# where its quietest 4-lane repeat read 89, lanes ** 0.14 slower
LANE_TURN = 0.15
# The I/O part's run-to-run spread on a quiet machine, half its range over its median: the
# 48-layer model's four quiet serial repeats read 89, 91, 108 and 126 ms a token (flash I/O)
IO_NOISE_SHARE = 0.18
BAND_MOST_SHARE = 0.40  # a calibrated band wider than this share of the decode is not known
DEFAULT_LANES = (1, 2, 4, 8)  # the lane counts a what-if tries (--io-threads: yours)
# What a what-if is asked to try: cache sizes (--cache-mb) and lane counts (--io-threads), ()
# for the defaults.
Asked = namedtuple("Asked", "cache_sizes lanes", defaults=((), ()))


CACHE_BYTES_METHOD = (
    "the engine's cache: whole experts (the size over an expert's bytes, rounded down), least "
    "recently used out, prefill lookups counted, speculative reads left out; band: one expert "
    "fewer to one more (near a working set's knee one expert moves the hit share by tens of "
    "points)")
CACHED_CACHE_METHOD = (
    "this run had a cache, so its trace holds the misses alone: a simulation over them would "
    "take misses for every lookup. At its own size, its own hit share (the lookups missing "
    "from the trace); larger, at least that (a larger LRU serves every lookup a smaller one "
    "does) and at most every expert kept once read; smaller, at most its own. A trace of a run "
    "without a cache gives the curve")
UNCALIBRATED_METHOD = (
    "ms: this run's I/O and cache management less the setting's, from the run's own ms per MiB "
    "and what real runs showed (docs/what-if.md): I/O as lanes to the power "
    "-0.2 to -0.55 (past the lanes measured, +0.15 to -0.55: more lanes may be slower), cached "
    "reads 0.84-1.55x the time a MiB, management 0.24-0.33 ms a MiB missed; the band is their "
    "range (model_ms_per_token_saved) and the machine's run-to-run spread of the I/O part, "
    "each side of the point the larger of the two; compute is set aside")


def held_share(experts, distinct):
    """The share of the distinct experts a cache of `experts` holds: at most all of them (a
    cache larger than the model's experts holds 100%, not 108%)."""
    return None if not distinct else min(1.0, experts / distinct)


def figure(point, low=None, high=None):
    """A what-if figure: its point (None where only a bound is honest) and bounds."""
    return FIGURE(point=point, min=point if low is None and high is None else low,
                  max=point if low is None and high is None else high)


def run_hit_band(own):
    """A cached run's own hit share as a figure: a band where verify decodes hit what their
    trace cannot show (its middle the point), else exact."""
    least = own["hit_share"] or 0.0
    most = own.get("hit_share_most") or least
    return figure((least + most) / 2, least, most) if most > least else figure(least)


def footprint_share_mib(cache, share):
    """A share of the distinct experts' footprint in whole MiB (the engine's unit), at least 1:
    the what-if's default sizes, and at half the cache the cache verdict judges."""
    return max(1, round(cache.distinct * cache.expert_bytes / MIB * share))


def logged_tokens(generated, read_tokens):
    """The tokens the engine's log says the run generated, where they count a trace's tokens
    as the engine does: every decoded token, those served whole from a cache (which have no
    io row) too, every position of a speculative decode; None when the log gives none, or
    fewer than the trace read on (a log of another run)."""
    return generated if generated and generated >= read_tokens else None


def overlap_cap(meta, measured, tokens):
    """The most the reads can cost one of a report's `tokens`: all of them when serial; under
    overlap=1 the measured stall, else None (unknown). The stall is per token it was measured
    over (a trace's waits: per token that read or waited, `stall_tokens`; the log's: per
    generated token, `tokens`), spread over the report's tokens (its read-tokens, or a pair's
    decoded tokens)."""
    if not overlapped(meta):
        return math.inf
    stall = measured.get("stall_ms_per_token")
    if stall is None:
        return None
    over = measured.get("stall_tokens") or logged_tokens(measured.get("tokens"), tokens) or \
        tokens
    return stall * (ratio(over, tokens) or 1.0)


def capped(ms, cap):
    """ms saved, at most what the reads cost (an overlap_cap; None, unknown: not capped)."""
    return ms if cap is None else min(ms, cap)


def merging_saves(io, estimate, factor):
    """The most merging requests saves of `estimate` ms: the requests' fixed cost of the reads
    merged away, `factor` times fewer (the coalescing verdict's stake and the coalesce
    what-if's bound, one computation). A read's fixed cost is a share of its time, at most:
    from the size classes, the intercept of latency against size (least squares, weighted by
    reads; at most the fastest read); from one class, the fastest read's latency over the
    mean's."""
    latency = io["latency_us"]
    if not latency["mean"]:
        return 0.0
    rows = [(row["mib"] * 1024 / row["reads"], row["us_per_read"], row["reads"])
            for row in io["by_size"] if row["reads"] and row["us_per_read"] is not None]
    fixed = latency["min"]
    weight = sum(w for _, _, w in rows)
    if len({size for size, _, _ in rows}) > 1:
        size_mean = sum(x * w for x, _, w in rows) / weight
        us_mean = sum(y * w for _, y, w in rows) / weight
        spread = sum(w * (x - size_mean) ** 2 for x, _, w in rows)
        slope = sum(w * (x - size_mean) * (y - us_mean) for x, y, w in rows) / spread
        if slope > 0:
            fixed = min(fixed, max(0.0, us_mean - slope * size_mean))
    return estimate * min(1.0, fixed / latency["mean"]) * (1 - 1 / (factor or 1.0))


# ── io: the token model and the what-if ──────────────────────────────────────────────────────────
# A configuration as the token model sees it: its MiB read a token, lanes, whether it has a
# cache, its misses a token and whether it overlaps.
Config = namedtuple("Config", "mib lanes cached misses overlap")
Ranged = namedtuple("Ranged", "value low high")  # a figure and the range its costs allow
IoPart = namedtuple("IoPart", "whole flash management")  # a token's, each Ranged (TokenModel)
# What a setting is said to save: its ms_per_token_saved, how it was got, a calibrated band
# (None uncalibrated), the run that would narrow a band too wide, and the serial I/O part it
# leaves: (flash I/O, cache management) as Ranged, None where the model gives none; and the
# band from the model's error alone, where the machine's spread widened it.
Saving = namedtuple("Saving", "saved method band narrow_with parts model",
                    defaults=(None, None, None, None))


def ranged_of(cost):
    return Ranged(cost["value"], cost["min"], cost["max"])


def scaled_range(span, by):
    """span times a positive Ranged (each end by the product's extremes)."""
    ends = [end * factor for end in (span.low, span.high) for factor in (by.low, by.high)]
    return Ranged(span.value * by.value, min(ends), max(ends))


class TokenModel:
    """The I/O part of a decoded token at any configuration (the model above): the costs are
    the calibration's where it fitted them, else DEFAULT_COSTS; the rates are anchored at the
    lane counts the calibration's serial runs read at (uncached), else at the run's own (its
    ms per MiB now, cached where it had a cache). A cached run's own management a miss (its
    log's) stands for the default's where the calibration has none."""

    def __init__(self, fit, own, own_ms_per_mib, own_management=None, slowest_ms=0.0):
        self.fit = fit
        # the run's own reads take at least each layer's slowest read, at any lane count
        self.floor = (None if own is None else own.mib, slowest_ms or 0.0)
        fitted = fit or {}
        # each cost a Ranged: the fit's, else the default; management a miss of this model
        # (the fit's, else the run's own log's), None where the default a MiB missed stands
        costs = {**{name: fitted.get(name) or cost for name, cost in DEFAULT_COSTS.items()},
                 "management_ms_per_miss": fitted.get("management_ms_per_miss") or
                 own_management, "overlap_factor": fitted.get("overlap_factor")}
        self.costs = {name: cost and ranged_of(cost) for name, cost in costs.items()}
        self.overlap = self.costs["overlap_factor"]
        anchors = {int(lanes): ranged_of(cost) for lanes, cost in
                   (fitted.get("ms_per_mib") or {}).items()}
        self.anchored_cached = False  # whether the anchors are rates of cached reads
        if not anchors and own_ms_per_mib:
            anchors = {own.lanes: Ranged(own_ms_per_mib, own_ms_per_mib, own_ms_per_mib)}
            self.anchored_cached = own.cached
        self.anchors = anchors

    def rate(self, lanes, cached=False):
        """ms per MiB at `lanes`, of cached reads or not: an anchor's, or the nearest anchor's
        along the lane curve, times (or over) the cached factor where the anchor's reads were
        not (were) cached; None without an anchor."""
        if not self.anchors or not lanes:
            return None
        rate = self.anchors.get(lanes)
        if rate is None:
            near = min(self.anchors, key=lambda anchor: (abs(math.log(anchor / lanes)), anchor))
            exponent = self.costs["lane_exponent"]
            if lanes > max(self.anchors):
                # past every lane count measured the curve may turn: the drive's queue full,
                # the readers competing with compute for few cores; the band takes in a loss
                exponent = exponent._replace(low=min(exponent.low, -LANE_TURN))
            moves = [(near / lanes) ** power for power in (exponent.low, exponent.high)]
            rate = scaled_range(self.anchors[near], Ranged((near / lanes) ** exponent.value,
                                                        min(moves), max(moves)))
        if cached == self.anchored_cached:
            return rate
        factor = self.costs["cached_rate_factor"]
        if cached:
            return scaled_range(rate, factor)
        return scaled_range(rate, Ranged(1 / factor.value, 1 / factor.high, 1 / factor.low))

    def part(self, config):
        """The I/O part of a token at `config`: its serial (flash I/O, cache management), each
        a Ranged (its MiB at the ms per MiB there; its misses at the management a miss, the
        fit's or the run's own, else the MiB it misses at the default a MiB), and the whole
        part (overlapped: the serial part times the fitted overlap factor, None without
        one); None without a rate."""
        rate = self.rate(config.lanes, config.cached)
        if rate is None:
            return None
        per_miss = self.costs["management_ms_per_miss"]
        missed = (config.misses if per_miss else config.mib) if config.cached else 0.0
        flash = scaled_range(rate, Ranged(config.mib, config.mib, config.mib))
        mib, slowest = self.floor
        if config.mib == mib:  # the same reads: no lane count goes below the slowest
            flash = Ranged(*(max(end, slowest) for end in flash))
        management = scaled_range(per_miss or self.costs["management_ms_per_mib"],
                                  Ranged(missed, missed, missed))
        whole = Ranged(*map(add, flash, management))
        if config.overlap:
            whole = None if self.overlap is None else scaled_range(whole, self.overlap)
        return IoPart(whole, flash, management)


def validated_half(errors, kinds, spread):
    """The half-width of a calibrated band for a change of `kinds`: the largest error a
    leave-one-out saw for each kind ({kind: ms}; summed over a pair's kinds; a kind never
    held out: the largest of any), never below the quiet repeats' spread; None with no
    error. The what-if's bands and the calibration's validation of them, one rule."""
    if not errors:
        return None
    worst = max(errors.values())
    return max(sum(errors.get(kind, worst) for kind in kinds), spread or 0.0)


# The engine's flash I/O is the wall time it waited per layer's reads; a v1 trace holds each
# read's latency, not the wake-up and dispatch around a layer's reads: 44-65 us per layer on
# every shared real run (the estimate 0.89-0.94x the engine's), so that much is allowed too.
LAYER_WAIT_MS = 0.1


def agrees_with_engine(engine, tool, least=0.0, slack=0.0):
    """Whether the tool's figure agrees with the engine's: they differ by at most
    ENGINE_TOLERANCE of the engine's, or `least` (its rounding, or what else may part them),
    and `slack` more (the tool's own half band)."""
    return abs(tool - engine) <= max(ENGINE_TOLERANCE * abs(engine), least) + slack


def logged_flash_io(io, measured):
    """The engine's flash I/O per read-token of an io report, from its log, where the log can
    stand for the run's I/O part: the run read in series (overlapped, the log's flash I/O is
    the readers' summed time, no wait), the report covers the whole decode the log summed, and
    the log agrees with the trace's I/O estimate (within ENGINE_TOLERANCE, or LAYER_WAIT_MS a
    layer that read). The engine timed the wait the latencies only estimate; else None, and
    the estimate stands."""
    flash = (measured or {}).get("flash_io_ms_per_token")
    if flash is None or overlapped(io["meta"]) or not io["tokens"] or \
            not whole_decode(io):
        return None
    generated = logged_tokens(measured.get("tokens"), io["tokens"])
    flash *= generated / io["tokens"] if generated else 1.0  # the log's is per generated token
    layers = sum(1 for row in io["by_layer"] if row["reads_per_token"])
    estimate = io["io_wall_ms_per_token"]["estimate"]
    return flash if agrees_with_engine(flash, estimate, LAYER_WAIT_MS * layers) else None


def another_model(fitted, report, cache):
    """Why a calibration is of another model than the run's (its name, layers, top-k or
    expert size), or None."""
    meta, own = report["meta"], report["run_cache"] or {}
    run = {"model": meta.get("model"), "n_layer": meta_int(meta, "n_layer") or None,
           "top_k": own.get("top_k"), "expert_mib": cache.expert_bytes / MIB or None}
    differ = [key for key, value in run.items() if value is not None and fitted.get(key)
              is not None and (value != fitted[key] if key != "expert_mib"
                               else abs(value - fitted[key]) > 0.01 * value)]
    if not differ:
        return None
    words = ", ".join(f"{key} {fitted[key]}" for key in differ)
    return (f"fitted on another model ({words}; this run: "
            f"{', '.join(f'{key} {run[key]}' for key in differ)}): fit one on this model's "
            f"runs with summary --calibration-out")


def unused_because(validation):
    """Why a calibration is not used, None where it is: a fit that held nothing out, or none
    of whose held-out bands was narrow enough to count, validated no band (every setting would
    be 'not known'), and one that predicted its own held-out runs worse than the defaults would
    make the advice worse than none."""
    if not validation["held_out"]:
        return "nothing was held out of the fit, so no band is validated"
    if not validation["checked"]:
        return (f"none of its held-out bands was {BAND_MOST_SHARE:.0%} of the decode or "
                f"narrower, so none is validated")
    if validation.get("no_worse_than_defaults") is False:
        return (f"it predicted its own held-out runs worse than the defaults (median error "
                f"{validation['median_error_ms']:.2f} ms against "
                f"{validation['defaults_median_error_ms']:.2f})")
    return None


class WhatIf:
    """The inputs every setting's figures come from: the io report, the expert cache and the
    coalesced runs, what the run measured (its log: flash I/O, cache management, decode) and
    the calibration (--calibration), and the token model of both. Every figure is per one of
    the report's read-tokens (io), or of a pair's `decoded` (tokens or positions, and its
    decode per one of them, which no saving passes); the report's figures are divided once
    more from their totals (per), the log's made per them from its generated tokens."""

    def __init__(self, report, cache, coalesced_runs, lookups, measured=None, decoded=None):
        self.report, self.cache, self.runs = report, cache, coalesced_runs
        self.lookups = lookups  # the prefetch setting counts its speculative experts' use
        self.tokens, self.most = decoded or (report["tokens"], None)
        # a figure of the report's per read-token, made per one of `tokens`
        self.per_token = partial(per, den=self.tokens, factor=report["tokens"] / self.tokens)
        self.estimate = self.per_token(report["io_wall_ms_per_token"]["estimate"])
        mib = self.per_token(report["mib_per_token"])
        self.ms_per_mib = ratio(self.estimate, mib)
        measured = measured or {}
        self.cap = overlap_cap(report["meta"], measured, self.tokens)  # inf: serial
        # the log's figures are per generated token, all of them; without the log's count (a
        # selection), as the split takes them: per one of `tokens`
        generated = logged_tokens(measured.get("tokens"), report["tokens"]) or self.tokens
        self.per_read = generated / self.tokens
        self.management = (measured.get("cache_mgmt_ms_per_token") or 0.0) * self.per_read
        # summary --calibration-out's, from --calibration: used where it validated itself
        self.calibration = measured.get("calibration")
        problem = self.calibration and another_model(self.calibration["model"], report, cache)
        if problem:
            raise TraceError(measured["calibration_path"], 0, problem)
        self.unused = self.calibration and unused_because(self.calibration["validation"])
        self.fit = None if self.unused else self.calibration
        decode = measured.get("decode_ms_per_token") or (self.fit or {}).get("base_decode_ms")
        self.decode = None if decode is None else decode * self.per_read
        # the I/O part a saving is taken from: the log's flash I/O where it stands for it
        logged = self.per_token(logged_flash_io(report, measured))
        self.io_ms = self.estimate if logged is None or self.cap != math.inf else logged
        # what hiding or bypassing the reads saves at most: their time, within the decode
        self.io_most = self.io_ms if self.decode is None else min(self.io_ms, self.decode)
        cached = had_cache(report)
        self.own = Config(mib, lanes_read(report),  # the lanes whose rate is measured
                          cached, misses_of(mib, cache.expert_bytes / MIB) if cached else 0.0,
                          overlapped(report["meta"]))
        # a cached run's management a miss, from its log (per generated token, printed to 1 ms)
        managed = measured.get("cache_mgmt_ms_per_token")
        self.model = TokenModel(self.fit, self.own, ratio(self.io_ms, mib),
                                None if managed is None or not self.own.misses else
                                management_cost([(managed, self.own.misses / self.per_read)]),
                                self.per_token(report.get("slowest_reads_ms_per_token")))
        # a cached run's management no log gives: the model's at its own configuration, as at
        # every setting's (the header's estimate), not none
        if managed is None and self.own.cached:
            part = self.model.part(self.own._replace(overlap=False))
            # never more than a pair's decode leaves beside the flash I/O (the compute and the
            # management together): a default that does not fit the run is capped by it
            room = math.inf if self.most is None else max(0.0, self.most - self.io_ms)
            self.management = 0.0 if part is None else min(part.management.value, room)
        # the run's own I/O part as measured (serial: its I/O, the log's where it has one, and
        # its cache management), as the model gives it (overlapped); None unknown: every saving
        # is taken from it
        if self.own.overlap and self.model.overlap is not None:
            part = self.model.part(self.own)
            self.io_part = None if part is None else part.whole.value
        else:
            self.io_part = self.io_ms + self.management
        # the machine's run-to-run spread of that part, half its range: the calibration's quiet
        # repeats' where it measured one (an unused fit changes nothing), else IO_NOISE_SHARE
        spread = (self.fit or {}).get("quiet_spread_ms")
        self.noise = spread / 2 * self.per_read if spread else \
            None if self.io_part is None else self.io_part * IO_NOISE_SHARE
        self.cache_at = {}  # MiB -> its setting: the cache verdict's size is weighed once

    def saving_at(self, config, name, value):
        """What a change to `config` (name=value) is Saving to save, or None when the model
        cannot say (no rate; overlapped without a fitted overlap factor).
        Calibrated: its point plus or minus the band validated_half gives, not known (no
        figure, the run that would narrow it) when wider than BAND_MOST_SHARE of the decode;
        uncalibrated: the range the default costs allow."""
        # uncalibrated overlap: the serial part, then capped
        priced = self.model.part(config._replace(overlap=config.overlap and
                                                 self.model.overlap is not None))
        own, part = self.io_part, priced and priced.whole
        if own is None or part is None:
            return None
        # the part the setting acts on, said beside it; overlapped, the part is the stall
        parts = None if config.overlap else (priced.flash, priced.management)
        kinds = tuple(name.split("+"))
        point = own - part.value
        fit = self.fit or {}
        half = validated_half(fit.get("errors_ms"), kinds, fit.get("quiet_spread_ms"))
        if half is None:  # the model's range, and the machine's spread beside it
            model = self.banded(point, own - part.high, own - part.low)
            return Saving(self.banded(*model.values(), self.noise, self.io_part),
                        UNCALIBRATED_METHOD, parts=parts, model=model)
        half *= self.per_read
        share = ratio(2 * half, self.decode)
        known = share is not None and share <= BAND_MOST_SHARE
        band = BAND(half_ms=half, decode_share=share, known=known,
                    errors_of="+".join(kinds), validated=sorted(
                        set(kinds) & set(self.fit.get("errors_ms") or ())) == sorted(kinds))
        method = (f"calibrated on {len(self.fit['runs'])} runs of "
                  f"{self.fit['model']['model']} (--calibration)") + (
            ": this run's I/O and cache management less the setting's at the fitted costs, +- "
            "the largest error its leave-one-out saw for this kind of change (never below the "
            "quiet repeats' spread); compute is set aside")
        if not known:  # what would narrow it: a run at the setting itself when its kind was
            # never held out or missed widely, else quieter repeats of the base
            errors, spread = self.fit.get("errors_ms") or {}, self.fit.get("quiet_spread_ms")
            quieter = all(kind in errors for kind in kinds) and \
                (spread or 0.0) >= max(errors[kind] for kind in kinds)
            return Saving(figure(None, None, None), method, band,
                          "repeat the base run on a quiet machine (its repeats' spread is the "
                          "band)" if quieter else f"run {name}={value} once", parts)
        return Saving(self.banded(point, point - half, point + half), method, band,
                      parts=parts)

    def banded(self, point, low, high, noise=None, most=None):
        """A saving as a figure. Given `most` (a run's whole I/O part): with the machine's
        run-to-run spread (`noise`, None unknown: 0), each side of the point as wide as that at
        least, as a calibrated band is never below the repeats' spread (without a point: each
        end moved out by it), and the upper end at most `most`, however the machine varies. An
        end the model leaves open stays open."""
        if most is not None:
            ends = []
            for end, away in ((low, -1), (high, 1)):
                centre = end if point is None else point
                ends.append(None if end is None else
                            centre + away * max(abs(end - centre), noise or 0.0))
            low, high = ends
            high = None if high is None else min(high, most)
        return figure(point, low, high)

    def setting(self, name, value, figures, saving, fits=None):
        if saving.parts:  # the part the setting acts on, said beside what it saves
            flash, management = saving.parts
            figures = {**figures, "flash_io_ms_per_token": figure(*flash),
                       "cache_mgmt_ms_per_token": figure(*management)}

        # No end passes the decode, the log's or a pair's: a log whose flash I/O exceeds its
        # decode, or reads that outlast a serial decode, promised up to 80x it
        decode = min(decode for decode in (self.decode, self.most, math.inf) if decode is not None)

        def within(saved):
            return saved and {end: None if ms is None else min(ms, decode)
                              for end, ms in saved.items()}
        return WHAT_IF_SETTING(setting=name, value=value, figures=figures,
                               ms_per_token_saved=within(saving.saved),
                               model_ms_per_token_saved=within(saving.model),
                               method=saving.method, fits=fits, band=saving.band,
                               narrow_with=saving.narrow_with)

    def modelled(self, name, value, figures, configs, method, fits=None):
        """A setting whose ms the token model gives: at one configuration, or, for a cache,
        over the configurations reading its (fewest, middle, most) MiB a token (the middle
        None where unknown): the saving over that band, its point the middle's (None where an
        end is unknown). Uncalibrated under overlap, only bounds are honest: no point, at most
        the stall (none known: nothing), and at least as slow as the serial figure says."""
        savings = [None if config is None else self.saving_at(config, name, value)
                   for config in configs]
        if len(savings) == 1:
            saving, = savings
        else:  # a cache's band of MiB
            fewest, middle, most = savings
            saving = None if fewest is None or most is None else middle or fewest
        if saving is not None and len(savings) == 3:
            if saving.model is not None:  # the model's band, then widened
                model = figure(None if middle is None else middle.model["point"],
                               most.model["min"], fewest.model["max"])
                saving = saving._replace(model=model, saved=self.banded(
                    *model.values(), self.noise, self.io_part))
            elif saving.band["known"]:
                saving = saving._replace(saved=figure(
                    None if middle is None else middle.saved["point"], most.saved["min"],
                    fewest.saved["max"]))
            if saving.parts:  # each part over the MiB's band too
                saving = saving._replace(parts=tuple(Ranged(
                    saving.parts[index].value if middle else None,
                    min(one.parts[index].low for one in (fewest, most)),
                    max(one.parts[index].high for one in (fewest, most))) for index in (0, 1)))
        if saving is None:
            return self.setting(name, value, figures, Saving(
                figure(None, None, None), method + ". ms not predicted: no rate for it"), fits)
        if self.cap != math.inf and saving.band is None:
            low = saving.saved["min"]
            saving = saving._replace(model=None, saved=figure(None, None, None)
                                     if self.cap is None else
                                     figure(None, None if low is None else min(0.0, low),
                                            capped(saving.saved["max"], self.cap)))
        return self.setting(name, value, figures, saving._replace(
            method=f"{method}. {saving.method}"), fits)

    def fits(self, mib):
        """False when a cache of `mib` MiB exceeds a declared mem_limit_mb, else None."""
        limit = meta_number(self.report["meta"], "mem_limit_mb")
        return False if limit is not None and mib > limit else None

    def cache_settings(self, asked):
        """One per size asked for (--cache-mb), when an expert's size is known; for a run
        that had a cache, what its trace of misses can honestly say, and the cache off."""
        if not self.cache.expert_bytes:
            return []
        own = self.report["run_cache"]
        off = [self.off_setting(own)] if self.own.cached and own else []
        if ran_cached(self.report):
            return off + [self.cached_setting(mib, own) for mib in asked.cache_sizes]
        return off + [self.cache_setting(mib) for mib in asked.cache_sizes]

    def off_setting(self, own):
        """cache_mb=0 on a run that had a cache: every lookup read, at the uncached rate, no
        management."""
        band = run_hit_band(own)
        hit = band["point"]
        now = self.own.mib
        mib = now / (1 - hit) if hit < 1 else now
        fewest, most = (now / (1 - band[end]) if band[end] < 1 else now
                        for end in ("min", "max"))
        return self.modelled("cache_mb", 0, {"mib_per_token": figure(mib, fewest, most)},
                             [self.own._replace(mib=mib, cached=False, misses=0.0)],
                             "the cache off: every lookup read, as the trace's misses show "
                             f"{hit:.1%} of them served")

    def cached_setting(self, mib, own):
        """A size for a run that had a cache: its own hit share at its own size (or bounds,
        its size unknown); larger, at least that (LRU's inclusion property) and at most every
        expert kept once read (only first lookups miss: exact once all of them fit); smaller,
        at most its own."""
        cache, capacity = self.cache, self.cache.capacity(mib)
        own_mib = meta_number(self.report["meta"], "cache_mb")
        own_capacity = cache.capacity(own_mib) if own_mib else None
        ceiling = 1 - ratio(cache.distinct, own["lookups"]) if own["lookups"] else 0.0
        band = run_hit_band(own)
        hit = band["point"]
        figures = {"experts": figure(capacity),
                   "experts_share": held_share(capacity, cache.distinct)}
        if capacity >= cache.distinct:
            shares = figure(ceiling)
        elif capacity == own_capacity:
            shares = band
            figures.update(evictions=figure(own["evictions"]), rereads=figure(own["rereads"]))
        elif own_capacity is not None and capacity > own_capacity:
            shares = figure(None, band["min"], ceiling)
        else:
            shares = figure(None, 0.0, band["max"] if own_capacity is not None else ceiling)
        now = self.own.mib

        def mib_at(share):  # the bytes read go with the misses
            return None if share is None else now * (1 - share) / (1 - hit) if hit < 1 else now
        # the most hits read the fewest MiB
        fewest, middle, most = (mib_at(shares[bound]) for bound in ("max", "point", "min"))
        figures.update(hit_share=shares, mib_per_token=figure(middle, fewest, most))
        return self.modelled("cache_mb", mib, figures,
                             tuple(map(self.cached_config, (fewest, middle, most))),
                             CACHED_CACHE_METHOD, self.fits(mib))

    def cache_setting(self, mib):
        if mib in self.cache_at:
            return self.cache_at[mib]
        cache = self.cache
        capacity = cache.capacity(mib)
        low, point, high = (cache.at(capacity + step) for step in (-1, 0, 1))
        read = self.report["read_bytes"]
        # MiB a token, Ratios: a pair divides the total again
        fewest, middle, most = (Ratio((read - outcome.saved_bytes) / MIB, self.tokens)
                                for outcome in (high, point, low))

        def spread(name):
            values = [getattr(outcome, name) for outcome in (low, point, high)]
            _, middle, _ = values
            return figure(middle, min(values), max(values))
        held = partial(min, cache.distinct)  # a cache past the footprint holds what there is
        self.cache_at[mib] = self.modelled("cache_mb", mib, {
            "experts": figure(held(point.experts), held(low.experts), held(high.experts)),
            "experts_share": held_share(point.experts, cache.distinct),
            "hit_share": figure(point.hit_share, low.hit_share, high.hit_share),
            "mib_per_token": figure(middle, fewest, most),
            "evictions": spread("evictions"), "rereads": spread("rereads"),
            "resident_mib": point.resident_bytes / MIB},
            tuple(map(self.cached_config, (fewest, middle, most))), CACHE_BYTES_METHOD,
            self.fits(mib))
        return self.cache_at[mib]

    def cached_config(self, mib):
        """The run's configuration with a cache that leaves `mib` MiB a token to read (None:
        unknown), an expert's MiB a miss (a cache's setting has an expert's size)."""
        return None if mib is None else self.own._replace(
            mib=mib, cached=True, misses=mib / (self.cache.expert_bytes / MIB))

    def o_direct_settings(self, asked):
        """Buffered reads, for a run that read with O_DIRECT; O_DIRECT, for one that did not."""
        if self.report["meta"].get("o_direct") == "0":
            return [self.setting("o_direct", 1, {}, Saving(
                figure(None, None, None), "reads that bypass the page cache: what they cost is "
                "the drive's, which a buffered run's trace does not measure; run o_direct=1 "
                "once"))]
        if self.report["meta"].get("o_direct") != "1":
            return []
        return [self.setting("o_direct", 0, {
            "mib_per_token": figure(Ratio(self.report["req_bytes"] / MIB, self.tokens))}, Saving(
            figure(None, None, self.io_most),
            "bytes exact: req_bytes, the alignment waste gone. Time depends on the page "
            "cache: a real run without O_DIRECT was served from it, 12x faster than any bound; "
            "cold, buffered reads may be no faster, so no lower bound. On a small model whose "
            "weights fit the page cache, a run with O_DIRECT off measures the page cache, not "
            "the drive"))]

    def lanes_settings(self, asked):
        """Each lane count asked for (--io-threads; default DEFAULT_LANES) but the run's own (its
        io_threads, else the lanes its trace read on): its MiB at the token model's ms per MiB
        there."""
        settings = []
        named = meta_int(self.report["meta"], "io_threads")  # a named lane may never read
        for lanes in (lanes for lanes in asked.lanes if lanes not in (self.own.lanes, named)):
            config = self.own._replace(lanes=lanes)
            part = self.model.part(config._replace(overlap=False))
            settings.append(self.modelled(
                "io_threads", lanes, {} if part is None else {
                    "io_wall_ms_per_token": figure(*part.whole)}, [config],
                f"{counted(lanes, 'lane')}: the MiB now at the ms per MiB there"))
        return settings

    def overlap_settings(self, asked):
        """Reads beside compute, for a run that read in series; in series, for one that
        overlapped."""
        if overlapped(self.report["meta"]):
            return [self.serial_setting()]
        if self.model.overlap is not None:
            return [self.modelled("overlap", 1, {}, [self.own._replace(overlap=True)],
                                  "reads beside compute")]
        meta = self.report["meta"]
        threads, cores = meta_int(meta, "n_threads"), meta_number(meta, "cores")
        if threads and cores:
            full = threads >= cores
            low = -self.io_most if full else 0.0
            cores_words = f"{threads} compute threads on {cores:g} cores: " + (
                "they fill them, so the readers compete with compute and the run may get "
                "slower, by up to its I/O" if full else "a core is left for the readers")
        else:
            low = None
            cores_words = ("no lower bound: when the compute threads fill the cores, the "
                           "readers compete with them and the run gets slower (declare --set "
                           "cores=N)")
        return [self.setting("overlap", 1, {}, Saving(figure(None, low, self.io_most),
            f"reads beside compute: at most the run's whole I/O hidden (the log's flash I/O, "
            f"else the I/O estimate; after a cache, what it leaves); real runs hid 20-60% of "
            f"it, and on 2 cores one got 119 ms slower; {cores_words}; run overlap=1 once"))]

    def serial_setting(self):
        """overlap=0 on an overlapped run: from the fit's overlap factor; else the stall and
        the log's management now less the serial I/O part at the run's own ms per MiB, compute
        held (the point), and at best compute falls to nothing without readers beside it (the
        upper end, none without the decode)."""
        serial = self.own._replace(overlap=False)
        if self.model.overlap is not None:
            return self.modelled("overlap", 0, {}, [serial], "reads in series")
        priced = self.model.part(serial)
        part, method = priced and priced.whole, (
            "reads in series: the stall and cache management now less the serial I/O part "
            "(the MiB at this run's ms per MiB, and management), compute held; at best "
            "compute, slowed by readers beside it, falls to nothing (a real overlapped run "
            "on 2 cores saved 119.7 ms of 237: its compute went from 112 to 15 ms)")
        if self.cap is None or part is None:
            return self.setting("overlap", 0, {}, Saving(figure(None, None, None), method + (
                ". ms not predicted: no stall known (the log's moe-overlap line, or a v2 "
                "trace's waits)")))
        own = self.cap + self.management
        model = figure(own - part.value, own - part.high,
                       None if self.decode is None else self.decode - part.low)
        return self.setting("overlap", 0, {}, Saving(
            self.banded(*model.values(), self.noise,
                        self.io_part if self.decode is None else self.decode), method, model=model,
            parts=(priced.flash, priced.management)))

    def coalesce_settings(self, asked):
        """Touching requests merged, when --adjacent found the runs."""
        runs = self.runs
        if runs is None:
            return []
        direct = self.report["meta"].get("o_direct") == "1"
        merged = runs.aligned_bytes if direct else runs.bytes
        most = merging_saves(self.report, self.estimate, ratio(self.report["reads"], runs.runs))
        return [self.setting("coalesce", 1, {
            "reads_per_token": figure(Ratio(runs.runs, self.tokens)),
            "mib_per_token": figure(Ratio(merged / MIB, self.tokens))}, Saving(
            figure(None, 0.0, capped(most, self.cap)),
            f"requests that touch or overlap merged into one read"
            f"{f' ({O_DIRECT_ALIGNMENT}-byte O_DIRECT windows)' if direct else ''}: fewer reads "
            f"and less alignment waste; ms: at most the requests' fixed cost (the intercept of "
            f"latency against size, else the fastest read) of the reads merged away"))]

    def prefetch_settings(self, asked):
        """prefetch=1 to a run that did not prefetch; to one that did, prefetch=0: what its
        own speculative reads cost and how many of them the router used."""
        spec = self.report["spec"]
        if self.report["meta"].get("prefetch") != "1" and not spec["reads"]:
            return [self.setting("prefetch", 1, {}, Saving(figure(None, None, None),
                "this run read nothing speculatively: only a prefetch run's own trace shows "
                "what prefetching fetches and how much of it the router then uses"))]
        # its speculatively read experts, and of them those routed at that token run or the next
        lookups = self.lookups
        ends = list(islice(lookups.token_starts, 1, None)) + [len(lookups.items)]
        routed_in = {}

        def routed_at(run):
            if run not in routed_in and run < len(ends):
                routed_in[run] = set(lookups.items[lookups.token_starts[run]:ends[run]])
            return routed_in.get(run, set())
        experts = len(lookups.speculative)
        routed = sum(1 for run, item in lookups.speculative
                     if item in routed_at(run) or item in routed_at(run + 1))
        speculative = self.per_token(spec["mib_per_token"])
        saved_max = speculative * self.ms_per_mib if self.ms_per_mib else None
        return [self.setting("prefetch", 0, {
            "mib_per_token": figure(self.own.mib - speculative),
            "speculative_mib_per_token": figure(speculative),
            "useful_share": figure(ratio(routed, experts))}, Saving(
            figure(None, None, saved_max),
            f"this run prefetched: off, its speculative reads go ({experts} experts, {routed} of "
            f"them routed at that token or the next, which would then be read on demand): at "
            f"most their MiB at this run's I/O ms per MiB saved, no lower bound"))]

    def pair_setting(self, settings):
        """The best two changes at once, a cache size with a lane count, when calibrated: the
        cache's MiB at the lanes' rate, its band the two kinds' errors summed; None when no
        pair is known to beat both its parts."""
        if not self.fit or ran_cached(self.report):
            return None
        caches = [one for one in settings if one["setting"] == "cache_mb"  # a streamed run's:
                  and (one["figures"].get("experts_share") or 0) < 1  # not every expert
                  and one["figures"].get("mib_per_token", {}).get("point") is not None
                  and one["fits"] is not False]
        lanes = [one for one in settings if one["setting"] == "io_threads"]
        best = None
        for cache, lane in ((cache, lane) for cache in caches for lane in lanes):
            mib = cache["figures"]["mib_per_token"]["point"]
            config = self.cached_config(mib)._replace(lanes=lane["value"])
            saving = self.saving_at(config, "cache_mb+io_threads",
                                    f"{cache['value']}+{lane['value']}")
            if saving is None or saving.band is None or not saving.band["known"]:
                continue
            saved = saving.saved
            parts = [part["ms_per_token_saved"]["point"] or -math.inf for part in (cache, lane)]
            if saved["point"] > max(parts) and (best is None or saved["point"] >
                                                best["ms_per_token_saved"]["point"]):
                best = self.setting("cache_mb+io_threads", f"{cache['value']}+{lane['value']}",
                                    {key: cache["figures"][key] for key in (
                                        "experts", "experts_share", "hit_share", "mib_per_token",
                                        "resident_mib") if key in cache["figures"]},
                                    saving._replace(method=f"both at once. {saving.method}"),
                                    cache["fits"])
        return best

    def settings(self, asked):
        """Every registered setting the run can be asked about, surest saving first, and the
        best pair of them when calibrated."""
        chosen = [setting for offered in WHAT_IF_SETTINGS.values()
                  for setting in offered(self, asked)]
        pair = self.pair_setting(chosen)
        def rank(setting):  # by the conservative end of its band, largest first (what it
            # saves for sure); those without a lower bound after them, by their point, else
            # their upper bound
            saved = setting["ms_per_token_saved"]
            if saved["min"] is not None:
                return (0, -saved["min"])
            hope = saved["point"] if saved["point"] is not None else saved["max"]
            return (1, -hope if hope is not None else math.inf)
        return sorted(chosen + ([pair] if pair else []), key=rank)

    def report_of(self, asked):
        meta = self.report["meta"]
        fit = self.calibration
        return WHAT_IF(schema=SCHEMA, baseline=WHAT_IF_BASELINE(
            tokens=self.tokens, mib_per_token=self.own.mib,
            io_threads=meta_int(meta, "io_threads") or None,
            o_direct=meta_flag(meta, "o_direct"), overlap=meta_flag(meta, "overlap"),
            expert_bytes=self.cache.expert_bytes, io_wall_ms_per_token=self.estimate,
            io_part_ms_per_token=self.io_part,
            flash_io_ms_per_token=None if self.own.overlap else self.io_ms,
            cache_mgmt_ms_per_token=None if self.own.overlap else self.management,
            noise_ms_per_token=self.noise),
            calibrated=None if not fit else CALIBRATED(
                runs=len(fit["runs"]), model=fit["model"]["model"],
                inside=fit["validation"]["inside"], checked=fit["validation"]["checked"],
                median_band_share=fit["validation"]["median_band_share"],
                used=not self.unused, not_used_because=self.unused or None),
            settings=self.settings(asked))


# The registry of what-if settings, as COMMANDS is of commands: the engine setting, and the
# WhatIf method that offers its alternatives to the run (none, when the run has it already).
# A new setting is an entry here and its method.
WHAT_IF_SETTINGS = {"cache_mb": WhatIf.cache_settings, "o_direct": WhatIf.o_direct_settings,
                    "io_threads": WhatIf.lanes_settings, "overlap": WhatIf.overlap_settings,
                    "coalesce": WhatIf.coalesce_settings, "prefetch": WhatIf.prefetch_settings}


# ── io: the report ───────────────────────────────────────────────────────────────────────────────
HOT_EXPERTS = 10
READ_KINDS = ("demand", "speculative")  # by the spec column, 0 and 1


ReadSums = summing_record("ReadSums", ("reads", "read_bytes", "latency_ns"),
                          doc="Reads, bytes read and summed latency of a group of reads.")


def size_bucket(read_bytes):
    """KiB bucket: the largest power of two <= read_bytes // 1024 (0 under 1 KiB)."""
    kib = read_bytes // 1024
    return 1 << (kib.bit_length() - 1) if kib else 0


# The joined keys PhaseReads counts by, as fields.
ReadKey = namedtuple("ReadKey", "lane read_bytes spec layer")
ExpertKey = namedtuple("ExpertKey", "layer expert read_bytes")


def key_values(keys, record):
    """[record of ints] of joined keys ("lane,read_bytes,spec,layer"), checked by the
    reader."""
    return [record(*map(int, key.split(","))) for key in keys]


# The io report's tables: each groups the reads by one part of their (lane, read_bytes, spec,
# layer) key.
READ_GROUPS = {"size": lambda key: size_bucket(key.read_bytes), "lane": attrgetter("lane"),
               "spec": lambda key: READ_KINDS[key.spec], "layer": attrgetter("layer"),
               "read_bytes": attrgetter("read_bytes")}


def latency_histogram(latencies):
    """log2 buckets in us: [0, 1), then [2^k, 2^(k+1)); the non-empty ones, in order.

    Counted by bisecting the sorted latencies at each bucket's upper edge."""
    buckets = []
    below, low_us, n = 0, 0, len(latencies)
    while below < n:
        high_us = max(1, low_us * 2)
        upto = latencies.count_below(high_us * 1000)
        if upto > below:
            buckets.append(HISTOGRAM_ROW(lo_us=low_us, hi_us=high_us, count=upto - below))
        below, low_us = upto, high_us
    return buckets


def throughput(mib, seconds):
    """MiB/s, or None when no time passed: every rate the tool gives."""
    return ratio(mib, seconds)


def io_report(trace, fold, reading, settings, asked=None, curve=True):
    """The whole io report as a plain dict (the JSON output; text is rendered from it),
    without its verdicts; `settings` the report's (those of the reading joined to the
    preamble). asked: what the what-if tries (an Asked), None for no what-if; curve: the
    --cache curve and its verdict, where the lookups were folded (not when only to check
    the log's cache). With it, what makes its what-if over another denominator, or None."""
    selection = reading.selection
    phases, label, tokens = selected_tokens(trace, fold.book, selection, fold.phases.keys())
    per = PerToken(len(tokens), None)
    chosen = [fold.phases[phase] for phase in phases if phase in fold.phases]
    # the phases' keyed sums folded into {table: {group: ReadSums}} (READ_GROUPS), and the
    # (layer, expert) pairs' ReadSums (no latency)
    by_key = [(values, (count, count * values.read_bytes, reads.lane_ns[key]))
              for reads in chosen for (key, count), values in zip(
                  reads.by_lane.items(), key_values(reads.by_lane, ReadKey))]
    by_expert = [(values, (count, count * values.read_bytes, 0))
                 for reads in chosen for count, values in zip(
                     reads.by_expert.values(), key_values(reads.by_expert, ExpertKey))]
    tables = group_sums(by_key, READ_GROUPS, ReadSums)
    experts = group_sums(by_expert, {"experts": attrgetter("layer", "expert")},
                         ReadSums)["experts"]
    by_lane = tables["lane"]
    reads = sum(sums.reads for sums in by_lane.values())
    read_bytes = sum(sums.read_bytes for sums in by_lane.values())
    busy_ns = sum(sums.latency_ns for sums in by_lane.values())
    req_bytes = sum(phase_reads.req_bytes for phase_reads in chosen)
    latency = {spec: sum((r.latency[spec] for r in chosen), SortedParts()) for spec in "01"}
    latencies = latency["0"] + latency["1"]
    # The lanes the trace read on, where they are more than the preamble names (the trace's
    # stand); a row for every named lane, since a lane that never read is the most idle of all:
    # those the trace did not read on, the least numbers first (it may number them past the
    # named count: lanes 0 and 7 of two are two lanes)
    named = meta_int(trace.meta, "io_threads")
    meta, settings = ({**trace.meta, "io_threads": str(len(by_lane))}, {
        **settings, "io_threads": SETTING(value=str(len(by_lane)), source="trace")}) \
        if named and len(by_lane) > named else (trace.meta, settings)
    unread = filterfalse(by_lane.__contains__, range(named + len(by_lane)))
    for lane in islice(unread, max(0, named - len(by_lane))):
        by_lane[lane] = ReadSums()
    lanes = meta_int(meta, "io_threads") or len(by_lane)
    busy_ms = per.count(busy_ns / NS_PER_MS)
    runs = sum(phase_reads.runs.runs for phase_reads in chosen)
    table, row_of = tokens.table, partial(io_token_row, fold.latencies)
    heaviest = heapq.nlargest(SLOWEST, tokens.rows(), key=table.column("read_bytes").__getitem__)
    report = IO_REPORT(
        schema=SCHEMA, tool_version=TOOL_VERSION, kind="io", path=trace.name, meta=meta,
        settings=settings,
        version=trace.version, phase=label, selection=selection.as_dict(), tokens=len(tokens),
        reads=reads, read_bytes=read_bytes, req_bytes=req_bytes,
        reads_per_token=per.count(reads), mib_per_token=per.count(read_bytes / MIB), lanes=lanes,
        **io_ranges(IoWall(busy_ms, per.count(sum(tokens.values("io_ns")) / NS_PER_MS)),
                    per.count(read_bytes / MIB), lanes),
        slowest_reads_ms_per_token=per.count(sum(tokens.values("slowest_ns")) / NS_PER_MS),
        busy_ms_per_token=busy_ms, busy_mib_per_s=throughput(read_bytes / MIB, busy_ns / 1e9),
        waste_pct=None if not read_bytes else (read_bytes - req_bytes) / read_bytes * 100,
        waste_mib_per_token=per.count((read_bytes - req_bytes) / MIB),
        median_read_bytes=weighted_percentile(
            {size: sums.reads for size, sums in tables["read_bytes"].items()}, "p50"),
        latency_us=LATENCY(**dict.fromkeys(LATENCY.names)) if not len(latencies) else LATENCY(
            min=latencies.minimum() / 1e3, mean=latencies.total() / len(latencies) / 1e3,
            **{name: latencies.percentile(name) / 1e3 for name in PERCENTILES},
            max=latencies.maximum() / 1e3),
        latency_hist=latency_histogram(latencies),
        **read_groups(tables, latency, read_bytes, per),
        hot_experts=[EXPERT_ROW(layer=layer, expert=expert, reads=sums.reads,
                                mib=sums.read_bytes / MIB) for (layer, expert), sums in ordered_by(
            experts, lambda where, sums: (-sums.read_bytes, where))[:HOT_EXPERTS]],
        adjacency=ADJACENCY(reads_per_token=per.count(reads),
                            runs_per_token=per.count(runs) if fold.adjacent else None,
                            coalesce_factor=ratio(reads, runs) if fold.adjacent else None),
        run_cache=None, reuse=None, what_if=None,
        token_mib=spread_of(tokens.values("read_bytes"), MIB),
        token_reads=spread_of(tokens.values("reads")),
        heaviest=[row_of(table, row) for row in heaviest],
        per_token=TokenRows(tokens, row_of, IO_TOKEN_FIGURES),
        # what the SVG stacks, so counted only with --svg; JSON keys are text, so lanes are
        lane_bytes_by_token={lane: tokens.values(LANE_COLUMN + lane) for lane in sorted(
            (name[len(LANE_COLUMN):] for name in table.columns if name.startswith(
                LANE_COLUMN)), key=int)} if fold.per_lane else None)
    # the log's MiB read (printed to 1 decimal) against the trace's: another run's log weighs
    # nothing in the what-if
    without_another_runs_split(reading.measured, "read_mib", report["read_bytes"] / MIB
                               if whole_decode(report) else None, 0.05)
    what_if_at = None if fold.lookups is None else \
        add_cache_what_ifs(report, fold, (chosen, phases), asked, reading, curve)
    return report, what_if_at


def without_another_runs_split(measured, name, traced, rounding):
    """Where the log's figure `name` is not the traces' (`traced`, of a whole decode: within
    ENGINE_TOLERANCE or the log's rounding), its split of the decode leaves `measured` (in
    place): the log is another run's, or one of a run the traces were cut from, compared with
    them (the engine table) and weighing nothing in the split or the what-if."""
    logged = (measured or {}).get(name)
    if None not in (logged, traced) and not agrees_with_engine(logged, traced, rounding):
        for split in ("compute_ms_per_token", "cache_mgmt_ms_per_token",
                      "flash_io_ms_per_token", "stall_ms_per_token"):
            measured.pop(split, None)


def settled_cache(report, reading, cache):
    """One word on the run's cache: the trace's over the log's (cache_contradiction); a
    declared no cache (cache=0 or cache_mb=0) over both, since the trace's cache is inferred
    (a router may pick fewer experts than k by design). The settings that yield are dropped
    from the report's meta and settings, said once, and where the log's word yields, its cache
    figures leave reading.measured with it (log_cache_stands): no split or what-if manages a
    cache the run did not have. Whether any setting was dropped."""
    contradiction = cache_contradiction(report, reading, cache)
    own, none = report["run_cache"], declared_no_cache(reading.settings)
    if contradiction:
        reading.warn(f"{report['path']}: {contradiction} (a log of another run?); the trace's "
                     f"word stands")
    else:
        # a declaration settles it, said once with every word that yields: the log's (which
        # merged_settings left to this one), the compute preamble's, the trace's
        size = next((setting.value for setting in reading.settings
                     if setting.key == "cache_mb" and setting.source == "declared"), None)
        held = None if none or not own else holds_every_expert(own, cache, size)
        signs = [f"{key}={setting['value']} ({setting['source']})" for key, setting in
                 report["settings"].items() if key in CACHE_KEYS
                 and setting["source"] not in ("declared", "log")]
        signs += ["the trace's tokens read fewer experts than the router picks"] \
            if none and own and own["detected"] else [f"a cache that size holds all {held}"] \
            if held else []
        words = declared_cache_warning(report["path"], reading.settings, signs)
        if words:
            reading.warn(words)
    dropped = {"log"} if contradiction else {"log", "compute trace"} if none else set()
    gone = {key for key, setting in report["settings"].items()
            if key in CACHE_KEYS and setting["source"] in dropped}
    report["meta"] = {key: value for key, value in report["meta"].items() if key not in gone}
    for key in gone:
        del report["settings"][key]
    if not log_cache_stands(reading.measured or {}, report):
        for name in LOG_CACHE_FIGURES:
            reading.measured.pop(name, None)
    return bool(gone)


def add_cache_what_ifs(report, fold, selected, asked, reading, curve=True):
    """The report's `run_cache`, its `reuse` (the --cache curve, with `curve`) and, when
    asked for, its `what_if`: all from the one expert cache model, of the selected
    (PhaseReads, phases). Where the trace refutes what the log says of the run's cache, the
    trace's word stands: the log's cache settings are dropped (said) before anything is
    weighed with them. Returns what makes the what-if over another denominator (a pair's
    decoded tokens, its decode the most a setting saves), or None when none was asked."""
    chosen, phases = selected
    measured = reading.measured
    cache = ExpertCache(fold.lookups, phases)
    report["run_cache"] = own_cache(fold.lookups, cache, meta_number(report["meta"], "cache_mb"))
    if settled_cache(report, reading, cache):  # settings dropped: its cache counted again
        report["run_cache"] = own_cache(fold.lookups, cache, meta_number(report["meta"],
                                                                        "cache_mb"))
    # Each turn's decode tokens as the run's other records know them (a turn's last tokens
    # served whole from cache have no io row): a pair's compute trace, and the log's generated
    # tokens for a run of one turn. The run cache is recounted over them, once.
    decoded = dict((measured or {}).get("decoded") or {})
    generated = logged_tokens((measured or {}).get("tokens"), report["tokens"])
    if generated and report["run_cache"] and len(report["run_cache"]["turns"]) == 1:
        turn, = (row["turn"] for row in report["run_cache"]["turns"])
        decoded[turn] = max(decoded.get(turn, 0), int(generated))
    if decoded:
        report["run_cache"] = recounted(report["run_cache"], decoded)
    if not curve:
        return None
    cached = ran_cached(report)
    report["reuse"] = cache_curve(cache, fold.lookups, cached)
    if not report["tokens"]:  # a pair's io that read nothing in decode: no setting saves
        return None
    runs = Coalesced(*map(sum, zip(*(phase_reads.runs for phase_reads in chosen)))) \
        if fold.adjacent and chosen else None
    what_if = WhatIf(report, cache, runs, fold.lookups, measured)
    if not cached and cache.expert_bytes:  # the verdict's cache is the what-if's, computed once
        report["reuse"]["judged"] = what_if.cache_setting(footprint_share_mib(cache, 0.5))
    if asked is None:
        return None
    # The sizes tried unless asked: for a run that had a cache, its own size, twice that and
    # every expert (what its trace of misses can bound); else a quarter, a half (the size the
    # cache verdict judges) and all of the distinct experts' footprint, in whole MiB (the
    # engine's unit), and the run's own size when its settings name one; none it cannot hold
    own, limit = (meta_number(report["meta"], key) for key in ("cache_mb", "mem_limit_mb"))
    sizes = {own} if own else set()
    if cached:
        every = math.ceil(cache.distinct * cache.expert_bytes / MIB)
        sizes |= {every} | ({own * 2} if own and own * 2 < every else set())
    else:
        sizes |= {footprint_share_mib(cache, share) for share in (0.25, 0.5, 1)}
    asked = Asked(list(asked.cache_sizes) or [size for size in sorted(sizes)
                                              if limit is None or size <= limit],
                  list(asked.lanes) or DEFAULT_LANES)
    report["what_if"] = what_if.report_of(asked)
    return lambda decoded: WhatIf(report, cache, runs, fold.lookups, measured,
                                  decoded).report_of(asked)


def io_ranges(wall, mib, lanes):
    """A token's I/O wall time and throughput. A v1 trace has no timestamps, so the reads of a
    token took at least their lane-busy time over the lanes (all busy at once) and at most all
    of it (one at a time, or the token's decode wall when that is less: wall.high); the
    estimate (wall.estimate) is the engine's own way: per layer, its busiest lane."""
    low = wall.busy_ms / max(lanes, 1)
    high = wall.busy_ms if wall.high is None else wall.high
    return {"io_wall_ms_per_token": RANGE(min=low, max=high, estimate=wall.estimate),
            "throughput_mib_per_s": RANGE(min=throughput(mib, high / 1e3),
                                          max=throughput(mib, low / 1e3),
                                          estimate=throughput(mib, wall.estimate / 1e3))}


# What a token's I/O time is known by, in ms per token: its lanes' summed latency, the
# busiest-lane estimate, and an upper bound below the summed latency (the pair's decode wall),
# or None.
IoWall = namedtuple("IoWall", "busy_ms estimate high", defaults=(None,))


def read_groups(tables, latency, read_bytes, per):
    """The by-size, by-lane, speculative and by-layer parts of the io report."""
    spec = tables["spec"]
    speculative = spec["speculative"]
    return {
        "by_size": [SIZE_ROW(kib=kib, label="<1 KiB" if kib == 0 else f"{kib} KiB" if kib == 1
                             else f"{kib}-{2 * kib - 1} KiB", reads=sums.reads,
                             mib=sums.read_bytes / MIB,
                             mib_per_s=throughput(sums.read_bytes / MIB, sums.latency_ns / 1e9),
                             us_per_read=sums.latency_ns / sums.reads / 1e3)
                    for kib, sums in sorted(tables["size"].items())],
        "by_lane": [LANE_ROW(lane=lane, reads_per_token=per.count(sums.reads),
                             mib_per_token=per.count(sums.read_bytes / MIB),
                             busy_ms_per_token=per.count(sums.latency_ns / NS_PER_MS),
                             mib_per_s=throughput(sums.read_bytes / MIB, sums.latency_ns / 1e9))
                    for lane, sums in sorted(tables["lane"].items())],
        "spec": SPEC(reads=speculative.reads,
                     mib_per_token=per.count(speculative.read_bytes / MIB),
                     share_of_bytes=ratio(speculative.read_bytes, read_bytes)),
        "demand_vs_spec": [
            KIND_ROW(kind=kind, reads=spec[kind].reads,
                     mib_per_token=per.count(spec[kind].read_bytes / MIB),
                     share_of_bytes=ratio(spec[kind].read_bytes, read_bytes),
                     p50_us=scaled(latency[str(flag)].percentile("p50"), 1e3),
                     p99_us=scaled(latency[str(flag)].percentile("p99"), 1e3))
            for flag, kind in enumerate(READ_KINDS)],
        "by_layer": [IO_LAYER_ROW(layer=layer, reads_per_token=per.count(sums.reads),
                                  mib_per_token=per.count(sums.read_bytes / MIB),
                                  mean_latency_us=sums.latency_ns / sums.reads / 1e3,
                                  busy_ms_per_token=per.count(sums.latency_ns / NS_PER_MS))
                     for layer, sums in sorted(tables["layer"].items())],
    }


# The per_token figures read straight from the columns (as COMPUTE_TOKEN_FIGURES)
IO_TOKEN_FIGURES = {"mib": ("read_bytes", MIB), "busy_ms": ("busy_ns", NS_PER_MS),
                    "io_ms": ("io_ns", NS_PER_MS)}


def io_token_row(latencies, table, row):
    """An io token's per_token dict, from its row and its ReadLatencies."""
    columns = table.columns
    busy_ns, reads = columns["busy_ns"][row], columns["reads"][row]
    return IO_TOKEN(turn=columns["turn"][row], phase=columns["phase"][row],
                    step=columns["step"][row], mib=columns["read_bytes"][row] / MIB, reads=reads,
                    io_ms=columns["io_ns"][row] / NS_PER_MS, busy_ms=busy_ns / NS_PER_MS,
                    latency_mean_us=ratio(busy_ns / 1e3, reads),
                    latency_p99_us=token_p99(latencies.of(row)))


def token_p99(latencies):
    """A token's p99 read latency, µs: the value at percentile_index of them sorted. It lies
    among the few largest (the 4th of 350): heapq.nlargest finds it sooner than a sort (7.5
    against 11 us for 350 reads) and is max() itself for a token of under 100 reads."""
    n = len(latencies)
    if not n:
        return None
    above = n - 1 - percentile_index(n, 99, 100)  # how many lie above it
    if not above:
        return max(latencies) / 1e3
    *_, p99 = heapq.nlargest(above + 1, latencies)
    return p99 / 1e3


# ── io: its verdicts ─────────────────────────────────────────────────────────────────────────────
LATENCY_BOUND_KIB = 256  # median read below this ...
LATENCY_BOUND_RATE = 0.25  # ... and its bucket below this fraction of the best bucket's MiB/s
IO_MATERIAL = 0.10  # io alone: a remedy is at stake when it could save this share of the I/O

PAGE_CACHE_US = 50  # buffered reads (o_direct=0) with a median this fast came from memory


def io_findings(report):
    """What the reads show on their own: latency-bound, lanes, coalescing, cache; before the
    stakes (what their remedies could save) are weighed; none of a selection that read
    nothing (a pair's decode served whole from cache)."""
    if not report["reads"]:
        return []
    verdicts = [latency_verdict(report)]
    busy = [row["busy_ms_per_token"] for row in report["by_lane"]]
    if len(busy) > 1:
        spread = ratio(max(busy), min(busy))
        verdicts.append(threshold_verdict("lanes_unbalanced", past("lanes_unbalanced", spread),
            "the busiest lane is busy " + ("while the least busy never read" if spread is None
                                           else f"{spread:.2f}x as long as the least busy")))
    factor = report["adjacency"]["coalesce_factor"]
    if factor is not None:
        verdicts.append(threshold_verdict("coalescing", past("coalescing", factor),
            f"perfect merging would issue {factor:.2f}x fewer requests"))
    own = report.get("run_cache")
    if ran_cached(report):
        served = f"{own['hit_share']:.1%} to {own['hit_share_most']:.1%} of the expert " \
            f"lookups" if own["verify_decodes"] else f"{own['hit_share']:.1%} of the expert " \
            f"lookups ({own['decode_hit_share']:.1%} of the decode's)"
        verdicts.append(verdict("cache", None,
            f"cache: this run had one, its trace shows it served {served}; whether a larger "
            f"one would be worthwhile, a trace of a run without a cache tells"))
    elif (report["reuse"] or {}).get("judged"):  # a saved report before it: none
        # whether a cache of half the experts' footprint serves enough of the lookups: the
        # what-if's setting at that size (its stake is that setting's saving)
        half = report["reuse"]["judged"]
        figures = half["figures"]
        hit = figures["hit_share"]["point"]
        verdicts.append(threshold_verdict("cache", past("cache", hit),
            f"the engine's cache at --cache-mb {half['value']:g} (half the experts' "
            f"footprint: {figures['experts']['point']} experts) would serve {hit:.0%} of the "
            f"expert lookups"))
    return [v for v in verdicts if v]


def latency_verdict(report):
    median = report["median_read_bytes"]
    moving = [row for row in report["by_size"] if row["mib_per_s"]]
    if median is None or not moving:
        return None
    median_kib = median / 1024
    if len(moving) < 2:
        only, = moving
        return verdict("latency_bound", None,
            f"latency-bound undetermined: every read is in one size class "
            f"({only['label']}, median {median_kib:.0f} KiB), so there is no other "
            f"size to compare its MiB/s with")
    best = max(moving, key=itemgetter("mib_per_s"))
    home = next(row for row in report["by_size"] if row["kib"] == size_bucket(median))
    fraction = ratio(home["mib_per_s"] or 0, best["mib_per_s"])
    flagged = median_kib < LATENCY_BOUND_KIB and fraction < LATENCY_BOUND_RATE
    return verdict("latency_bound", flagged,
        f"{'LATENCY-BOUND reads' if flagged else 'reads not latency-bound'}: the median "
        f"read is {median_kib:.0f} KiB and its size class moves {fraction:.0%} of the best "
        f"class's MiB/s ({best['label']}; flagged below {LATENCY_BOUND_KIB} KiB and "
        f"{LATENCY_BOUND_RATE:.0%})")


# What a remedy is weighed against. whole_ms: what its saving is a share of (ms per token),
# `whole` in words; threshold: the share that is at stake; cap: the most the reads cost it
# (serial: all of them, inf; overlap=1: the stall, None when no log gives it); moot: why
# nothing the reads do is at stake (they came from the page cache), or None; pressure: the
# decode is inflated by memory pressure, so a small share is no answer.
Stakes = namedtuple("Stakes", "whole_ms whole threshold cap moot pressure")


def page_cache_words(io):
    """Why the reads are no flash reads: buffered, and their median faster than flash."""
    median = io["latency_us"]["p50"]
    if io["meta"].get("o_direct") != "0" or median is None or median >= PAGE_CACHE_US:
        return None
    return (f"the reads came from the page cache (o_direct=0, median {median:.0f} us a read, "
            f"< {PAGE_CACHE_US} us), {io['io_wall_ms_per_token']['estimate']:.2f} ms per "
            f"read-token in all: the drive was not measured")


# What an io verdict's remedy could save at most, in ms per token, from the I/O time per token
# (`wall`, ms, over `tokens`: the io report's read-tokens, or a pair's decoded tokens) and the
# io report: even lanes bring each layer down to its mean lane (the lower bound); merged
# requests save the requests' fixed cost (merging_saves); a cache at most its hit share of
# the reads.
AT_STAKE = {
    "lanes_unbalanced": ("lanes unbalanced", "evening the lanes",
                         lambda io, wall, tokens: wall["estimate"] - wall["min"]),
    "coalescing": ("coalescing", "merging requests (their fixed cost)",
                   lambda io, wall, tokens: merging_saves(io, wall["estimate"],
                                                          io["adjacency"]["coalesce_factor"])),
    # the judged cache's most saved, per read-token: per token of `wall` (a pair's decoded
    # tokens: its read-tokens' share of them)
    "cache": ("cache", "that cache", lambda io, wall, tokens: per(
        io["reuse"]["judged"]["ms_per_token_saved"]["max"] or 0.0, tokens,
        io["tokens"] / tokens)),
}


def weighed_io_verdicts(io, wall, stakes, pair=None):
    """The io findings, those flagged weighed: flagged only when their remedy could save
    `stakes.threshold` of what it acts on; the pair's say replaces io's (all_verdicts)."""
    weighed = []
    for finding in io_findings(io):
        if finding["id"] not in AT_STAKE or not finding["flagged"]:
            weighed.append(finding)
            continue
        name, remedy, saving = AT_STAKE[finding["id"]]
        _, _, why = finding["text"].partition(": ")
        if stakes.moot:
            weighed.append(verdict(finding["id"], False, f"{name} not at stake: {stakes.moot}; "
                                                        f"{why}"))
            continue
        if finding["id"] == "cache" and stakes.pressure:  # beside MEMORY PRESSURE, not WORTHWHILE
            weighed.append(verdict("cache", False,
                f"no larger cache: memory pressure (above) shows the RAM short, and a cache "
                f"takes RAM the weights need; {why}"))
            continue
        if stakes.cap is None:
            weighed.append(verdict(finding["id"], None,
                f"{name} undetermined: {why}; overlap=1 ran the reads beside compute, so what "
                f"{remedy} could save is at most the stall, which the engine's log gives "
                f"(moe-overlap: give its NAME.log), not found here"))
            continue
        weighed.append(stake_verdict(finding, name, remedy,
                                     saving(io, wall, (pair or io)["tokens"]), stakes, pair))
    return weighed


def stake_verdict(finding, name, remedy, saving, stakes, pair):
    """A flagged finding, flagged still when its remedy's saving (at most the overlap's stall)
    is at least the threshold of the whole; else not at stake, or undetermined when memory
    pressure inflates the whole."""
    stalled = " (the overlap's stall)" if capped(saving, stakes.cap) < saving else ""
    # never past the whole it is a share of: the decode (a pair's), the I/O estimate (io's),
    # which the what-if's band may pass where it reaches the log's flash I/O or the one-lane end
    at_most = max(0.0, min(capped(saving, stakes.cap), stakes.whole_ms))
    share = ratio(at_most, stakes.whole_ms)
    per_position = per_position_words(pair, at_most, stakes.whole_ms) if pair else ""
    stake = (f"{remedy} could save at most {at_most:.2f} ms{stalled} of {stakes.whole}"
             f"{per_position} ({num(share, '.1%')}")
    _, _, why = finding["text"].partition(": ")
    if share is None or share >= stakes.threshold:
        return verdict(finding["id"], True, f"{finding['text']}; {stake}, >= "
                                           f"{stakes.threshold:.0%})")
    if stakes.pressure:
        return verdict(finding["id"], None,
            f"{name} undetermined: {why}; {stake}, < {stakes.threshold:.0%}), but memory "
            f"pressure inflates the decode: judge it again once the pressure is relieved")
    return verdict(finding["id"], False, f"{name} not at stake: {why}; but {stake}, < "
                                        f"{stakes.threshold:.0%} of it)")


def per_position_words(pair, *ms):
    """', per generated position A of B ms' when a decode covers several positions."""
    position = pair["per_position"]
    if not position:
        return ""
    per = position["positions"] / pair["tokens"]
    return f" (per generated position {' of '.join(f'{value / per:.2f}' for value in ms)} ms)"


# ── io: its text and Markdown sections ───────────────────────────────────────────────────────────
IO_KEYS = ("model", "io_threads", "o_direct", "overlap")


def io_part(report):
    """The io report a section draws: an io report's figures are per read-token; a pair's
    lanes, demand/speculative and adjacency are per decoded token, as the pair computed them."""
    if report["kind"] != "report":
        return report
    pair = report["pair"]
    return {**report["io"], "by_lane": pair["by_lane"], "demand_vs_spec": pair["demand_vs_spec"],
            "adjacency": pair["adjacency"]}


# What a pair's figures are per: its compute trace's tokens, decoded ones unless --phase says
PAIR_UNITS = {"decode": "decoded token", "prefill": "prefill batch",
              "all": "token (a prefill batch counts as one)"}


def per_words(report):
    """What io_part's per-token figures are per: a speculative pair's per decode, each of
    several positions (the ngram header said "per decoded token" over them)."""
    if report["kind"] != "report":
        return "per read-token"
    if (report.get("pair") or {}).get("per_position"):
        return "per decode (of several positions: speculative decoding)"
    return f"per {PAIR_UNITS[report['compute']['phase']]}"


def what_if_per(report):
    """What a what-if's figures are per: a speculative pair's, per generated position."""
    return "per generated position" if (report.get("pair") or {}).get("per_position") \
        else per_words(report)


def io_range_text(figures, per):
    """A token's I/O time: the busiest-lane estimate, within the range a v1 trace allows, and
    the throughput; under overlap=1 the reads ran beside compute: read time, not a wait."""
    wall, rate = figures["io_wall_ms_per_token"], figures["throughput_mib_per_s"]
    what = "read time" if overlapped(figures["meta"]) else "I/O"
    estimate = num(wall.get("estimate"), ".2f")
    head = (f"{what}{' ' + per if per else ''}: {estimate} ms estimated (per layer, its "
            f"busiest lane)")
    if figures["lanes"] == 1:
        return f"{head}; one lane, so reads one at a time; {num(rate['estimate'], '.0f')} MiB/s"
    return (f"{head}, within {wall['min']:.2f} ({figures['lanes']} lanes at once) and "
            f"{wall['max']:.2f} ms (one at a time); throughput {num(rate['estimate'], '.0f')} "
            f"MiB/s (between {num(rate['min'], '.0f')} and {num(rate['max'], '.0f')})")


def own_cache_words(report):
    """A cached run's own result, for its first screen: its hit share (the lookups missing
    from its trace; the engine's counts prefill too), evictions and re-reads, what managing
    it costs, and whether it costs more than it saves; [] without a cache."""
    io = report_halves(report)["io"]
    own = io["run_cache"]
    if not own or not had_cache(io):
        return []
    size = io["meta"].get("cache_mb")
    if own["verify_decodes"]:  # the decode's share alone would be one more band
        hit = (f"{pct(own['hit_share'])} to {pct(own['hit_share_most'])} of the expert lookups "
               f"(prefill's too; {counted(own['verify_decodes'], 'verify decode')} of several "
               f"positions: their trace shows the misses, not every hit)")
    else:
        hit = (f"{pct(own['decode_hit_share'])} of the decode's expert lookups "
               f"({pct(own['hit_share'])} with prefill's)")
    return [f"this run's cache{f' (cache_mb={size})' if size else ''}: hit {hit}, "
            f"{num(own['evictions'], 'd', 'unknown')} evictions, {own['rereads']} re-reads",
            *cache_worth_words(report, io)]


def cache_worth_words(report, io):
    """What managing the run's cache costs a token (its log's, else the default a miss), and
    what turning it off would save (the what-if's cache_mb=0): a cache that costs more than it
    saves is called out."""
    # the log's management where the engine table did not set it aside (its cache is not the
    # run's) and the tokens are its decode's: the one the split and what-if take
    logged = ((report.get("engine") or {}).get("figures") or {}).get("cache_mgmt_ms_per_token")
    if not logged or logged["note"] == SET_ASIDE.why or io["phase"] != "decode":
        logged = None
    per = "per read-token" if report["kind"] == "io" else per_words(report)
    expert_mib = (io.get("reuse") or {}).get("expert_mib")
    if logged:  # printed to 1 ms
        managed = f"managing it cost {logged['engine']:.0f} ms {per} (the engine's log, to 1 ms)" \
            if logged["engine"] else f"managing it cost under 0.5 ms {per} (the engine's log)"
    elif expert_mib:
        mib_ms = DEFAULT_COSTS["management_ms_per_mib"]["value"]
        mib = report["pair"]["io_mib_per_token"] if report["kind"] == "report" else \
            io["mib_per_token"]
        # at most what the split leaves beside the flash I/O, as the what-if takes it
        pair = report.get("pair") or {}
        room = None if pair.get("flash_io_ms_per_token") is None else \
            max(0.0, pair["decode_ms_per_token"] - pair["flash_io_ms_per_token"])
        about = mib_ms * mib
        managed = (f"managing it costs about {min(about, room or about):.2f} ms {per} "
                   f"({mib_ms:.3f} ms a MiB missed, real runs', x {mib:.2f} MiB missed: "
                   f"{misses_of(mib, expert_mib):.1f} misses" + (
                       f"; at most the {room:.2f} ms the decode leaves beside its flash I/O)"
                       if room is not None and about > room else ")"))
    else:
        return []
    off = next((setting["ms_per_token_saved"] for setting in
                (report.get("what_if") or {}).get("settings", ())
                if setting["setting"] == "cache_mb" and setting["value"] == 0), None)
    if off is None or off["min"] is None or off["max"] is None:
        return [managed]
    band = f"{off['min']:+.2f} to {off['max']:+.2f} ms"
    if off["min"] > 0:
        return [f"{managed}; the cache COSTS MORE THAN IT SAVES: turning it off (cache_mb=0) "
                f"saves {band} {per}"]
    if off["max"] < 0:
        return [f"{managed}; it pays: turning it off would cost {-off['max']:.2f} to "
                f"{-off['min']:.2f} ms {per}"]
    return [f"{managed}; whether it pays is not known: turning it off saves {band} {per}"]


def io_headline_blocks(report, view):
    per = "per read-token"
    return [Block(None, [Prose([*own_cache_words(report),
        f"read-tokens={report['tokens']} ({selection_text(report)}; tokens that read: a token "
        f"served entirely from cache has no rows)",
        io_range_text(report, per),
        f"reads {report['reads_per_token']:.1f} {per}, {report['mib_per_token']:.2f} MiB {per} "
        f"({report['reads']} read{'s' if report['reads'] != 1 else ''})",
        f"per read: lanes busy {report['busy_ms_per_token']:.2f} ms {per} summed over lanes, "
        f"{num(report['busy_mib_per_s'], '.0f')} MiB/s while a lane is busy",
        f"alignment waste {num(report['waste_pct'], '.1f')}% "
        f"({report['waste_mib_per_token']:.2f} MiB {per} read but not wanted)"], "")],
        gap=False)]


def latency_blocks(report, view):
    io = io_part(report)
    hist = io["latency_hist"]
    peak = max((row["count"] for row in hist), default=0) or 1
    histogram = (column("us", lambda row: f"{row['lo_us']} -> {row['hi_us'] - 1}"),
                 column("count", "count"),
                 Column("distribution", lambda row: row["count"] / peak,
                        lambda fraction: "|" + bar(fraction, HIST_WIDTH).replace(".", " ") + "|",
                        "<", HIST_WIDTH))
    return [Block("per-read latency (us)", [
        Grid(table_of(LATENCY), [io["latency_us"]]),
        Full("the latency histogram", Grid(histogram, hist))])]


def lane_blocks(report, view):
    """The by-lane table; without --full, its range in a line (the lanes verdict says whether
    they are balanced)."""
    lanes = io_part(report)["by_lane"]
    part = Grid(table_of(LANE_ROW), lanes)
    if lanes:
        busy = [row["busy_ms_per_token"] for row in lanes]
        speeds = [row["mib_per_s"] or 0.0 for row in lanes]
        part = Full("every lane", part, Prose([
            f"  {counted(len(lanes), 'lane')}, each busy {min(busy):.2f}-{max(busy):.2f} ms a "
            f"token at {min(speeds):.0f}-{max(speeds):.0f} MiB/s"]))
    return [Block("by lane (a lane busy far less than the others is waiting for work: the drive "
                  "is not the limit there)", [part])]


def spec_blocks(report, view):
    io, per = io_part(report), per_words(report)
    spec = io["spec"]
    if not spec["reads"]:
        return []
    return [Block(f"speculative: {spec['reads']} reads ({pct(spec['share_of_bytes'])} of bytes "
                  f"read); MiB/tok is {per}", [Grid(table_of(KIND_ROW), io["demand_vs_spec"])])]


def io_layer_blocks(report, view):
    parts = [Grid(table_of(IO_LAYER_ROW), report["by_layer"], compact=True)]
    if report["hot_experts"]:
        parts.append(Items("  hottest (layer, expert) by bytes read:",
                           [f"({row['layer']}, {row['expert']}) {row['mib']:.1f} MiB"
                            for row in report["hot_experts"]]))
    return [Block("by layer", parts)]


def adjacency_blocks(report, view):
    io, per = io_part(report), per_words(report)
    figures = io["adjacency"]
    if figures["runs_per_token"] is None:
        return []
    return [Block("adjacency: requested extents, merged where they touch or overlap", [Prose([
        f"  {figures['reads_per_token']:.1f} reads {per} span {figures['runs_per_token']:.1f} "
        f"contiguous runs",
        f"  coalescing factor {num(figures['coalesce_factor'], '.2f')}: perfectly coalesced, "
        f"that many times fewer requests for the same bytes"])])]


def cache_blocks(report, view):
    reuse = io_part(report)["reuse"]
    if reuse is None:
        return []
    return [Block(f"re-reads: {reuse['lookups']} expert lookups of {reuse['experts']} experts "
                  f"({reuse['expert_mib'] * 1024:.0f} KiB each); footprint "
                  f"{reuse['unique_mib']:.1f} MiB, {reuse['reread_mib']:.1f} MiB read again",
                  [Full("the cache curve", Grid(CACHE_TABLE, reuse["lru"]), Prose([
                      "  a cache of " + ", ".join(f"{point['cache_mib']:.1f}" for point in
                                                  reuse["lru"]) + " MiB would have served "
                      + ", ".join(pct(point["hit_share"]) for point in reuse["lru"])]))]
                  if reuse["lru"] else [Prose([
                      "  (no curve: a cached run's trace holds its misses alone; an uncached "
                      "run's gives it)"])])]


# How each what-if figure reads in a line: (label before, format, label after); shares in %.
def what_if_figure(name, value):
    """'hit 29.7% (26.1%-31.0%)': a figure in the words its Record shows it with, and its band
    where the bounds differ."""
    shown = WHAT_IF_FIGURES.field(name).shown
    write = formatter(shown.format)
    if not isinstance(value, dict):
        return shown.header.format(write(value))
    point, low, high = (write(value[bound]) for bound in ("point", "min", "max"))
    if value["point"] is None:  # only bounds are honest
        return shown.header.format(f"{low}-{high}")
    return shown.header.format(point) + (f" ({low}-{high})" if low != high else "")


# The I/O part a serial setting acts on, as its line says it moves: figure -> label.
SPLIT_FIGURES = {"flash_io_ms_per_token": "flash I/O", "cache_mgmt_ms_per_token": "cache mgmt"}


def offer_text(setting, noise=None):
    """What a setting saves, or that a calibrated band too wide is not known, and the run that
    would narrow it; a saving no larger than the machine's noise (its run-to-run spread, the
    what-if's noise_ms_per_token; none known: never) said to be within it, with the spread."""
    band, saved = setting["band"], setting["ms_per_token_saved"]
    if noise and saved["point"] is not None and abs(saved["point"]) <= noise and not (
            band and not band["known"]):
        bounds = "" if saved["min"] is None or saved["max"] is None else \
            f" ({saved['min'] + 0.0:+.2f} to {saved['max'] + 0.0:+.2f})"
        return (f"within this machine's noise, {saved['point'] + 0.0:+.2f} ms{bounds} against a "
                f"run-to-run spread of +-{noise:.2f} ms")
    if band is not None and not band["known"]:
        return (f"not known from these runs (band +-{band['half_ms']:.2f} ms, "
                f"{num(band['decode_share'], '.0%')} of the decode): {setting['narrow_with']}")
    return saving_text(setting["ms_per_token_saved"])


def saving_text(saved):
    """What a setting saves, in ms per token, as honestly as its bounds allow; a negative
    saving is said as a cost, and what rounds to zero as 0.00 (never -0.00)."""
    point, low, high = (None if saved[bound] is None else round(saved[bound], 2) + 0.0
                        for bound in ("point", "min", "max"))
    if point is None and low is not None and high is None:
        return (f"saves at least {low:.2f} ms" if low >= 0 else
                f"costs at most {-low:.2f} ms") + " (no upper bound)"
    if point is not None:
        words = f"saves {point:.2f} ms" if point >= 0 else f"costs {-point:.2f} ms"
        if low is None or high is None:  # a point with an end left open
            return words + " (" + ("no lower bound" if low is None else f"at least {low:+.2f}") \
                + ", " + ("no upper bound" if high is None else f"at most {high:+.2f}") + ")"
        return words + ("" if low == high else f" ({low:+.2f} to {high:+.2f})") + (
            (" (uncertain: it may be slower)" if point >= 0 else
             " (uncertain: it may be faster)") if low is not None and high is not None
            and low < 0 < high else "")
    if low is not None and high is not None:
        return f"saves {low:.2f} to {high:.2f} ms" + (
            " (uncertain: it may be slower)" if low < 0 < high else "")
    return "ms saved not predicted" if high is None else \
        f"saves up to {high:.2f} ms (no lower bound)"


BEST_SHOWN = 3  # changes on the first screen; the what-if section has them all


def every_expert(setting):
    """Whether a setting caches every expert: not streaming at all, no change of a streamed
    run's, but the bound of any cache."""
    return setting["setting"] == "cache_mb" and (setting["figures"].get("experts_share") or 0) >= 1


def memory_words(setting, resident=False):
    """What a cache costs in memory: that one of every expert is as much as not streaming,
    else (resident) its resident MiB; over a declared memory limit, said."""
    figures = setting["figures"]
    words = ""
    if every_expert(setting):
        words = " (every expert cached: as much RAM as not streaming)"
    elif resident and figures.get("resident_mib") is not None:
        words = f" (resident {figures['resident_mib']:.1f} MiB)"
    return words + (" (over the declared mem_limit_mb)" if setting["fits"] is False else "")


def changes_of(report):
    """The what-if's settings that change the streamed run: not caching every expert (not
    streaming at all: the best changes say it once, as a bound) and not the run's own cache
    size (the JSON keeps it: the model's check on the run itself)."""
    own = meta_number(report_halves(report)["io"]["meta"], "cache_mb")
    return [setting for setting in report["what_if"]["settings"] if not every_expert(setting)
            and not (setting["setting"] == "cache_mb" and own and setting["value"] == own)]


def best_changes(report):
    """The changes whose point saves more than this machine's noise (none known: more than
    0.00 as shown) and that fit a declared memory limit, by the low end of their band (the
    what-if's order)."""
    noise = report["what_if"]["baseline"].get("noise_ms_per_token") or 0  # saved: may lack it
    return [setting for setting in changes_of(report)
            if round(setting["ms_per_token_saved"]["point"] or 0, 2) > max(noise, 0)
            and setting["fits"] is not False]


def best_change_blocks(report, view):
    """The answer to 'what do I change', up front: the best changes, each with what it saves;
    else that none saves more than the machine's noise."""
    what_if = report.get("what_if")
    if not what_if:
        return []
    noise = what_if["baseline"].get("noise_ms_per_token")  # a saved report's may lack it
    best = best_changes(report)
    lines = [f"  {setting['setting']}={setting['value']}: {offer_text(setting, noise)}"
             f"{memory_words(setting, resident=True)}" for setting in best[:BEST_SHOWN]]
    if not lines:
        lines = ["  none: no setting's point saves more than " + (
            f"this machine's run-to-run spread, +-{noise:.2f} ms" if noise else "0.00 ms")
            + " (the what-if below gives each band)"]
    # said here once, as a bound: the what-if's list leaves it out
    bounds = sorted((setting for setting in what_if["settings"] if every_expert(setting)
                     and setting["ms_per_token_saved"]["max"] is not None),
                    key=lambda setting: setting["value"])  # the least size that holds them
    lines += [f"  the bound, not streaming at all (every expert in RAM, cache_mb="
              f"{setting['value']}): {offer_text(setting)}" for setting in bounds[:1]]
    calibrated = what_if.get("calibrated")  # how the calibration's leave-one-out did
    if calibrated and calibrated.get("used") is False:
        lines.insert(0, f"  the calibration on {calibrated['runs']} runs of {calibrated['model']} "
                        f"is not used, the defaults are: {calibrated['not_used_because']}")
    elif calibrated:
        head = f"  calibrated on {calibrated['runs']} runs of {calibrated['model']}: "
        lines.insert(0, head + (
            f"leave-one-out {calibrated['inside']} of {calibrated['checked']} inside, median "
            f"band {calibrated['median_band_share']:.0%} of the decode" if calibrated["checked"]
            else f"no held-out band was {BAND_MOST_SHARE:.0%} of the decode or narrower, so "
            f"none is validated (the what-if says which run would narrow each)"))
    beyond = f"; each beyond this machine's noise, +-{noise:.2f} ms" if noise and best else ""
    return [Block(f"best changes ({what_if_per(report)}, by the low end of their band{beyond})",
                  [Prose(lines, "    ")])]


def what_if_blocks(report, view):
    what_if = report["what_if"]
    if what_if is None:
        return []
    baseline = what_if["baseline"]
    per = what_if_per(report)
    lines = []
    for setting in changes_of(report):
        held = setting["figures"]
        figures = [what_if_figure(name, value) for name, value in held.items()
                   if name not in SPLIT_FIGURES and name != "experts" and not (
                       name == "io_wall_ms_per_token" and "flash_io_ms_per_token" in held)]
        experts = held.get("experts")
        if experts:
            figures.insert(0, f"{experts['point']} expert{'s' if experts['point'] != 1 else ''}")
        # the part the setting acts on, from the run's own to the setting's, compute held
        moved = [f"{label} {baseline[name]:.2f} -> {what_if_figure(name, held[name])}"
                 for name, label in SPLIT_FIGURES.items() if name in held and baseline.get(
                     name) is not None and num(held[name]["point"], ".2f") != num(
                         baseline[name], ".2f")]
        lines.append(f"  {setting['setting'] + '=' + str(setting['value']):<13} "
                     f"{offer_text(setting, baseline.get('noise_ms_per_token'))}"
                     + (": " + ", ".join(moved) + ("; " if figures else "") if moved else
                        ": " if figures else "")
                     + ", ".join(figures) + memory_words(setting))
    methods = dict.fromkeys(f"{setting['setting']}: {setting['method']}"
                            for setting in what_if["settings"])
    noise = baseline.get("noise_ms_per_token")
    sources = "the fit's leave-one-out error, never below its repeats' spread" \
        if (what_if.get("calibrated") or {}).get("used", True) and what_if.get("calibrated") \
        else None if noise is None else \
        f"the model's range, never narrower than this machine's run-to-run spread, " \
        f"+-{noise:.2f} ms"
    told = [Prose(["  how each is estimated:"], "    "), Bullets(list(methods))] \
        if view.explain else [Prose([f"  (each band: {sources}; how each is made: --explain; "
                                     f"docs/what-if.md)" if sources else
                                     "  (how each band is made: --explain; docs/what-if.md)"],
                                    "    ")]
    now = f"I/O estimate {num(baseline['io_wall_ms_per_token'], '.2f')} ms" \
        if baseline.get("flash_io_ms_per_token") is None else \
        f"flash I/O {baseline['flash_io_ms_per_token']:.2f} ms, cache mgmt " \
        f"{baseline['cache_mgmt_ms_per_token']:.2f} ms; compute held"
    return [Block(f"what would it buy ({per}, surest saving first; now "
                  f"{baseline['mib_per_token']:.2f} MiB read, {now})",
                  [Listed(lines, "    "), *told])]


IO_READ_SECTIONS = (latency_blocks, lambda report, view: [
    Block("by read size (bucket: largest power of two <= KiB read)",
          [Grid(table_of(SIZE_ROW), io_part(report)["by_size"])])], lane_blocks, spec_blocks)

KINDS["io"] = Kind(IO_REPORT, layout(
    header_section(trace_header(IO_KEYS)), io_headline_blocks, verdict_blocks,
    best_change_blocks, calm_blocks, engine_blocks, what_if_blocks, *IO_READ_SECTIONS,
    io_layer_blocks, adjacency_blocks, cache_blocks,
    lambda report, view: [token_block(report, "mib", "MiB")]))


# ── pair: its records ────────────────────────────────────────────────────────────────────────────
READ_GROUP = Record("read group", ("tokens", "ms_per_token"))
SLOW_STRETCH = Record("slow stretch", ("turn", "first_step", "last_step", "tokens",
    "without_reads", "ms_per_token"))
READ_SPLIT = Record("read split", (("read", READ_GROUP), ("no_read", READ_GROUP),
    "io_ms_per_token", ("slow_stretch", SLOW_STRETCH)))
PAIR_LAYER_ROW = Record("pair layer row", (("layer", Shown("layer")),
    ("compute_ms_per_token", Shown("compute ms", 2)), ("majflt_per_token", Shown("majflt", 1)),
    ("reads_per_token", Shown("reads", 1)), ("mib_per_token", Shown("MiB", 2))), key="layer")
PER_POSITION = Record("per position", ("positions",
    ("decode_ms", Shown(diff="decode ms per generated position")),
    ("compute_ms", Shown(diff="compute ms per generated position")), "io_ms",
    ("mib", Shown(diff="MiB per generated position"))))
PAIR = Record("pair", ("tokens", "tokens_without_reads", ("per_position", PER_POSITION),
    ("decode_ms_per_token", Shown(diff="decode ms per decoded token", samples="ms")),
    ("compute_ms_per_token", Shown(diff="compute ms (decode - flash I/O - cache mgmt)")),
    ("cache_mgmt_ms_per_token", Shown(diff="cache management ms per decoded token")),
    "flash_io_ms_per_token", "flash_io_source", "stall_ms_per_token", "stall_source",
    ("faulting_ms_per_token", Shown(diff="faulting nodes' ms per decoded token")),
    "experts_ms_per_token", "router_ms_per_token", "io_reads_per_token",
    ("io_mib_per_token", Shown(diff="MiB per decoded token")),
    ("io_wall_ms_per_token", RANGE,
     Shown(diff={"estimate": "I/O estimate ms per decoded token"})),
    ("throughput_mib_per_s", RANGE), "io_busy_ms_per_token", "waste_mib_per_token",
    ("by_lane", ListOf(LANE_ROW)), ("demand_vs_spec", ListOf(KIND_ROW)), ("adjacency", ADJACENCY),
    ("read_split", READ_SPLIT), ("by_layer", ListOf(PAIR_LAYER_ROW)), "warnings",
    ("verdicts", ListOf(VERDICT))), later=("verdicts",))
PAIR_REPORT = Record("pair report", (*REPORT_HEAD, ("compute", COMPUTE_REPORT), ("io", IO_REPORT),
    ("pair", PAIR), ("what_if", WHAT_IF), ENGINE_FIELD, WARNINGS), later=LATER)


# ── pair: the two traces of one run ──────────────────────────────────────────────────────────────
def pair_report(compute, io, measured, pressure, what_if_at=None, logged=()):
    """Both reports of one traced run, and what only the pair can tell: I/O per decoded
    token (the compute trace knows every token, including those that read nothing), side by
    side with compute per layer, and the engine's split (measured: its log's figures, for
    the cache management no trace times; pressure: the run's memory Pressure), and its
    what-if, made per decoded token by what_if_at (io_report); logged: the log's Settings,
    which a difference of the preambles names. Without its verdicts."""
    tokens, readers = TokenIndex(compute["per_token"]), TokenIndex(io["per_token"])
    warnings = pair_warnings(compute, io, tokens, logged)
    compute = with_run_settings(compute, io)
    n = len(compute["per_token"])
    per_decoded = io["tokens"] / n  # io figures are per read-token; the pair's per decoded token
    decoded = PerToken(n, None)
    mib = decoded.count(io["read_bytes"] / MIB)
    categories = {c["category"]: c for c in compute["by_category"]}

    def category_ms(name):  # a layer-granularity trace has no per-node detail to classify
        return categories.get(name, {}).get("ms_per_token", 0.0) if categories else None
    wall = decoded_io_wall(io, tokens)
    split = engine_split(compute, io, measured or {}, wall.estimate)
    # a serial decode waits for every read and its cache's management: reads longer than it
    # (with the log's management) are not this decode's
    flash, management = split.flash_io_ms_per_token, split.cache_mgmt_ms_per_token or 0.0
    if flash is not None and flash + management > compute["ms_per_token"]:
        managed = f" and the log's cache management, {management:.2f} ms," if management else ""
        source = "the log" if split.flash_io_source == "log" else "estimated"
        warnings.append(
            f"the reads, {flash:.2f} ms a decoded token ({source}){managed} outlast its "
            f"{compute['ms_per_token']:.2f} ms decode, which waits for every read of a serial "
            f"run (overlap=0): the two traces are not of one run, or the io trace's latencies "
            f"are not this decode's; no compute is split off")
    io_layers = {row["layer"]: rescaled(row, IO_LAYER_ROW, n, per_decoded)
                 for row in io["by_layer"]}
    compute_layers = {row["layer"]: row for row in compute["by_layer"]}
    by_layer = []  # compute and reads side by side, per decoded token
    for layer in sorted(set(compute_layers) | set(io_layers)):
        computed, read = compute_layers.get(layer, {}), io_layers.get(layer, {})
        by_layer.append(PAIR_LAYER_ROW(
            layer=layer, compute_ms_per_token=computed.get("ms_per_token", 0.0),
            majflt_per_token=computed.get("majflt_per_token", 0.0),
            reads_per_token=read.get("reads_per_token", 0.0),
            mib_per_token=read.get("mib_per_token", 0.0)))
    pair = PAIR(
        tokens=n, tokens_without_reads=readers.missing(compute["per_token"]),
        per_position=per_position(compute, io, split, wall.estimate),
        decode_ms_per_token=compute["ms_per_token"], **split._asdict(),
        faulting_ms_per_token=compute["faults"]["ms_per_token"],
        experts_ms_per_token=category_ms("experts"), router_ms_per_token=category_ms("router"),
        io_reads_per_token=decoded.count(io["reads"]),
        io_mib_per_token=mib, **io_ranges(wall, mib, io["lanes"]),
        io_busy_ms_per_token=wall.busy_ms,
        waste_mib_per_token=per(io["waste_mib_per_token"], n, per_decoded),
        by_lane=[rescaled(row, LANE_ROW, n, per_decoded) for row in io["by_lane"]],
        demand_vs_spec=[rescaled(row, KIND_ROW, n, per_decoded) for row in io["demand_vs_spec"]],
        adjacency=rescaled(io["adjacency"], ADJACENCY, n, per_decoded),
        read_split=read_split(compute["per_token"], readers),
        by_layer=by_layer,
        warnings=warnings)
    units = generated_positions(compute)  # the what-if per generated position
    what_if = what_if_at and io["what_if"] and \
        what_if_at((units, per(compute["ms_per_token"], units, n / units)))
    if what_if and pressure.flagged:  # no cache larger than the run's own:
        own = meta_number(io["meta"], "cache_mb") or 0  # a cache takes RAM the weights need
        what_if = {**what_if, "settings": [setting for setting in what_if["settings"]
                                           if setting["setting"] != "cache_mb"
                                           or setting["value"] <= own]}
    return PAIR_REPORT(schema=SCHEMA, tool_version=TOOL_VERSION, kind="report", compute=compute,
                       io=io, pair=pair, what_if=what_if or None)


# The engine's split of a pair's decode, per decoded token, each part with its source: the PAIR
# fields of the same names
EngineSplit = namedtuple("EngineSplit", "compute_ms_per_token cache_mgmt_ms_per_token "
                         "flash_io_ms_per_token flash_io_source stall_ms_per_token stall_source")


def engine_split(compute, io, measured, estimate):
    """decode = compute + cache management + flash I/O (serial) or + the stall (overlap=1),
    decided once. Flash I/O is the log's where it stands for the run's I/O part (logged_flash_io:
    serial, whole, agreeing with the trace), else the I/O estimate. Overlapped, the decode
    waited for its reads only as long as it stalled (the log's moe-overlap stall, or a v2
    trace's wait rows), whatever the readers' own time. Cache management is the log's (per
    generated position there; an overlapped run without a cache logged 3 ms of it), else 0 for
    a run without a cache, else None: no trace times it. Compute is what is left: None where a
    part is unknown, or the parts outlast the decode."""
    n, decode = len(compute["per_token"]), compute["ms_per_token"]
    management = measured.get("cache_mgmt_ms_per_token")
    if management is None or not n:
        management = None if had_cache(io) else 0.0
    else:
        management = per(management, n, generated_positions(compute) / n)
    beside = overlapped(io["meta"])  # the reads ran beside compute
    logged = None if beside else logged_flash_io(io, measured)
    flash = None if beside else estimate if logged is None else \
        per(logged, n, io["tokens"] / n)
    stall = overlap_cap({"overlap": "1"}, measured, n) if beside else None
    wait = stall if beside else flash  # what the reads cost the decode
    known = None not in (management, wait) and wait + management <= decode
    return EngineSplit(
        compute_ms_per_token=decode - wait - management if known else None,
        cache_mgmt_ms_per_token=management, flash_io_ms_per_token=flash,
        flash_io_source=None if beside else "I/O estimate" if logged is None else "log",
        stall_ms_per_token=stall, stall_source=None if stall is None else
        "io trace" if measured.get("stall_tokens") else "log")


def per_position(compute, io, split, estimate):
    """The pair's headline per generated position, when the run decoded speculatively (a
    decode verifies several positions): what the engine counts per token then, the split's
    parts divided once; else None. Overlapped, the reads ran beside compute: no compute."""
    decodes = compute["decodes"]
    if not decodes["speculative"] or compute["phase"] != "decode":
        return None
    n, positions = len(compute["per_token"]), decodes["positions"]
    flash, left = split.flash_io_ms_per_token, split.compute_ms_per_token
    return PER_POSITION(positions=positions,
                        decode_ms=per(compute["ms_per_token"], positions, n / positions),
                        compute_ms=None if flash is None or left is None else
                        per(left, positions, n / positions),
                        io_ms=per(estimate if flash is None else flash, positions, n / positions),
                        mib=io["read_bytes"] / MIB / positions)


def decoded_io_wall(io, tokens):
    """The IoWall per decoded token of a pair: each token's reads took no longer than its
    decode (its lanes' summed latency can exceed it, when lanes ran at once). tokens: the
    compute tokens' TokenIndex."""
    n, reads = len(tokens.rows), io["per_token"]
    decode_ms = token_figure(tokens.rows, "ms")
    high = 0
    # floats summed in trace order, as sum() adds them
    for key, busy_ms, token_io_ms in zip(token_keys(reads), token_figure(reads, "busy_ms"),
                                         token_figure(reads, "io_ms")):
        at = tokens.find(key)
        wall_ms = busy_ms if at is None else decode_ms[at]
        # ... nor shorter than their estimate: a decode shorter than that is no bound
        # (inverted, "within 184.71 and 2.65"), but a pair whose reads outlast a serial
        # decode (warned)
        high += min(busy_ms, max(token_io_ms, wall_ms))
    # the summed latency and the estimate: the io trace's totals, divided once more
    per_decoded = io["tokens"] / n
    return IoWall(per(io["busy_ms_per_token"], n, per_decoded),
                  per(io["io_wall_ms_per_token"]["estimate"], n, per_decoded), Ratio(high, n))


class TokenIndex:
    """Finds a per_token row by its (turn, phase, step): in a trace the engine wrote, trace
    order is key order (turns appended, a turn's prefill before its decodes, steps rising),
    so the keys, packed into one integer each, are bisected. A key packs into as few bits as
    the largest phase and step need, and the integers into the narrowest array that holds
    them (compact): 4 bytes a token for a session of a million steps. A trace out of that
    order takes a dict."""

    def __init__(self, per_token):
        self.rows, self.by_key = per_token, None
        self.phase_bits, self.step_bits = (
            max(map(itemgetter(at), token_keys(per_token)), default=0).bit_length()
            for at in (1, 2))
        self.packed = compact(map(self.packed_key, token_keys(per_token)))
        if any(map(ge, self.packed, islice(self.packed, 1, None))):
            self.packed = None
            self.by_key = {key: at for at, key in enumerate(token_keys(per_token))}

    def packed_key(self, key):
        """The key as one integer that sorts as the keys do; None when its phase or step is
        past every one indexed (it cannot be here)."""
        turn, phase, step = key
        if phase >> self.phase_bits or step >> self.step_bits:
            return None
        return (turn << self.phase_bits | phase) << self.step_bits | step

    def find(self, key):
        """The row's index in per_token, or None."""
        if self.by_key is not None:
            return self.by_key.get(key)
        packed = self.packed_key(key)
        at = bisect_left(self.packed, packed) if packed is not None else len(self.packed)
        return at if at < len(self.packed) and self.packed[at] == packed else None

    def missing(self, per_token):
        """How many of another per_token's rows are not found here."""
        return sum(self.find(key) is None for key in token_keys(per_token))


def rescaled(row, record, den, factor):
    """A row of `record` with its figures per token made per `den` tokens (per: a Ratio from
    its total, any other times `factor`): an io figure per read-token made per decoded token.
    Names, totals, shares, rates and latencies have no denominator to change."""
    fields = record.per_token
    return {key: per(value, den, factor) if key in fields else value
            for key, value in row.items()}


def read_split(per_token, readers):
    """Compute ms per token of the tokens that read and of those that read nothing, the
    reading tokens' own I/O estimate, and the longest stretch of slow tokens. readers: the io
    tokens' TokenIndex."""
    count, total, io_total = {True: 0, False: 0}, {True: 0, False: 0}, 0
    idle = array("d")
    walls, read_ms = token_figure(per_token, "ms"), token_figure(readers.rows, "io_ms")
    for key, ms in zip(token_keys(per_token), walls):  # floats summed in trace order
        at = readers.find(key)
        count[at is not None] += 1
        total[at is not None] += ms
        if at is None:
            idle.append(ms)
        else:
            io_total += read_ms[at]
    read, no_read = (READ_GROUP(tokens=count[side], ms_per_token=ratio(total[side], count[side]))
                     for side in (True, False))
    idle = sorted(idle)
    return READ_SPLIT(read=read, no_read=no_read,
                      io_ms_per_token=ratio(io_total, count[True]),
                      slow_stretch=slow_stretch(per_token, walls, readers, idle[len(idle) // 2])
                      if idle else None)


def slow_stretch(per_token, walls, readers, idle_median):
    """The longest run of consecutive decoded tokens of one turn slower than READ_SPLIT_RATIO x
    the median token that read nothing, when it holds at least half of the slow tokens.
    walls: each token's ms."""
    slow = bytearray(READ_SPLIT_RATIO * idle_median < ms for ms in walls)
    best = longest_run(slow, compact(turn for turn, _, _ in token_keys(per_token)))
    if len(best) < 2 or 2 * len(best) < sum(slow):
        return None
    stretch = per_token[best.start:best.stop]
    first, *_, last = stretch
    return SLOW_STRETCH(turn=first["turn"], first_step=first["step"], last_step=last["step"],
                        tokens=len(stretch),
                        without_reads=sum(readers.find(row_token(t)) is None for t in stretch),
                        ms_per_token=sum(walls[best.start:best.stop]) / len(stretch))


def with_run_settings(compute, io):
    """The compute half with the run's settings as the io half decided them (its preamble,
    then --set, the compute preamble's, the log's, and what its trace shows: analyze_pair),
    so that whatever reads a setting of the pair reads one value."""
    # the io preamble's own, where the compute half's differ or lack them, are joined from
    # the io trace: its settings say so, as they say where every other joined value came from
    io_settings = {**{key: SETTING(value=value, source="io trace")
                      for key, value in preamble_of(io).items()
                      if key in RUN_SETTINGS and compute["meta"].get(key) != value},
                   **io["settings"]}

    def joined(mine, theirs):  # the compute preamble's keys first, then the joined ones in
        # the order the io half joined them; the run's settings the io half's
        order = [key for key in mine if key not in compute["settings"]] + [
            key for key in theirs if key in RUN_SETTINGS or key in mine] + list(mine)
        held = {key: theirs.get(key) if key in RUN_SETTINGS else mine[key]
                for key in dict.fromkeys(order)}
        return {key: value for key, value in held.items() if value is not None}
    return {**compute, "meta": joined(compute["meta"], io["meta"]),
            "settings": joined(compute["settings"], io_settings)}


def preamble_of(report):
    """A report's meta as its trace's preamble wrote it: without the settings joined to it."""
    return {key: value for key, value in report["meta"].items() if key not in report["settings"]}


def pair_warnings(compute, io, tokens, logged=()):
    """What makes the two reports a doubtful pair: preambles that differ on a key both name
    (one process writes both traces of a run, with one set of settings; the log's word on it
    too, where it differs: the io half left it to this one), tokens that do not match
    (tokens: the compute tokens' TokenIndex)."""
    warnings = []
    io_preamble = preamble_of(io)
    for key, left in preamble_of(compute).items():
        right = io_preamble.get(key)  # trace_id: said below, with the files' names
        if right is not None and left != right and key != "trace_id":
            words = [f"{setting.key}={setting.value}" for setting in logged
                     if setting.key == key and setting.value != right
                     or setting.key != key and setting.key in fact_keys(key)
                     and ran_a_cache(setting.key, setting.value) != ran_a_cache(key, right)]
            warnings.append(f"{key} differs: {left!r} in the compute trace, {right!r} in the io "
                            f"trace" + (f", the log says {' '.join(words)}" if words else "")
                            + (": the io trace's stands" if key in RUN_SETTINGS else ""))
    differs = trace_id_warning((compute["path"], compute["meta"]), (io["path"], io["meta"]))
    if differs:
        warnings.append(differs)
    strangers = tokens.missing(io["per_token"])  # io tokens the compute trace lacks
    if io["per_token"] and strangers == len(io["per_token"]):  # a decode that read nothing
        warnings.append("the traces share no token (turn, phase, step): not one run's pair")
    elif strangers:
        warnings.append(f"{strangers} token(s) of the io trace are not among the "
                        f"compute trace's: their reads are still counted")
    return warnings


def trace_id_warning(compute, io):
    """The warning when the (name, preamble) of a run's two traces name different trace_ids;
    None when they agree or either names none (a v1 trace has none to compare)."""
    (compute_name, compute_meta), (io_name, io_meta) = compute, io
    left, right = compute_meta.get("trace_id"), io_meta.get("trace_id")
    if left is None or right is None or left == right:
        return None
    return (f"trace_id differs: {left} in {compute_name}, {right} in {io_name}: the files may "
            f"be from two runs")


READ_SPLIT_RATIO = 2.0  # compute ms of tokens that read over that of tokens that did not
READ_SPLIT_SHARE = 0.05  # ... each side holding this share of the tokens, and two at least


# ── pair: its verdicts ───────────────────────────────────────────────────────────────────────────
ROUTER_EXPLAINED = 0.5  # a pair: the share of the router's time the reads can account for

READS_EXPLAIN = 0.5  # ... and the reads' own time must cover this share of the difference
MATERIAL = 0.05  # a pair: an I/O verdict is flagged when it could save this share of the decode


def pair_verdicts(compute, io, pair, measured, pressure):
    """What only the pair can decide: whether the reads bound the decode, whether routing
    waits for them, whether the tokens that read are the slow ones, and whether the io
    verdicts are at stake in the decode; and the io trace's other verdicts (the io part's,
    judged here once: its verdicts at stake are the pair's, never weighed in I/O time too)."""
    decode = pair["decode_ms_per_token"]  # a remedy weighed against the decode, MATERIAL of it
    # the most the reads cost the decode: all of them serial, the split's stall overlapped
    cap = pair["stall_ms_per_token"] if overlapped(io["meta"]) else math.inf
    stakes = Stakes(decode, f"the {decode:.2f} ms decode per token", MATERIAL, cap,
                    page_cache_words(io), pressure.flagged)
    # the io trace is the expert streamer's: memory pressure's remedies are a streamed run's
    streamed = {**compute, "meta": {**compute["meta"], **io["meta"], "moe_stream": "1"}}
    own = [memory_verdict(streamed, pressure), io_bound_verdict(pair, stakes),
           router_pair_verdict(compute, pair, stakes),
           read_split_verdict(pair, overlapped(io["meta"]))]
    weighed = weighed_io_verdicts(io, pair["io_wall_ms_per_token"], stakes, pair)
    return ([v for v in own if v] + [v for v in weighed if v["id"] in AT_STAKE],
            [v for v in weighed if v["id"] not in AT_STAKE])


def split_flash_io(pair):
    """(the split's flash I/O, whether it is the log's): the I/O estimate where the split has
    none of its own (overlapped) or a report saved before it named one."""
    flash = pair.get("flash_io_ms_per_token")
    if flash is None:
        return pair["io_wall_ms_per_token"]["estimate"], False
    return flash, pair.get("flash_io_source") == "log"


def io_bound_verdict(pair, stakes):
    """Whether the reads bound the decode: what they cost it (serial: the split's flash I/O;
    overlap=1: the stall) against the decode. Node and layer traces of one run agree: it reads
    neither routing nodes nor segments."""
    estimate, decode = pair["io_wall_ms_per_token"]["estimate"], pair["decode_ms_per_token"]
    flash, logged = split_flash_io(pair)
    if stakes.cap is None:
        return verdict("io_bound", None,
            f"I/O share undetermined: overlap=1 ran the reads ({estimate:.2f} ms estimated) "
            f"beside compute, so what they cost the {decode:.2f} ms decode is the stall, which "
            f"the engine's log gives (moe-overlap), not found here")
    words = "the engine's flash I/O" if logged else "the I/O estimate"
    if stakes.cap == math.inf and flash > decode:  # warned: reads outlast a serial decode
        return verdict("io_bound", None,
            f"I/O share undetermined: the reads' {flash:.2f} ms ({words}) outlast the "
            f"{decode:.2f} ms decode per token that waited for them (overlap=0): not one run's "
            f"pair, or not its latencies")
    cost = flash if stakes.cap == math.inf else stakes.cap  # the wait the reads caused
    what = "the overlap's stall" if stakes.cap < math.inf else words
    share = ratio(cost, decode)
    return threshold_verdict("io_bound", share is not None and past("io_bound", share),
        f"the reads cost {cost:.2f} ms ({what}) of the {decode:.2f} ms decode per token",
        shown=num(share, ".0%"), after=f"; {stakes.moot}" if stakes.moot else "")


def router_pair_verdict(compute, pair, stakes):
    """Whether the routing nodes' time is the wait for expert reads, in ms: the reads can
    account for at most what they cost (serial: their estimated I/O time, each layer's
    busiest lane; overlap=1: the stall), so the router's read wait is at most the smaller of
    the two; faulting time does not dilute it. Under overlap without a stall: undetermined
    (routing takes as long without any wait)."""
    router_ms = pair["router_ms_per_token"]
    if router_ms is None:
        return None  # a layer-granularity trace has no routing nodes
    estimate = pair["io_wall_ms_per_token"]["estimate"]
    if stakes.cap is None:
        return verdict("router_wait", None,
            f"router wait undetermined: routing nodes take {router_ms:.2f} ms per decoded "
            f"token, but overlap=1 ran the reads beside compute, so routing time is not read "
            f"wait: the stall (the engine's log, moe-overlap) bounds it, or diff against the "
            f"same model's serial run")
    stake = pair["decode_ms_per_token"] - pair["faulting_ms_per_token"]
    wait = min(router_ms, estimate, stakes.cap)
    bound = f"the overlap's stall, {stakes.cap:.2f} ms" if stakes.cap < estimate else \
        f"the reads, estimated at {estimate:.2f} ms (each layer's busiest lane)"
    reads = (f"routing nodes take {router_ms:.2f} ms per decoded token"
             f"{per_position_words(pair, router_ms)}; {bound}, can account for {wait:.2f} of "
             f"them")
    if not stake or wait <= ROUTER_SHARE * stake:
        calm = verdict("router_wait", False,
            f"router not waiting much: {reads}, {ratio(wait, stake) or 0:.0%} of the decode "
            f"outside faulting nodes (<= {ROUTER_SHARE:.0%})")
        return calm if not stakes.pressure else verdict("router_wait", None,
            f"router wait undetermined: {reads}, {ratio(wait, stake) or 0:.0%} of a decode "
            f"that memory pressure inflates: judge it once the pressure is relieved")
    if wait >= ROUTER_EXPLAINED * router_ms:
        return verdict("router_wait", True,
            f"ROUTER WAITS FOR READS: {reads} ({wait / router_ms:.0%} of the router's time, "
            f">= {ROUTER_EXPLAINED:.0%}), {wait / stake:.0%} of the decode outside faulting "
            f"nodes")
    return verdict("router_wait", False,
        f"router time is mostly not read wait: {reads} ({wait / router_ms:.0%} of the router's "
        f"time, < {ROUTER_EXPLAINED:.0%})")


def read_split_verdict(pair, overlapped):
    """Whether the tokens that read are slow because they read: their difference from the
    tokens that read nothing is held against their own reads' time (the I/O estimate)."""
    split = pair["read_split"]
    stretch = split["slow_stretch"]  # what else differs: the slow tokens as one stretch
    read, idle = split["read"], split["no_read"]
    if not read["tokens"] or not idle["tokens"] or not idle["ms_per_token"]:
        return None
    fewest, least = min(read["tokens"], idle["tokens"]), \
        max(2, READ_SPLIT_SHARE * (read["tokens"] + idle["tokens"]))
    if fewest < least:  # one all-hit token of 64 is no group
        return verdict("read_split", None,
            f"read split undetermined: {read['tokens']} tokens read, {idle['tokens']} read "
            f"nothing; a group of {counted(fewest, 'token')} (< 2 or {READ_SPLIT_SHARE:.0%} of "
            f"them) is too few to tell a split")
    factor = read["ms_per_token"] / idle["ms_per_token"]
    groups = (f"the {read['tokens']} tokens that read take {read['ms_per_token']:.2f} ms each, "
              f"the {idle['tokens']} that read nothing {idle['ms_per_token']:.2f} ms "
              f"({factor:.2f}x")
    if factor <= READ_SPLIT_RATIO:
        return verdict("read_split", False, f"reads do not split the tokens: {groups}; <= "
                                            f"{READ_SPLIT_RATIO}x)")
    difference = read["ms_per_token"] - idle["ms_per_token"]
    own = split["io_ms_per_token"] or 0.0
    reads = (f"{groups}), a difference of {difference:.2f} ms against their reads' own "
             f"{own:.2f} ms (I/O estimate, {own / difference:.0%} of it")
    if own >= READS_EXPLAIN * difference:
        if overlapped:
            return verdict("read_split", None,
                f"read split undetermined: {reads}); overlap=1: the reads ran beside compute, "
                f"so how much of them the tokens waited for is not in a v1 trace (a v2 "
                f"trace's timeline measures it)")
        return verdict("read_split", True, f"READS SPLIT THE TOKENS: {reads}, >= "
                                           f"{READS_EXPLAIN:.0%})")
    return verdict("read_split", False,
        f"the reads do not explain the split: {reads}, < {READS_EXPLAIN:.0%})"
        + ("" if stretch is None else
           f"; the slow tokens are one stretch, turn {stretch['turn']} steps "
           f"{stretch['first_step']}-{stretch['last_step']} ({stretch['tokens']} tokens, "
           f"{stretch['ms_per_token']:.2f} ms each), {stretch['without_reads']} of which read "
           f"nothing: something else slowed that stretch"))


# ── pair: its text and Markdown sections ─────────────────────────────────────────────────────────
PAIR_KEYS = ("model", "arch", "n_layer", "n_threads", "io_threads", "o_direct", "overlap")


def pair_headline_blocks(report, view):
    compute, pair = report["compute"], report["pair"]
    lines = [f"tokens={pair['tokens']} (from the compute trace; {selection_text(compute)}), "
             f"{pair['tokens_without_reads']} of them read nothing; every figure below is "
             f"{per_words(report)}"]
    if not report["io"]["tokens"]:
        lines.append(f"the io trace holds no read of phase {compute['phase']}: the cache held "
                     f"every expert its tokens asked for (the trace's other rows, prefill's, "
                     f"are not charged to them)")
    position = pair["per_position"]
    if position:
        split = f" = compute {position['compute_ms']:.2f} + flash I/O" \
            if position["compute_ms"] is not None else ", reads beside it:"
        lines.append(f"speculative decoding: {pair['tokens']} decodes generated "
                     f"{position['positions']} positions; per generated position, decode "
                     f"{position['decode_ms']:.2f} ms{split} {position['io_ms']:.2f} ms, "
                     f"{position['mib']:.2f} MiB read")
    return [Block(None, [Prose(lines + own_cache_words(report), ""),
                         Prose([f"warning: {message}" for message in pair["warnings"]])],
                  gap=False)]


def per_decoded_blocks(report, view):
    io, pair = report["io"], report["pair"]
    engine = engine_split_of(report, math.inf)  # the log's own split: this run's, no saved one
    inside = ("routed experts and router n/a (a layer-granularity trace)"
              if pair["experts_ms_per_token"] is None else
              f"routed experts {pair['experts_ms_per_token']:.2f} ms, router "
              f"{pair['router_ms_per_token']:.2f} ms")
    estimate = pair["io_wall_ms_per_token"]["estimate"]
    managed = pair.get("cache_mgmt_ms_per_token")  # a schema 7 report may lack it: no cache
    flash, logged = split_flash_io(pair)
    decode = pair["decode_ms_per_token"]
    io_part = f"flash I/O {flash:.2f} (" + (
        f"the engine's log; the I/O estimate {estimate:.2f})" if logged else "the I/O estimate)")
    stall = pair.get("stall_ms_per_token")  # a schema 7 report's: none
    if pair["compute_ms_per_token"] is not None:
        managing = f"cache mgmt {managed:.2f} (the engine's log" + (
            ")" if had_cache(io) else ", booked by a run without a cache)") + " + " \
            if managed else ""  # an overlapped run without one logs 3 ms of it
        if stall is not None:
            io_part = (f"stall {stall:.2f} (" + ("the io trace's waits" if
                       pair["stall_source"] == "io trace" else "the engine's log") +
                       f"; reads beside compute, lanes busy {pair['io_busy_ms_per_token']:.2f}"
                       f" ms)")
        split = f"decode {decode:.2f} ms = compute {pair['compute_ms_per_token']:.2f} + " \
                f"{managing}{io_part}; "
    elif overlapped(io["meta"]):
        split = (f"decode {decode:.2f} ms, reads beside it (overlap=1: their time is not "
                 f"subtracted; lanes busy {pair['io_busy_ms_per_token']:.2f} ms is what the "
                 f"engine counts as flash I/O then); ")
    elif managed is None and flash <= decode:  # a cached run without its log
        split = (f"decode {decode:.2f} ms = compute and cache mgmt {decode - flash:.2f} (no "
                 f"log gives the management) + {io_part}; ")
    else:
        managing = f" and the log's cache mgmt {managed:.2f} ms" if managed else ""
        split = (f"decode {decode:.2f} ms, no split: the reads' {flash:.2f} ms "
                 f"{'(the log)' if logged else 'estimated'}{managing} outlast it (a warning "
                 f"above says why); ")
    return [Block(per_words(report), [Prose([
        f"  {split}in the decode, faulting nodes {pair['faulting_ms_per_token']:.2f} ms, {inside}",
        *([f"  the engine's log: {engine_split_text(engine)}"] if engine else []),
        "  " + io_range_text({**pair, "lanes": io["lanes"], "meta": io["meta"]}, ""),
        f"  reads {pair['io_reads_per_token']:.1f}, {pair['io_mib_per_token']:.2f} MiB; lanes "
        f"busy {pair['io_busy_ms_per_token']:.2f} ms summed over lanes; alignment waste "
        f"{pair['waste_mib_per_token']:.2f} MiB"])])]


def pair_layer_blocks(report, view):
    return [Block("by layer (compute by inferred layer)",
                  [Grid(table_of(PAIR_LAYER_ROW), report["pair"]["by_layer"], compact=True),
                   *tail_note(report["compute"])])]


KINDS["report"] = Kind(PAIR_REPORT, layout(
    header_section(lambda report: Header(
        "report", [("compute", report["compute"]["path"], ""), ("io", report["io"]["path"], "")],
        {**report["io"]["meta"], **report["compute"]["meta"]}, PAIR_KEYS)),
    # the answer, then what to change, then the tables
    pair_headline_blocks, per_decoded_blocks, verdict_blocks, best_change_blocks, calm_blocks,
    engine_blocks, what_if_blocks, caveat_blocks, pair_layer_blocks, segment_blocks,
    pair_op_blocks, fault_blocks, category_blocks, compute_token_blocks,
    lambda report, view: [Block("flash reads")],  # a heading over the sections after it
    *IO_READ_SECTIONS, adjacency_blocks, cache_blocks))


# ── timeline: its records ────────────────────────────────────────────────────────────────────────
TIMELINE_STATS = Record("timeline figure", (("p50", Shown("p50")), ("p99", Shown("p99")),
    ("total", Shown("total"))))
OUTSIDE = Record("outside decodes", ("read_busy_ms",))
TIMELINE_DECODE = Record("timeline decode", (("turn", Shown("turn")), "phase",
    ("step", Shown("step")), "span_from", ("decode_ms", Shown("decode ms", 3)),
    ("graph_ms", Shown("graph ms", 3)), ("read_busy_ms", Shown("read busy", 3)),
    ("read_share", Shown("share", "%")), ("wait_ms", Shown("wait ms", 3)),
    ("overlap_ms", Shown("overlap ms", 3)), ("callback_ms", Shown("callback ms", 3))))
TIMELINE_REPORT = Record("timeline report", (*REPORT_HEAD, "paths", ("meta", MapOf(VALUE)),
    "phase", ("selection", SELECTION), "decodes_count", ("summary", MapOf(TIMELINE_STATS)),
    ("outside_decodes", OUTSIDE), ("decodes", ListOf(TIMELINE_DECODE)), WARNINGS), later=LATER)


# ── timeline: v2 traces, measured on one clock ───────────────────────────────────────────────────
# On a v2 trace's clock (Clock), a decode's I/O time is a measurement, not a range. Reads and
# waits are given to decodes by time (clipped to the decode's span), not by the token they were
# stamped with, so a read that runs across two decodes counts in each for the part it spent
# there.
TIMELINE_COMPUTE_COLUMNS = ("turn", "phase", "step", "op", "start_ns", "end_ns")
TIMELINE_IO_COLUMNS = ("start_ns", "end_ns", "kind")
TIMELINE_FIGURES = (("decode_ms", "decode wall (BMOE_DECODE span)"),
                    ("graph_ms", "graph wall (first node start to last node end)"),
                    ("read_busy_ms", "read busy (union of reads over every lane)"),
                    ("read_share", "read busy / decode wall"),
                    ("wait_ms", "expert wait (union of waits)"),
                    ("overlap_ms", "reads while compute was not waiting"),
                    ("callback_ms", "callbacks (BMOE_CALLBACK)"))


class TimelineToken:
    """One selected decode of a v2 compute trace: its BMOE_DECODE span, its graph nodes' span,
    and its callback intervals."""

    __slots__ = ("turn", "phase", "step", "decode", "graph", "callbacks")

    def __init__(self, turn, phase, step):
        self.turn, self.phase, self.step = turn, phase, step
        self.decode = self.graph = None  # Span (ns)
        self.callbacks = []  # Span (ns) each

    def add(self, ops, timed):
        """A run of the token's rows: their ops and Intervals."""
        starts, ends = timed
        nodes = [op not in SYNTHETIC_OPS for op in ops]
        if any(nodes):
            self.graph = widest(self.graph, Span(min(compress(starts, nodes)),
                                                 max(compress(ends, nodes))))
        if not all(nodes):
            for op, start, end in zip(ops, starts, ends):
                if op == "BMOE_DECODE":
                    self.decode = widest(self.decode, Span(start, end))
                elif op == "BMOE_CALLBACK":
                    self.callbacks.append(Span(start, end))

    def merge(self, other):
        self.decode = widest(self.decode, other.decode)
        self.graph = widest(self.graph, other.graph)
        self.callbacks += other.callbacks


def widest(span, other):
    """The smallest Span holding both (either may be None)."""
    if span is None or other is None:
        return span or other
    return Span(min(span.start, other.start), max(span.end, other.end))


def decode_span(token):
    """(what it came from, Span) of a decode (a TimelineToken): its BMOE_DECODE row, else its
    graph nodes, else (a decode of callbacks only) its callbacks."""
    if token.decode:
        return "BMOE_DECODE", token.decode
    if token.graph:
        return "graph", token.graph
    return "callbacks", Span(min(span.start for span in token.callbacks),
                             max(span.end for span in token.callbacks))


class TimelineComputeFold(TokenFold):
    """Each selected decode's spans, from the synthetic rows and the graph nodes' timestamps."""

    def __init__(self, selection):
        super().__init__(selection, TimelineToken)
        self.clock = Clock()

    def _fold(self, batch, runs):
        for run in runs:
            row = self.book.lookup(run)
            if row is not None:
                self.book.records[row].add(batch["op"][run.start:run.end],
                                           self.clock.intervals(batch, run.start, run.end))

    def _finished(self):
        pass

    def merge(self, later):
        self.book.merge(later.book)
        self.clock.merge(later.clock)


class TimelineIoFold:
    """Every read's and every wait's interval (Intervals of two arrays)."""

    def __init__(self):
        self.reads, self.waits = (Intervals(array("Q"), array("Q")) for _ in range(2))
        self.clock = Clock()

    def feed(self, batch):
        timed = self.clock.by_kind(batch)
        for mine, kind in ((self.reads, "read"), (self.waits, "wait")):
            mine.starts.extend(timed[kind].starts)
            mine.ends.extend(timed[kind].ends)

    def finish(self):
        pass

    def detach(self):
        pass

    def merge(self, later):
        self.clock.merge(later.clock)
        for mine, theirs in ((self.reads, later.reads), (self.waits, later.waits)):
            mine.starts.extend(theirs.starts)
            mine.ends.extend(theirs.ends)


def union(starts, ends):
    """The union of intervals [start, end) as disjoint sorted Intervals of lists."""
    merged_starts, merged_ends = [], []
    for start, end in sorted(zip(starts, ends)):
        if end <= start:
            continue
        if merged_ends and start <= merged_ends[-1]:
            merged_ends[-1] = max(merged_ends[-1], end)
        else:
            merged_starts.append(start)
            merged_ends.append(end)
    return Intervals(merged_starts, merged_ends)


def intersection(first, second):
    """The intersection of two disjoint sorted interval lists, as one."""
    (a_starts, a_ends), (b_starts, b_ends) = first, second
    starts, ends = [], []
    i = j = 0
    while i < len(a_starts) and j < len(b_starts):
        start, end = max(a_starts[i], b_starts[j]), min(a_ends[i], b_ends[j])
        if start < end:
            starts.append(start)
            ends.append(end)
        if a_ends[i] < b_ends[j]:
            i += 1
        else:
            j += 1
    return Intervals(starts, ends)


def covered_ns(intervals, window):
    """How much of window [start, end) the disjoint sorted intervals cover."""
    starts, ends = intervals
    low, high = window
    total = 0
    i = max(0, bisect_right(starts, low) - 1)
    while i < len(starts) and starts[i] < high:
        total += max(0, min(ends[i], high) - max(starts[i], low))
        i += 1
    return total


TIMELINE_COMPUTE_READ = Columns("compute", TIMELINE_COMPUTE_COLUMNS, ints=("start_ns", "end_ns"),
                                keys=("turn", "phase", "step"), strings=("op",))
TIMELINE_IO_READ = Columns("io", TIMELINE_IO_COLUMNS, ints=("start_ns", "end_ns"),
                           strings=("kind",))


def has_v2_clock(trace):
    """Whether the trace stamps its rows on the v2 steady clock (start_ns, end_ns)."""
    return trace.version == "v2" and {"start_ns", "end_ns"} <= set(trace.columns)


def require_v2(trace):
    """timeline measures what only v2 timestamps hold: a v1 trace is an error that says where
    to look instead."""
    if not has_v2_clock(trace):
        raise TraceError(trace.name, 1, f"a {trace.version or 'v1'} trace has no start_ns/end_ns "
                                        f"timestamps to measure a timeline with; for v1 traces, "
                                        f"'decode-analyze report CT IO' gives each token's I/O "
                                        f"time as a range")


def timeline_report(trace, fold, selection, io_trace=None, io_fold=None):
    """Per decode and summarised: decode wall, graph wall, read busy and its share, expert
    wait, overlap achieved and callbacks (the I/O figures null without an io trace)."""
    _, label, tokens = selected_tokens(trace, fold.book, selection,
                                       set(fold.table.columns["phase"]))
    tokens = [fold.book.records[row] for row in tokens.rows()]
    reads = None
    if io_fold is not None:
        reads, waits = union(*io_fold.reads), union(*io_fold.waits)
        reads_in_waits = intersection(reads, waits)
    decodes, windows = [], []
    for token in tokens:
        span_from, window = decode_span(token)
        windows.append(window)
        io_figures = dict.fromkeys(("read_busy_ms", "read_share", "wait_ms", "overlap_ms"))
        if reads is not None:
            read_ns = covered_ns(reads, window)
            both_ns = covered_ns(reads_in_waits, window)
            io_figures.update(read_busy_ms=read_ns / NS_PER_MS,
                              read_share=ratio(read_ns, window.end - window.start),
                              wait_ms=covered_ns(waits, window) / NS_PER_MS,
                              overlap_ms=(read_ns - both_ns) / NS_PER_MS)
        decodes.append(TIMELINE_DECODE(
            turn=token.turn, phase=token.phase, step=token.step, span_from=span_from,
            decode_ms=span_ms(window), graph_ms=span_ms(token.graph) if token.graph else None,
            callback_ms=total_ns(union(*zip(*token.callbacks))) / NS_PER_MS
            if token.callbacks else 0.0, **io_figures))
    outside = None  # read busy time (union over lanes) outside every selected decode's span
    if reads is not None:
        spans = union(*zip(*windows)) if windows else ([], [])
        outside = OUTSIDE(read_busy_ms=(total_ns(reads) - total_ns(intersection(reads, spans)))
                          / NS_PER_MS)
    # {figure: {p50, p99, total}} over the decodes (read_share's total: all read busy time
    # over all decode time); None for a figure no decode has
    summary = {}
    for key, _ in TIMELINE_FIGURES:
        values = [row[key] for row in decodes if row[key] is not None]
        if not values:
            summary[key] = None
            continue
        percentiles = percentile_summary(values)
        total = sum(values) if key != "read_share" else ratio(
            summary["read_busy_ms"]["total"], summary["decode_ms"]["total"])
        summary[key] = TIMELINE_STATS(p50=percentiles["p50"], p99=percentiles["p99"], total=total)
    return TIMELINE_REPORT(
        schema=SCHEMA, tool_version=TOOL_VERSION, kind="timeline",
        paths=[trace.name] + ([io_trace.name] if io_trace else []),
        meta={**(io_trace.meta if io_trace else {}), **trace.meta}, phase=label,
        selection=selection.as_dict(), decodes_count=len(decodes),
        summary=summary, outside_decodes=outside, decodes=decodes)


def span_ms(span):
    return (span.end - span.start) / NS_PER_MS


def total_ns(intervals):
    starts, ends = intervals
    return sum(map(sub, ends, starts))


# ── timeline: its text and Markdown sections ─────────────────────────────────────────────────────
TIMELINE_KEYS = ("model", "trace_id", "io_threads", "overlap")


TIMELINE_SHOWN = 20  # decodes listed; the slowest when there are more
TIMELINE_DECODE_TABLE = table_of(TIMELINE_DECODE)


def timeline_headline_blocks(report, view):
    from_graph = sum(row["span_from"] == "graph" for row in report["decodes"])
    lines = [f"decodes={report['decodes_count']} ({selection_text(report)}); each decode's span "
             f"is its BMOE_DECODE row" + (f", or for {from_graph} without one its graph nodes' "
                                          f"span" if from_graph else "")]
    if report["outside_decodes"] is not None:
        lines.append(f"read busy outside every selected decode: "
                     f"{report['outside_decodes']['read_busy_ms']:.3f} ms")
    else:
        lines.append("no io trace: read busy, wait and overlap need one (timeline CT IO)")
    return [Block(None, [Prose(lines)], gap=False)]


def timeline_summary_blocks(report, view):
    """One row per figure, its values written as ms, or as a share for read_share."""
    rows = []
    for key, label in TIMELINE_FIGURES:
        figure = report["summary"][key] or {}
        write = pct if key == "read_share" else lambda ms: num(ms, ".3f")
        rows.append({"label": label, **{stat: write(figure.get(stat))
                                        for stat in ("p50", "p99", "total")}})
    return [Block("summary over the decodes (ms; read share in %)",
                  [Grid((text_column("per decode", "label"), *table_of(TIMELINE_STATS)),
                        rows)])]


def timeline_decode_blocks(report, view):
    decodes = report["decodes"]
    if len(decodes) <= TIMELINE_SHOWN:
        return [Block("decodes: every one", [Grid(TIMELINE_DECODE_TABLE, decodes)])]
    slowest = sorted(decodes, key=lambda row: -row["decode_ms"])[:TIMELINE_SHOWN]
    return [Block(f"decodes: the {TIMELINE_SHOWN} slowest (JSON has all {len(decodes)})",
                  [Grid(TIMELINE_DECODE_TABLE, slowest)])]


KINDS["timeline"] = Kind(TIMELINE_REPORT, layout(
    header_section(lambda report: Header("timeline", [
        (label, path, "") for label, path in zip(("compute", "io"), report["paths"])],
        report["meta"], TIMELINE_KEYS)), timeline_headline_blocks, timeline_summary_blocks,
    timeline_decode_blocks))


# ── engine: the engine's own end-of-run lines ────────────────────────────────────────────────────
# NAME.log beside a trace holds the lines the engine printed at the end of the run (their
# grammar: ../shared/traces/README.md). Each kind of line has its pattern, found anywhere in the
# file; every other line is ignored. A figure keeps how finely the engine printed it: it agrees
# with the tool's when they differ by at most ENGINE_TOLERANCE of it, or by the engine's rounding.
COMPRESSED_ENDINGS = (".gz", ".bz2", ".xz", ".lzma", ".zip")  # what a trace's name may end in


def matched_name(path):
    """How two traces' names are matched: the path normalized, without a compression ending
    (x-ct.csv pairs with x-io.csv.gz)."""
    path = os.path.normpath(path)
    for ending in COMPRESSED_ENDINGS:
        if path.endswith(ending):
            return path[:-len(ending)]
    return path


NUMBER = r"(\d{1,15}(?:\.\d{1,9})?)"  # longer is no engine's figure (nor a float, nor an int)
# Each line: the words it starts with (found with str.find, anywhere in the line), then its
# figures, right after those words or (where the engine prints text between) searched for after
# them. No pattern has a `.*`: each one is tried at each place at a bounded cost, so a line is
# read in time linear in its length (a `.*` before a figure backtracked: 97 s on a 416 KB line).
EngineLine = namedtuple("EngineLine", "lead figures names anywhere", defaults=(False,))
ENGINE_LINES = tuple(EngineLine(lead, re.compile(pattern.replace("N", NUMBER)), names, anywhere)
                     for lead, pattern, names, anywhere in (
    ("generation: ", r"N tokens, N s/token", ("tokens", "generation_ms_per_token"), False),
    ("compute: ", r", N major faults/token", ("majflt_per_token",), True),
    ("moe-stream: ", r"read N MiB \(N MiB/token\), decode N s/token \(compute N \+ cache mgmt "
     r"N \+ flash I/O N s/token, N MiB/s\)",
     ("read_mib", "mib_per_token", "decode_ms_per_token", "compute_ms_per_token",
      "cache_mgmt_ms_per_token", "flash_io_ms_per_token", "mib_per_s"), False),
    ("moe-cache: ", r"N% hit, resident N MiB", ("hit_pct", "resident_mib"), False),
    ("moe-cache: ", r"N evictions, N re-reads", ("evictions", "rereads"), False),
    ("moe-overlap: ", r"stall N s/token", ("stall_ms_per_token",), False),
    ("moe-prefetch: ", r"N MiB speculative, N/N experts useful",
     ("speculative_mib", "useful_experts", "speculative_experts"), False),
    ("ngram: ", r" N tokens per verify decode", ("positions_per_decode",), True)))
TURN_LEAD = "turn id="
TURN_HEAD = re.compile(r"(\d{1,9}): generated=(\d{1,12}) ")
# a number ends where a separator or a digit does not follow: `read_mib=1,043.4` is not 1
NUMBER_END = r"(?![\d.,])"
TURN_TAIL = re.compile(r"cache_hit=(\d{1,3}(?:\.\d{1,9})?)% read_mib=" + NUMBER + NUMBER_END)
TURN_SPEED = re.compile(r"tok_s=" + NUMBER + NUMBER_END)  # the turn's decode speed, if printed
LOG_MOST_BYTES = 64 << 20  # a log is a terminal's text: past this, it is not one
LOG_LINE_MOST = 4096  # the engine's lines are under 300 characters: a longer one is none of them
# A terminal's colours and cursor moves (CSI and OSC sequences), which `2>` keeps in the file
TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]{0,32}[ -/]{0,4}[@-~]|\x1b\][^\x07\x1b]{0,256}"
                            r"(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
EngineValue = namedtuple("EngineValue", "value rounding")


def engine_value(name, text):
    """A figure as the engine printed it, in the tool's units (s/token -> ms), with half of
    its last printed digit."""
    scale = 1000 if name.endswith("_ms_per_token") else 1
    _, _, decimals = text.partition(".")
    return EngineValue(float(text) * scale, 0.5 * 10 ** -len(decimals) * scale)


# A log read: its last run's figures {name: EngineValue} and turns [(id, generated, hit %,
# MiB, tok/s or None)]; how many runs' end-of-run lines it holds (`2>>` appends a run's to the
# last's), and how many engine lines.
# unread: (line number, lead, figure names) of each known line not understood
EngineLog = namedtuple("EngineLog", "path figures turns runs lines unread",
                       defaults=(1, 1, ()))


def engine_lines(text):
    """(kind, figures) of every engine line in the text, in order: kind the line's lead
    (`turn id=` for a session's turn), figures its {name: EngineValue}, or its turn tuple."""
    # lines end at a newline alone: splitlines() would also cut at a U+2028 inside a line
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > LOG_LINE_MOST:
            continue
        if "\x1b" in line:
            line = TERMINAL_CODES.sub("", line)
        missed = {}  # lead -> the names of its kinds that did not fit the line
        for kind in ENGINE_LINES:
            at = line.find(kind.lead)
            if at < 0:
                continue
            at += len(kind.lead)
            found = kind.figures.search(line, at) if kind.anywhere else \
                kind.figures.match(line, at)
            values = {} if not found else {  # a figure past any float is no figure
                name: engine_value(name, value) for name, value in
                zip(kind.names, found.groups()) if math.isfinite(float(value))}
            if len(values) == len(kind.names):
                missed[kind.lead] = None  # one kind of the lead fits (moe-cache has two)
                yield kind.lead, values
            elif kind.lead not in missed or missed[kind.lead] is not None:
                missed[kind.lead] = (missed.get(kind.lead) or ()) + kind.names
        # a known line whose numbers do not fit (0,003, 3e-3, -1) is said, not dropped
        yield from ((UNREAD, (number, lead, names)) for lead, names in missed.items() if names)
        at = line.find(TURN_LEAD)
        if at < 0:
            continue
        head = TURN_HEAD.match(line, at + len(TURN_LEAD))
        tail = TURN_TAIL.search(line, head.end()) if head else None
        speed = TURN_SPEED.search(line, head.end()) if head else None
        if not tail or not speed and "tok_s=" in line[head.end():]:
            yield UNREAD, (number, TURN_LEAD, ("the turn's figures",))
            continue
        (turn, generated), (hit, mib) = head.groups(), tail.groups()
        yield TURN_LEAD, (int(turn), int(generated), float(hit), float(mib),
                          float(speed.group(1)) if speed else None)


UNREAD = "?"  # engine_lines' kind of a known line not understood


def read_engine_log(path):
    """The EngineLog of the file at `path`: its last run's lines. A run's lines start again
    where a kind of line it printed once comes back (a second `generation:`), or a turn's id
    does not count up."""
    try:
        with open(path, "rb") as f:
            data = f.read(LOG_MOST_BYTES + 1)
    except OSError as exc:
        raise TraceError(path, 0, f"cannot read the engine's log: {exc.strerror or exc}")
    if len(data) > LOG_MOST_BYTES:
        raise TraceError(path, 0, f"over {LOG_MOST_BYTES >> 20} MiB: not an engine's log")
    figures, turns, seen, runs, lines, unread = {}, [], set(), 0, 0, []
    # UTF-16 where a byte-order mark says so (PowerShell's `>` writes it), else UTF-8, any bad
    # byte replaced
    text = data.decode("utf-16" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "utf-8-sig",
                       "replace")
    for kind, found in engine_lines(text):
        lines += 1
        if kind == UNREAD:
            unread.append(found)
            continue
        again = turns and found[0] <= turns[-1][0] if kind == TURN_LEAD else \
            (kind, tuple(found)) in seen
        if again or not runs:
            figures, turns, seen, runs = {}, [], set(), runs + 1
            unread = unread if runs == 1 else []  # the lines not understood of a run before
        if kind == TURN_LEAD:
            turns.append(found)
        else:
            seen.add((kind, tuple(found)))
            figures.update(found)
    # the engine's flash I/O per token from its read MiB, MiB/s and tokens, finer than the ms
    # it prints (4.63 against 5 on the serial run)
    read, rate, tokens = (figures.get(name) for name in ("read_mib", "mib_per_s", "tokens"))
    if all(part and part.value for part in (read, rate, tokens)):
        flash = read.value / rate.value / tokens.value * 1000
        # as fine as the MiB/s it rests on (printed whole)
        figures["flash_io_ms_per_token"] = EngineValue(flash, flash * rate.rounding / rate.value)
    return EngineLog(path, figures, turns, runs, lines, unread)


def log_beside(paths):
    """NAME.log beside the first trace that has one, or for a pair their shared NAME's
    (session-ct.csv and session-io.csv: session.log); None. A trace's NAME is its file name
    without .csv, or without -ct.csv / -io.csv, as a sweep names a run's two traces."""
    # NAME: the trace's name as summary matches it (no compression ending), without .csv
    names = [matched_name(path).removesuffix(".csv") for path in paths
             if path != trace_io.STDIN]
    shared = os.path.commonprefix(names).rstrip("-_.") if len(names) > 1 else ""
    runs = [RUN_OF_TRACE.sub("", name) for name in names]
    for name in names + ([shared] if shared and os.path.basename(shared) else []) + runs:
        if os.path.basename(name) and os.path.isfile(name + ".log"):
            return name + ".log"
    return None


RUN_OF_TRACE = re.compile(r"[-_.](?:ct|io)$")  # sweep/x-ct.csv, sweep/x-io.csv: sweep/x.log


def engine_log(paths, named=None):
    """A run's EngineLog: the one named, else NAME.log beside its traces; None."""
    path = named or log_beside(paths)
    return read_engine_log(path) if path else None


def tool_figures(report, generated=None):
    """The tool's figure for each engine figure the traces show, counted as the engine counts:
    per generated position (a speculative decode verifies several), over every decoded token
    (a token served whole from a cache reads nothing: the compute trace has it; an io trace
    alone takes the log's `generated` tokens), from a report of the whole decode (a selection
    of some tokens is not the run the engine summed)."""
    halves = report_halves(report)
    compute, io, pair = halves.get("compute"), halves.get("io"), report.get("pair")
    figures = {}
    positions = None
    if compute and whole_decode(compute):
        decodes, positions = compute["decodes"], generated_positions(compute)
        per_position = compute["tokens"] / positions
        decode_ms = per(compute["ms_per_token"], positions, per_position)
        figures.update(tokens=positions, decode_ms_per_token=decode_ms,
                       generation_ms_per_token=decode_ms,
                       majflt_per_token=per(compute["majflt_per_token"], positions, per_position))
        if decodes["speculative"]:
            figures["positions_per_decode"] = decodes["positions"] / decodes["decodes"]
    if io and whole_decode(io):
        beside = overlapped(io["meta"])
        units = positions or logged_tokens(generated, io["tokens"]) or io["tokens"]
        per_unit = io["tokens"] / units
        # not speculative MiB: the prefetch run's spec=1 reads hold 0.2 MiB where its log
        # says 0.0, so the two count different things
        io_ms = io["busy_ms_per_token"] if beside else io["io_wall_ms_per_token"]["estimate"]
        figures.update(read_mib=io["read_bytes"] / MIB,
                       mib_per_token=io["read_bytes"] / MIB / units,
                       flash_io_ms_per_token=per(io_ms, units, per_unit))
        figures.update(own_cache_figures(io))
    if pair and "read_mib" in figures and positions:
        per_position = pair["tokens"] / positions
        figures["compute_ms_per_token"] = per(pair["compute_ms_per_token"], positions,
                                              per_position)
        figures["cache_mgmt_ms_per_token"] = per(pair["cache_mgmt_ms_per_token"], positions,
                                                 per_position)
        # where the split has a flash I/O part (serial: overlapped, the engine's is the
        # readers' summed time, lanes busy, above)
        if pair["compute_ms_per_token"] is not None and \
                pair.get("flash_io_ms_per_token") is not None:
            figures["flash_io_ms_per_token"] = per(pair["io_wall_ms_per_token"]["estimate"],
                                                   positions, per_position)
    return figures


def own_cache_figures(io):
    """The engine's cache figures (its hit %, re-reads and evictions) as the trace of a run
    that had a cache shows them (`run_cache`); or, for a cache that never hit (its trace holds
    every lookup, none short), as the what-if simulates the cache at the run's own size."""
    if ran_cached(io):
        own = io["run_cache"]
        # a verify run's hit % is a band (its trace cannot show all its hits): its middle
        figures = {"hit_pct": (own["hit_share"] + own["hit_share_most"]) * 50,
                   "hit_pct_half_band": (own["hit_share_most"] - own["hit_share"]) * 50,
                   "rereads": own["rereads"]}
        if own["evictions"] is not None:
            figures["evictions"] = own["evictions"]
        return figures
    own_mib = meta_number(io["meta"], "cache_mb")
    simulated = next((setting["figures"] for setting in (io.get("what_if") or {}).get(
        "settings", ()) if setting["setting"] == "cache_mb" and setting["value"] == own_mib),
        None)
    if io["meta"].get("cache") != "1" or simulated is None:
        return {}
    return {"hit_pct": simulated["hit_share"]["point"] * 100,
            "evictions": simulated["evictions"]["point"],
            "rereads": simulated["rereads"]["point"]}


# The figures the tool estimates where the engine measures: a gap in one is the estimate's,
# said as what the trace lacks, never blamed on the log (a count that differs may be). Flash
# I/O, serial (False), is the tool's estimate; overlapped (True), the readers' summed time
ESTIMATES = {
    ("flash_io_ms_per_token", False): "the tool's I/O estimate, from each read's latency; the "
    "engine measured the wait, with the wake-ups and queueing around the reads that a trace does "
    "not time: trust the engine's",
    ("flash_io_ms_per_token", True): "the tool's lanes busy, the readers' summed time, which an "
    "overlapped run's engine counts as flash I/O: a run that read in series, or a log of another "
    "run?"}


def engine_report(log, report):
    """The report's `engine`: each figure of the EngineLog beside the tool's, and the turns."""
    generated = log.figures.get("tokens")
    ours = tool_figures(report, generated.value if generated else None)
    io = report_halves(report).get("io")  # each layer its reads span is a wait of the engine's
    read_layers = len([row for row in io["by_layer"] if row["reads_per_token"]]) if io else 0
    meta, logged = io["meta"] if io else {}, log.figures
    # Why the engine's figure sums something this run's traces do not show, where real runs
    # found so (then shown, not compared). What an overlapped run did beside its reads, that
    # the engine times and its trace does not:
    beside = " and ".join(kind for kind, ran in (
        ("a cache", had_cache(io)),
        ("prefetch", io["spec"]["reads"] or meta.get("prefetch") == "1"
         or logged.get("speculative_mib") is not None),
        ("speculative decoding", "positions_per_decode" in logged)) if ran) \
        if io and overlapped(meta) else ""
    speculative, read = (logged.get(key) for key in ("speculative_mib", "read_mib"))
    unlike = {"flash_io_ms_per_token": (
        f"overlapped with {beside}, the engine's flash I/O sums time the trace does not hold "
        f"(the lanes' busy time is 11-23% below it on 14 real runs: speculative reads' waits, "
        f"reads past the decode's barrier)" if beside else
        "o_direct=0: reads from the page cache are timed around the copy by the engine, not "
        "by the trace (0.36 against 0.25 ms on a real run)" if meta.get("o_direct") == "0"
        else None),
        "rereads": "a run that prefetched: the engine's re-reads count speculative loads the "
                   "trace books apart (997 against 839 on a real run)"
        if speculative and read and speculative.value > 0.01 * read.value else None}
    compared = {}
    aside = () if not io or log_cache_stands(logged, io) else LOG_CACHE_FIGURES
    for name, engine in log.figures.items():
        tool = ours.get(name)
        note = SET_ASIDE.why if name in aside else None if tool is None else \
            UNCOMPARED[name].why if name in UNCOMPARED else unlike.get(name)
        least = max(engine.rounding, LAYER_WAIT_MS * read_layers
                    if name == "flash_io_ms_per_token" else 0.0)
        agrees = None if tool is None or note else agrees_with_engine(
            engine.value, tool, least, ours.get(name + "_half_band", 0.0))
        compared[name] = ENGINE_FIGURE(engine=engine.value, tool=tool,
                                       ratio=ratio(tool, engine.value) if tool is not None
                                       else None, agrees=agrees, note=note)
    return ENGINE(log=log.path, figures=compared, turns=turn_rows(log.turns, report),
                  unread=[ENGINE_UNREAD(line=number, lead=lead.strip(), figures=list(names))
                          for number, lead, names in log.unread])


def turn_rows(turns, report):
    """The session's turn lines, each beside what the traces hold of its turn: the MiB its
    decode reads, its hit %, its decode ms per token. Turns are matched in order: the engine
    counts them from 1 (`turn id=1`), the trace from 0, so each row names both; when the
    traces hold fewer turns (--turn chose some), turn id=N is the trace's N-1 where it has it."""
    halves = report_halves(report)
    io, compute = halves.get("io"), halves.get("compute")
    read, walls = {}, defaultdict(list)
    for token in io["per_token"] if io and io["phase"] == "decode" else ():
        read[token["turn"]] = read.get(token["turn"], 0.0) + token["mib"]
    for token in compute["per_token"] if compute and compute["phase"] == "decode" else ():
        walls[token["turn"]].append(token["ms"])
    # a decode a token, so a turn's decodes are what it generated; a speculative decode is not
    counted = compute is not None and compute["phase"] == "decode" and \
        not compute["decodes"]["speculative"]
    traced = sorted(set(read) | set(walls))
    matched = traced if len(traced) == len(turns) else \
        [turn - 1 if turn - 1 in traced else None for turn, *_ in turns]
    own = io.get("run_cache") if io else None
    hits = {row["turn"]: row["hit_share"] * 100 for row in own["turns"]} \
        if ran_cached(io) else {}
    rows = [ENGINE_TURN(turn=turn, trace_turn=at, generated=generated,
                        tool_generated=len(walls.get(at, ())) if counted and at in traced
                        else None, cache_hit_pct=hit,
                        read_mib=mib, tool_read_mib=read.get(at), tool_cache_hit_pct=hits.get(at),
                        ms_per_token=1000 / speed if speed else None,
                        tool_ms_per_token=mean_of(walls[at]) if walls.get(at) else None,
                        differs=None)
            for (turn, generated, hit, mib, speed), at in zip(turns, matched)]
    for row in rows:
        compared = [(name, rounding) for name, rounding in TURN_FIGURES
                    if row[name] is not None and row["tool_" + name] is not None]
        counts = row["tool_generated"] is not None
        if row["trace_turn"] in traced and (compared or counts):
            row["differs"] = ["generated"] * (counts and row["generated"] != row["tool_generated"])
            row["differs"] += [name for name, rounding in compared if not agrees_with_engine(
                row[name], row["tool_" + name], rounding)]
    return rows


# A turn line's figures the traces also give, each with the rounding the engine prints it to
# (read_mib and cache_hit to 0.1; ms from its tok_s, finer)
TURN_FIGURES = (("read_mib", 0.05), ("cache_hit_pct", 0.05), ("ms_per_token", 0.0))


def with_engine_log(report, log, warn):
    """The report with its `engine`, the engine's log's figures beside its own (null without
    a log), in its Record's order; every figure that disagrees beyond the tolerance is a
    warning."""
    names = KINDS[report["kind"]].record.names
    engine = engine_report(log, report) if log else None
    if log and not log.lines:
        warn(f"{log.path}: no line of the engine's end-of-run summary in it (generation:, "
             f"moe-stream:, ...): nothing to compare")
    for number, lead, unread in log.unread if log else ():
        warn(f"{log.path}: line {number} ({lead.strip()}) not understood: its numbers are not "
             f"the engine's (a decimal comma, an exponent, a sign, a part missing?); "
             f"{', '.join(unread)} unread")
    if log and log.runs > 1:
        warn(f"{log.path}: holds the end-of-run lines of {log.runs} runs (appended, as 2>> "
             f"does): its last run's are read")
    chosen = any(half["selection"]["turns"] for half in report_halves(report).values())
    for turn in engine["turns"] if engine else ():
        if turn["trace_turn"] is None and not chosen:  # --turn left it out: no word
            warn(f"{log.path}: turn id={turn['turn']} ({turn['generated']} generated) is not in "
                 f"the traces: nothing of it is compared")
        for name in turn["differs"] or ():
            warn(f"{log.path}: turn id={turn['turn']}'s {name} is {turn[name]:.4g}, the "
                 f"traces' turn {turn['trace_turn']} {turn['tool_' + name]:.4g} (beyond "
                 f"{ENGINE_TOLERANCE:.0%}): turns out of order, or another run's?")
    logged = {turn["trace_turn"] for turn in engine["turns"]} if engine else set()
    # the turns the traces decoded, asked only of a log with turns: a token row is made on
    # demand, with its p99 read latency
    unlogged = sorted({token["turn"] for half in report_halves(report).values()
                       if half["phase"] == "decode" for token in half["per_token"]}
                      - logged) if logged else []
    if unlogged:
        warn(f"{log.path}: the traces' turn(s) {', '.join(map(str, unlogged))} have no turn "
             f"line in the log: nothing of them is compared (a log of another session, or "
             f"cut short?)")
    io = report_halves(report).get("io")
    beside = bool(io) and overlapped(io["meta"])
    for name, figure in (engine["figures"] if engine else {}).items():
        if figure["agrees"] is False:
            warn(f"{log.path}: the engine's {name} is {figure['engine']:.4g}, the traces' "
                 f"{figure['tool']:.4g} ({times(figure['ratio'], '.2f')}, beyond "
                 f"{ENGINE_TOLERANCE:.0%}): " + ESTIMATES.get(
                     (name, beside), "a log of another run, or a trace cut short?"))
    return {name: engine if name == "engine" else report[name] for name in names
            if name in report or name == "engine"}


# ── settings: what the run's preamble does not say ───────────────────────────────────────────────
# The preamble names a few of the engine's settings (io_threads, o_direct, overlap). The others
# come from the command line (--set KEY=VALUE: `declared`), from the engine's log, whose lines
# imply them (`log`), or from what the trace itself shows (`trace`: a cached run's missing
# lookups, speculative reads). Each joins the report's `meta`, so whatever reads a setting
# reads it there (the what-if, summary's columns, diff's preamble); `settings` says where each
# came from. A declared value replaces the preamble's; the log's and the trace's fill gaps.
SETTING_KEY = re.compile(r"[a-z_][a-z0-9_]{0,40}")
SETTING_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,40}")
Setting = namedtuple("Setting", "key value source")
MAX_CACHE_MB = 1 << 30  # a PiB: past any device's memory

# The settings the tool reads, and the values each takes: a flag 0 or 1, a whole count, or a
# size in MiB (a decimal: a log's resident 1.9). Any other key is shown as declared, said.
KnownSetting = namedtuple("KnownSetting", "accepts wanted")


def setting_count(most):
    return lambda value: value.isascii() and value.isdigit() and 1 <= int(value) <= most


def setting_mib(least):
    return lambda value: bool(PLAIN_DECIMAL.fullmatch(value)) and \
        least <= float(value) <= MAX_CACHE_MB


KNOWN_SETTINGS = {
    **{key: KnownSetting(("0", "1").__contains__, "0 or 1")
       for key in ("cache", "prefetch", "overlap", "o_direct", "ngram", "moe_stream")},
    "cache_mb": KnownSetting(setting_mib(0), f"MiB from 0 (no cache) to {MAX_CACHE_MB}"),
    "mem_limit_mb": KnownSetting(setting_mib(1), f"MiB from 1 to {MAX_CACHE_MB}"),
    "io_threads": KnownSetting(setting_count(256), "a whole number of lanes from 1 to 256"),
    "n_threads": KnownSetting(setting_count(4096), "a whole number from 1 to 4096"),
    "cores": KnownSetting(setting_count(4096), "a whole number of cores from 1 to 4096")}


def readable_preamble(trace, warn):
    """The trace's preamble without the values of settings the tool reads that it cannot read
    (io_threads=abc, overlap=7), each said: the next source's word on the setting stands, and
    no header shows a value that the figures ignore."""
    for key, value in list(trace.meta.items()):
        known = KNOWN_SETTINGS.get(key)
        if known and not known.accepts(value):
            warn(f"{trace.name}: the preamble's {key}={trace_io.shown(value)} is not "
                 f"{known.wanted}: left out, as if not named")
            del trace.meta[key]


# Which source's value stands where two name a setting the preamble lacks: the first here
SOURCE_RANK = {"declared": 0, "compute trace": 1, "log": 2, "trace": 3}


# What the trace of a whole decode shows of a setting the log implies: speculative reads of
# prefetch, decodes that cover several positions of n-gram drafting
SHOWN_BY_TRACE = {"prefetch": ("io", "speculative read", lambda report: report["spec"]["reads"]),
                  "ngram": ("compute", "decode covering two positions or more",
                            lambda report: report["decodes"]["speculative"])}


def without_refuted_settings(report, warn):
    """The report without the log's settings its trace refutes (prefetch=1 with no speculative
    read, ngram=1 with no decode of several positions), each said: the trace's word stands;
    a declared one stands, said. Only a whole decode can refute: a selection may leave out
    what showed it."""
    if not whole_decode(report):
        return report
    for key, (kind, sign, shown) in SHOWN_BY_TRACE.items():
        setting = report["settings"].get(key)
        if report["kind"] != kind or not setting or setting["value"] != "1" or shown(report):
            continue
        if setting["source"] == "declared":
            warn(f"{report['path']}: {key}=1 declared, but the trace holds no {sign}: the "
                 f"declaration stands")
        elif setting["source"] == "log":
            warn(f"{report['path']}: the engine's log says {key}=1, but the trace holds no "
                 f"{sign} (a log of another run?); the trace's word stands")
            del report["settings"][key]
            report["meta"] = {name: value for name, value in report["meta"].items()
                              if name != key}
    return report


def reading_with_log(reading, log):
    """The reading with the run's settings (those declared on the command line, then those
    its log implies) and what its log measured. A log implies a cache of its resident MiB
    (none, when its moe-stream line has no moe-cache line beside it: the engine prints one
    whenever a cache ran), prefetch, overlap, n-gram drafting (speculative decoding)."""
    declared = tuple(setting for setting in reading.settings if setting.source == "declared")
    if not log:
        return reading._replace(settings=declared, measured=None)
    figures = log.figures
    implied = [("cache_mb", f"{figures['resident_mib'].value:g}")] \
        if "resident_mib" in figures else []
    if "hit_pct" in figures or any(turn[2] for turn in log.turns):
        implied.append(("cache", "1"))
    elif "read_mib" in figures and "resident_mib" not in figures:
        implied.append(("cache", "0"))
    implied += [(key, "1") for key, shown_by in (
        ("moe_stream", "read_mib"), ("prefetch", "speculative_mib"),
        ("overlap", "stall_ms_per_token"),
        ("ngram", "positions_per_decode")) if shown_by in figures]
    # The log's figures are per token it generated, all of them: some of them selected take
    # its figures as averages, never rescaled by its count of tokens (18 ms of management over
    # 64 tokens is not 54.86 over 21); they are the decode's, nothing of a prefill batch
    selection = reading.selection
    decode = selection.phase in (None, "decode")
    measured = {name: figure.value for name, figure in figures.items()
                if (name != "tokens" or selection.whole_decode) and (decode or not (
                    name.endswith("_per_token") or name in ("tokens", "positions_per_decode")))}
    return reading._replace(
        settings=declared + tuple(Setting(key, value, "log") for key, value in implied),
        measured=measured)


def join_settings(trace, reading):
    """Join the reading's settings to the trace's readable preamble: its `settings`."""
    readable_preamble(trace, reading.warn)
    trace.meta, settings = merged_settings(trace.meta, reading.settings, reading.warn, trace.name)
    return settings


# A --set word over a preamble's on these is said where the trace is weighed with them: the
# cache with what its trace shows (settled_cache), the lanes where the trace's overrule them
# (weighed_io)
SAID_WITH_THE_TRACE = (*CACHE_KEYS, "io_threads")


def merged_settings(meta, given, warn, name):
    """The preamble with the given Settings joined, and the report's `settings`: a declared
    value wins over the preamble's (of two sources, SOURCE_RANK's first); a log's that
    contradicts the preamble is left out. The run's cache is one fact with two keys: a
    source's word on it that contradicts what a stronger one said under the other key
    (cache_mb=64 declared, cache=0 the log's) yields too. Every word that yields on one fact
    is one warning, with the value that stands."""
    meta, settings = dict(meta), {}
    # the log's word on a declared cache is said once, with the trace's, by settled_cache (or,
    # for a compute trace alone, analyze_compute)
    cache_settled = bool(declared_cache(given))
    yielded = {}  # (the source kept, its fact) -> ({yielding source: [its words]}, [kept's])

    def yields(source, key, value, kept_source, kept):
        words, kept_words = yielded.setdefault((kept_source, fact_keys(key)), ({}, []))
        words.setdefault(source, []).append(f"{key}={value}")
        kept_words.append(kept)
    # a fact the compute preamble names otherwise than this one: the pair says the log's word
    # on it with that difference (pair_warnings)
    pair_says = {fact_keys(setting.key) for setting in given if setting.source == "compute trace"
                 and setting.key in meta and meta[setting.key] != setting.value}
    for key, value, source in sorted(given, key=lambda setting: SOURCE_RANK[setting.source]):
        other = other_cache_key(key, value, meta)
        if key in settings or other:
            stood, stands = (key, settings[key]) if key in settings else \
                (other, settings.get(other) or SETTING(value=meta[other], source="preamble"))
            differs = stands["value"] != value
            if source == "log" and differs and not (cache_settled and key in CACHE_KEYS) or \
                    source == "compute trace" and differs and stands["source"] == "declared" \
                    and key not in SAID_WITH_THE_TRACE:
                yields(source, key, value, stands["source"], f"{stood}={stands['value']}")
            continue
        if source != "declared" and key in meta:
            # what a trace shows yields; the compute preamble's differing is the pair's warning
            if meta[key] != value and source not in ("trace", "compute trace"):
                yields(source, key, value, "preamble", f"{key}={meta[key]}")
            continue
        # declared over the preamble's word: said, but where the trace is weighed too
        if key in meta and meta[key] != value and key not in SAID_WITH_THE_TRACE:
            yields("preamble", key, meta[key], "declared", f"{key}={value}")
        meta[key] = value
        settings[key] = SETTING(value=value, source=source)
    for (kept_source, fact), (words, kept) in yielded.items():
        if kept_source == "preamble" and fact in pair_says:
            words.pop("log", None)
        if not words:
            continue
        kept = " ".join(dict.fromkeys(kept))
        if "preamble" in words and words["preamble"] == words.get("compute trace"):  # both
            words = {"preambles": words.pop("preamble"), **words}
            del words["compute trace"]
        yielding = ", ".join(f"the {source} {'say' if source == 'preambles' else 'says'} "
                             f"{' '.join(each)}" for source, each in words.items())
        # --set over the preambles is the command's, the same for every run of a summary or a
        # diff: said once, not a line a run
        named = "" if kept_source == "declared" and "log" not in words else f"{name}: "
        warn(f"{named}{yielding}, " + (
            f"declared {kept}: the declared value stands" if kept_source == "declared" else
            f"the {kept_source} {kept}: the {kept_source}'s kept"))
    return meta, settings


# ── runs: its records ────────────────────────────────────────────────────────────────────────────
CALIBRATION_SCHEMA = 2  # of the file --calibration-out writes: 2 the fitted token model
MODEL_ID = Record("calibrated model", ("model", "n_layer", "experts", "top_k", "expert_mib"))
CONFIGURATION = Record("configuration", ("label", "change", "runs", "decode_ms_per_token",
    "mad_ms", "quiet", "loaded", "outliers"), key="label")
HELD_OUT = Record("held-out configuration", ("label", "change", "decode_ms_per_token",
    "predicted_ms", "error_ms", "defaults_predicted_ms", "band_ms", "band_share", "inside",
    "checked", "note"), key="label")
VALIDATION = Record("validation", ("held_out", "checked", "inside", "median_band_share",
    "median_error_ms", "defaults_median_error_ms", "no_worse_than_defaults"))
CALIBRATION = Record("calibration", ("calibration_schema", ("model", MODEL_ID), "runs",
    "other_model_runs", "base", "base_decode_ms", "base_compute_ms", "quiet_spread_ms",
    ("configurations", ListOf(CONFIGURATION)), ("ms_per_mib", MapOf(COST)),
    ("lane_exponent", COST), ("cached_rate_factor", COST), ("management_ms_per_miss", COST),
    ("overlap_factor", COST), ("leave_one_out", ListOf(HELD_OUT)), "errors_ms",
    ("validation", VALIDATION)))


# ── runs: which are repeats of one configuration (diff and summary group by it) ──────────────────
# A configuration is a run's preamble with its settings joined, less the keys that name a run
# rather than set it (a v2 trace's per-run trace_id). A key one run lacks is unknown there, not
# a difference: a saved report without a what-if has no `cache`, its trace says cache=0.
RUN_NAMES = ("trace_id",)
# Runs of one configuration whose figures are further apart than this are not repeats: a
# memory limit, a cut-short run, mmap against streaming. Repeats of real runs spread by up to
# 1.5x in time (the sweep's serial 9-13 ms, quiet 48-layer repeats 97-135 ms) and read the same
# bytes. (figure, at most this ratio between two repeats, and more than this apart.)
REPEAT_SPREAD = (("tokens", 1.25, 0), ("decode_ms_per_token", 2.0, 1.0),
                 ("io_ms_per_token", 2.0, 1.0), ("mib_per_token", 1.1, 0.01),
                 ("majflt_per_token", 2.0, 1.0))


def configuration(meta):
    """A run's settings: its preamble less the keys that name the run."""
    return {key: value for key, value in meta.items() if key not in RUN_NAMES}


def compatible(known, other):
    """Whether two configurations agree on every key both know."""
    return all(other[key] == value for key, value in known.items() if key in other)


def too_far_apart(one, other):
    """The words for the first figure two runs' figures differ in beyond REPEAT_SPREAD, or
    None: one, other {figure: value or None}."""
    for name, most, least in REPEAT_SPREAD:
        a, b = one.get(name), other.get(name)
        if a is None or b is None:
            continue
        low, high = sorted((a, b))
        if high - low > least and high > most * low:
            return f"{name} {a:.4g} against {b:.4g} (repeats stay within {most:g}x)"
    return None


def once(runs, warn):
    """The runs, each once: a path given again is the run already read (not read twice,
    said). Copies, and saved reports of a run, are told by their figures after (run_table)."""
    kept = list(dict.fromkeys(runs))
    for run in kept:
        if runs.count(run) > 1:
            warn(f"{'+'.join(map(display_name, run.paths))}: given again, the same run: "
                 f"counted once")
    return kept


# A run as the table of runs sees it: its name, what tells it from every other run (its
# figures, to the last digit), its configuration, and the column it is in (summary: its kind
# and granularity; diff: its side). How runs are grouped into the table's rows:
RunEntry = namedtuple("RunEntry", "name figures config column")
RunGroup = namedtuple("RunGroup", "config runs")  # a row: its configuration, its runs in order
GROUP_REPEATS = "repeats"  # one configuration whose figures are as close as repeats' (summary)
GROUP_CONFIGURATION = "configuration"  # one configuration, however far apart (the fit)
GROUP_COLUMN = "column"  # the column alone: a diff side is the runs its user gave it


def run_table(items, entry_of, warn, group):
    """The table of runs that summary, diff and the calibration's fit each read: the items
    (entry_of(item) a RunEntry) less those that repeat an earlier one of their column (the
    same figures, to the last digit where both have one, and a configuration that agrees: one
    file given twice, a saved report beside the trace it was made from), said; then grouped
    into RunGroups as `group` says (None: each its own), in the order their first run was
    given. Runs of one configuration further apart than repeats are groups of their own, said.
    A group's configuration is every key its runs know."""
    groups, seen = [], []  # [(column, configuration, items, entries)]; RunEntry of each kept
    for item in items:
        entry = entry_of(item)
        # the run again: in its column, of a configuration that agrees, with the same figures
        # to the last digit where both have one (and one at least)
        same = next((known.name for known in seen if known.column == entry.column
                     and known.figures.keys() == entry.figures.keys()
                     and compatible(known.config, entry.config)
                     and any(value is not None for value in known.figures.values())
                     and all(value == entry.figures[name] for name, value in known.figures.items()
                             if value is not None and entry.figures[name] is not None)), None)
        if same is not None:
            warn(f"{entry.name} is {same} again (the same figures, to the last digit): counted "
                 f"once")
            continue
        seen.append(entry)
        words = None  # why the run is apart from the first group of its configuration
        for column, known, members, entries in groups if group else ():
            if column != entry.column or group != GROUP_COLUMN and not compatible(
                    known, entry.config):
                continue
            apart = next(filter(None, (too_far_apart(one.figures, entry.figures)
                                       for one in entries)), None) \
                if group == GROUP_REPEATS else None
            if apart:
                first, *_ = entries
                words = words or f"{first.name} and {entry.name}: one configuration, but " \
                    f"{apart}: not repeats, listed apart"
                continue
            known.update(entry.config)
            members.append(item)
            entries.append(entry)
            break
        else:
            groups.append((entry.column, dict(entry.config), [item], [entry]))
            if words:
                warn(words)
    return [RunGroup(config, members) for _, config, members, _ in groups]


# ── runs: the token model fitted on them (summary, diff: --calibration-out) ──────────────────────
# What each run gives the fit, per decoded token: its model, lanes, whether it had a cache or
# overlapped, MiB, the engine's flash I/O (else the estimate), management (the log's), misses
# (MiB over an expert's), compute (the pair's engine split), decode, and its configuration.
Sample = namedtuple("Sample", "run identity lanes cached overlap mib io_ms management_ms misses "
                              "compute_ms decode_ms config")
WHAT_IF_KEYS = ("cache_mb", "cache", "io_threads", "overlap", "o_direct", "prefetch")
MODELLED_KINDS = {"cache_mb", "io_threads", "overlap"}  # the changes the token model prices
# Repeats, robustly (hyperfine's warnings, done on the median): a run 5 scaled MADs and 2x
# from its configuration's median is an outlier; sorted by decode, a step of 1.5x between two
# neighbours splits them into a quiet level and a loaded one (the shared 48-layer repeats: one
# quiet run at 97 ms, seven loaded at 179-300, one outlier at 2,329; the sweep's quiet-ish
# repeats, 9.3-12.9 ms, stay one level).
OUTLIER_MADS, OUTLIER_RATIO, LEVEL_RATIO = 5.0, 2.0, 1.5
MAD_SCALE = 1.4826  # a MAD of normal noise times this is its sd


def calibration_problem(fit):
    """What is wrong with a calibration read from a file, or None."""
    if fit.get("calibration_schema") != CALIBRATION_SCHEMA:
        return (f"calibration_schema {str(fit.get('calibration_schema'))[:20]!r}, where this "
                f"version reads {CALIBRATION_SCHEMA} (fit it again with summary "
                f"--calibration-out)")
    if not isinstance(fit.get("model"), dict) or not isinstance(fit["model"].get("model"), str):
        return "no `model` it was fitted on"
    for key in ("n_layer", "top_k", "expert_mib"):
        value = fit["model"].get(key)
        if value is not None and not (is_number(value) and value > 0):
            return f"model.{key} {str(value)[:20]!r} is not a number above 0"
    if not isinstance(fit.get("runs"), list) or not fit["runs"]:
        return "no `runs` it was fitted on"
    if not isinstance(fit.get("ms_per_mib"), dict) or not isinstance(fit.get("errors_ms"), dict):
        return "no `ms_per_mib` and `errors_ms` maps"
    costs = [(f"ms_per_mib.{lanes}", cost, True) for lanes, cost in fit["ms_per_mib"].items()]
    costs += [(name, fit.get(name), name != "lane_exponent") for name in (
        "lane_exponent", "cached_rate_factor", "management_ms_per_miss", "overlap_factor")]
    for name, cost, positive in costs:  # None allowed: not fitted
        positive = positive and name != "management_ms_per_miss"
        if cost is None:
            continue
        if not isinstance(cost, dict) or not all(is_number(cost.get(bound))
                                                 for bound in ("value", "min", "max")):
            return f"{name}: not a cost with a finite value, min and max: {str(cost)[:60]!r}"
        if cost["max"] > COST_MOST:
            return f"{name}: max {cost['max']:g} is past any run's ({COST_MOST:g})"
        if not cost["min"] <= cost["value"] <= cost["max"]:
            return (f"{name}: min {cost['min']:g}, value {cost['value']:g}, max "
                    f"{cost['max']:g} out of order")
        if (positive and cost["min"] <= 0) or cost["min"] < 0:
            return f"{name}: min {cost['min']:g} is " + ("not above 0" if positive else
                                                        "below 0")
    if not all(lanes.isascii() and lanes.isdigit() and 0 < int(lanes) <= 1024
               for lanes in fit["ms_per_mib"]):
        return "ms_per_mib: a key that is not a lane count"
    numbers = [(f"errors_ms.{kind}", value) for kind, value in fit["errors_ms"].items()]
    numbers += [(name, fit.get(name)) for name in ("quiet_spread_ms", "base_decode_ms",
                                                   "base_compute_ms")]
    for name, value in numbers:
        if not is_number(value) or not 0 <= value <= FIGURE_LIMIT:
            return f"{name} {str(value)[:40]!r} is not a number of ms >= 0"
    validation = fit.get("validation")
    if not isinstance(validation, dict) or not all(
            is_number(validation.get(key)) for key in ("held_out", "checked", "inside")):
        return "no `validation` counts"
    share = validation.get("median_band_share", "absent")
    if share is not None and not (is_number(share) and share >= 0):
        return f"validation.median_band_share {str(share)[:20]!r} is not a share"
    if (share is None) != (validation["checked"] == 0) or not \
            0 <= validation["inside"] <= validation["checked"] <= validation["held_out"]:
        return (f"validation: {validation['inside']} inside of {validation['checked']} checked "
                f"of {validation['held_out']} held out, median band share {share}: not one fit's")
    # against the defaults (absent from a file of an earlier version: the fit is used)
    errors = [validation.get(key) for key in ("median_error_ms", "defaults_median_error_ms")]
    if validation.get("no_worse_than_defaults") not in (None, True, False) or any(
            error is not None and not (is_number(error) and 0 <= error <= FIGURE_LIMIT)
            for error in errors) or (validation.get("no_worse_than_defaults") is False
                                     and None in errors):
        return (f"validation: median errors {str(errors)[:60]}, no worse than the defaults "
                f"{str(validation.get('no_worse_than_defaults'))[:20]!r}: not one fit's")
    return None


COST_MOST = 1e6  # no cost of a real run comes near (ms a MiB, a miss; a factor); past it, edited


def is_number(value):
    """A finite JSON number (1e999 reads as inf; a 400-digit integer as itself)."""
    if type(value) is int:
        return abs(value) < 10 ** 300
    return isinstance(value, float) and math.isfinite(value)


def calibration_sample(name, report):
    """A pair's Sample, or None (a trace alone gives no decode beside its reads; a saved report
    of an older schema may lack what it takes)."""
    if report.get("kind") != "report" or report.get("schema") != SCHEMA:
        return None
    io, pair = report["io"], report["pair"]
    engine = {key: value["engine"] for key, value in
              ((report.get("engine") or {}).get("figures") or {}).items()}
    meta = {**report["compute"]["meta"], **io["meta"]}
    cached = had_cache(io)
    own, reuse = io["run_cache"] or {}, io["reuse"] or {}
    expert_mib = reuse.get("expert_mib") or 0.0
    mib = pair["io_mib_per_token"]
    identity = MODEL_ID(model=meta.get("model"), n_layer=meta_int(meta, "n_layer") or None,
                        experts=reuse.get("experts"), top_k=own.get("top_k"),
                        expert_mib=expert_mib or None)
    sample = Sample(
        name, identity, lanes_read(io), cached,
        overlapped(meta), mib,
        engine.get("flash_io_ms_per_token", pair["io_wall_ms_per_token"]["estimate"]),
        engine.get("cache_mgmt_ms_per_token"), misses_of(mib, expert_mib) if cached else 0.0,
        pair.get("compute_ms_per_token"), pair["decode_ms_per_token"], configuration(meta))
    # figures a fit can use (a saved report may hold anything): lanes a whole number from 1,
    # every figure a finite number >= 0 (the optional ones null)
    if type(sample.lanes) is not int or not 1 <= sample.lanes <= 1024:
        raise ValueError(f"lanes {str(sample.lanes)[:20]!r} is not a whole number from 1")
    for field in ("mib", "io_ms", "decode_ms", "management_ms", "compute_ms", "misses"):
        value = getattr(sample, field)
        if (value is not None or field in ("mib", "io_ms", "decode_ms")) and not (
                is_number(value) and (value == 0 or FIGURE_LEAST <= value <= FIGURE_LIMIT)):
            raise ValueError(f"the fit's {field} {str(value)[:20]!r} is not 0 nor a number "
                             f"from {FIGURE_LEAST:g} to {FIGURE_LIMIT:g}")
    return sample


def known_computes(samples):
    """The runs' compute, as their pair's engine split gave it (pair_report), where known."""
    return [one.compute_ms for one in samples if one.compute_ms is not None]


# One configuration's runs, split robustly: the quiet level, a loaded one, the outliers.
Repeats = namedtuple("Repeats", "config runs quiet loaded outliers")


def repeats_of(config, runs):
    """The Repeats of one configuration's runs, whatever their order: by decode, those 5
    scaled MADs and 2x from the median are outliers; of the rest, by compute (where known), a
    step of LEVEL_RATIO or more between neighbours puts the runs above it in a loaded level
    (the largest such step)."""
    ordered = sorted(runs, key=lambda one: (one.decode_ms, one.run))
    middle = median_of([one.decode_ms for one in ordered])
    mad = median_of([abs(one.decode_ms - middle) for one in ordered])

    def far(decode):
        return len(ordered) >= 3 and middle > 0 and decode > 0 and \
            abs(decode - middle) > OUTLIER_MADS * MAD_SCALE * max(mad, 0.01 * middle) and \
            deviation(decode, middle) >= OUTLIER_RATIO
    outliers = [one for one in ordered if far(one.decode_ms)]

    def level(one):  # a busy machine inflates compute tenfold while the reads barely move: the
        # levels are compute's where it is known, else the decode's
        return one.decode_ms if one.compute_ms is None else one.compute_ms
    kept = sorted((one for one in ordered if one not in outliers), key=lambda one: (level(one),
                                                                                 one.run))
    steps = [(level(kept[at]) / level(kept[at - 1]), at) for at in range(1, len(kept))
             if level(kept[at - 1]) > 0]
    step, cut = max(steps, default=(0.0, len(kept)))
    if step < LEVEL_RATIO:
        cut = len(kept)
    return Repeats(config, ordered, kept[:cut], kept[cut:], outliers)


def fitted_costs(samples, base_compute):
    """The token model's costs fitted on `samples` (no outliers among them): ms per MiB by
    lanes of the serial runs without a cache, the lane exponent across lane counts, the
    cached runs' rate factor and management a miss, the overlapped runs' factor."""
    serial = [one for one in samples if not one.overlap and one.mib > 0]
    by_lanes = defaultdict(list)
    for one in serial:
        if not one.cached:
            by_lanes[one.lanes].append(one.io_ms / one.mib)
    costs = {"ms_per_mib": {str(lanes): cost_of(rates) for lanes, rates in
                            sorted(by_lanes.items())}}
    costs["lane_exponent"] = lane_exponent(costs["ms_per_mib"])
    rates = TokenModel(costs, None, None)
    cached = [(one, rates.rate(one.lanes)) for one in serial if one.cached]
    costs["cached_rate_factor"] = cost_of([one.io_ms / one.mib / rate.value
                                           for one, rate in cached if rate])
    costs["management_ms_per_miss"] = management_cost(
        [(one.management_ms, one.misses) for one, _ in cached
         if one.management_ms is not None and one.misses])
    serial_parts = TokenModel(costs, None, None)
    overlapped = [(one, serial_parts.part(Config(one.mib, one.lanes, one.cached, one.misses,
                                                 False))) for one in samples if one.overlap]
    overlapped = [(one, part and part.whole) for one, part in overlapped]
    costs["overlap_factor"] = cost_of([(one.decode_ms - base_compute) / part.value
                                       for one, part in overlapped if part and part.value > 0])
    return costs


def lane_exponent(ms_per_mib):
    """I/O as lanes ** -exponent: least squares of log ms per MiB on log lanes over the lane
    counts fitted (None with fewer than two); its residual in log units."""
    points = [(math.log(int(lanes)), math.log(cost["value"])) for lanes, cost in
              ms_per_mib.items() if cost["value"] > 0]
    if len(points) < 2:
        return None
    x_mean, y_mean = (mean_of(column) for column in zip(*points))
    spread = fsum((x - x_mean) ** 2 for x, _ in points)
    slope = fsum((x - x_mean) * (y - y_mean) for x, y in points) / spread
    residual = max(abs(y - y_mean - slope * (x - x_mean)) for x, y in points)
    return COST(value=-slope, min=-slope, max=-slope, n=len(points), residual=residual)


def calibration(samples):
    """The token model fitted on every run but the outliers, and each configuration but the
    base predicted from the fit of the others; None without a run."""
    samples = [one for one in samples if one is not None]
    if not samples:
        return None
    # every configuration's Repeats, sorted by configuration (never by the files' order); runs
    # with no figures to tell them apart are never said to repeat one another (no warn)
    groups = [repeats_of(group.config, group.runs) for group in sorted(run_table(
        samples, lambda one: RunEntry(one.run, {}, one.config, None), None, GROUP_CONFIGURATION),
        key=lambda group: sorted(group.config.items()))]
    # the base: the configuration without a cache or overlap with the most runs (then the
    # fastest), else the one with the most runs
    plain = [group for group in groups
             if not any(one.cached or one.overlap for one in group.runs)] or groups
    base = max(plain, key=lambda group: (len(group.runs), -median_of(
        [one.decode_ms for one in group.quiet or group.runs])))
    model = next(iter(base.runs)).identity["model"]
    others = sorted(one.run for one in samples if one.identity["model"] != model)
    if others:  # fitted on the base's model alone, the others named
        fit = calibration([one for one in samples if one.identity["model"] == model])
        return fit and {**fit, "other_model_runs": others}
    changes = []  # (group, label, kind): the what-if keys its configuration changes from the
    for group in groups:  # base's (`cache` and `cache_mb` one change), `other` when it differs
        config = group.config  # in a key no setting is
        changed = [key for key in WHAT_IF_KEYS if config.get(key) != base.config.get(key)]
        if "cache" in changed and "cache_mb" in changed:
            changed.remove("cache")
        if any(base.config[key] != value for key, value in config.items()
               if key in base.config and key not in WHAT_IF_KEYS):
            changes.append((group, "another setup", "other"))
        else:
            changes.append((group, ", ".join(f"{key}={config.get(key, 'unset')}" for key in
                                             changed) or "base",
                            "+".join(sorted({"cache_mb" if key == "cache" else key
                                             for key in changed}))))
    modelled = [(group, label, kind) for group, label, kind in changes
                if kind != "other" and set(kind.split("+")) <= MODELLED_KINDS | {""}]
    kept = [one for group, _, _ in modelled for one in group.runs if one not in group.outliers]
    base_runs = base.quiet or base.runs
    base_compute = median_of(known_computes(base_runs))
    if base_compute is None:  # no base to anchor a decode on: no fit, rather than a wrong one
        return None
    spread = max((max(one.decode_ms for one in group.quiet) - min(
        one.decode_ms for one in group.quiet) for group, _, _ in modelled
        if len(group.quiet) > 1), default=0.0)
    base_decode = median_of([one.decode_ms for one in base_runs])
    # the defaults, as an uncalibrated what-if of the base sees them: the fit must beat them
    rate = median_of([one.io_ms / one.mib for one in base_runs if one.mib > 0])
    first, *_ = base_runs
    defaults = rate and TokenModel(None, Config(median_of([one.mib for one in base_runs]),
                                                first.lanes, False, 0.0, False), rate)
    held = banded([held_out((group, label, kind), [one for one in kept if one not in group.runs],
                            base_compute, spread, defaults) for group, label, kind in modelled
                   if group is not base], spread, base_decode)
    errors = defaultdict(float)  # each kind of change's largest
    for one in held:
        if one["error_ms"] is not None:
            errors[one["change"]] = max(errors[one["change"]], abs(one["error_ms"]))
    # the model: the base's runs', with the most experts any of its model's runs read
    identity = next(iter(base.runs)).identity
    experts = max((one.identity["experts"] or 0 for one in samples
                   if one.identity["model"] == identity["model"]), default=0)
    return CALIBRATION(
        calibration_schema=CALIBRATION_SCHEMA, model={**identity, "experts": experts or None},
        runs=sorted(one.run for one in samples), other_model_runs=[], base="base",
        base_decode_ms=base_decode, base_compute_ms=base_compute, quiet_spread_ms=spread,
        configurations=[configuration_record(group, label, kind)
                        for group, label, kind in changes],
        **fitted_costs(kept, base_compute), leave_one_out=held,
        errors_ms=dict(sorted(errors.items())), validation=validation(held, spread))


def configuration_record(group, label, kind):
    decodes = [one.decode_ms for one in group.runs]
    middle = median_of(decodes)
    return CONFIGURATION(
        label=label, change=kind, runs=[one.run for one in group.runs],
        decode_ms_per_token=median_of([one.decode_ms for one in group.quiet or group.runs]),
        mad_ms=median_of([abs(one - middle) for one in decodes]),
        quiet=[one.run for one in group.quiet], loaded=[one.run for one in group.loaded],
        outliers=[one.run for one in group.outliers])


def held_out(change, others, base_compute, spread, defaults):
    """A HELD_OUT (its band left to `banded`): the configuration's quiet median decode against
    the base's compute plus its I/O part at the costs fitted on the others. A serial one whose
    compute is LEVEL_RATIO the base's and more (past the quiet spread) ran loaded: its compute
    is set aside (measured: the base's compute and its own I/O part). The defaults (a
    TokenModel) predict it too, for the comparison."""
    group, label, kind = change
    runs = group.quiet or group.runs
    model = TokenModel(fitted_costs(others, base_compute), None, None)
    first, *_ = runs
    config = Config(median_of([one.mib for one in runs]), first.lanes, first.cached,
                    median_of([one.misses for one in runs]), first.overlap)
    part = model.part(config)
    part = part and part.whole
    measured = median_of([one.decode_ms for one in runs])
    note = None if part is not None else "the others hold no rate for it"
    compute = median_of(known_computes(runs))
    if not config.overlap and compute is not None:
        if compute > LEVEL_RATIO * base_compute + spread:
            measured += base_compute - compute
            note = (f"its compute, {compute:.2f} ms, is {compute / (base_compute or 1):.1f}x the "
                    f"base's: probably loaded, set aside")
    predicted = None if part is None else base_compute + part.value
    default_part = defaults and defaults.part(config)
    default_part = default_part and default_part.whole
    return HELD_OUT(label=label, change=kind, decode_ms_per_token=measured,
                    predicted_ms=predicted,
                    error_ms=None if predicted is None else measured - predicted,
                    defaults_predicted_ms=None if not default_part or part is None else
                    base_compute + default_part.value,
                    band_ms=None, band_share=None, inside=None, checked=None, note=note)


def banded(held, spread, base_decode):
    """Each held-out configuration's band, from the others' errors alone: the largest of its
    kind (none: of any), at least the quiet spread; whether it holds and is narrow enough."""
    for one in held:
        errors = {}  # the others' largest error of each kind of change
        for other in held:
            if other is not one and other["error_ms"] is not None:
                errors[other["change"]] = max(errors.get(other["change"], 0.0),
                                              abs(other["error_ms"]))
        band = validated_half(errors, (one["change"],), spread)
        if one["error_ms"] is None or band is None:
            continue
        share = ratio(2 * band, base_decode)
        one.update(band_ms=band, band_share=share, inside=abs(one["error_ms"]) <= band,
                   checked=share is not None and share <= BAND_MOST_SHARE)
    return held


def validation(held, spread):
    checked = [one for one in held if one["checked"]]
    both = [one for one in held if one["defaults_predicted_ms"] is not None]
    fitted, defaults = (median_of([abs(one["decode_ms_per_token"] - one[name]) for one in both])
                        for name in ("predicted_ms", "defaults_predicted_ms"))
    return VALIDATION(held_out=sum(1 for one in held if one["error_ms"] is not None),
                      checked=len(checked), inside=sum(1 for one in checked if one["inside"]),
                      median_band_share=median_of([one["band_share"] for one in checked]),
                      median_error_ms=fitted, defaults_median_error_ms=defaults,
                      # worse only past the machine's noise: half the quiet repeats' range
                      no_worse_than_defaults=None if fitted is None else
                      fitted <= defaults + spread / 2)


# ── runs: its text and Markdown sections ─────────────────────────────────────────────────────────
def calibration_blocks(report, view):
    """The fit: the base, the repeats' outliers and loaded runs, each fitted cost (value, the
    runs' range, n, residual), and each configuration predicted from the others: its band's
    width, inside or not."""
    fit = report.get("calibration")
    if not fit:
        return []
    # 0 is the fit's word for no quiet repeats (docs/json.md): a spread not measured
    spread = f"quiet repeats' spread {fit['quiet_spread_ms']:.2f} ms (no band is narrower)" \
        if fit["quiet_spread_ms"] else ("no configuration ran twice quietly, so this machine's "
                                        "spread is not measured (repeat one to measure it)")
    lines = [f"  base: decode {fit['base_decode_ms']:.2f} ms, compute "
             f"{fit['base_compute_ms']:.2f} ms (median of its quiet runs); {spread}"]
    for group in fit["configurations"]:
        lines += repeats_lines(group)
    costs = [(f"flash I/O ms per MiB, {counted(int(lanes), 'lane')}", cost)
             for lanes, cost in fit["ms_per_mib"].items()]
    costs += [(name, fit[field]) for name, field in (
        ("I/O as lanes to the power -", "lane_exponent"),
        ("cached reads' ms per MiB over uncached", "cached_rate_factor"),
        ("cache management ms a miss", "management_ms_per_miss"),
        ("overlapped decode less compute over serial I/O", "overlap_factor")) if fit[field]]
    lines += [f"  {name}{'' if name.endswith('-') else ': '}{cost['value']:.3g} "
              f"({cost['min']:.3g}-{cost['max']:.3g}), n={cost['n']}, residual "
              f"{cost['residual']:.3g}" for name, cost in costs]
    others = fit.get("other_model_runs")  # a file written before them: none
    if others:
        lines.insert(0, f"  left out, of another model than the base's: {', '.join(others)}")
    return [Block(f"calibration, fitted on {len(fit['runs'])} run(s) of {fit['model']['model']} "
                  f"(--calibration-out FILE writes it)", [Prose(lines, "        ")]),
            *leave_one_out_blocks(fit)]


def repeats_lines(group):
    """A configuration's outliers and loaded runs, a line each (none: no line)."""
    lines = []
    if group["outliers"]:
        lines.append(f"  {group['label']}: outlier (busy machine?): "
                     f"{', '.join(group['outliers'])}, far outside its repeats' median "
                     f"(MAD {group['mad_ms']:.2f} ms): left out of the fit")
    if group["loaded"]:
        lines.append(f"  {group['label']}: probably loaded (a slower level than "
                     f"{', '.join(group['quiet'])}): {', '.join(group['loaded'])}; their "
                     f"compute is set aside, their reads still count")
    return lines


def leave_one_out_blocks(fit):
    held = fit["leave_one_out"]
    if not held:
        return []
    tally = fit["validation"]
    lines = [f"  {tally['inside']} of {tally['checked']} inside their band, of "
             f"{tally['held_out']} held out (a band counts when it is "
             f"{BAND_MOST_SHARE:.0%} of the base decode or narrower)"
             + ("" if tally["median_band_share"] is None else
                f"; median band {tally['median_band_share']:.0%} of the decode")]
    # what a report given this file will do with it, and why
    unused = unused_because(tally)
    lines.append("  " + ("the what-if will use it" if not unused else
                         f"the what-if will not use it, the defaults stand: {unused}")
                 + ("" if tally.get("median_error_ms") is None else
                    f" (median error {tally['median_error_ms']:.2f} ms, the defaults' "
                    f"{tally['defaults_median_error_ms']:.2f})"))
    for one in held:
        if one["predicted_ms"] is None:
            lines.append(f"  {one['label']}: {one['decode_ms_per_token']:.2f} ms, not "
                         f"predicted: {one['note']}")
            continue
        band = "no band (nothing else held out)" if one["band_ms"] is None else (
            f"+-{one['band_ms']:.2f} ({one['band_share']:.0%} of the decode): "
            + ("inside" if one["inside"] else "outside")
            + ("" if one["checked"] else ", too wide to count"))
        defaults = "" if one.get("defaults_predicted_ms") is None else \
            f" (the defaults {one['defaults_predicted_ms']:.2f})"
        lines.append(f"  {one['label']}: {one['decode_ms_per_token']:.2f} ms, predicted "
                     f"{one['predicted_ms']:.2f}{defaults} {band}"
                     + (f" ({one['note']})" if one["note"] else ""))
    return [Block("leave one out: each configuration predicted from the fit of the others",
                  [Prose(lines, "        ")])]


# ── diff: its records ────────────────────────────────────────────────────────────────────────────
GROUP_NAME_WIDTH = 16  # an input's name heads its columns when no longer (else base, new #i)
DIFF_INPUT = Record("diff input", ("path", "name", "side", "source", "kind",
    ("tokens", MapOf(VALUE))))
DIFF_SIDE = Record("diff side", ("name", "runs", ("engine", MapOf(VALUE))))
PREAMBLE_CHANGE = Record("preamble change", ("key", "base", "new"))
SIDE_FIGURE = Record("side figure", ("per_run", "spread_share", "within_run_share"))
CHANGE = Record("change", ("new", ("new_side", SIDE_FIGURE), "delta", "ratio", "p", "significant",
    "n", "test_unit", "status"))
DIFF_ROW = Record("diff row", ("name", "unit", "base", ("base_side", SIDE_FIGURE),
    ("changes", ListOf(CHANGE))))
DIFF_SECTION = Record("diff section", ("part", "title", "key", ("rows", ListOf(DIFF_ROW))))
DRIFT = Record("drift", ("input", "part", "figure", "first_half_ms", "second_half_ms", "ratio",
    "p", "unstable"))
GATE = Record("gate", ("new", "figure", "limit_share", "worse_share", "p", "n", "failed",
    "decided"))
PREDICTION = Record("prediction", ("new", ("setting", Shown("setting", "text")),
    ("value", Shown("value")), ("figure", Shown("figure", "text")), ("predicted", FIGURE),
    ("measured", Shown("measured", 3)), ("within", Shown("within")), "unit"))

DIFF_REPORT = Record("diff report", (*REPORT_HEAD, "compares", "alpha", "test", "runs_to_decide",
    ("sides", ListOf(DIFF_SIDE)), ("inputs", ListOf(DIFF_INPUT)),
    ("preamble_changes", ListOf(PREAMBLE_CHANGE)), ("latency_hist", VALUE),
    ("sections", ListOf(DIFF_SECTION)), ("drift", ListOf(DRIFT)), ("gate", ListOf(GATE)),
    ("prediction_check", ListOf(PREDICTION)), "notes", ("calibration", CALIBRATION), WARNINGS))


# ── diff: runs compared ──────────────────────────────────────────────────────────────────────────
# What `diff` compares, per kind of report. A headline figure is (label, path in the report,
# the per_token field that samples it or None); a table is rows of one figure keyed by a
# column. Every figure is per token, so runs of different lengths compare.
READ_SCHEMAS = (SCHEMA - 1, SCHEMA)  # saved reports diff and summary read: this one, the last
DEFAULT_ALPHA = 0.05

# The headline figures of each part, in the order diff gives them; what each is called, and
# what it is tested on, its declaration says (Shown.diff, Shown.samples). The tables are every
# list field a report marks COMPARED, one per figure of its rows that has diff's words.
DIFF_HEADLINES = {
    "compute": ("ms_per_token", "majflt_per_token", "nodes_per_token", "token_ms.p50",
                "token_ms.p99", "faults.ms_per_token", "decodes.ms_per_position"),
    "io": ("reads_per_token", "mib_per_token", "io_wall_ms_per_token.estimate",
           "busy_ms_per_token", "io_wall_ms_per_token.min", "io_wall_ms_per_token.max",
           "busy_mib_per_s", "waste_mib_per_token", "latency_us.mean", "latency_us.p50",
           "latency_us.p99", "spec.mib_per_token", "adjacency.coalesce_factor"),
    # the engine's split, per decoded token, and per generated position when speculative
    "pair": ("decode_ms_per_token", "compute_ms_per_token", "cache_mgmt_ms_per_token",
             "io_wall_ms_per_token.estimate",
             "io_mib_per_token", "faulting_ms_per_token", "per_position.decode_ms",
             "per_position.compute_ms", "per_position.mib"),
}
PART_RECORDS = {"compute": COMPUTE_REPORT, "io": IO_REPORT, "pair": PAIR}
Headline = namedtuple("Headline", "label path samples")
# title: the figure's words and its rows' (`by op`); table: the report's list; key: the rows'
# name in diff's output, row_key the field that holds it; per_token: divide by the tokens
DiffTable = namedtuple("DiffTable", "title table key row_key figure per_token samples")


def headline_of(record, dotted):
    """The Headline of the figure at `dotted` (`token_ms.p50`) of a part's record: its words
    and samples as the field declares them, or as the record holding it declares them for
    it (the same percentiles are a token's ms in one place and its MiB in another)."""
    path = tuple(dotted.split("."))
    field = record.field(path[0])
    if len(path) == 1:
        return Headline(field.shown.diff, path, field.shown.samples)
    words = ((field.shown.diff if field.shown else None) or {}).get(path[1])
    if words is None:
        inner = inner_record(field).field(path[1]).shown
        return Headline(inner.diff, path, inner.samples)
    label, samples = (words, None) if isinstance(words, str) else words
    return Headline(label, path, samples)


def diff_tables(record):
    """A DiffTable per figure with diff's words of each list the record marks COMPARED."""
    tables = []
    for field in record.fields:
        rows = inner_record(field) if field.per == COMPARED else None
        for figure in rows.fields if rows else ():
            if figure.shown is None or not isinstance(figure.shown.diff, str):
                continue
            joint = "" if rows.by.startswith(",") else " "
            key = rows.field(rows.key).shown.header or rows.key
            tables.append(DiffTable(figure.shown.diff + joint + rows.by, field.name, key,
                                    rows.key, figure.name, figure.per == TOTAL,
                                    figure.shown.samples))
    return tuple(tables)


HEADLINES = {part: tuple(headline_of(PART_RECORDS[part], dotted) for dotted in picked)
             for part, picked in DIFF_HEADLINES.items()}
DIFF_TABLES = {part: diff_tables(record) for part, record in PART_RECORDS.items()}
SAMPLE_FIELDS = {part: tuple(figure.samples for figure in figures if figure.samples)
                 for part, figures in HEADLINES.items()}
# Two figures diff's notes and checks read by their words
CATEGORY_TITLE = next(table.title for table in DIFF_TABLES["compute"]
                      if (table.table, table.figure) == ("by_category", "ms_per_token"))
ESTIMATE_WORDS = next(headline.label for headline in HEADLINES["io"]
                      if headline.path == ("io_wall_ms_per_token", "estimate"))
# A per-node trace against a per-layer one: what both have (by layer; the headline, untested).
NODE_ONLY_FIGURES = ("nodes per token",)
SHARED_ACROSS_GRANULARITIES = ("ms per token by layer",)
DIFF_PARTS = ("compute", "io", "pair")  # a pair report's split: only against another pair
COMPARES = {("compute",): "compute", ("io",): "io", ("compute", "io"): "report",
            ("compute", "io", "pair"): "report"}
IDENTITY_KEYS = ("model", "arch")  # a difference here is a warning, not just a change


class DiffView:
    """One input of `diff`, reduced to what is compared: for each part (compute, io) its
    headline figures, tables, per-token samples and preamble. Built from a report dict, which
    may have been saved by hand or by another version: every value is checked here (a
    trace's own figures may go past FIGURE_LIMIT: values up to 2^64 are legal)."""

    def __init__(self, path, source, report):
        self.path, self.source = path, source
        self.limit = FIGURE_LIMIT if source == "saved report" else math.inf
        kind = report["kind"]
        halves = report_halves(report)
        io = halves.get("io")
        if kind == "report":  # the pair's own figures as a part, sampled by the compute trace's
            compute = report["compute"]  # tokens (each decoded token's wall)
            halves["pair"] = {**report["pair"], "tokens": compute["tokens"],
                              "per_token": compute["per_token"], "meta": compute["meta"],
                              "selection": compute["selection"], "granularity": None,
                              "schema": report.get("schema")}
        # The tokens the run decoded, as the engine counts them: a pair's, else its log's
        # generation tokens (a cached run's tail reads nothing), else None (its read-tokens).
        if report.get("pair"):
            self.decoded = report["pair"].get("tokens")
        else:
            logged = (report.get("engine") or {}).get("figures", {}).get("tokens")
            generated = logged.get("engine") if isinstance(logged, dict) else None
            self.decoded = logged_tokens(generated, io["tokens"]) if io and whole_decode(io) \
                and isinstance(generated, (int, float)) else None
        self.kind = kind
        # a pair's what-if as report shows it (per decoded token, within the decode and the
        # memory): one run, one prediction, whichever command asks
        self.what_if = report.get("what_if") if kind == "report" else None
        self.sample = calibration_sample(path, report)  # what it gives a fit of the sides'
        self.engine = engine_split_of(report, self.limit)
        self.parts = {part: self._part(part, half) for part, half in halves.items()}

    def figures(self):
        """Its name, what tells its run from every other (each part's tokens and headline
        figures) and its configuration."""
        return self.path, {(part, label): value for part, half in self.parts.items()
                           for label, value in [("tokens", half["tokens"]),
                                                *half["headline"].items()]}, \
            configuration({key: value for half in self.parts.values()
                           for key, value in half["meta"].items()})

    def _part(self, part, report):
        tokens, per_token = report["tokens"], report["per_token"]
        if type(tokens) is not int or tokens < 1 or tokens != len(per_token):
            raise ValueError("tokens is not the number of per_token entries")
        limit = self.limit
        samples = {field: [sample_value(t[field], limit) for t in per_token]
                   for field in SAMPLE_FIELDS[part]}
        op_samples = {str(op): [sample_value(v, limit) for v in values]
                      for op, values in report.get("op_us_by_token", {}).items()}
        headline = {label: figure_value(value_at(report, path), limit)
                    for label, path, _ in HEADLINES[part]}
        tables = {}
        for table in DIFF_TABLES[part]:  # a figure an older report lacks: shown as n/a
            scale = tokens if table.per_token else 1
            tables[table.title] = {
                row_key(row[table.row_key]): scaled(figure_value(row.get(table.figure), limit),
                                                    scale)
                for row in report.get(table.table) or ()}
        meta = {str(k): str(v) for k, v in report["meta"].items()}
        per_decoded = report["tokens"] / (self.decoded or report["tokens"])
        tail = report.get("tail_in_post")
        return {**(predictions(report, limit, per_decoded, self.what_if) if part == "io"
                   else {}),
                "tokens": tokens, "samples": samples, "op_samples": op_samples,
                "headline": headline, "tables": tables, "meta": meta,
                "selection": report.get("selection"),
                "granularity": granularity_name(report.get("granularity")),
                "tail_in_post": tail if isinstance(tail, dict) and type(tail.get("layer")) is int
                else None,  # a saved report may say anything
                "latency_hist": [HISTOGRAM_ROW(lo_us=figure_value(row["lo_us"], limit),
                                               hi_us=figure_value(row["hi_us"], limit),
                                               count=figure_value(row["count"], limit))
                                 for row in report.get("latency_hist") or ()]}


def predictions(report, limit, per_decoded=1.0, decoded_what_if=None):
    """What diff's prediction check takes of an io report, checked: its what-if's settings
    (BASE's predictions: the pair's, decoded_what_if, where the run is a pair) and its own
    figures (NEW's measurements), each per decoded token (per_decoded: its read-tokens over its
    decoded tokens)."""
    what_if = decoded_what_if or report.get("what_if") or {}
    scale = 1.0 if decoded_what_if else per_decoded

    def band(held, scale=1.0):
        return FIGURE(**{bound: None if figure_value(held[bound], limit) is None
                         else figure_value(held[bound], limit) * scale
                         for bound in FIGURE.names})
    offered = [{"setting": str(setting["setting"]), "value": figure_value(setting["value"], limit),
                # the figures their Record says are per token scale to decoded tokens on both
                # sides, so that prediction and measurement compare like with like (a cached
                # run reads on fewer)
                "figures": {name: band(held, scale if name in WHAT_IF_FIGURES.per_token
                                       else 1.0)
                            for name, held in setting["figures"].items()
                            if isinstance(held, dict)},
                "ms_per_token_saved": band(setting["ms_per_token_saved"], scale)}
               for setting in what_if.get("settings", ())]
    # the run's I/O part as its what-if took it (the log's flash I/O where it read in series,
    # with the log's management), else its I/O estimate: a base's prediction is that part
    # less a saving, and a new run's measurement is taken by the same rule
    part = figure_value((what_if.get("baseline") or {}).get("io_part_ms_per_token"), limit)
    if part is None:
        part = figure_value(value_at(report, ("io_wall_ms_per_token", "estimate")), limit)
        scale = per_decoded
    own = report.get("run_cache")
    hit = None if not own else own["hit_share"] if ran_cached(report) else 0.0
    return {"what_if": offered, "measured": {
        "hit_share": figure_value(hit, limit),
        "mib_per_token": figure_value(report["mib_per_token"], limit) * per_decoded,
        "io_wall_ms_per_token": None if part is None else part * scale}}


def granularity_name(granularity):
    """A report's granularity, if it is a name (it tells node traces from layer ones)."""
    if granularity is not None and type(granularity) is not str:
        raise ValueError("granularity is not a name")
    return granularity


def value_at(report, path):
    """report[path[0]][path[1]]...; None past a null part (a pair's per_position)."""
    for key in path:
        if report is None:
            return None
        report = report[key]
    return report


def sample_value(value, limit=FIGURE_LIMIT):
    """A per-token sample: a number, never missing."""
    if value is None:
        raise ValueError("a per-token sample is null")
    return figure_value(value, limit)


def row_key(value):
    if type(value) not in (int, str):
        raise ValueError(f"{value!r:.40} is not a row name")
    return value


# A run's figures: what one side of a diff holds of one figure. runs: each run's figure (a run
# without it left out); tokens: with one run, its per-token samples of the figure (None without).
SideSamples = namedtuple("SideSamples", "runs tokens")


def relative_sd(values):
    """The sample standard deviation over the mean's size; None for fewer than two values
    or a zero mean."""
    mean = mean_of(values)
    return None if len(values) < 2 or not mean else sd_of(values) / abs(mean)


def side_figure(sampled):
    one = len(sampled.runs) == 1 and sampled.tokens
    return SIDE_FIGURE(per_run=sampled.runs, spread_share=relative_sd(sampled.runs),
                       within_run_share=relative_sd(sampled.tokens) if one else None)


def tested(base, new, test):
    """(p, n, unit) of one figure's change: over the runs (a side of one run against one
    cannot be tested: n=1+1), over the tokens of one run each when asked (--test tokens), or
    nothing (test None: node against layer traces)."""
    if test == "tokens" and base.tokens and new.tokens:
        return (mann_whitney_p(base.tokens, new.tokens), [len(base.tokens), len(new.tokens)],
                "tokens")
    if test != "runs":
        return None, None, None
    n = [len(base.runs), len(new.runs)]
    return (mann_whitney_p(base.runs, new.runs) if max(n) > 1 else None), n, "runs"


def compared(base, new, alpha, test):
    """One figure of one NEW side against BASE (each a SideSamples): the CHANGE of the means of
    their runs, tested as `test` says."""
    base_mean, new_mean = mean_of(base.runs), mean_of(new.runs)
    if new_mean is None and base_mean is None:
        return CHANGE(new=None, new_side=side_figure(new), delta=None, ratio=None, p=None,
                      significant=None, n=None, test_unit=None, status="n/a")
    status = "added" if base_mean is None else "removed" if new_mean is None else "both"
    both = status == "both"
    p, n, unit = tested(base, new, test) if both else (None, None, None)
    return CHANGE(new=new_mean, new_side=side_figure(new),
                  delta=new_mean - base_mean if both else None,
                  ratio=ratio(new_mean, base_mean) if both else None, p=p,
                  significant=None if p is None else p < alpha, n=n, test_unit=unit,
                  status=status)


def diff_rows(figures, alpha, test, unit=None):
    """One row per name, in the figures' order: figures {name: [SideSamples per side]}, BASE
    first; unit: a table's, else each figure's name states its own."""
    rows = []
    for name, (base, *news) in figures.items():
        rows.append(DIFF_ROW(name=name, unit=unit_named(name) if unit is None else unit,
                             base=mean_of(base.runs), base_side=side_figure(base),
                             changes=[compared(base, new, alpha, test) for new in news]))
    return rows


# ── diff: the sides, compared part by part ───────────────────────────────────────────────────────
class DiffSide:
    """The runs of one configuration: one side of a diff (one run each, without `vs`)."""

    def __init__(self, name, views):
        self.name, self.views = name, views

    def halves(self, part):
        return [view.parts[part] for view in self.views]

    @property
    def named(self):
        """How a warning names it: its run's path, or its name when it has several."""
        first, *more = self.views
        return self.name if more else first.path

    def meta(self, part):
        """{key: value} of its runs' configurations: the value the runs that know it share, or
        their values joined by |."""
        found = {}
        for half in self.halves(part):
            for key, value in configuration(half["meta"]).items():
                found.setdefault(key, []).append(value)
        return {key: "|".join(dict.fromkeys(values)) for key, values in found.items()}

    @property
    def engine(self):
        """Its engine split: each figure's mean over its runs, when every run has it."""
        splits = [view.engine for view in self.views]
        if not all(splits):
            return None
        first, *_ = splits
        return {name: mean_of([split[name] for split in splits]) for name in first
                if all(split.get(name) is not None for split in splits)}

    @property
    def histogram(self):
        """The read latency histogram of its runs together (their counts added)."""
        counts = {}
        for half in self.halves("io"):
            for row in half["latency_hist"]:
                key = (row["lo_us"], row["hi_us"])
                counts[key] = counts.get(key, 0) + row["count"]
        return [HISTOGRAM_ROW(lo_us=lo, hi_us=hi, count=count)
                for (lo, hi), count in sorted(counts.items())]

    @property
    def measured(self):
        """What the prediction check takes of a NEW side: its settings and the mean of its
        runs' measured figures."""
        halves = self.halves("io")
        names = dict.fromkeys(name for half in halves for name in half["measured"])
        return {"meta": self.meta("io"), "measured": {
            name: mean_of([half["measured"][name] for half in halves
                           if half["measured"][name] is not None]) for name in names}}

    def first(self, part):
        """Its first run's part (the one whose what-if is computed)."""
        first, *_ = self.halves(part)
        return first

    def sampled(self, part, value, tokens):
        """A figure of every run as a SideSamples: value(half) its figure, tokens(half) its
        per-token samples (or None)."""
        first, *more = halves = self.halves(part)
        runs = [figure for figure in map(value, halves) if figure is not None]
        return SideSamples(runs, None if more else tokens(first))


def diff_part(part, sides, alpha, test):
    """The sections of one part (compute, io or pair) over every side: the headline figures in
    their own order, then each table's rows by the largest change."""
    mixed = len({half["granularity"] for side in sides for half in side.halves(part)}) > 1
    test = None if mixed else test  # node against layer: absolutes differ by the barriers
    headline = {label: [side.sampled(part, lambda half, label=label: half["headline"][label],
                                     lambda half, field=field: half["samples"].get(field))
                        for side in sides]
                for label, _, field in HEADLINES[part]
                if not mixed or label not in NODE_ONLY_FIGURES}
    headline = {label: sampled for label, sampled in headline.items()
                if any(run for side in sampled for run in side.runs)}
    sections = [DIFF_SECTION(part=part, title=f"{part} headline", key="figure",
                             rows=diff_rows(headline, alpha, test))]
    for table in DIFF_TABLES[part]:
        if mixed and table.title not in SHARED_ACROSS_GRANULARITIES:
            continue
        figures = table_figures(part, sides, table)
        if not any(run for sampled in figures.values() for side in sampled for run in side.runs):
            continue  # none or all zero (no faults, no speculative reads): nothing to compare
        rows = diff_rows(figures, alpha, test, unit_named(table.title))
        # largest change over the NEWs first (an added or removed row: its whole value); among
        # equal ones the largest base (the heaviest op first when nothing changed), the name
        rows.sort(key=lambda row: (-max((
            abs(c["delta"]) if c["delta"] is not None else abs(c["new"] or row["base"] or 0)
            for c in row["changes"]), default=0), -abs(row["base"] or 0), str(row["name"])))
        sections.append(DIFF_SECTION(part=part, title=table.title, key=table.key, rows=rows))
    return sections


def table_figures(part, sides, table):
    """{row name: [SideSamples per side]} of one table, rows in the order the runs first name
    them; tokens: an op's per-token samples (zero in a token without it)."""
    keys = {}
    for side in sides:
        for half in side.halves(part):
            keys.update(dict.fromkeys(half["tables"][table.title]))

    def tokens(half, key):
        if table.samples != "op" or not half["op_samples"]:
            return None
        return half["op_samples"].get(key) or [0] * half["tokens"]
    return {key: [side.sampled(part, lambda half, key=key: half["tables"][table.title].get(key),
                               lambda half, key=key: tokens(half, key)) for side in sides]
            for key in keys}


# A gate figure (--fail-if-worse) whose larger value is better.
BETTER_HIGHER = ("busy_mib_per_s",)


def least_p(n):
    """The smallest p the exact test reaches with n = [a, b] runs and no ties: the most
    extreme ordering, 2 / C(a + b, a)."""
    base, new = n
    return 2 / comb(base + new, base) if base and new else 1.0


def gate_rows(gate, sections, sides, alpha, test):
    """The GATE of one asked figure against each NEW side: decided by the test over runs only
    (a run's tokens say that two runs differ, not that their settings do)."""
    section = next((s for s in sections if s["title"] == f"{gate.part} headline"), None)
    row = next((r for r in section["rows"] if r["name"] == gate.label), None) if section \
        else None
    if row is None:
        return []  # analyze_diff says so
    sign = -1 if gate.figure.endswith(BETTER_HIGHER) else 1
    rows = []
    for side, change in zip(sides[1:], row["changes"]):
        worse = None if change["ratio"] is None else sign * (change["ratio"] - 1)
        decided = test == "runs" and (bool(change["significant"]) or change["p"] is not None
                                      and least_p(change["n"]) < alpha)
        rows.append(GATE(new=side.name, figure=gate.figure, limit_share=gate.limit,
                         worse_share=worse,
                         p=change["p"], n=change["n"],
                         failed=decided and bool(change["significant"]) and worse is not None
                         and worse > gate.limit, decided=decided))
    return rows


def diff_report(sides, alpha, test, gates=()):
    """Every NEW side against BASE (the first), part by part: the JSON of `diff`."""
    base, *news = sides
    runs = [view for side in sides for view in side.views]
    parts = [part for part in DIFF_PARTS if all(part in view.parts for view in runs)]
    changes = []  # the preamble keys and settings whose values differ from the base's; a
    for side in news:  # key of both traces of a pair said once
        found = []
        for part in parts:
            # a key one side lacks is unknown there, not changed, but a setting that is off
            # when unnamed (SETTINGS_OFF: the prediction check's rule): cache_mb 0 -> 64
            old_meta, new_meta = base.meta(part), side.meta(part)
            for key in dict.fromkeys([*old_meta, *new_meta]):
                value, theirs = old_meta.get(key), new_meta.get(key)
                change = PREAMBLE_CHANGE(key=key, base=value, new=theirs)
                known = None not in (value, theirs) or key in SETTINGS_OFF and \
                    setting_number(old_meta, key) != setting_number(new_meta, key)
                if known and value != theirs and change not in found:
                    found.append(change)
        changes.append(found)
    first_part, *_ = parts
    warnings = [f"{side.named}: its runs differ in {key} ({value}): they are not repeats of one "
                f"configuration" for side in sides
                for key, value in side.meta(first_part).items() if "|" in value]
    warnings += [f"{side.named}: {c['key']} {c['new'] or '(none)'} is not the base's "
                 f"{c['base'] or '(none)'}: different models compare poorly"
                 for side, found in zip(news, changes) for c in found if c["key"] in IDENTITY_KEYS]
    for part in parts:
        warnings += selection_warnings(part, runs) if part != "pair" else []
    warnings += io_mode_warnings(sides) if "io" in parts else []
    names = shortest_names([view.path for view in runs])
    sections = [section for part in parts for section in diff_part(part, sides, alpha, test)]
    # the costs fitted on the runs that are pairs (each named as the inputs name it), with two
    # or more: one run gives no cost another can contradict
    samples = [view.sample._replace(run=name) for view, name in zip(runs, names)
               if view.sample is not None]
    return DIFF_REPORT(
        schema=SCHEMA, tool_version=TOOL_VERSION, kind="diff", compares=COMPARES[tuple(parts)],
        alpha=alpha, test=test,  # the fewest runs a side whose U test can give p < alpha
        runs_to_decide=next((n for n in range(1, 100) if least_p([n, n]) < alpha), None),
        sides=[DIFF_SIDE(name=side.name, runs=len(side.views), engine=side.engine)
               for side in sides],
        inputs=[DIFF_INPUT(path=view.path, name=name, side=index, source=view.source,
                           kind=view.kind,
                           tokens={part: view.parts[part]["tokens"] for part in parts})
                for (index, view), name in zip(((index, view) for index, side in
                                                enumerate(sides) for view in side.views), names)],
        preamble_changes=changes,
        latency_hist=[side.histogram for side in sides] if "io" in parts else [],
        sections=sections,
        drift=[found for view, name in zip(runs, names) for part in parts
               for found in [drift_check(name, part, view.parts[part], alpha)] if found],
        gate=[row for gate in gates for row in gate_rows(gate, sections, sides, alpha, test)],
        prediction_check=[row for side in news if "io" in parts
                          for row in prediction_check(base.first("io"), side.measured,
                                                      side.name)],
        notes=router_notes(sides, sections) if "compute" in parts else [],
        calibration=calibration(samples) if len(samples) > 1 else None, warnings=warnings)


def router_notes(sides, sections):
    """Under overlap the routing nodes' time is not read wait by itself; against the same
    model's serial run it is bounded: serial routing = its compute + its wait (at most the
    smaller of its time and its I/O estimate), overlapped = the same compute + the wait the
    overlap left there, so that wait is at most overlapped - serial + the serial wait."""
    router = next((row for section in sections if section["title"] == CATEGORY_TITLE
                   for row in section["rows"] if row["name"] == "router"), None)
    estimate = next((row for section in sections if section["title"] == "io headline"
                     for row in section["rows"] if row["name"] == ESTIMATE_WORDS), None)
    if router is None:
        return []
    metas = [side.meta("compute") for side in sides]
    modes = [meta.get("overlap") for meta in metas]
    values = [router["base"]] + [change["new"] for change in router["changes"]]
    estimates = [estimate["base"]] + [c["new"] for c in estimate["changes"]] if estimate \
        else [None] * len(values)
    serial = [(value, est, meta.get("model")) for mode, value, est, meta
              in zip(modes, values, estimates, metas) if mode == "0" and value is not None]
    notes = []
    for side, mode, value, meta in zip(sides, modes, values, metas):
        if mode != "1" or value is None or not serial:
            continue
        (serial_ms, serial_estimate, model), *_ = serial
        if meta.get("model") != model:
            continue  # another model's routing says nothing of this one's
        wait = min(serial_ms, serial_estimate) if serial_estimate is not None else serial_ms
        at_most = max(0.0, value - serial_ms + wait)
        notes.append(f"router under overlap ({side.name}): routing takes {value:.2f} ms "
                     f"per token overlapped, {serial_ms:.2f} serial; its wait for reads is at "
                     f"most {at_most:.2f} ms ({num(ratio(at_most, value), '.0%')} of its time)")
    return notes


# The figure a run's drift check reads, per part: a token's wall (compute), its I/O estimate (io).
DRIFT_FIGURES = {"compute": ("ms", "ms per token"),
                 "io": ("io_ms", ESTIMATE_WORDS)}
DRIFT_SHARE = 0.10  # halves further apart than this (and significant): the run was unstable
DRIFT_TOKENS = 8  # fewer tokens than this: no halves to compare


def drift_check(name, part, half, alpha):
    """A run's first half of tokens against its second (the DRIFT), or None without enough
    per-token samples."""
    field, label = DRIFT_FIGURES.get(part, (None, None))
    samples = half["samples"].get(field) if field else None
    if not samples or len(samples) < DRIFT_TOKENS:
        return None
    middle = len(samples) // 2
    first, second = mean_of(samples[:middle]), mean_of(samples[middle:])
    p = mann_whitney_p(samples[:middle], samples[middle:])
    moved = ratio(second, first)
    return DRIFT(input=name, part=part, figure=label, first_half_ms=first,
                 second_half_ms=second, ratio=moved, p=p,
                 unstable=p < alpha and moved is not None and abs(moved - 1) >= DRIFT_SHARE)


# A measured figure holds the prediction when it lies in the predicted band widened by this
# share of the band's ends, and by half a point of a share at least: the engine's rounding.
PREDICTION_TOLERANCE = 0.05
PREDICTION_SLACK = 0.005
# What a run whose settings lack a what-if setting has of it (the others: unknown, None).
SETTINGS_OFF = {"cache_mb": 0.0, "prefetch": 0.0, "overlap": 0.0, "o_direct": 0.0}


def setting_number(meta, key):
    """A what-if setting's value in a run's meta, as the what-if writes it."""
    value = meta_number(meta, key)
    return SETTINGS_OFF.get(key) if value is None else value


# The figures checked, each with its words in the text: io_wall_ms_per_token is the I/O part
# (docs/what-if.md), flash I/O and cache management, not the I/O estimate the headline names so
PREDICTED_FIGURES = {"hit_share": "hit share", "mib_per_token": "MiB per token",
                     "io_wall_ms_per_token": "I/O part ms"}


def prediction_check(base, new, name):
    """BASE's what-if for each what-if setting NEW changed, figure by figure, beside NEW's."""
    rows = []
    for key in WHAT_IF_SETTINGS:  # one a run's meta never holds (coalesce) never differs
        value = setting_number(new["meta"], key)
        if value == setting_number(base["meta"], key):
            continue
        offered = next((setting for setting in base["what_if"]
                        if setting["setting"] == key and setting["value"] == value), None)
        if offered is None:
            continue
        # its hit share, MiB and I/O as the what-if gives them, else the I/O its saving leaves
        # of the part it was taken from (a report saved before the what-if named its part: the
        # I/O estimate)
        found = [(name, offered["figures"][name]) for name in PREDICTED_FIGURES
                 if isinstance(offered["figures"].get(name), dict)]
        saved, estimate = offered["ms_per_token_saved"], base["measured"]["io_wall_ms_per_token"]
        if "io_wall_ms_per_token" not in offered["figures"] and estimate is not None and (
                saved["min"] is not None or saved["max"] is not None):
            left = {end: None if ms is None else estimate - ms for end, ms in saved.items()}
            found.append(("io_wall_ms_per_token", FIGURE(point=left["point"], min=left["max"],
                                                         max=left["min"])))
        for figure_name, predicted in found:
            measured = new["measured"].get(figure_name)
            rows.append(PREDICTION(new=name, setting=key, value=value, figure=figure_name,
                                   predicted=predicted, measured=measured,
                                   within=held(predicted, measured),
                                   unit=unit_named(figure_name)))
    return rows


def held(predicted, measured):
    """Whether `measured` lies in the predicted band, widened; None without a band."""
    low, high = predicted["min"], predicted["max"]
    if measured is None or low is None or high is None:  # open at an end: nothing can fail it
        return None
    slack = PREDICTION_SLACK

    def widened(end, sign):
        return end + sign * max(abs(end) * PREDICTION_TOLERANCE, slack)
    return (low is None or measured >= widened(low, -1)) and \
        (high is None or measured <= widened(high, 1))


def io_mode_warnings(sides):
    """The engine's own flash I/O figure is not one measure across overlap modes: the I/O
    estimate (a token's wait) when serial, lanes busy (readers' time) when overlapped."""
    base, *news = [side.first("io") for side in sides]
    mode = base["meta"].get("overlap")
    warnings = []
    for side, half in zip(sides[1:], news):
        theirs = half["meta"].get("overlap")
        if {mode, theirs} == {"0", "1"}:
            before, after = (num(them["headline"]["lanes busy ms per token (summed over lanes)"
                                                  if overlap == "1" else ESTIMATE_WORDS], ".2f")
                             for them, overlap in ((base, mode), (half, theirs)))
            warnings.append(
                f"{side.named}: overlap {mode} -> {theirs}: the engine's own flash I/O figure is "
                f"the I/O estimate when serial and lanes busy when overlapped ({before} -> "
                f"{after} ms here), not one measure; compare the estimate with the estimate "
                f"and lanes busy with lanes busy")
    return warnings


def selection_warnings(part, views):
    """Inputs that cover different selections or granularities compare less directly."""
    warnings = []
    first, *news = views
    base = first.parts[part]
    for view in news:
        half = view.parts[part]
        if half["selection"] != base["selection"]:
            warnings.append(f"{view.path}: its {part} selection differs from the base's")
        if half["granularity"] != base["granularity"]:
            warnings.append(f"{view.path}: a per-{half['granularity']} trace against a "
                            f"per-{base['granularity']} base: only what both have is compared "
                            f"(the headline, untested: per-node barriers inflate a node trace's "
                            f"absolutes; ms per token by layer)")
            tail = half["tail_in_post"] or base["tail_in_post"]
            if tail:
                warnings.append(f"{view.path}: the layer trace puts layer {tail['layer']}'s "
                                f"MoE tail into post (layer -1): compare layers "
                                f"{tail['layer']} and -1 together")
    return warnings


def shortest_names(paths):
    """Each path's shortest ending (whole components) that no other path ends with."""
    parts = [tuple(part for part in str(path).replace(os.sep, "/").split("/") if part) or ("",)
             for path in paths]
    names = []
    for mine in parts:
        for depth in range(1, len(mine) + 1):
            ending = mine[-depth:]
            if sum(other[-depth:] == ending for other in set(parts)) == 1 or depth == len(mine):
                names.append("/".join(ending))
                break
    return names


# ── diff: the regression gate ────────────────────────────────────────────────────────────────────
# --fail-if-worse FIGURE=SHARE names a headline figure by its field in the report (a part's
# prefix, `pair.`, picks it where two parts have it); a larger value is worse but for
# BETTER_HIGHER's.
Gate = namedtuple("Gate", "figure part label limit")
PART_PREFIXES = tuple(f"{part}." for part in DIFF_PARTS)


# {name --fail-if-worse takes: (part, the figure's words)}: a part's figures by their dotted
# name (the first part's, when two parts share one) and by part.name
GATE_FIGURES = {}
for _part, _picked in DIFF_HEADLINES.items():
    for _dotted, _headline in zip(_picked, HEADLINES[_part]):
        GATE_FIGURES.setdefault(_dotted, (_part, _headline.label))
        GATE_FIGURES[f"{_part}.{_dotted}"] = (_part, _headline.label)


def gate_of(text):
    """--fail-if-worse's FIGURE=SHARE (5%, or 0.05) as a Gate."""
    figure, _, share = text.partition("=")
    if figure not in GATE_FIGURES:
        raise argparse.ArgumentTypeError(
            f"{figure!r:.60} is not a headline figure: one of "
            f"{', '.join(name for name in GATE_FIGURES if not name.startswith(PART_PREFIXES))}")
    try:
        limit = float(share[:-1]) / 100 if share.endswith("%") else float(share)
    except ValueError:
        limit = math.nan
    if not 0 <= limit < 1e6:
        raise argparse.ArgumentTypeError(f"{share!r:.30} is not a share (5% or 0.05)")
    return Gate(figure, *GATE_FIGURES[figure], limit)


# ── diff: its text and Markdown sections ─────────────────────────────────────────────────────────
def figure_text(value):
    """A figure with about four significant digits and no exponent: 4.495, 123.4, 0.0123."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    size = abs(value)
    digits = 0 if size >= 1000 else 1 if size >= 100 else 2 if size >= 10 else 3 \
        if size >= 1 or size == 0 else 4
    return f"{value:.{digits}f}"


def delta_text(change):
    if change["status"] in ("added", "removed"):
        return change["status"]
    delta = change["delta"]
    return "-" if delta is None else ("+" if delta >= 0 else "") + figure_text(delta)


def p_text(change):
    """The p-value, and ~ when the change is not significant (benchstat's mark)."""
    p = change["p"]
    if p is None:
        return ""
    return p_figure(p) + (" ~" if change["significant"] is False else "")


def p_figure(p):
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def group_names(names):
    """The column heads of the inputs: each input's name (the shortest end of its path that
    tells it from the others), or its label when the name is too long to head a column."""
    return [name if len(name) <= GROUP_NAME_WIDTH else input_label(i, len(names))
            for i, name in enumerate(names)]


def diff_columns(key, shown, names, section):
    """The name, base and its spread columns, then new, its spread, delta, ratio (and p, when
    the section has a test) for each NEW of `shown` (indexes of NEWs; names: every side's
    column head): one group of columns per NEW, as benchstat does with several files."""
    base, *news = names
    columns = [Column(key, "name", safe, "<"), column(base, "base", figure_text)]
    if any(spread_text(row["base_side"]) for row in section["rows"]):
        columns.append(column("±", lambda row: spread_text(row["base_side"]), str))
    for i in shown:
        pick = (lambda field, i=i: lambda row: row["changes"][i][field])
        columns.append(column(news[i], pick("new"), figure_text))
        if any(spread_text(row["changes"][i]["new_side"]) for row in section["rows"]):
            columns.append(column("±", lambda row, i=i: spread_text(row["changes"][i]["new_side"]),
                                  str))
        columns += [column("delta", lambda row, i=i: row["changes"][i], delta_text),
                    column("ratio", pick("ratio"), lambda r: "" if r is None else f"{r:.2f}x")]
        if any_tested([section]):
            columns.append(Column("p", lambda row, i=i: row["changes"][i], p_text, "<"))
    return columns


def spread_text(side):
    """±: the runs' sd over their mean; in brackets, with one run, its tokens'."""
    if side["spread_share"] is not None:
        return f"±{share_text(side['spread_share'])}"
    return "" if side["within_run_share"] is None else \
        f"(±{share_text(side['within_run_share'])})"


def share_text(share):
    return f"{share:.1%}" if share < 0.1 else f"{share:.0%}"


def input_label(index, inputs):
    """base, new, or new #i when there are several NEWs."""
    return "base" if index == 0 else "new" if inputs == 2 else f"new #{index}"


def diff_header_blocks(report, view):
    """A line a run: its side (and number in it), its path, what it is and its tokens."""
    paths = []
    for source, label in zip(report["inputs"], run_labels(report)):
        counts = set(source["tokens"].values())
        tokens = f"{counts.pop()} tokens" if len(counts) == 1 else ", ".join(
            f"{n} {part} tokens" for part, n in source["tokens"].items())
        what = f"{source['kind']} trace" if source["source"] == "trace" else \
            f"saved JSON of decode-analyze {source['kind']}"
        paths.append((label, source["path"], f" ({what}, {tokens})"))
    return [Block(None, [Header(f"diff ({report['compares']}, n={runs_text(report)})", paths,
                                {}, ())], gap=False)]


def run_labels(report):
    """Each input's label, in order: its side (base, new, new #i), and its number there when
    the side has several runs (base 2)."""
    sides, labels, at_in_side = report["sides"], [], Counter()
    for source in report["inputs"]:
        at_in_side[source["side"]] += 1
        head = input_label(source["side"], len(sides))
        labels.append(f"{head} {at_in_side[source['side']]}"
                      if sides[source["side"]]["runs"] > 1 else head)
    return labels


def runs_text(report):
    """n as benchstat writes it: each side's runs, joined by +."""
    return "+".join(str(side["runs"]) for side in report["sides"])


def test_legend(report):
    """What p (or its absence) means in this diff, in one line."""
    alpha, n, least = report["alpha"], runs_text(report), report["runs_to_decide"]
    if report["test"] == "tokens":
        return (f"p: two-sided Mann-Whitney U over the tokens of one run each (--test tokens): "
                f"it says these two runs differ, not that their settings do (tokens of one run "
                f"share its machine state); ~ = p >= {alpha:g}; (±): a run's tokens' sd/mean")
    if all(side["runs"] == 1 for side in report["sides"]):
        return (f"n={n}: run-to-run variation unknown, so no change is tested (a run's tokens "
                f"are not independent samples of its setting); to decide at alpha {alpha:g}, "
                f"repeat each side {least} times at least (diff A1..A{least} vs B1..B{least}), "
                f"more when runs vary as much as the change; (±): a run's tokens' sd/mean")
    short = min(side["runs"] for side in report["sides"])
    return (f"p: two-sided Mann-Whitney U over the runs' figures (n={n}); ~ = no significant "
            f"change (p >= {alpha:g}); ±: the runs' sd/mean"
            + (f"; with {short} run(s) a side p cannot go below {alpha:g}: {least} at least"
               if least and short < least else ""))


def drift_lines(report, full=True):
    """The runs whose second half of tokens moved from their first, or that none did (not
    full: how many, in a line)."""
    unstable = [d for d in report["drift"] if d["unstable"]]
    if not report["drift"]:
        return []
    runs = {d["input"] for d in unstable}
    if unstable and not full:
        return [f"drift: {counted(len(runs), 'run')} drifted, the second half of the tokens "
                f"against the first by {DRIFT_SHARE:.0%} or more (--full: each)"]
    if not unstable:
        return [f"drift: no run's second half of tokens differs from its first by "
                f"{DRIFT_SHARE:.0%} or more"]
    labels = dict(zip((source["name"] for source in report["inputs"]), run_labels(report)))
    return ["drift, runs unstable in themselves (their first half of tokens -> their second): "
            + "; ".join(f"{labels.get(d['input']) or safe(d['input'])} {d['figure']} "
                        f"{figure_text(d['first_half_ms'])} -> "
                        f"{figure_text(d['second_half_ms'])} ({d['ratio']:.2f}x, "
                        f"p{p_words(d['p'])})" for d in unstable)]


def p_words(p):
    """p in a sentence: p<0.001, p=0.029."""
    figure = p_figure(p)
    return figure if figure.startswith("<") else f"={figure}"


def gate_lines(report):
    """The regression gate's answer, a line per figure and NEW."""
    lines = []
    undecided = "not decided (the gate takes the test over runs, not --test tokens)" \
        if report["test"] == "tokens" else "not decided (too few runs: nothing can fail it)"
    for gate in report["gate"]:
        share = gate["worse_share"]
        change = "change n/a" if share is None else f"worse by {share:.1%}" if share > 0 \
            else f"better by {-share:.1%}" if share < 0 else "unchanged"
        test = "no test" if gate["p"] is None else \
            f"p{p_words(gate['p'])} n={'+'.join(map(str, gate['n']))}"
        verdict = "FAILED" if gate["failed"] else "passed" if gate["decided"] else undecided
        lines.append(f"gate: {safe(gate['new'])} {gate['figure']} {change} (limit "
                     f"{gate['limit_share']:.1%}), {test}: {verdict}")
    return lines


# The figure a diff's headline leads with, per what it compares: the decode, else the I/O.
DECODE_LABELS = (("pair", headline_of(PAIR, "decode_ms_per_token").label),
                 ("compute", headline_of(COMPUTE_REPORT, "ms_per_token").label),
                 ("io", ESTIMATE_WORDS))
SIGNIFICANT_SHOWN = 6  # the headline's significant changes, largest first; the tables have all


def diff_headline_blocks(report, view):
    """The first screen: the decode on each side (its ms per token and its test), the engine's
    split of each side's decode (their logs), the figures that changed significantly, the
    settings that differ."""
    sides = report["sides"]
    labels = [input_label(index, len(sides)) for index in range(len(sides))]
    rows = {(section["part"], row["name"]): row for section in report["sections"]
            if section["title"].endswith(" headline") for row in section["rows"]}
    decode = next((rows[key] for key in DECODE_LABELS if key in rows), None)
    lines = []  # the decode's ms per token, base -> each NEW, with its ratio and test
    for label, change in zip(labels[1:], decode["changes"] if decode else ()):
        tested = "" if change["p"] is None else \
            f", p{p_words(change['p'])}{'' if change['significant'] else ' ~'}"
        lines.append(f"  {decode['name']}: base {figure_text(decode['base'])} -> {label} "
                     f"{figure_text(change['new'])} ({times(change['ratio'], '.2f')}{tested})")
    lines += [f"  {label}, its log{'s' if side['runs'] > 1 else ''}: "
              f"{engine_split_text(side['engine'], side['runs'])}"
              for label, side in zip(labels, sides) if side["engine"]]
    lines += changed_lines(report, labels)
    for label, changes in zip(labels[1:], report["preamble_changes"]):
        words = ", ".join(f"{c['key']} {c['base'] or '(none)'} -> {c['new'] or '(none)'}"
                         for c in changes) or "none"
        lines.append(f"  settings that differ{'' if len(sides) == 2 else ' in ' + label}: {words}")
    return [Block(f"headline (n={runs_text(report)})", [Prose(lines, "    ")])]


Moved = namedtuple("Moved", "title name base change")  # a row's change against one NEW


def changed_lines(report, labels):
    """The figures that changed significantly against each NEW, largest first (a figure that
    was 0 has no ratio: its change is the largest, shown as base -> new); without a test, that
    none was tested."""
    lines = []
    for index, label in enumerate(labels[1:]):
        found = [Moved(section["title"], row["name"], row["base"], row["changes"][index])
                 for section in report["sections"] for row in section["rows"]]
        tested = [one for one in found if one.change["significant"] is not None]
        moved = sorted((one for one in tested if one.change["significant"]), key=lambda one: (
            not one.title.endswith(" headline"), -math.inf if one.change["ratio"] is None else
            -abs(math.log(one.change["ratio"] or 1.0))))
        who = "" if len(labels) == 2 else f" ({label})"
        if not tested:
            lines.append(f"  changed significantly{who}: not tested (one run a side: repeat "
                         f"each {report['runs_to_decide']} times at least to test)")
            continue
        shown = [f"{name if title.endswith(' headline') else f'{title} ({name})'} " + (
                     f"{figure_text(base)} -> {figure_text(change['new'])}"
                     if change["ratio"] is None else times(change["ratio"], ".2f"))
                 for title, name, base, change in moved[:SIGNIFICANT_SHOWN]]
        more = len(moved) - len(shown)
        lines.append(f"  changed significantly{who}: " + (
            "; ".join(shown) + (f"; and {more} more" if more else "") if shown else
            f"none of {len(tested)} figures"))
    return lines


def prediction_blocks(report, view):
    """BASE's what-if for each setting a NEW changed, beside what the NEW measured."""
    rows = report.get("prediction_check") or []
    if not rows:
        return []
    several = len(report["sides"]) > 2

    def written(row, value):
        return formatter(WHAT_IF_FIGURES.field(row["figure"]).shown.format)(value)

    def band(row):
        predicted = row["predicted"]
        low, high = written(row, predicted["min"]), written(row, predicted["max"])
        around = low if low == high else f"{low} to {high}"
        return around if predicted["point"] is None or low == high else \
            f"{written(row, predicted['point'])} ({around})"
    columns = ((text_column("new", "new"),) if several else ()) \
        + tuple(shown_column(PREDICTION.field(name)) for name in ("setting", "value")) \
        + (text_column("figure", lambda row: PREDICTED_FIGURES.get(row["figure"], row["figure"])),
           column("predicted", band), column("measured", lambda row: written(row, row["measured"])),
           column("within", lambda row: AGREEMENT[row["within"]]))
    return [Block(f"did the prediction hold? the base's what-if beside what the new run measured "
                  f"(per decoded token, per read-token without one; within: inside the band, "
                  f"widened by "
                  f"{PREDICTION_TOLERANCE:.0%})", [Grid(columns, rows)])]


def diff_section_blocks(report, view):
    """Each section as one table, or, with several NEWs, as tables of as many NEW column groups
    as fit TEXT_WIDTH side by side (the name and base columns repeated)."""
    names = group_names([side["name"] for side in report["sides"]])
    changed = []
    for section in report["sections"]:
        # a change to show: a row changed significantly, or, untested (one run a side, where
        # any figure may differ by chance), a headline, or a row on one side only
        changes = [change for row in section["rows"] for change in row["changes"]]
        tested = [change["significant"] for change in changes if change["significant"] is not None]
        shown = any(tested) if tested else section["title"].endswith(" headline") or any(
            change["status"] in ("added", "removed") for change in changes)
        if view.full or shown:
            changed.append(section)
    blocks, folded = [], []
    for section in changed:
        rows, together, left = moved_together(section, view, len(names) - 1)
        if together:
            folded.append(f"  {section['title']}: {together}")
        more = [Prose([f"  and {left} more that changed significantly, smaller (--full: each "
                       f"row)"], "    ")] if left else []
        if rows:
            blocks.append(Block(section["title"], [
                Grid(diff_columns(section["key"], shown, names, section), rows)
                for shown in new_groups(section, names)] + more))
    if folded:  # a table whose rows moved as one: a line, each row with --full
        blocks.append(Block("tables whose rows moved together (--full: each row)",
                            [Prose(folded, "    ")]))
    same = [section["title"] for section in report["sections"] if section not in changed]
    if same:  # the tables with no change to show: one line for all of them
        words = "no significant change" if any_tested(report["sections"]) else \
            "not tested, one run a side"
        blocks.append(Block(None, [Prose([f"{words} (--full: each table): {', '.join(same)}"],
                                         "    ")]))
    return blocks


MOVED_TOGETHER_BAND = 1.1  # ... their ratios within this factor of the median's, either way


MOVED_TOGETHER_LEAST = 4  # rows that moved together this many or more are said in a line
DIFF_ROWS_SHOWN = 8  # of a table's other significant changes, the largest (--full: all)


def moved_together(section, view, news):
    """(the rows to draw, the words for the others or None, how many more were left out): of a
    table against one NEW (unless --full), the rows that changed significantly by about their
    median ratio, four or more or the whole table, are said in words ("48 layers, 0.74x to
    0.83x"); of the others that changed significantly the DIFF_ROWS_SHOWN largest are drawn,
    and those that did not are left to --full, as a headline's are (a row of nothing on both
    sides is none). Else every row."""
    rows = section["rows"]
    if view.full or news != 1:
        return rows, None, 0
    held = [(row, change) for row in rows for change in row["changes"][:1]
            if (row["base"], change["new"]) != (0, 0)]  # a row of nothing on both sides: none
    significant = [(row, change) for row, change in held if change["significant"] is not False]
    ratios = sorted(change["ratio"] for _, change in significant
                    if change["significant"] and change["ratio"])
    if not ratios:  # untested (one run a side): every row
        return [row for row, _ in significant] or rows, None, 0
    drawn = [row for row, _ in significant]  # largest change first
    if section["title"].endswith(" headline"):
        return drawn[:DIFF_ROWS_SHOWN], None, max(0, len(drawn) - DIFF_ROWS_SHOWN)
    middle = ratios[len(ratios) // 2]
    together = [(row, change) for row, change in significant if change["significant"] and
                change["ratio"] and middle / MOVED_TOGETHER_BAND <= change["ratio"]
                <= middle * MOVED_TOGETHER_BAND]
    if len(together) < MOVED_TOGETHER_LEAST and len(together) < len(held):
        return drawn[:DIFF_ROWS_SHOWN], None, max(0, len(drawn) - DIFF_ROWS_SHOWN)
    low, high = (f"{ratio:.2f}x" for ratio in (min(c["ratio"] for _, c in together),
                                               max(c["ratio"] for _, c in together)))
    named = counted(len(together), str(section["key"])) if len(together) >= \
        MOVED_TOGETHER_LEAST else ", ".join(safe(row["name"]) for row, _ in together)
    drawn = [row for row in drawn if not any(row is r for r, _ in together)]
    return drawn[:DIFF_ROWS_SHOWN], (
        f"{named}, {low}" + (f" to {high}" if high != low else "")
        + f" (p {p_figure(max(c['p'] for _, c in together))} or less)"), \
        max(0, len(drawn) - DIFF_ROWS_SHOWN)


def any_tested(sections):
    """Whether a change in these tables was tested (one run a side: none is)."""
    return any(change["p"] is not None for section in sections for row in section["rows"]
               for change in row["changes"])


def new_groups(section, names):
    """The NEWs' indexes in runs that fit TEXT_WIDTH side by side (one NEW at least)."""
    runs, current = [], []
    for i in range(len(names) - 1):
        columns = diff_columns(section["key"], current + [i], names, section)
        cells = [[cell(col, row) for col in columns] for row in section["rows"]]
        width = 2 + sum(max([len(safe(col.header))] + [len(line[j]) for line in cells]) + 2
                        for j, col in enumerate(columns)) - 2
        if current and width > TEXT_WIDTH:
            runs.append(current)
            current = []
        current.append(i)
    return runs + [current]


SHORT_SETTING = 10  # a differing preamble key whose values are all this short gets a column
NO_SETTING = "-"  # a preamble key a run's header lacks (JSON: null)


def setting_text(row, key):
    value = row["settings"].get(key)
    return NO_SETTING if value is None else str(value)


KINDS["diff"] = Kind(DIFF_REPORT, layout(  # the answer first: what changed, and did it hold
    diff_header_blocks, diff_headline_blocks, prediction_blocks,
    lambda report, view: [Block(None, [Prose(
        [f"warning: {message}" for message in report["warnings"]] + [test_legend(report)]
        + drift_lines(report, view.full) + gate_lines(report)
        + [f"note: {note}" for note in report["notes"]])])],
    diff_section_blocks, lambda report, view: calibration_blocks(report, view) if view.full
    else calibration_line_blocks(report)))


def calibration_line_blocks(report):
    """diff's fit over its sides in a line or two (--full: the costs and each check): how many
    runs, how leave-one-out did, and every run it named loaded or an outlier."""
    fit = report.get("calibration")
    if not fit:
        return []
    tally = fit["validation"]
    lines = [f"calibration: fitted on {len(fit['runs'])} run(s) of {fit['model']['model']}; "
             f"leave-one-out {tally['inside']} of {tally['checked']} inside (--full: its costs "
             f"and checks; --calibration-out FILE writes it)"]
    for group in fit["configurations"]:
        lines += repeats_lines(group)
    return [Block(None, [Prose(lines, "    ")])]


# ── summary: its records ─────────────────────────────────────────────────────────────────────────
SUMMARY_ROW = Record("summary row", ("run", "paths", "kind", ("n", Shown("n")),
    ("spread", MapOf(VALUE)), ("figure_runs", MapOf(VALUE)), ("settings", MapOf(VALUE)),
    ("tokens", Shown("tokens"), TOTAL), ("decode_ms_per_token", Shown("decode ms", 2), PER_TOKEN),
    ("decode_ms_p50", Shown("p50", 2)), ("decode_ms_p99", Shown("p99", 2)),
    ("compute_ms_per_token", Shown("compute", 2), PER_TOKEN),
    ("cache_mgmt_ms_per_token", Shown("mgmt", 2, "cache management ms per token"), PER_TOKEN),
    ("io_ms_per_token", Shown("I/O est", 2), PER_TOKEN),
    ("mib_per_token", Shown("MiB", 2), PER_TOKEN), ("hit_share", Shown("hit", "%")),
    ("majflt_per_token", Shown("majflt", 1), PER_TOKEN),
    ("positions_per_decode", Shown("pos/dec", 2)), ("engine_ms_per_token", Shown("eng ms", 2)),
    ("engine_hit_share", Shown("eng hit", "%")), "engine_disagrees", "flagged"))
SUMMARY_REPORT = Record("summary report", (*REPORT_HEAD, "keys", ("common", MapOf(VALUE)), "sort",
    ("runs", ListOf(SUMMARY_ROW)), ("calibration", CALIBRATION), WARNINGS),
    later=("calibration", "warnings"))


# ── summary: many runs in one table ──────────────────────────────────────────────────────────────
# One row per run, as llama-bench prints one per configuration. A run is a trace, a saved
# report, CT+IO (the two traces of one run), or a compute and an io trace of the inputs whose
# names pair (ct -> io in the name, or -io before the ending). Each run is read, reduced to its
# row and let go: a hundred runs hold a hundred rows, not a hundred reports.
class Run(namedtuple("Run", "path io_path", defaults=(None,))):
    """One row's inputs: a trace or a saved report, or a compute trace and its io trace."""

    @property
    def paths(self):
        return (self.path,) if self.io_path is None else (self.path, self.io_path)


SUMMARY_FIGURES = tuple(field.name for field in SUMMARY_ROW.shown())  # its table's numbers
SUMMARY_SORTS = ("run",) + SUMMARY_FIGURES
# --sort takes a column by the head the table shows too (`hit`, `decode ms`), as typed
SUMMARY_HEADS = {field.shown.header.lower(): field.name for field in SUMMARY_ROW.shown()}


def run_parts(argument):
    """The inputs a RUN argument names: CT+IO's two (where no file has the whole name), else
    itself."""
    if argument == trace_io.STDIN or "+" not in argument or os.path.exists(argument):
        return (argument,)
    compute, _, io_path = argument.partition("+")
    return (compute, io_path)


def in_pair_order(first, second, warn):
    """A run's two traces as (compute, io): given io first, swapped with a note, as their
    preambles say which is which; two of one kind refused before either is read. Left as given
    when either is not a regular file (a pipe is read once) or not a trace: the reading refuses
    what is wrong, with its line."""
    if not (os.path.isfile(first) and os.path.isfile(second)):
        return first, second
    try:
        kinds = first_kind, second_kind = trace_io.sniff(first), trace_io.sniff(second)
    except TraceError:
        return first, second
    if first_kind == second_kind != "json":  # said before either is read
        raise TraceError(display_name(second), 1, f"{'an' if first_kind == 'io' else 'a'} "
                         f"{first_kind} trace, as {display_name(first)} is: a run's pair is its "
                         f"compute trace and its io trace")
    if kinds != ("io", "compute"):
        return first, second
    warn(f"{display_name(first)} is the io trace and {display_name(second)} the compute trace: "
         f"read as the run's compute trace and its io trace, in that order")
    return second, first


def summary_runs(arguments, kinds, warn):
    """The runs the arguments name: CT+IO pairs (IO+CT too), a compute and an io trace whose
    names pair (in either order, one to one; the run stands at its compute trace's place), and
    each other input alone (a path given twice is two runs). kinds: what each argument that is
    a file holds."""
    # {compute position: io position} of the traces whose names pair. A name pairs only where
    # it is unambiguous: one io path for a compute trace, one compute path for an io trace; the
    # same path given twice pairs twice.
    positions = defaultdict(list)  # (kind, matched name) -> positions, in order
    for index, argument in enumerate(arguments):
        if kinds.get(argument) in ("compute", "io"):
            positions[kinds[argument], matched_name(argument)].append(index)
    computes = {name: at for (kind, name), at in positions.items() if kind == "compute"}
    wanted = {}
    for name in computes:  # the names its io trace may have, by the engine's habits: ct -> io
        folder, base = os.path.split(matched_name(name))  # in the name, or -io before the end
        stem, dot, ending = base.rpartition(".")
        others = {re.sub(r"(?<![a-z])ct(?![a-z])", "io", base)} if "ct" in base else set()
        if dot:
            others.add(f"{stem}-io.{ending}")
        wanted[name] = [other for other in (os.path.join(folder, one) for one in others
                                            if one != base) if ("io", other) in positions]
    claims = Counter(other for names in wanted.values() for other in names)
    pairs = {}
    for name, names in wanted.items():
        other = names.pop() if len(names) == 1 else None
        if other is None or claims[other] != 1:
            continue
        ios = positions["io", other]
        if any(len({arguments[at] for at in side}) != 1 for side in (ios, computes[name])):
            continue  # x-io.csv and x-io.csv.gz both given: which is this run's?
        pairs.update(zip(computes[name], ios))
    paired_ios = set(pairs.values())
    runs = []
    for index, argument in enumerate(arguments):
        if argument not in kinds:
            parts = run_parts(argument)
            runs.append(Run(*in_pair_order(*parts, warn)) if len(parts) == 2 else Run(*parts))
        elif index in pairs:
            runs.append(Run(argument, arguments[pairs[index]]))
        elif index not in paired_ios:
            runs.append(Run(argument))
    return runs


def summary_figures(name, run, report):
    kind = report["kind"]
    halves = report_halves(report)
    compute, io, pair = halves.get("compute"), halves.get("io"), report.get("pair")
    what_if = report.get("what_if")
    # the run's own cache's hit share: inferred from its trace when it had one, else the
    # what-if's at the cache_mb its settings name (None without either)
    hit, size = None, io and meta_number(io["meta"], "cache_mb")
    if io and ran_cached(io):
        hit = io["run_cache"]["hit_share"]
    elif size:
        hit = next((s["figures"]["hit_share"]["point"] for s in (what_if or {}).get("settings", ())
                    if s["setting"] == "cache_mb" and s["value"] == size), None)
    verdicts = all_verdicts(report)
    decodes = (compute or {}).get("decodes") or {}
    per_decode = decodes["positions"] / decodes["decodes"] \
        if decodes.get("speculative") and decodes.get("decodes") else None
    engine = (report.get("engine") or {}).get("figures", {})  # null without a log
    row = SUMMARY_ROW(
        run=name, paths=[display_name(path) for path in run.paths], kind=kind, n=1, spread={},
        figure_runs={},
        settings={},
        tokens=(compute or io)["tokens"],
        decode_ms_per_token=compute["ms_per_token"] if compute else None,
        decode_ms_p50=compute["token_ms"]["p50"] if compute else None,
        decode_ms_p99=compute["token_ms"]["p99"] if compute else None,
        compute_ms_per_token=pair["compute_ms_per_token"] if pair else None,
        cache_mgmt_ms_per_token=pair["cache_mgmt_ms_per_token"] if pair else None,
        io_ms_per_token=(pair or io)["io_wall_ms_per_token"]["estimate"] if io else None,
        mib_per_token=(pair["io_mib_per_token"] if pair else io["mib_per_token"]) if io else None,
        hit_share=hit,
        majflt_per_token=compute["majflt_per_token"] if compute else None,
        positions_per_decode=per_decode,
        engine_ms_per_token=engine["decode_ms_per_token"]["engine"]
        if engine.get("decode_ms_per_token") else None,
        engine_hit_share=engine["hit_pct"]["engine"] / 100 if engine.get("hit_pct") else None,
        engine_disagrees=[name for name, figure in engine.items() if figure["agrees"] is False],
        flagged=[v["id"] for v in verdicts if v["flagged"]])
    # per generated position when its decodes cover several (as the engine counts a token)
    return {**(rescaled(row, SUMMARY_ROW, None, 1 / per_decode) if per_decode else row),
            "meta": {**(compute or {}).get("meta", {}), **(io or {}).get("meta", {})},
            "granularity": (compute or {}).get("granularity")}


# A repeat's figures that add up (the rest are averaged) and lists that are joined.
SUMMED, JOINED = ("tokens", "n"), ("paths", "engine_disagrees", "flagged")
# What tells a row's run from every other (a copy, or a saved report of it, has them all alike).
TELLING_FIGURES = ("kind", "tokens", "decode_ms_per_token", "io_ms_per_token", "mib_per_token",
                   "majflt_per_token")


def merged(group):
    """One row of repeats: each figure the mean of its runs' (the ones that have it), its
    standard deviation beside it; counts added, lists joined."""
    first, *more = group
    if not more:
        return first
    row = {**first, "run": ", ".join(row["run"] for row in group), "spread": {}}
    for name in SUMMED:
        row[name] = sum(each[name] for each in group)
    for name in JOINED:
        row[name] = list(dict.fromkeys(item for each in group for item in each[name]))
    row["figure_runs"] = {}
    for name in SUMMARY_FIGURES:
        if name not in SUMMED:
            values = [each[name] for each in group if each[name] is not None]
            row[name], row["spread"][name] = mean_of(values), sd_of(values)
            if 0 < len(values) < len(group):
                row["figure_runs"][name] = len(values)
    return row


PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# ── summary: its text and Markdown sections ──────────────────────────────────────────────────────
def summary_header_blocks(report, view):
    common = report["common"]
    runs = sum(row["n"] for row in report["runs"])
    lines = [f"{len(report['runs'])} row(s) of {runs} run(s) (repeats of one configuration: "
             f"one row, n runs, mean ±sd)" + (f", sorted by {report['sort']}"
                                              if report["sort"] else ", as given")
             + "; figures per token (decoded, or read-tokens for an io trace alone; per "
               "generated position where pos/dec shows)"]
    if common:
        lines.append("shared: " + " ".join(f"{key}={value}" for key, value in common.items()))
    return [Block(f"decode-analyze {TOOL_VERSION} summary", [Prose(lines)], gap=False)]


SUMMARY_WIDTH = TEXT_WIDTH  # summary's table too fits a terminal and a bug report (issue: 120)
# The columns that go first when the table is wider than that (--wide shows them all): the
# percentiles and the engine's hit share say least beside the means and the engine's ms.
SUMMARY_DROPPED_FIRST = ("decode_ms_p50", "decode_ms_p99", "engine_hit_share", "majflt_per_token",
                         "positions_per_decode", "compute_ms_per_token",
                         "cache_mgmt_ms_per_token", "tokens")


def summary_table(report, wide=False):
    """The runs' table: the run's number, the short keys that tell the runs apart, then the
    figures that any run has; within SUMMARY_WIDTH unless wide. (columns, the headers of
    those left out to fit)."""
    rows = report["runs"]
    keys = [text_column(key, lambda row, key=key: setting_text(row, key))
            for key in report["keys"]
            if all(len(setting_text(row, key)) <= SHORT_SETTING for row in rows)]
    fields = [field for field in SUMMARY_ROW.shown()
              if any(row[field.name] not in (None, HIDDEN_WHEN.get(field.name)) for row in rows)]
    numbers = {id(row): place for place, row in enumerate(rows, start=1)}  # equal rows too
    number = column("#", lambda row: numbers[id(row)])

    def spread_column(field):  # a figure, and its runs' sd after it (±) in a row of repeats
        shown = shown_column(field)

        def written(row):
            sd, some = row["spread"].get(field.name), row["figure_runs"].get(field.name)
            value = shown.format(row[field.name])
            value = value if sd is None else f"{value} ±{shown.format(sd)}"
            return value if some is None else f"{value} ({some}/{row['n']})"
        return shown if shown.align == "<" else Column(shown.header, lambda row: row, written,
                                                       ">")
    left_out = []
    while True:  # the keys' columns, then the figures, that fit
        columns = (number, *keys, *map(spread_column, fields))
        if wide or max(map(len, table_lines(columns, rows))) <= SUMMARY_WIDTH:
            return columns, left_out
        if keys:
            left_out.append(keys.pop().header)
            continue
        dropped = next((field for name in SUMMARY_DROPPED_FIRST for field in fields
                        if field.name == name), None)
        if dropped is None:
            return columns, left_out
        left_out.append(shown_column(dropped).header)
        fields.remove(dropped)


# a column every row has at this value says nothing: one run each, no cache managed
HIDDEN_WHEN = {"n": 1, "cache_mgmt_ms_per_token": 0.0}


def summary_blocks(report, view):
    """A legend, a run each (the keys that tell it apart first, its whole name, its flagged
    verdicts; wrapped, never cut: a cut took the keys that differ), then the table, and a line
    naming the columns --wide would add."""
    rows = report["runs"]
    names = [f"  #{i}" + "".join(f" {key}={setting_text(row, key)}" for key in report["keys"])
             + f"  {row['run']}"
             + (f"  FLAGGED: {' '.join(row['flagged'])}" if row["flagged"] else "")
             for i, row in enumerate(rows, start=1)]
    columns, left_out = summary_table(report, view.wide)
    more = [f"(--wide adds: {', '.join(sorted(left_out))}; JSON has every figure)"] \
        if left_out else []
    return [Block("runs", [Prose(names + [""], "      "), Grid(columns, rows),
                           *([Prose(more)] if more else [])])]


KINDS["summary"] = Kind(SUMMARY_REPORT, layout(summary_header_blocks, summary_blocks,
                                               calibration_blocks))


# ── outputs: text ────────────────────────────────────────────────────────────────────────────────
def drawn_sections(report, view):
    """(section, its blocks) of the report's layout, in order."""
    for section in KINDS[report["kind"]].layout:
        yield section, section.draw(report, view)
def text_of(report, view):
    """The report as text: every line at most TEXT_WIDTH columns, trace strings escaped; the
    tables left for --full named in its last line."""
    lines, divided, left_out = [], False, []
    for _, blocks in drawn_sections(report, view):
        for block in blocks:
            if block.gap and not divided:
                lines.append("")
            if block.heading:
                lines += wrap(block.heading, "")
            for part in block.parts:
                if isinstance(part, Full) and not view.full:
                    left_out.append(part.name)
                lines += TEXT_PARTS[type(part)](part, view)
            divided = block.heading is not None and not block.parts
    if left_out:
        lines += ["", *wrap(f"(--full adds: {', '.join(dict.fromkeys(left_out))})", "  ")]
    return "\n".join(lines) + "\n"


def text_header(header, view):
    """What made the report, each input's path whole: on its label's line with its detail when
    they fit, else on lines of its own, cut after a / where it must be (never shortened)."""
    lines = [f"decode-analyze {TOOL_VERSION} {header.command}"]
    for label, path, detail in header.paths:
        lead, path, detail = f"  {safe(label)}: ", safe(str(path)), safe(detail)
        if len(lead) + len(path) + len(detail) <= TEXT_WIDTH:
            lines.append(lead + path + detail)
            continue
        lines.append(lead.rstrip())
        line = "    "
        for piece in re.findall(r"[^/]*/|[^/]+$", path) or [path]:
            if len(line) + len(piece) > TEXT_WIDTH and line.strip():
                lines.append(line)
                line = "      "
            line += piece
            while len(line) > TEXT_WIDTH:  # a piece longer than a line: cut where it ends
                lines.append(line[:TEXT_WIDTH])
                line = "      " + line[TEXT_WIDTH:]
        lines += [line] + ([f"    {detail.strip()}"] if detail else [])
    if header.keys:
        lines += wrap_items("", [fit(f"{key}={header.meta.get(key, '?')}")
                                 for key in header.keys], indent="", separator="")
    return lines


def text_prose(prose, view):
    if prose.clip:  # a legend's line, cut at the width with an ellipsis (JSON holds it whole)
        return [line if len(line) <= TEXT_WIDTH else line[:TEXT_WIDTH - 1] + "…"
                for line in map(safe, prose.lines)]
    return [line for logical in prose.lines for line in wrap(safe(logical), prose.hang)]


def text_full(full, view):
    shown = full.part if view.full else full.instead
    return [] if shown is None else TEXT_PARTS[type(shown)](shown, view)


TEXT_PARTS = {
    Header: text_header,
    Prose: text_prose,
    Items: lambda items, view: wrap_items(items.prefix, [safe(i) for i in items.items]),
    Bullets: lambda bullets, view: [line for item in bullets.items
                                    for line in wrap(f"  {safe(item)}")],
    Grid: lambda grid, view: compact_layer_lines(grid.columns, grid.rows, view.layers)
    if grid.compact else table_lines(grid.columns, grid.rows if grid.shown is None
                                     else grid.rows[:grid.shown], grid.indent),
    Spark: lambda spark, view: [f"  run |{sparkline(spark.values, view.ascii)}|"],
    Full: text_full,
    Listed: lambda listed, view: text_prose(Prose(listed.lines, listed.hang), view),
}


# ── outputs: Markdown ────────────────────────────────────────────────────────────────────────────
# GitHub-flavoured Markdown for an issue or a pull request, from the same layout as the text:
# the same sections and tables; a long table shows its first rows and folds the rest into a
# <details> block; bars are code spans; every string escaped.
GITHUB_COMMENT_LIMIT = 65536
MD_SHOWN_ROWS = 12  # rows of a long table shown before the rest is folded away
_MD_SPECIAL = {"\\": "\\\\", "`": "\\`", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]",
               "|": "\\|", "<": "&lt;", ">": "&gt;", "&": "&amp;", "#": "\\#", "~": "\\~",
               "!": "\\!"}


def md(text):
    """Untrusted text as Markdown that shows as itself: no markup, no HTML, one line."""
    return "".join(_MD_SPECIAL.get(ch, ch) for ch in safe(text))


def markdown_of(report, view):
    view = view._replace(full=True)  # Markdown folds its long tables instead
    pieces = []
    for section, blocks in drawn_sections(report, view):
        for block in blocks:
            if block.heading is not None and not block.parts:
                pieces.append(f"#### {md(block.heading)}")
                continue
            drawn = [f"**{md(block.heading)}**"] if block.heading else []
            drawn += [MD_PARTS[type(part)](part, block.heading, section.fold)
                      for part in block.parts]
            pieces.append(re.sub(r"\n{3,}", "\n\n", "\n\n".join(  # one blank line apart
                piece.strip("\n") for piece in drawn if piece)))
    return fit_comment(pieces)


def md_header(header, heading, fold):
    names = " · ".join(md(os.path.basename(str(path))) for _, path, _ in header.paths)
    pieces = [f"### decode-analyze {TOOL_VERSION} {md(header.command)}"
              + (f": {names}" if names else "")]
    details = [f"{label}: {path}{detail}" for label, path, detail in header.paths if detail]
    if details:
        pieces.append(md_lines(details))
    if header.keys:
        pieces.append(" ".join(f"{md(key)}={md(header.meta.get(key, '?'))}"
                               for key in header.keys))
    return "\n\n".join(pieces)


def md_lines(lines):
    """Logical prose lines as Markdown lines, each ending in a line break."""
    return "\n".join(md(line.strip()) + "  " for line in lines if line.strip())


def md_table(columns, rows):
    lines = ["| " + " | ".join(md(col.header) for col in columns) + " |",
             "|" + "|".join("---:" if col.align == ">" else ":---" for col in columns) + "|"]
    # a bar is a code span: it keeps every character, where spaces would collapse
    lines += ["| " + " | ".join(f"`{bar(value_of(col, row), col.width)}`" if col.width
                                else md(cell(col, row)) for col in columns) + " |"
              for row in rows]
    return "\n".join(lines)


def md_details(summary, table):
    return f"<details><summary>{md(summary)}</summary>\n\n{table}\n\n</details>"


def md_grid(grid, heading, fold):
    """The table; a folded section's whole table, or a long table's rows past the first few,
    in a <details> block that a reader opens. No row appears twice."""
    rows = grid.rows
    if fold:
        return md_details(f"{heading or 'table'}: {len(rows)} rows", md_table(grid.columns, rows))
    alike = alike_rows(grid) if len(rows) > MD_SHOWN_ROWS else None
    if alike:  # rows nearly identical: a line, the exceptions named, the whole table folded
        return md(alike) + "\n\n" + md_details(f"all {len(rows)} rows",
                                                md_table(grid.columns, rows))
    shown = MD_SHOWN_ROWS if grid.shown is None or grid.compact else grid.shown
    if len(rows) <= shown:
        return md_table(grid.columns, rows)
    rest = md_details(f"the other {len(rows) - shown} rows", md_table(grid.columns, rows[shown:]))
    return md_table(grid.columns, rows[:shown]) + "\n\n" + rest if shown else rest


ALIKE_BAND = 0.10  # rows whose figure is within this share of the median's are alike ...
ALIKE_MOST = 0.75  # ... and a table of this share of alike rows or more says them in a line


def alike_rows(grid):
    """A line for a table whose rows are nearly identical in its first figure (48 layers of
    about 2 ms: 'figure within 10% of their median M in N of its rows; the others: ...'), or
    None."""
    name, *rest = grid.columns
    columns = [col for col in rest if col.header]
    for col in columns:
        values = [value_of(col, row) for row in grid.rows]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            break
    else:
        return None
    middle = sorted(values)[len(values) // 2]
    apart = [i for i, v in enumerate(values) if abs(v - middle) > ALIKE_BAND * abs(middle)]
    if not middle or len(values) - len(apart) < ALIKE_MOST * len(values):
        return None
    others = ", ".join(f"{cell(name, grid.rows[i]).strip()} {cell(col, grid.rows[i]).strip()}"
                       for i in apart[:5]) + (f" and {len(apart) - 5} more" if len(apart) > 5
                                              else "")
    return (f"{col.header} within {ALIKE_BAND:.0%} of their median, {col.format(middle).strip()},"
            f" in {len(values) - len(apart)} of {len(values)} rows"
            + (f"; the others: {others}" if apart else ""))


MD_PARTS = {
    Header: md_header,
    Prose: lambda prose, heading, fold: md_lines(prose.lines),
    Items: lambda items, heading, fold: md(f"{items.prefix.strip()} "
                                           + ", ".join(items.items)),
    Bullets: lambda bullets, heading, fold: "\n".join(f"- {md(item)}" for item in bullets.items),
    Grid: md_grid,
    Spark: lambda spark, heading, fold: f"run `{sparkline(spark.values)}`",
    Full: lambda full, heading, fold: md_full(full, heading, fold),
    Listed: lambda listed, heading, fold: "\n".join(md_listed(line) for line in listed.lines),
}


def md_listed(line):
    """An aligned line (a what-if setting) as a bullet, its first word (setting=value, the
    tool's own) a code span."""
    first, _, rest = line.strip().partition(" ")
    return f"- `{first}` {md(' '.join(rest.split()))}"


def md_full(full, heading, fold):
    """What the text shows with --full only: its short form, as the text's, then the whole in a
    <details> block a reader opens (Markdown has everything, its first view the text's)."""
    whole = MD_PARTS[type(full.part)](full.part, heading, True)
    if full.instead is None:
        return whole
    return MD_PARTS[type(full.instead)](full.instead, heading, fold) + "\n\n" + (
        whole if whole.startswith("<details>") else md_details(full.name, whole))


def fit_comment(parts, limit=GITHUB_COMMENT_LIMIT):
    """The parts joined; past one GitHub comment, the longest folded tables are cut, each once
    and by enough, with a line that says how many rows were left out; what still does not fit
    (a name longer than the limit) is cut at it, with a line that says so. Linear in the text."""
    parts = [part.strip("\n") for part in parts if part]
    size = sum(map(len, parts)) + 2 * max(0, len(parts) - 1) + 1
    cuttable = {i for i, part in enumerate(parts) if "<details>" in part}
    while size > limit and cuttable:
        longest = max(cuttable, key=lambda i: len(parts[i]))
        cuttable.discard(longest)
        shorter = cut_details(parts[longest], size - limit)
        size += len(shorter) - len(parts[longest])
        parts[longest] = shorter
    text = "\n\n".join(parts) + "\n"
    if len(text) <= limit:
        return text
    note = (f"\n*Cut here: past one GitHub comment ({limit} characters) with no table left to "
            f"fold away; `--format json` has the whole report.*\n")
    text = text[:limit - len(note)]
    return text[:text.rfind("\n") + 1] + note


def cut_details(part, excess):
    """A <details> block with enough of its last table rows removed to save `excess`
    characters (all of them, if that is not enough), and a line saying so."""
    head, _, rest = part.partition("<details>")
    block, _, tail = rest.partition("</details>")
    lines = block.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("| ")][1:]
    saved, cut = 0, set()
    while rows and saved < excess + 200:
        i = rows.pop()
        saved += len(lines[i]) + 1
        cut.add(i)
    if not cut:
        return part
    kept = [line for i, line in enumerate(lines) if i not in cut]
    note = f"\n*{len(cut)} rows left out to fit one comment; `--format json` has them all.*\n"
    return head + "<details>" + "\n".join(kept).rstrip("\n") + "\n" + note + "\n</details>" + tail


# ── outputs: tidy CSV ────────────────────────────────────────────────────────────────────────────
# --format csv: the JSON report in long form, one line per value: (section, row, column, value,
# unit). A section is the path of objects down to a table or a value (`by_op`,
# `io_wall_ms_per_token`, `pair.by_lane`); a row is a table row's name when its naming field is
# unique in the table (`MUL_MAT`, `3`), else its index; every value of the report is one line,
# so a folder of runs loads into one table (DuckDB: read_csv_auto('runs/*.csv')).
# No SQL keyword among the names (`column` was one): a folder of these loads into SQLite or
# DuckDB as it is, with numbers in a column of their own and text in another.
CSV_HEADER = ("section", "row", "field", "number", "text", "unit")
ROW_NAMES = ("op", "name", "category", "layer", "lane", "kind", "label", "figure", "key")
# A value's unit: its column's own (past the bounds of a figure and the part it is kept for:
# `figures.hit_share.point` is a hit_share's, `tokens.io` a tokens'), else its section's
# innermost name's (a bare `min` of `io_wall_ms_per_token`), else the unit the object above it
# states (a diff row's, a diff series'); the few whose name says none, by name.
NAMED_UNITS = {("by_op", "count"): "nodes", ("latency_hist", "count"): "reads",
               ("warmup", "first_mean"): "ms", ("warmup", "rest_mean"): "ms",
               ("tail_in_post", "others_per_token"): "segments", ("runs", "n"): "runs"}
QUALIFIERS = {"point", "min", "max", "mean", "p50", "p90", "p99", "p999", "total", "compute",
              "io", "pair"}
# a probability, a level, a yes or no; a diff test's samples (n), whose unit is its test_unit
DIMENSIONLESS = {"p", "alpha", "significant", "n"}
SPREADSHEET_FORMULA = ("=", "+", "-", "@", "\t", "\r")  # a text cell a spreadsheet would run


def unit_of(column, section, row_unit=""):
    table = section.rpartition(".")[2]
    if (table, column) in NAMED_UNITS:
        return NAMED_UNITS[table, column]
    outer = column.split(".")
    innermost = outer.pop()
    while outer and innermost in QUALIFIERS:
        innermost = outer.pop()
    if innermost in DIMENSIONLESS:
        return ""
    return unit_named(innermost) or unit_named(table) or row_unit


def csv_text(text):
    """Untrusted text as a CSV cell: escaped as every format escapes it (safe), and behind a '
    where a spreadsheet would take it for a formula."""
    text = safe(text)
    return "'" + text if text.startswith(SPREADSHEET_FORMULA) else text


def csv_cell(value):
    """A value as CSV text: null empty, booleans as JSON writes them, text by csv_text."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return csv_text(value)
    return repr(value) if isinstance(value, float) else str(value)


def row_names(rows):
    """Each row's name: its naming field's value when that is unique in the table and holds
    no / (which joins the rows of nested tables), else its index. A per-token table's rows all
    have its first row's fields: with no naming field among them, its names are made as read."""
    if isinstance(rows, TokenRows) and not set(next(iter(rows), {})) & set(ROW_NAMES):
        return map(str, range(len(rows)))
    for field in ROW_NAMES:
        if rows and all(isinstance(row, dict) and field in row for row in rows):
            names = [csv_cell(row[field]) for row in rows]
            if len(set(names)) == len(names) and not any("/" in name for name in names):
                return names
    return [str(index) for index in range(len(rows))]


def tidy_lines(value, section, rows=(), columns=(), row_unit=""):
    """(section, row, field, value, unit) of every value under `value`. The objects above
    every table name the section; in a table, each table crossed adds its row's name to the
    row (joined by /) and each object its key to the field (joined by .), so that a line is
    found again by walking the report: at a table take a row, at an object a field. A row
    that states its unit (a diff row, a diff series) gives it to the figures below it whose
    names state none."""
    if isinstance(value, dict) and isinstance(value.get("unit"), str):
        row_unit = value["unit"]
    if isinstance(value, (list, TokenRows)):
        for name, item in zip(row_names(value), value):
            yield from tidy_lines(item, section, rows + (name,), columns, row_unit)
    elif not rows and isinstance(value, dict) and value and all(  # {op: each token's µs}
            isinstance(samples, array) or isinstance(samples, list) and not any(
                isinstance(v, (dict, list)) for v in samples) for samples in value.values()):
        # per-token samples: rows tokens, columns ops
        for key, samples in value.items():
            for index, sample in enumerate(samples):
                yield section, str(index), csv_text(str(key)), sample, unit_of("", section)
    elif isinstance(value, dict):
        for key, item in value.items():
            if rows:
                yield from tidy_lines(item, section, rows, columns + (str(key),), row_unit)
            elif isinstance(item, (dict, list, TokenRows)):
                name = csv_text(str(key))
                yield from tidy_lines(item, f"{section}.{name}" if section else name,
                                      row_unit=row_unit)
            else:
                yield (section or "report", "", csv_text(str(key)), item,
                       number_unit(item, str(key), section))
    else:
        column = ".".join(columns)
        yield section, "/".join(rows), csv_text(column), value, \
            number_unit(value, column, section, row_unit)


def number_unit(value, name, section, row_unit=""):
    """The unit of a value's cell: a number's (or a null figure's), never text's (--set ms=3
    is the text 3, in no unit)."""
    return "" if isinstance(value, (str, bool)) else unit_of(name, section, row_unit)


def csv_chunks(report):
    """The report as tidy CSV (RFC 4180), in chunks as its lines are made: a per-token table is
    never held whole as text."""
    out = StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(CSV_HEADER)
    for count, (section, row, field, value, unit) in enumerate(tidy_lines(report, ""), 1):
        # a number in the first value column, text and true/false in the second, null in neither
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        cell = csv_cell(value)
        writer.writerow((section, row, field, cell if number else "", "" if number else cell,
                         unit))
        if count % 4096 == 0:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


def csv_of(report):
    return "".join(csv_chunks(report))


# ── outputs: files, written whole or not at all ──────────────────────────────────────────────────
def write_output(path, text):
    """text (a string, or string pieces as they are made) to `path`: a regular file (or a new
    path) is replaced atomically, the target of a symlink being the file replaced; a FIFO, a
    device or /dev/stdout is written to as it is, never replaced by a file."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        regular = True
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if regular:
        return write_atomically(os.path.realpath(path), text, path)
    try:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.writelines([text] if isinstance(text, str) else text)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def write_atomically(path, text, named=None):
    """text (a string, or string pieces as they are made) into the regular file at `path`,
    whole or not at all: a reader never sees half a report. named: the path as given."""
    named = named or path
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".decode-analyze-",
                                             suffix=".tmp")
    except OSError as exc:
        raise OutputError(f"{named}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as f:
            f.writelines([text] if isinstance(text, str) else text)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 is not what > gives
        os.replace(temporary, path)
    except BaseException as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        if not isinstance(exc, OSError):
            raise  # a bad trace met while writing: its error, with no file left behind
        raise OutputError(f"{named}: cannot write: {exc.strerror or exc}") from None


# ── pictures: Perfetto, a Chrome Trace Event Format file ─────────────────────────────────────────
# Opens in ui.perfetto.dev and chrome://tracing. Timestamps are µs. A v1 trace has no clock:
# its nodes are laid end to end in file (seq) order with their wall_ns, which is real because
# tracing runs one node at a time behind a barrier (the gaps between nodes are not recorded),
# and its reads end to end per lane, each layer's from the start of that layer's routing node
# (the one that waits for them, READS_AFTER) where a compute trace gives it; each token starts
# where the one before it ended, and the reads' tracks say "reconstructed". v2 traces use their
# start_ns/end_ns, and the two files of a run share one clock. Times are whole ns (3 decimals
# of µs), so that a child's end is its parent's exactly.
PERFETTO_TOKENS = (0, 64)
COMPUTE_PID, READS_PID, WAITS_PID = 1, 2, 3
ExportToken = namedtuple("ExportToken", "turn phase step index")
# What --perfetto exports: the traces (either may be None), how they are read, and the window
# of tokens, (A, B): the A-th (0-based) to before the B-th of the selection.
Export = namedtuple("Export", "compute_path io_path reading window")
Track = namedtuple("Track", "pid tid")  # a process and a thread of the Perfetto UI
COMPUTE_EXPORT = Columns("compute", COMPUTE_COLUMNS,
                         ints=("wall_ns", "majflt", "start_ns", "end_ns"),
                         keys=("turn", "phase", "step", "layer"), strings=("op", "name"))
IO_EXPORT = Columns("io", IO_COLUMNS, ints=("latency_ns", "start_ns", "end_ns"),
                    keys=("turn", "phase", "step", "layer", "expert", "lane", "spec",
                          "read_bytes"), strings=("kind", "thread_id"))


def window_text(window):
    """(A, B) as the A:B --tokens takes."""
    first, last = window
    return f"{first}:{last}"


def token_key(token):
    """A token's (turn, phase, step)."""
    return (token.turn, token.phase, token.step)


def exported_runs(path, columns, export, keys=None):
    """(token, {column: values}) for each run of rows of the exported tokens, in file order:
    the selection's tokens in the export's window, or those whose (turn, phase, step) is in
    `keys`. Reading stops after the window's last token."""
    first, last = export.window
    with Trace(path, export.reading.skip_bad_rows) as trace:
        trace.require(columns.kind, columns.required)
        book = TokenBook(export.reading.selection, lambda turn, phase, step: ExportToken(
            turn, phase, step, len(book.records)))
        present = columns._replace(ints=[c for c in columns.ints if c in trace.columns])
        for batch in trace.batches(present):
            for run in batch.runs:
                row = book.lookup(run)
                if row is None:
                    continue
                token = book.records[row]
                if keys is not None:
                    if token_key(token) not in keys:
                        continue
                elif token.index >= last:
                    return
                elif token.index < first:
                    continue
                yield token, {name: values[run.start:run.end]
                              for name, values in batch.items()}


READS_AFTER = "ffn_moe_weights"  # the routing node a streamed run's read wait lands on


def event(name, span, track, args, category=None):
    """A complete event: span (start, duration) in µs, on the track; both ends in whole ns."""
    start, duration = span
    begin, end = round(start, 3), round(start + duration, 3)
    record = {"name": name, "ph": "X", "ts": begin, "dur": round(end - begin, 3),
              "pid": track.pid, "tid": track.tid, "args": args}
    if category:
        record["cat"] = category
    return record


def name_event(kind, track, name):
    """A metadata event naming a process or a thread (ts 0: Perfetto wants one on every
    event)."""
    return {"name": kind, "ph": "M", "ts": 0, "pid": track.pid, "tid": track.tid,
            "args": {"name": name}}


LaidOut = namedtuple("LaidOut", "events end anchors")  # anchors: {layer: its reads' start, µs}


def compute_events(token, rows, start_us, timed=None):
    """The token's slice and its nodes' slices (category-named), its end in µs, and where each
    layer's reads may start (v1: its first READS_AFTER node's start). v1: nodes end to end
    from start_us; v2: at their own timestamps (`timed`: Intervals in ns from the origin)."""
    ops, names, walls = rows["op"], rows["name"], rows["wall_ns"]
    synthetic = [op in SYNTHETIC_OPS for op in ops]
    nodes = [i for i, flag in enumerate(synthetic) if not flag]
    categories = classify_graph([ops[i] for i in nodes], [names[i] for i in nodes],
                                [int(rows["layer"][i]) for i in nodes])
    track = Track(COMPUTE_PID, token.turn * 2)
    events, cursor, anchors = [], start_us, {}
    total_ns = sum(walls[i] for i in nodes)
    for i, node in zip(nodes, categories):
        at = cursor if timed is None else timed.starts[i] / 1e3
        if node.base == READS_AFTER:
            anchors.setdefault(node.layer, at)
        events.append(event(names[i] or ops[i], (at, walls[i] / 1e3), track,
                            {"op": ops[i], "layer": node.layer, "category": node.category,
                             "majflt": rows["majflt"][i]}, node.category))
        cursor += walls[i] / 1e3
    start, end = start_us, start_us + total_ns / 1e3
    if timed is not None:  # the span as the timeline measures it
        spans = TimelineToken(token.turn, token.phase, token.step)
        spans.add(ops, timed)
        _, span = decode_span(spans)
        start, end = span.start / 1e3, span.end / 1e3
        callbacks = Track(COMPUTE_PID, token.turn * 2 + 1)
        events += [event("callback", (timed.starts[i] / 1e3, walls[i] / 1e3), callbacks, {})
                   for i, op in enumerate(ops) if op == "BMOE_CALLBACK"]
    head = event(f"turn {token.turn} step {token.step}", (start, end - start), track,
                 {"turn": token.turn, "phase": token.phase, "step": token.step,
                  "ms": total_ns / NS_PER_MS, "majflt": sum(rows["majflt"])}, "token")
    return LaidOut([head] + events, end, anchors)


def io_events(rows, start_us, threads, anchors=None, timed=None):
    """The reads' slices, by lane (and the waits', by thread, in v2), and how long the
    token's reads took in µs: v1 lays each lane's reads end to end from start_us, a layer's
    no earlier than its anchor (its routing node's start, when the compute trace gives it)."""
    anchors = anchors or {}
    events, lane_end = [], {}
    kinds = rows.get("kind") or ["read"] * len(rows["lane"])
    thread_ids = rows.get("thread_id") or ["?"] * len(rows["lane"])
    for i, kind in enumerate(kinds):
        if kind == "wait" and timed is None:
            continue  # not a read: on a reconstructed lane it would push the reads along
        latency_us = rows["latency_ns"][i] / 1e3
        if timed is not None:
            at, latency_us = timed.starts[i] / 1e3, (timed.ends[i] - timed.starts[i]) / 1e3
        else:
            at = max(lane_end.get(rows["lane"][i], start_us),
                     anchors.get(int(rows["layer"][i]), start_us))
            lane_end[rows["lane"][i]] = at + latency_us
        where = {"layer": int(rows["layer"][i]), "expert": int(rows["expert"][i])}
        if kind == "wait":
            thread = Track(WAITS_PID, threads.setdefault(thread_ids[i], len(threads)))
            events.append(event("expert wait", (at, latency_us), thread, where, "wait"))
            continue
        events.append(event(f"read L{rows['layer'][i]} E{rows['expert'][i]}", (at, latency_us),
                            Track(READS_PID, int(rows["lane"][i])),
                            {**where, "spec": int(rows["spec"][i]),
                             "read_bytes": int(rows["read_bytes"][i])},
                            "speculative read" if rows["spec"][i] == "1" else "read"))
    return events, max(lane_end.values(), default=start_us) - start_us


def export_perfetto(target, export):
    """Write the Perfetto file of the exported tokens of one trace or a pair, atomically.
    Returns how many tokens it holds."""
    selection = export.reading.selection  # decode tokens unless a phase was chosen
    export = export._replace(reading=export.reading._replace(selection=Selection(
        selection.phase or "decode", selection.turns, selection.steps, selection.skip)))
    v2 = True
    for path in filter(None, (export.compute_path, export.io_path)):
        with Trace(path) as trace:
            v2 = has_v2_clock(trace)
        if not v2:
            break
    keys, starts = compute_preview(export, keys=bool(export.io_path), first=v2)
    io_rows = {}
    if export.io_path:
        for token, rows in exported_runs(export.io_path, IO_EXPORT, export, keys):
            io_rows.setdefault(token_key(token), []).append(rows)
    origin = min(chain((min(rows["start_ns"]) for runs in io_rows.values() for rows in runs),
                       starts), default=0) if v2 else None
    pieces = PerfettoPieces(export, io_rows, keys, origin)
    write_output(target, pieces)
    if pieces.clock.backwards:
        export.reading.warn(f"{target}: {pieces.clock.backwards} row(s) end before they start: "
                            f"drawn as empty intervals")
    return pieces.tokens


def compute_preview(export, keys, first):
    """What must be known of the compute trace before the events are written, in one pass
    over the exported tokens: their (turn, phase, step) when `keys` (a pair: which reads to
    keep), or None; and each exported run's earliest start_ns when `first` (v2: the clock's
    origin is the earliest of them, since a later token may start earlier), or []."""
    found, starts = set(), []
    if export.compute_path and (keys or first):
        for token, rows in exported_runs(export.compute_path, COMPUTE_EXPORT, export):
            found.add(token_key(token))
            if first:
                starts.append(min(rows["start_ns"]))
    return (found if keys and export.compute_path else None), starts


class PerfettoPieces:
    """The JSON text of the file, in pieces as they are made (iterate it once); `tokens` is
    the number of exported tokens once it has been read through."""

    def __init__(self, export, io_rows, keys, origin):
        self.export, self.io_rows, self.keys, self.origin = export, io_rows, keys, origin
        self.tokens, self.clock = 0, Clock()

    def __iter__(self):
        threads, self.tracks = {}, set()
        yield '{"traceEvents": [\n'
        cursor = 0.0
        for token, runs in token_groups(self.export, self.io_rows, self.keys):
            self.tokens += 1
            events, end, anchors = [], cursor, {}
            for rows in runs:
                laid = compute_events(token, rows, cursor, self.timed(rows))
                events += laid.events
                end = laid.end
                for layer, at in laid.anchors.items():
                    anchors.setdefault(layer, at)
            reads_end = cursor
            for rows in self.io_rows.get(token_key(token), ()):
                more, took = io_events(rows, cursor, threads, anchors, self.timed(rows))
                events += more
                reads_end = max(reads_end, cursor + took)
            self.tracks.update(Track(e["pid"], e["tid"]) for e in events)
            cursor = max(end, reads_end)
            yield "".join(json_event(e) + ",\n" for e in events)
        yield ",\n".join(map(json_event, self.names(threads)))
        yield ('\n], "displayTimeUnit": "ms", "otherData": ' + json_event(self.other_data())
               + "}\n")

    def timed(self, rows):
        """v2: the rows' Intervals (Clock) in ns from the origin; v1, which has no clock: None."""
        if self.origin is None:
            return None
        starts, ends = self.clock.intervals(rows)
        return Intervals([start - self.origin for start in starts],
                         [end - self.origin for end in ends])

    def names(self, threads):
        """The name events of the tracks that hold events (an empty track is not declared):
        they come last, since every chunk before them ends with a comma; the compute process
        always has one (the first token's)."""
        rebuilt = " (reconstructed)" if self.origin is None else ""
        used = sorted(self.tracks)
        waits = {tid: thread for thread, tid in threads.items()}
        thread_names = {COMPUTE_PID: lambda tid: f"turn {tid // 2}" + (
                            " callbacks" if tid % 2 else ""),
                        READS_PID: lambda tid: f"lane {tid}{rebuilt}",
                        WAITS_PID: lambda tid: f"thread {safe(waits[tid])}"}
        process_names = {COMPUTE_PID: "compute", READS_PID: f"reads by lane{rebuilt}",
                         WAITS_PID: "expert waits by thread"}
        names = [name_event("thread_name", track, thread_names[track.pid](track.tid))
                 for track in used]
        names += [name_event("process_name", Track(pid, 0), process_names[pid])
                  for pid in sorted({track.pid for track in used})]
        return names or [name_event("process_name", Track(COMPUTE_PID, 0), "compute")]

    def other_data(self):
        clock = ("steady_ns: the v2 traces' own timestamps, one clock for both files"
                 if self.origin is not None else
                 "reconstructed from v1 wall_ns and latency_ns: nodes end to end in seq order, "
                 "reads end to end per lane, each layer's from its routing node "
                 f"({READS_AFTER}) when the compute trace is given, tokens one after "
                 "another; gaps are not recorded")
        return {"tool": f"decode-analyze {TOOL_VERSION}", "clock": clock,
                "reconstructed": self.origin is None, "tokens": self.tokens,
                "window": window_text(self.export.window),
                "phase": self.export.reading.selection.phase}


def token_groups(export, io_rows, keys):
    """(token, [runs of compute rows]) per exported token; io-only: (token, [])."""
    if not export.compute_path:
        for key in io_rows:
            yield ExportToken(*key, 0), []
        return
    current, runs = None, []
    for token, rows in exported_runs(export.compute_path, COMPUTE_EXPORT, export):
        if current is not None and token != current:
            yield current, runs
            runs = []
        current = token
        runs.append(rows)
    if current is not None:
        yield current, runs


def json_event(record):
    return json.dumps(record, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


# ── pictures: SVG, the report's panels ───────────────────────────────────────────────────────────
# One self-contained SVG (no script, no external font or link), drawn from the report dict.
# Panels stack vertically, each with a title, axes with units and a legend. Past SVG_MAX_BARS
# tokens, each bar is a group of consecutive tokens: its mean, with a tick at the group's
# largest token, so that the file stays small whatever the run's length.
SVG_WIDTH = 960
SVG_PANEL = 230  # height of one panel, title and axes included
SVG_LEFT, SVG_RIGHT, SVG_TOP, SVG_BOTTOM = 64, 16, 34, 34
SVG_MAX_BARS = 160
SVG_LINE = "#4e79a7"  # a panel's one line
SVG_PALETTE = (SVG_LINE, "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
               "#ff9da7", "#9c755f", "#bab0ac")


def xml(text):
    """Untrusted text as XML character data or an attribute value: shown as itself (safe()
    has already written every character XML forbids, all unprintable, as an escape)."""
    text = safe(text)
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#39;"))


AXIS_STEPS = (1, 2, 2.5, 5)  # times a power of ten: the y axes' tick steps
AXIS_TICKS = 5  # at most this many steps from 0 to the top


def nice_axis(value):
    """(top, step) of a y axis from 0 that holds value: the step the smallest of 1, 2, 2.5
    or 5 times a power of ten that reaches it in AXIS_TICKS steps or fewer, the top a whole
    number of steps (1, 1 for nothing)."""
    if not value or value <= 0 or not math.isfinite(value):
        return 1.0, 0.25
    power = 10.0 ** math.floor(math.log10(value / AXIS_TICKS))
    for step in (s * power for s in AXIS_STEPS + tuple(10 * s for s in AXIS_STEPS)):
        steps = math.ceil(value / step * (1 - 1e-12))
        if steps <= AXIS_TICKS:
            return float(f"{steps * step:.12g}"), float(f"{step:.12g}")
    return value, value  # not reached: 50 x power / 5 steps covers any value


class Panel:
    """One chart: a plot area at (left, top) of size width x height inside the SVG, a y axis
    from 0 to y_max in `unit`, and the elements drawn into it."""

    def __init__(self, index, title, unit, y_max, x_label):
        self.top = index * SVG_PANEL + SVG_TOP
        self.left, self.width = SVG_LEFT, SVG_WIDTH - SVG_LEFT - SVG_RIGHT
        self.height = SVG_PANEL - SVG_TOP - SVG_BOTTOM
        self.y_max, self.y_step = nice_axis(y_max)
        self.per_px = self.y_max / self.height  # units per pixel, for readers and tests
        self.labels = []  # Box of each note and legend entry in it, so that none overlap
        self.title_px = TITLE_CHAR_PX * len(title)
        self.parts = [f'<g class="panel" data-title="{xml(title)}" data-unit="{xml(unit)}" '
                      f'data-per-px="{self.per_px:.9g}">',
                      f'<text x="{self.left}" y="{self.top - 14}" class="title">'
                      f'{xml(title)}</text>']
        self._axes(unit, x_label)

    def _axes(self, unit, x_label):
        bottom = self.top + self.height
        for i in range(round(self.y_max / self.y_step) + 1):
            value = float(f"{self.y_step * i:.12g}")  # 0.1 x 3 is 0.30000000000000004
            y = bottom - value / self.per_px
            self.parts.append(f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.left + self.width}"'
                              f' y2="{y:.1f}" class="grid"/><text x="{self.left - 4}" '
                              f'y="{y + 4:.1f}" class="tick" text-anchor="end">{value:g}</text>')
        self.parts.append(f'<text transform="translate(14,{self.top + self.height / 2:.0f}) '
                          f'rotate(-90)" class="axis" text-anchor="middle">{xml(unit)}</text>'
                          f'<text x="{self.left + self.width / 2:.0f}" y="{bottom + 28}" '
                          f'class="axis" text-anchor="middle">{xml(x_label)}</text>')

    def y(self, value):
        return self.top + self.height - min(value, self.y_max) / self.per_px

    def x_label(self, x, text, anchor="middle"):
        self.parts.append(f'<text x="{x:.1f}" y="{self.top + self.height + 13}" class="tick" '
                          f'text-anchor="{anchor}">{xml(text)}</text>')

    def legend(self, names, slot_chars=None):
        """A swatch and a name each, from the right; slot_chars: every entry as wide as that
        many characters (the inputs' names, so that their places do not hang on them)."""
        widths = [8 * (slot_chars or len(str(name))) + 22 for name in names]
        # beside the title when there is room, else on a row of its own under it
        row = -24 if self.left + self.title_px + 12 + sum(widths) <= self.left + self.width \
            else -11
        x = self.left + self.width
        for i, name in reversed(list(enumerate(names))):
            x -= widths[i]
            self.parts.append(f'<rect x="{x}" y="{self.top + row}" width="10" height="10" '
                              f'class="c{i % len(SVG_PALETTE)}"/><text x="{x + 13}" '
                              f'y="{self.top + row + 9}" class="tick legend">{xml(name)}'
                              f'</text>')
            self.labels.append(Box(x, self.top + row, x + widths[i], self.top + row + 11))

    def stacked_bars(self, stacks, names, tops=None, css="bar"):
        """One bar per stack (a list of values, one per name), bottom to top; `tops`: a tick at
        each bar's own maximum (a group's largest token)."""
        width = self.width / max(1, len(stacks))
        bar = f"{max(width - 1, 0.5):.1f}"
        for i, stack in enumerate(stacks):
            x = f"{self.left + i * width:.1f}"
            shown = ", ".join(f"{name} {value:.4g}" for name, value in zip(names, stack) if value)
            self.parts.append(f'<g class="{css}" data-index="{i}" data-total="{sum(stack):.9g}">'
                              f'<title>{xml(shown)}</title>')
            base = 0.0
            for j, value in enumerate(stack):
                if value > 0:  # classes, not fill colours: about 60 bytes a rectangle
                    self.parts.append(f'<rect x="{x}" y="{self.y(base + value):.1f}" '
                                      f'width="{bar}" height="{value / self.per_px:.2f}" '
                                      f'class="c{j % len(SVG_PALETTE)}"/>')
                base += value
            self.parts.append("</g>")
            if tops is not None:
                y, x = self.y(tops[i]), self.left + i * width
                self.parts.append(f'<line x1="{x:.2f}" x2="{x + width - 1:.2f}" y1="{y:.2f}" '
                                  f'y2="{y:.2f}" class="max"/>')
        return width

    def polyline(self, values, color, name):
        """A line through the values (None: undefined, as a share of no bytes: left out)."""
        step = self.width / max(1, len(values) - 1)
        points = " ".join(f"{self.left + i * step:.1f},{self.y(v):.1f}"
                          for i, v in enumerate(values) if v is not None)
        if not points:
            self.parts.append(f'<text x="{self.left + 4}" y="{self.top + 14}" class="note">'
                              f'{xml(name)}: undefined (nothing to share)</text>')
            return
        self.parts.append(f'<polyline points="{points}" fill="none" stroke="{color}" '
                          f'stroke-width="1.5" class="series"><title>{xml(name)}</title>'
                          f'</polyline>')

    def marker(self, x0, x1, css, label=None):
        self.parts.append(f'<rect x="{x0:.2f}" y="{self.top}" width="{max(x1 - x0, 1):.2f}" '
                          f'height="{self.height}" class="{css}"/>')
        if label:
            self.note(x0 + 2, self.top + 10, label, "start")

    def note(self, x, y, text, anchor="middle"):
        """A note at (x, y) unless it would overlap one already written: whether it was."""
        box = self.reserve(x, y, len(text), anchor)
        if box is not None:
            self.write(box, text)
        return box is not None

    def reserve(self, x, y, chars, anchor="middle"):
        """The box a note of `chars` characters at (x, y) takes, kept for it; None when it
        would overlap a kept one."""
        width = NOTE_CHAR_PX * chars
        x0 = x - width / 2 if anchor == "middle" else x
        x0 = min(max(x0, self.left), self.left + self.width - width)
        box = Box(x0, y - NOTE_HEIGHT_PX, x0 + width, y + 2)
        if any(box.x0 < other.x1 and other.x0 < box.x1 and box.y0 < other.y1 and
               other.y0 < box.y1 for other in self.labels):
            return None
        self.labels.append(box)
        return box

    def write(self, box, text):
        x0, _, _, bottom = box
        self.parts.append(f'<text x="{x0:.1f}" y="{bottom - 2:.1f}" class="note" '
                          f'data-box="{" ".join(f"{v:.1f}" for v in box)}">{xml(text)}</text>')

    def points(self, points, name, colour=0):
        """(x, y-value) points, each a run: no line between them."""
        self.parts += [f'<circle cx="{x:.1f}" cy="{self.y(v):.1f}" r="3" '
                       f'class="c{colour % len(SVG_PALETTE)} run">'
                       f'<title>{xml(name)} {v:.4g}</title></circle>' for x, v in points]

    def dots(self, points, name, colour=0):
        """A line through (x, y-value) points, each marked: values known only there."""
        if not points:
            return
        path = " ".join(f"{x:.1f},{self.y(v):.1f}" for x, v in points)
        self.parts.append(f'<polyline points="{path}" fill="none" '
                          f'stroke="{SVG_PALETTE[colour % len(SVG_PALETTE)]}" stroke-width="1" '
                          f'stroke-dasharray="3,3" class="series"><title>{xml(name)}</title>'
                          f'</polyline>')
        self.parts += [f'<circle cx="{x:.1f}" cy="{self.y(v):.1f}" r="3" '
                       f'class="c{colour % len(SVG_PALETTE)} point">'
                       f'<title>{xml(name)} {v:.4g}</title></circle>' for x, v in points]

    def text(self):
        """The panel's elements, one a line (a golden's diff can be read)."""
        return "\n".join(self.parts) + "\n</g>"


def token_axis_panel(index, title, unit, tokens, series, names):
    """Per-token stacked bars (binned past SVG_MAX_BARS) with turn boundaries and the
    warm-up marked."""
    size = max(1, math.ceil(len(tokens) / SVG_MAX_BARS))  # tokens a bar
    stacks, tops = [], []  # per bar, the mean of each named series; and its largest total
    for start in range(0, len(tokens), size):
        indexes = range(start, min(start + size, len(tokens)))
        stacks.append([sum(series[name][i] for i in indexes) / len(indexes) for name in names])
        tops.append(max(sum(series[name][i] for name in names) for i in indexes))
    what = "token" if size == 1 else f"group of {size} tokens (bar: mean; tick: max)"
    panel = Panel(index, title, unit, max(tops, default=0), f"decode order, one bar per {what}")
    panel.legend(names)
    width = panel.stacked_bars(stacks, names, tops if size > 1 else None)
    seen = defaultdict(int)
    for i, token in enumerate(tokens):
        group = i // size
        if i and token["turn"] != tokens[i - 1]["turn"]:
            x = panel.left + group * width
            panel.marker(x, x + 1, "turn", f"turn {token['turn']}")
        if token["phase"] == DECODE and seen[token["turn"]] == 0:
            x = panel.left + group * width
            end = min(len(tokens), i + WARMUP_TOKENS)
            panel.marker(x, panel.left + ((end - 1) // size + 1) * width, "warmup",
                         None if i else f"first {WARMUP_TOKENS} tokens")
        seen[token["turn"]] += token["phase"] == DECODE
    bars = len(stacks)
    ends = {0: ("start", 0), bars // 2: ("middle", 0.5), bars - 1: ("end", 1)}
    for label_index, (anchor, offset) in sorted(ends.items()) if bars else ():
        token = tokens[label_index * size]
        panel.x_label(panel.left + (label_index + offset) * width,
                      f"turn {token['turn']} step {token['step']}", anchor)
    return panel, width, size


OUTLIER_LABELS = 5  # at most this many outlier tokens are labelled, the slowest first
Box = namedtuple("Box", "x0 y0 x1 y1")  # a note's place in the picture, px
TITLE_CHAR_PX = 7.6  # a 13 px bold sans-serif character: what a panel's title takes
NOTE_CHAR_PX, NOTE_HEIGHT_PX = 5.6, 9  # a 10 px sans-serif note: what a label box takes


def outlier_labels(panel, tokens, values, median, width, size):
    """The step of the slowest tokens at least OUTLIER_FACTOR times the median, as the
    outliers verdict counts them: OUTLIER_LABELS at most, none over another label; the rest
    counted in one note."""
    outliers = sorted((i for i, value in enumerate(values)
                       if median and value >= OUTLIER_FACTOR * median), key=lambda i: -values[i])
    def more(count):
        return f"{count} more token(s) >= {OUTLIER_FACTOR}x the median"

    # the count's place is kept before any step label is placed, wide enough for any count
    kept = panel.reserve(panel.left + panel.width, panel.top + 10, len(more(len(outliers))),
                         "start") if outliers else None
    shown = 0
    for i in outliers:
        if shown == OUTLIER_LABELS:
            break
        shown += panel.note(panel.left + (i // size + 0.5) * width, panel.y(values[i]) - 3,
                            f"step {tokens[i]['step']}")
    if kept is not None and len(outliers) > shown:
        panel.write(kept, more(len(outliers) - shown))

FAULT_BAND = "faulting nodes"


def compute_panels(report, start):
    """The compute panel, by node category, with the faulting nodes' time as its own band when
    there are faults (the categories then share the rest of each token in proportion to their
    time), a layer trace's one series; then the profile by layer."""
    tokens = report["per_token"]
    samples = report["category_us_by_token"]
    faulting = [t.get("faulting_ms") or 0.0 for t in tokens]
    if not samples:
        title, names = "compute ms per token (a layer trace: no node categories)", ["compute"]
        series = {"compute": [t["ms"] for t in tokens]}
    else:
        title = "compute ms per token, by node category"
        names = [c["category"] for c in report["by_category"]]
        series = {name: [us / 1e3 for us in samples[name]] for name in names}
    if samples and any(faulting):
        title = "compute ms per token: faulting nodes, then categories (the rest, in proportion)"
        totals = [sum(values) for values in zip(*series.values())]
        kept = [max(0.0, 1 - fault / total) if total else 0.0
                for fault, total in zip(faulting, totals)]
        series = {FAULT_BAND: faulting, **{name: [v * k for v, k in zip(values, kept)]
                                          for name, values in series.items()}}
        names = [FAULT_BAND] + names
    panel, width, size = token_axis_panel(start, title, "ms", tokens, series, names)
    outlier_labels(panel, tokens, [t["ms"] for t in tokens], report["token_ms"]["p50"], width,
                   size)
    layers = report["by_layer"]
    profile = Panel(start + 1, "compute ms per token, by layer (inferred)", "ms",
                    max((row["ms_per_token"] for row in layers), default=0), "layer")
    bar_width = profile.stacked_bars([[row["ms_per_token"]] for row in layers], ["ms"],
                                     css="layer")
    for i, row in enumerate(layers):
        if len(layers) <= 24 or i % math.ceil(len(layers) / 24) == 0:
            profile.x_label(profile.left + (i + 0.5) * bar_width, str(row["layer"]))
    return [panel, profile]


def io_panels(report, start, tokens=None):
    """The per-token MiB by lane (on `tokens`' axis when given: the pair's decoded tokens),
    the latency histogram and, with --cache, the expert cache curve."""
    lanes = report["lane_bytes_by_token"]
    names = [f"lane {lane}" for lane in lanes]
    by_key = {row_token(t): i for i, t in enumerate(report["per_token"])}
    axis = tokens or report["per_token"]
    series = {f"lane {lane}": [values[by_key[key]] / MIB if key in by_key else 0.0
                               for key in map(row_token, axis)]
              for lane, values in lanes.items()}
    per_token, _, _ = token_axis_panel(start, "MiB read per token, by lane", "MiB", axis,
                                       series, names)
    io_ms = {row_token(t): t["io_ms"] for t in report["per_token"]}
    estimate, _, _ = token_axis_panel(
        start + 1, "I/O estimate ms per token (each layer's busiest lane, summed)", "ms", axis,
        {"I/O estimate": [io_ms.get(key, 0.0) for key in map(row_token, axis)]},
        ["I/O estimate"])
    hist = report["latency_hist"]
    latency = Panel(start + 2, "read latency, log2 buckets", "reads",
                    max((row["count"] for row in hist), default=0),
                    "latency (us), each bucket from its lower bound to twice it")
    bar_width = latency.stacked_bars([[row["count"]] for row in hist], ["reads"], css="hist")
    for i, row in enumerate(hist):
        latency.x_label(latency.left + (i + 0.5) * bar_width, f"{row['lo_us']}")
    panels = [per_token, estimate, latency]
    if report["reuse"] and report["reuse"]["lru"]:
        panels.append(cache_panel(start + 3, report["reuse"]["lru"], report["meta"]))
    return panels


def cache_panel(index, curve, meta):
    """The expert cache curve: its simulated sizes marked on a log2 axis (nothing is known
    between them: the dashed line only joins them), labelled to the precision they need, and
    the run's own --cache-mb where the preamble names it."""
    cache = Panel(index, "expert cache what-if: share of lookups served", "share", 1.0,
                  "cache size (MiB, log2 axis: the points are the sizes simulated)")
    sizes = [row["cache_mib"] for row in curve if row["cache_mib"] > 0]
    if not sizes:
        cache.polyline([row["hit_share"] for row in curve], SVG_LINE, "hit share")
        return cache
    low, high = math.log2(min(sizes)), math.log2(max(sizes))

    def x_of(mib):
        return cache.left + cache.width * ((math.log2(mib) - low) / (high - low)
                                           if high > low else 0.5)
    points = [(x_of(row["cache_mib"]), row["hit_share"]) for row in curve
              if row["cache_mib"] > 0 and row["hit_share"] is not None]
    if not points:
        cache.polyline([None], SVG_LINE, "hit share")
    cache.dots(points, "hit share")
    for row in curve:
        if row["cache_mib"] > 0:
            cache.x_label(x_of(row["cache_mib"]), f"{row['cache_mib']:.3g}")
    own = meta_number(meta, "cache_mb")
    if own and min(sizes) <= own <= max(sizes):
        cache.marker(x_of(own), x_of(own) + 1, "turn", f"--cache-mb {own:g}")
    return cache


# The tables diff's SVG draws side by side, by part: the first of its tables with two rows or
# more (a layer trace's ops are one, LAYER: its segments say more), and their unit.
DIFF_SIDE_BY_SIDE = {"compute": (("ms per token by op", "ms per token by segment"), "ms per token"),
                     "io": (("MiB per token by lane",), "MiB per token")}


RUN_FIGURES = 8  # a headline's figures drawn as runs, at most


def runs_panel(index, section, sides):
    """A headline's figures, each side's runs as points over the mean of BASE's runs (figures
    of any unit share the axis), a tick at each side's mean: the runs' spread beside the
    change."""
    rows = [row for row in section["rows"] if row["base"]][:RUN_FIGURES]
    figures = [[[run / row["base"] for run in side["per_run"]]
                for side in [row["base_side"]] + [c["new_side"] for c in row["changes"]]]
               for row in rows]
    top = max((value for figure in figures for runs in figure for value in runs), default=1)
    panel = Panel(index, f"{section['part']}: each run's figure over the base's mean (points: "
                         f"runs; bars: each side's mean)", "x base mean", top, "figure")
    width = panel.width / max(1, len(rows))
    for i, (row, figure) in enumerate(zip(rows, figures)):
        step = width / len(figure)
        for j, runs in enumerate(figure):
            x = panel.left + i * width + (j + 0.5) * step
            panel.points([(x, value) for value in runs], f"{row['name']}: {sides[j]}", j)
            if runs:
                y = panel.y(mean_of(runs))
                panel.parts.append(f'<line x1="{x - 7:.1f}" y1="{y:.1f}" x2="{x + 7:.1f}" '
                                   f'y2="{y:.1f}" class="max mean"/>')
        panel.x_label(panel.left + (i + 0.5) * width, fit(row["name"], int(width / 6.5)))
    panel.legend(sides, GROUP_NAME_WIDTH)
    return panel


def histograms_overlaid(index, histograms, inputs):
    """Every input's read latency histogram, as the share of its reads in each log2 bucket
    (so that runs of different lengths overlay), on the buckets any of them has."""
    buckets = sorted({row["lo_us"] for rows in histograms for row in rows})
    shares = []
    for rows in histograms:
        total = sum(row["count"] for row in rows) or 1
        counts = {row["lo_us"]: row["count"] for row in rows}
        shares.append([counts.get(lo, 0) / total for lo in buckets])
    panel = Panel(index, "read latency, log2 buckets: every input's share of its reads",
                  "share of reads", max((max(s, default=0) for s in shares), default=0),
                  "latency (us), each bucket from its lower bound to twice it")
    step = panel.width / max(1, len(buckets))
    for i, values in enumerate(shares):
        panel.dots([(panel.left + (j + 0.5) * step, value) for j, value in enumerate(values)],
                   inputs[i], i)
    for j, lo in enumerate(buckets):
        panel.x_label(panel.left + (j + 0.5) * step, f"{lo}")
    panel.legend(inputs, GROUP_NAME_WIDTH)
    return panel


SIDE_BY_SIDE_ROWS = 12  # a table's rows in a side-by-side panel, the largest changes first


def side_by_side(index, section, inputs, unit):
    rows = section["rows"][:SIDE_BY_SIDE_ROWS]
    if section["key"] == "lane":  # lanes read best in their own order
        rows = sorted(rows, key=lambda row: (0, int(row["name"])) if re.fullmatch(
            r"-?[0-9]{1,20}", str(row["name"])) else (1, str(row["name"])))
    values = [[row["base"] or 0] + [c["new"] or 0 for c in row["changes"]] for row in rows]
    which = f"the {len(rows)} largest changes" if len(section["rows"]) > len(rows) else \
        f"every {section['key']}"
    panel = Panel(index, f"{section['title']}: {which}", unit,
                  max((max(v) for v in values), default=0), section["key"])
    width = panel.width / max(1, len(rows))
    for i, (row, group) in enumerate(zip(rows, values)):
        bar = (width - 4) / len(group)
        for j, value in enumerate(group):
            x = panel.left + i * width + j * bar
            panel.parts.append(f'<rect x="{x:.2f}" y="{panel.y(value):.2f}" '
                               f'width="{max(bar - 1, 0.5):.2f}" '
                               f'height="{min(value, panel.y_max) / panel.per_px:.3f}" '
                               f'class="c{j % len(SVG_PALETTE)}">'
                               f'<title>{xml(row["name"])} {xml(inputs[j])} {value:.4g}'
                               f'</title></rect>')
        panel.x_label(panel.left + (i + 0.5) * width, str(row["name"])[:14])
    panel.legend(inputs, GROUP_NAME_WIDTH)
    return panel


FOOTER_CHAR_PX = 6.0  # a 10 px sans-serif character at its widest on average: the footer fits


def pair_pictures(report):
    panels = compute_panels(report["compute"], 0)
    return (panels + io_panels(report["io"], len(panels), report["compute"]["per_token"]),
            [report["compute"]["path"], report["io"]["path"]])


def diff_pictures(report):
    """The diff's panels, its sides named by their run's path, or by their name and runs:
    `base (4 runs) vs new (4 runs)`."""
    first_path = {source["side"]: str(source["path"]) for source in reversed(report["inputs"])}
    # each part's headline as every side's runs in points, then (io) each side's read latency
    # histogram, then the table rows with the largest change, base and new side by side
    panels = []
    sides = group_names([side["name"] for side in report["sides"]])
    for section in report["sections"]:
        if section["title"].endswith(" headline"):
            panels.append(runs_panel(len(panels), section, sides))
    if report["latency_hist"]:
        panels.append(histograms_overlaid(len(panels), report["latency_hist"], sides))
    for part, (titles, unit) in DIFF_SIDE_BY_SIDE.items():
        section = next((section for title in titles for section in report["sections"]
                        if section["title"] == title and len(section["rows"]) > 1), None)
        if section:
            panels.append(side_by_side(len(panels), section, sides, unit))
    return panels, [
        f"{side['name']} ({side['runs']} runs)" if side["runs"] > 1 else first_path[i]
        for i, side in enumerate(report["sides"])]


# What each kind of report draws in its SVG: (its panels, the paths it was made from).
SVG_PICTURES = {"compute": lambda report: (compute_panels(report, 0), [report["path"]]),
                "io": lambda report: (io_panels(report, 0), [report["path"]]),
                "report": pair_pictures, "diff": diff_pictures}


def svg_of(report):
    """The SVG of a compute, io, report or diff report."""
    kind = report["kind"]
    panels, paths = SVG_PICTURES[kind](report)
    joiner = " vs " if kind == "diff" else " + "
    source = joiner.join(map(str, paths))  # whole in the title; the footer names them
    height = len(panels) * SVG_PANEL + 24
    shown = shortest_names(list(map(str, paths)))
    footer = fit(f"decode-analyze {TOOL_VERSION} {kind}: {joiner.join(shown)}",
                 int((SVG_WIDTH - SVG_LEFT - SVG_RIGHT) / FOOTER_CHAR_PX))
    style = ("text{font-family:sans-serif;font-size:11px;fill:#222}.title{font-size:13px;"
             "font-weight:bold}.tick{font-size:10px;fill:#555}.axis{font-size:11px}"
             ".grid{stroke:#ddd;stroke-width:1}.max{stroke:#222;stroke-width:1}"
             ".turn{fill:#222}.warmup{fill:#edc948;fill-opacity:0.15}.note{font-size:10px;"
             "fill:#b00}" + "".join(f".c{i}{{fill:{colour}}}"
                                     for i, colour in enumerate(SVG_PALETTE)))
    return "\n".join([
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}">',
        f'<title>decode-analyze {TOOL_VERSION} {kind}: {xml(source)}</title>',
        f'<style>{style}</style>', '<rect width="100%" height="100%" fill="#fff"/>',
        *(panel.text() for panel in panels),
        f'<text x="{SVG_LEFT}" y="{height - 6}" class="tick footer">{xml(footer)}</text>',
        "</svg>\n"])


# ── command line: reading, summing up and judging a command's inputs ─────────────────────────────
class UsageError(Exception):
    """The command line asks for what cannot be done (exit status 2)."""


def layers_past_preamble(report, warn):
    """Said where the trace holds a layer past its preamble's n_layer (n_layer=2 beside layer
    3): the header would name fewer layers than the tables show. The tables are the trace's."""
    named = meta_int(report["meta"], "n_layer")
    deepest = max((row["layer"] for row in report["by_layer"]), default=-1)
    if named and deepest >= named:
        warn(f"{report['path']}: the preamble says n_layer={named}, but the trace holds layer "
             f"{deepest}: the tables show the trace's layers")


def analyze_compute(path, reading, paired=False):
    """Read, sum up and judge a compute trace: its report dict (`paired`: a pair's part,
    without the verdicts the pair judges)."""
    trace, fold = fold_file(path, COMPUTE_READ, lambda: ComputeFold(reading.selection),
                            in_parts_if_it_may(reading))
    report = without_refuted_settings(compute_report(
        trace, fold, reading.selection, join_settings(trace, reading)), reading.warn)
    layers_past_preamble(report, reading.warn)
    words = None if paired else declared_cache_warning(trace.name, reading.settings)
    if words:  # no trace of reads to say it with
        reading.warn(words)
    # paired: without the verdicts a pair judges with its reads (the router's wait, memory
    # pressure), so that each is judged once
    verdicts = []
    share = report["faults"]["share"]
    if share is not None and report["majflt_per_token"]:
        flagged = past("fault_bound", share)
        verdicts.append(threshold_verdict("fault_bound", flagged,
            f"nodes that took major faults are {share:.0%} of compute",
            after=": flash wait billed as compute" if flagged else ""))
    router = next((c for c in report["by_category"] if c["category"] == "router"), None)
    if router and router["share"] is not None and not paired:  # from the compute trace
        # alone, router time cannot be told from a wait for reads
        words = (f"routing nodes take {router['ms_per_token']:.2f} ms per token, "
                 f"{router['share']:.0%} of compute")
        verdicts.append(verdict("router_wait", False,
            f"router not heavy: {words} (<= {ROUTER_SHARE:.0%})")
            if router["share"] <= ROUTER_SHARE else verdict("router_wait", None,
            f"router wait undetermined: {words} (> {ROUTER_SHARE:.0%}); with expert streaming "
            f"that can be the wait for expert reads, billed to ffn_moe_weights after the top-k. "
            f"Give this run's io trace to 'decode-analyze report' to tell"))
    warm = report["warmup"]
    if warm["ratio"] is not None and not warm["from_turn_start"]:
        verdicts.append(verdict("warmup", None,
            f"warm-up undetermined: the selection starts past the first decode token of a turn "
            f"(--steps or --skip), so its first {warm['tokens']} tokens are not a warm-up"))
    elif warm["ratio"] is not None:
        verdicts.append(warmup_verdict(report))
    verdicts.append(None if paired else memory_verdict(report))
    verdicts.append(stretch_verdict(report) or outlier_verdict(report))
    report["verdicts"] = [v for v in verdicts if v]
    return report


class IoOptions(namedtuple("IoOptions", "adjacent cache what_if")):
    """What an io analysis computes beyond the tables: adjacency, the --cache curve, and
    what the what-if tries (an Asked; None for no what-if)."""

    @classmethod
    def of(cls, args):
        what_if = args.what_if or args.cache_mb is not None or args.io_threads is not None
        return cls(args.adjacent or what_if, args.cache or what_if,
                   asked_of(args) if what_if else None)


def asked_of(args):
    """What --cache-mb and --io-threads ask the what-if to try."""
    return Asked(args.cache_mb or (), args.io_threads or ())


def analyze_io(path, reading, asked=IoOptions(True, True, None)):
    """Read, sum up and judge an io trace: its report dict."""
    report, measured, _ = weighed_io(path, reading, asked)
    # weighed in I/O time (IO_MATERIAL), the part the what-if's settings act on: the log's
    # flash I/O where it stands for the run's, else the trace's estimate
    flash = logged_flash_io(report, measured)
    whole, words = (report["io_wall_ms_per_token"]["estimate"], "I/O") if flash is None \
        else (flash, "flash I/O (the engine's log)")
    stakes = Stakes(whole, f"the {whole:.2f} ms of {words} per read-token", IO_MATERIAL,
                    overlap_cap(report["meta"], measured or {}, report["tokens"]),
                    page_cache_words(report), False)
    report["verdicts"] = weighed_io_verdicts(report, report["io_wall_ms_per_token"], stakes)
    return report


def shown_by_reads(trace, fold, reading):
    """What the io trace's reads show of prefetch, taken before the settings are joined, so
    that every word it overrules is said once, in its warning: speculative reads are
    prefetching. The reading without those words; whether it prefetched; the values
    overruled."""
    phases, _ = chosen_phases(reading.selection, fold.phases.keys())
    chosen = [fold.phases[phase] for phase in phases if phase in fold.phases]
    prefetched = any(len(reads.latency["1"]) for reads in chosen)
    overridden = sorted(({setting.value for setting in reading.settings
                          if setting.key == "prefetch"} | {trace.meta.get("prefetch", "1")})
                        - {"1"}) if prefetched else []
    if overridden:
        trace.meta = {key: value for key, value in trace.meta.items() if key != "prefetch"}
    reading = reading._replace(settings=tuple(
        setting for setting in reading.settings
        if not (overridden and setting.key == "prefetch" and setting.value != "1")))
    return reading, prefetched, overridden


def weighed_io(path, reading, asked):
    """analyze_io's report without its verdicts, which its caller judges (io alone, or the
    pair in the decode), what its reads were weighed against (the log's figures, or the
    trace's waits), which a pair weighs again per decoded token: one pass over the waits, and
    what makes its what-if per decoded token (io_report)."""
    reading = with_trace_stall(path, reading)
    # With the expert lookups for the cache what-ifs, and whenever the log says the run had a
    # cache: only the lookups can refute it (as `report` does), and they show its hit share.
    # A log without a moe-cache line implies no cache; unchecked, that word is left out, not
    # said where `report` may refute it: the lookups cost a third of a plain io pass.
    logged = {setting.value for setting in reading.settings
              if setting.key == "cache" and setting.source == "log"}
    lookups = asked.cache or "1" in logged
    if not lookups and "0" in logged:
        reading = reading._replace(settings=tuple(
            setting for setting in reading.settings
            if not (setting.key == "cache" and setting.source == "log")))
    trace, fold = fold_file(path, IO_READ_EXTENTS if asked.adjacent else IO_READ,
                            lambda: IoFold(reading.selection, asked.adjacent, lookups,
                                           reading.per_lane), in_parts_if_it_may(reading))
    reading, prefetched, overridden = shown_by_reads(trace, fold, reading)
    report, what_if_at = io_report(trace, fold, reading, join_settings(trace, reading),
                                   asked.what_if, asked.cache)
    if trace_io.read_once(path) and "kind" in trace.columns and \
            overlapped(trace.meta) and "stall_ms_per_token" not in (reading.measured
                                                                          or {}):
        reading.warn(f"{trace.name}: the stall this v2 trace's wait rows measure takes a second "
                     f"pass over it: give a file, not a pipe or stdin, for the stall")
    named, read = trace.meta.get("io_threads"), lanes_read(report)
    if named != report["meta"].get("io_threads"):  # the trace's lanes stand over every word
        words = [f"io_threads={named} " + ("declared" if any(
            setting.key == "io_threads" and setting.source == "declared"
            for setting in reading.settings) else "in the preamble")] + [
            f"{setting.value} in the compute trace" for setting in reading.settings
            if setting.key == "io_threads" and setting.source == "compute trace"
            and setting.value != report["meta"].get("io_threads")]
        reading.warn(f"{trace.name}: {', '.join(words)}, but the trace read on "
                     f"{counted(report['lanes'], 'lane')}: the trace's lanes stand")
    elif (report["settings"].get("io_threads") or {}).get("source") == "declared" and \
            report["lanes"] > read:  # a preamble's idle lanes: the lanes verdict's
        reading.warn(f"{trace.name}: io_threads={report['lanes']} declared, but the trace read on "
                     f"{counted(read, 'lane')}: the declared value stands, the other "
                     f"{report['lanes'] - read} idle (the lanes verdict weighs them; the "
                     f"what-if's rates are the {counted(read, 'lane')}')")
    # The settings the trace shows: whether the run had a cache (with --cache or --what-if),
    # and prefetch, when it read speculatively: that is prefetching, whatever was written or
    # declared of it, so it takes the place of any other word
    own = [Setting("prefetch", "1", "trace")] if prefetched else []
    if overridden:
        reading.warn(f"{trace.name}: the trace reads speculatively, so prefetch=1, where the "
                     f"settings say prefetch={' or '.join(overridden)}: the trace's stands")
    if report["run_cache"] is not None and not declared_no_cache(reading.settings):
        own.append(Setting("cache", "1" if report["run_cache"]["detected"] else "0", "trace"))
    report["meta"], shown = merged_settings(report["meta"], own, reading.warn, trace.name)
    report["settings"].update(shown)
    report = without_refuted_settings(report, reading.warn)
    layers_past_preamble(report, reading.warn)
    if report["req_bytes"] > report["read_bytes"]:
        reading.warn(f"{trace.name}: the reads asked for more bytes ({report['req_bytes']}) "
                     f"than they read ({report['read_bytes']}): short reads, so the alignment "
                     f"waste is negative")
    return report, reading.measured, what_if_at


def analyze_pair(compute_path, io_path, reading, asked=Asked()):
    """Both traces of a run, one after the other, each with every job: reading them at once,
    each with its share of the jobs, left a large io trace in one process while a small
    compute trace was long done (48 layers, 1,430 tokens and 500k reads: 1.41x the two
    commands in turn)."""
    analyze_reads = partial(weighed_io, asked=IoOptions(True, True, asked))
    # One run, one set of settings, each settled once. The io half settles the run's settings
    # (pair_report gives them to the compute half): it knows both preambles (the compute one's
    # as `compute trace`, after --set, before the log) and what its trace shows (prefetch, a
    # cache), so it alone weighs --set's word on them, and the log's. The compute half weighs
    # the log's word on what only its trace shows (ngram) and on the rest; the io half hears
    # those as the compute half left them (a word it refuted, not at all).
    io_settles = set(RUN_SETTINGS) - {key for key, (kind, *_) in SHOWN_BY_TRACE.items()
                                      if kind == "compute"}
    compute = analyze_compute(compute_path, reading._replace(settings=tuple(
        setting for setting in reading.settings
        if not (setting.source == "log" and setting.key in io_settles
                or setting.source == "declared" and setting.key in RUN_SETTINGS))),
        paired=True)
    preamble = preamble_of(compute)
    kept = tuple(setting for setting in reading.settings
                 if setting.source != "log" or setting.key in io_settles
                 or compute["settings"].get(setting.key) == SETTING(value=setting.value,
                                                                    source="log"))
    reading = reading._replace(settings=kept + tuple(
        Setting(key, preamble[key], "compute trace") for key in RUN_SETTINGS if key in preamble))
    # the decode tokens of each turn, as the compute trace knows them: the run cache counts
    # them all (a turn's last tokens served whole from cache have no io row) before the
    # what-if weighs it
    decoded = Counter(token["turn"] for token in compute["per_token"]) \
        if compute["phase"] == "decode" else {}
    measured = {**(reading.measured or {}), "decoded": decoded}
    without_another_runs_split(measured, "decode_ms_per_token",
                               tool_figures(compute).get("decode_ms_per_token"),
                               ENGINE_MS_ROUNDING)
    reading = reading._replace(measured=measured)
    io, measured, what_if_at = analyze_reads(io_path, reading._replace(
        selection=reading.selection.paired()))
    if compute["phase"] != io["phase"]:  # a compute trace without decode rows: all, both
        io, measured, what_if_at = analyze_reads(io_path, reading)
    pressure = memory_pressure(compute)  # decided once: the what-if and the verdicts read it
    report = pair_report(compute, io, measured, pressure, what_if_at, tuple(
        setting for setting in reading.settings if setting.source == "log"))
    report["pair"]["verdicts"], report["io"]["verdicts"] = pair_verdicts(
        report["compute"], report["io"], report["pair"], measured, pressure)  # run's settings
    for message in report["pair"]["warnings"]:
        reading.warn(message)
    # the compute half hears --set's word from the io half (pair_report): it is weighed here
    without_refuted_settings(report["compute"], reading.warn)
    return report


def analyze_diff(arguments, reading, asked, logs=True):
    """Every run of `diff` read (traces analysed, saved reports loaded and checked), then its
    sides compared: the diff report dict. The NEWs are read first, so that the what-if of
    BASE's first run tries the cache sizes they ran with (the prediction check)."""
    base_paths, *new_sides = diff_sides(arguments)
    if asked.test == "tokens" and any(len(paths) > 1 for paths in [base_paths, *new_sides]):
        raise UsageError("--test tokens compares the tokens of one run a side: give one run "
                         "each, or leave the test over runs")
    with ExitStack() as copies:
        inputs = read_inputs([path for paths in [base_paths, *new_sides] for path in paths],
                             copies, logs)

        def side(paths, tried=lambda index: Asked()):  # its runs, read as summary reads them
            views = []
            for index, run in enumerate(once(summary_runs(paths, inputs.kinds, reading.warn),
                                             reading.warn)):
                name = display_name(run.path) if run.io_path is None else \
                    pair_name(display_name(run.path), display_name(run.io_path))
                report = run_report(run, inputs, reading, tried(index))
                try:
                    views.append(DiffView(name, "saved report" if inputs.kinds.get(run.path)
                                          == "json" else "trace", report))
                except NOT_WRITTEN_HERE as exc:
                    raise not_written_here(name, exc) from None
            return views
        # a NEW's what-if gives its I/O part as the base's gives its own (the prediction check)
        news = [side(paths) for paths in new_sides]
        metas = [view.parts["io"]["meta"] for views in news for view in views
                 if "io" in view.parts]
        tried = Asked(sorted({meta_number(meta, "cache_mb") for meta in metas} - {None}),
                      sorted({meta_int(meta, "io_threads") for meta in metas} - {0}))
        base = side(base_paths, lambda index: None if index else tried)
    sides = [base] + news
    side_of = {id(view): index for index, side in enumerate(sides) for view in side}
    views = [group.runs for group in run_table(
        [view for side in sides for view in side],
        lambda view: RunEntry(*view.figures(), side_of[id(view)]), reading.warn, GROUP_COLUMN)]
    *_, last = runs = [view for side in views for view in side]
    if not set.intersection(*(set(view.parts) for view in runs)):
        described = ", ".join(f"{view.path} is {view.kind}" for view in runs)
        raise TraceError(last.path, 0, f"nothing to compare: {described} (diff compares "
                                       f"compute with compute, io with io)")
    # a side of one run is named as its run; of several, base, new or new #i
    paths = shortest_names([view.path for side in views for view in side])
    starts = [sum(map(len, views[:index])) for index in range(len(views))]
    names = [paths[start] if len(side) == 1 else input_label(index, len(views))
             for index, (side, start) in enumerate(zip(views, starts))]
    report = diff_report([DiffSide(name, side) for name, side in zip(names, views)], asked.alpha,
                         asked.test, asked.gates)
    for gate in asked.gates:
        if not any(row["figure"] == gate.figure for row in report["gate"]):
            raise UsageError(f"--fail-if-worse {gate.figure}: these inputs have no "
                             f"{gate.label!r} to compare")
    for message in report["warnings"]:
        reading.warn(message)
    return report


# Between the sides of a diff: `diff A1 A2 vs B1 B2`; without it each input is a side of its own.
SIDE_SEPARATOR = "vs"
DiffAsked = namedtuple("DiffAsked", "alpha test gates")


def diff_sides(arguments):
    """The runs of each side, BASE first: split at `vs`, or one run a side without it."""
    if SIDE_SEPARATOR not in arguments:
        if len(arguments) < 2:
            raise UsageError("diff needs a BASE and a NEW (or runs: A1 A2 vs B1 B2)")
        return [[path] for path in arguments]
    sides, current = [], []
    for argument in arguments:
        if argument == SIDE_SEPARATOR:
            sides.append(current)
            current = []
        else:
            current.append(argument)
    sides.append(current)
    if len(sides) < 2 or not all(sides):
        raise UsageError(f"diff A1 A2 {SIDE_SEPARATOR} B1 B2: every side needs a run (a file "
                         f"named {SIDE_SEPARATOR} is ./{SIDE_SEPARATOR})")
    return sides


def pair_name(compute_name, io_name):
    """A run's two traces named once: what their names differ in braced, as a shell would
    (x/a-{ct,io}.csv), else both (x/a.csv+b.csv)."""
    folder, compute_file = os.path.split(compute_name)
    io_folder, io_file = os.path.split(io_name)
    if io_folder != folder:
        return f"{compute_name}+{io_name}"
    head = os.path.commonprefix([compute_file, io_file])
    tail = os.path.commonprefix([compute_file[len(head):][::-1], io_file[len(head):][::-1]])
    compute_part = compute_file[len(head):len(compute_file) - len(tail)]
    io_part = io_file[len(head):len(io_file) - len(tail)]
    if not compute_part or not io_part or "," in compute_part + io_part:
        return os.path.join(folder, f"{compute_file}+{io_file}")
    return os.path.join(folder, f"{head}{{{compute_part},{io_part}}}{tail[::-1]}")


# What reading a report this tool did not write (a hand-edited saved one) raises.
NOT_WRITTEN_HERE = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def not_written_here(name, exc):
    return TraceError(name, 0, f"not a report this tool wrote ({type(exc).__name__}: {exc}); "
                               f"save one with --format json")


def analyze_input(readable, name, held, reading, asked):
    """The report of one input `diff` or `summary` takes, already sniffed (`held`): a saved
    report loaded and checked, or a trace analysed (an io trace as `asked`); an error names
    the input as it was given."""
    try:
        if held == "json":
            # a saved report, of a schema and kind this version reads
            report = trace_io.read_json_object(readable, "a saved report")
            schema, kind = report.get("schema"), report.get("kind")
            if kind == "diff":
                raise TraceError(name, 0, "a diff report cannot be compared again: give the "
                                          "runs' traces or reports")
            if kind not in ("compute", "io", "report"):
                raise TraceError(name, 0, f"not a decode-analyze report (kind "
                                          f"{safe(kind)!s:.40})")
            if schema not in READ_SCHEMAS:
                raise TraceError(name, 0, f"a schema {safe(schema)!s:.20} report (decode-analyze "
                                          f"{safe(report.get('tool_version', '?'))!s:.20}); this "
                                          f"version reads schemas "
                                          f"{', '.join(map(str, READ_SCHEMAS))}: write it again "
                                          f"from its traces")
            return report
        if held == "compute":
            return analyze_compute(readable, reading)
        return analyze_io(readable, reading, asked)
    except TraceError as problem:
        raise TraceError(name if problem.path == readable else problem.path,
                         problem.line, problem.message) from None


class reopenable:
    """A path that can be opened twice (diff looks at a file's head before reading it):
    the path itself, or stdin or a pipe copied to a temporary file, removed afterwards."""

    def __init__(self, path):
        self.path, self.temporary = path, None

    def __enter__(self):
        if not trace_io.read_once(self.path):
            return self.path
        binary, _ = trace_io._open_binary(self.path)
        try:
            handle, self.temporary = tempfile.mkstemp(prefix="decode-analyze-diff-")
            with os.fdopen(handle, "wb") as copy:
                shutil.copyfileobj(binary, copy, 1 << 20)
        except OSError as exc:
            self.__exit__()
            raise TraceError(display_name(self.path), 0,
                             f"cannot copy to a temporary file: {exc.strerror or exc}") from None
        return self.temporary

    def __exit__(self, *exc):
        if self.temporary:
            try:
                os.unlink(self.temporary)
            except OSError:
                pass


# The inputs of diff and summary: where each sniffed one can be read again (a copy, for stdin),
# what each holds (trace_io.sniff), and whether the engine's logs beside them are read.
Inputs = namedtuple("Inputs", "local kinds logs")


def read_inputs(arguments, copies, logs):
    """The Inputs of a command's arguments: each that names one input made readable again
    (stdin and pipes copied once, the copies removed with `copies`) and sniffed."""
    local = {path: copies.enter_context(reopenable(path)) for path in dict.fromkeys(arguments)
             if run_parts(path) == (path,)}
    return Inputs(local, {path: trace_io.sniff(readable) for path, readable in local.items()},
                  logs)


def analyze_summary(arguments, reading, sort, logs=True, group=True):
    """Every run read and reduced to its row, one at a time; then the keys that tell the runs
    apart, and the order asked for."""
    with ExitStack() as copies:
        inputs = read_inputs(arguments, copies, logs)
        runs = once(summary_runs(arguments, inputs.kinds, reading.warn), reading.warn)
        names = shortest_names([display_name(run.path) for run in runs])
        rows = []  # each run's row, its preamble under `meta` until the keys that differ are known
        for name, run in zip(names, runs):
            report = run_report(run, inputs, reading)
            try:
                row = summary_figures(name, run, report)
                limit = FIGURE_LIMIT if inputs.kinds.get(run.path) == "json" else math.inf
                for field in SUMMARY_FIGURES:  # a number each: a saved report may hold anything
                    row[field] = figure_value(row[field], limit)
                if type(row["tokens"]) is not int:
                    raise ValueError("tokens is not a whole number")
                row["flagged"] = [str(verdict_id) for verdict_id in row["flagged"]]
                row["meta"] = {str(key): str(value) for key, value in row["meta"].items()}
                row["granularity"] = granularity_name(row["granularity"])  # it keys the groups
                row["sample"] = calibration_sample(name, report)
            except NOT_WRITTEN_HERE as exc:
                raise not_written_here(display_name(run.path), exc) from None
            rows.append(row)
    # a row's name, what tells its run from every other (its kind, tokens and headline
    # figures) and its configuration
    table = run_table(rows, lambda row: RunEntry(
        row["run"], {name: row[name] for name in TELLING_FIGURES}, configuration(row["meta"]),
        (row["kind"], row["granularity"])), reading.warn, GROUP_REPEATS if group else None)
    fit = calibration([row.pop("sample") for repeats in table for row in repeats.runs])
    rows = flagged_loaded([{**merged(repeats.runs), "meta": repeats.config}
                           for repeats in table])
    for row in rows:  # what the table grouped the rows by, not a column of theirs
        del row["granularity"]
    # The preamble keys whose values differ between the runs (into each row's settings), and
    # {key: value} of those they share. A key some runs do not know is not shared: a column,
    # with '-' where it is unknown (a repeat's unknown key was filled by its group's runs).
    metas = [row.pop("meta") for row in rows]
    every = list(dict.fromkeys(key for meta in metas for key in meta))
    keys = [key for key in every if len({meta.get(key) for meta in metas}) > 1]
    for row, meta in zip(rows, metas):
        row["settings"] = {key: meta.get(key) for key in keys}
    first = next(iter(metas), {})
    common = {key: first[key] for key in every if key not in keys}
    sortable = SUMMARY_SORTS + tuple(keys) + tuple(common)
    sort = sort if sort is None or sort in sortable else SUMMARY_HEADS.get(sort.lower(), sort)
    if sort is not None and sort not in sortable:
        raise UsageError(f"--sort {sort!r}: not a column; one of {', '.join(sortable)}")
    def sort_key(row):  # ascending, a missing value last; numbers (and preamble values
        # written as plain ASCII numbers: str.isdigit takes '²', which float() refuses) as
        # numbers, the rest as text after them; a key every run shares leaves the order
        value = row[sort] if sort in SUMMARY_SORTS else row["settings"].get(sort)
        if value is None:
            return (2, 0.0, "")
        if isinstance(value, str):
            return (0, float(value), "") if PLAIN_NUMBER.fullmatch(value) else (1, 0.0, value)
        return (0, float(value), "")
    if sort is not None:
        rows = sorted(rows, key=sort_key)
    return SUMMARY_REPORT(schema=SCHEMA, tool_version=TOOL_VERSION, kind="summary", keys=keys,
                          common=common, sort=sort, runs=rows, calibration=fit)


def flagged_loaded(rows):
    """The rows, each whose compute is LEVEL_RATIO or more its configuration's quietest
    row's flagged `loaded`: rows of one configuration listed apart (not repeats) differ so
    when another core's load inflated compute (the 48-layer repeats: 8.5 ms quiet, 82-182
    loaded), the reads barely moving. A node trace's barriers inflate its compute (a node
    trace of the 48-layer run 1.6x its layer repeats' on a quiet machine): a node row is
    weighed against node rows alone, any other against every row."""
    configurations = [(row["kind"], tuple(sorted(row["meta"].items()))) for row in rows]
    quietest = {}  # (configuration, whether node rows alone) -> the least compute
    for configuration, row in zip(configurations, rows):
        compute = row["compute_ms_per_token"]
        for key in {(configuration, False), (configuration, row["granularity"] == "node")}:
            if compute:
                quietest[key] = min(quietest.get(key, math.inf), compute)
    for configuration, row in zip(configurations, rows):
        compute = row["compute_ms_per_token"]
        least = quietest.get((configuration, row["granularity"] == "node"))
        if compute and compute >= LEVEL_RATIO * least:  # as repeats_of
            row["flagged"] = ["loaded", *row["flagged"]]  # first: it colours the rest
    return rows


def run_report(run, inputs, reading, asked=Asked()):
    """The report of one run of diff or summary: its two traces as `report` reads them, a
    trace alone (an io trace with the --cache curve and its what-if as `asked`, None none:
    as io --what-if), or a saved report loaded and checked; with the engine's log beside
    its traces, whose settings the analysis takes."""
    log = engine_log(run.paths) if inputs.logs and inputs.kinds.get(run.path) != "json" \
        else None
    reading = reading_with_log(reading, log)
    if run.io_path is not None:
        report = analyze_pair(*(inputs.local.get(path, path) for path in run.paths), reading,
                              asked or Asked())
    else:
        report = analyze_input(inputs.local[run.path], display_name(run.path),
                               inputs.kinds[run.path], reading, IoOptions(True, True, asked))
    return with_engine_log(report, log, reading.warn) if log else report


def analyze_timeline(compute_path, io_path, reading):
    """Read both v2 traces of a run (the io one optional): the timeline report dict."""
    trace, fold = fold_file(compute_path, TIMELINE_COMPUTE_READ,
                            lambda: TimelineComputeFold(reading.selection),
                            in_parts_if_it_may(reading), check=require_v2)
    io_trace = io_fold = None
    if io_path is not None:
        io_trace, io_fold = fold_file(io_path, TIMELINE_IO_READ, TimelineIoFold, reading,
                                      check=require_v2)  # every read and wait, whatever its token
        readable_preamble(io_trace, reading.warn)
        differs = trace_id_warning((trace.name, trace.meta), (io_trace.name, io_trace.meta))
        if differs:
            reading.warn(differs)
    readable_preamble(trace, reading.warn)
    backwards = fold.clock.backwards + (io_fold.clock.backwards if io_fold else 0)
    if backwards:
        reading.warn(f"{backwards} row(s) end before they start: counted as empty intervals")
    return timeline_report(trace, fold, reading.selection, io_trace, io_fold)


# ── command line: options ────────────────────────────────────────────────────────────────────────
def ascii_whole(text):
    """A whole number of plain ASCII digits, as trace values are (int() also takes '٣', signs
    and spaces)."""
    if not re.fullmatch(r"[0-9]+", text):
        raise ValueError(text)
    return int(text)


def ascii_fraction(text):
    if not re.fullmatch(r"[0-9]*\.?[0-9]+(?:[eE]-?[0-9]+)?", text):
        raise ValueError(text)
    return float(text)


def option_type(convert, accepts, wanted):
    """An argparse type: convert(text), refused unless accepts(value), with one message
    whatever is wrong with it."""
    def parse(text):
        try:
            value = convert(text)
        except ValueError:  # an ArgumentTypeError says what is wrong itself
            value = None
        if value is None or not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value
    return parse


non_negative = option_type(ascii_whole, lambda value: True, "a whole number >= 0")
positive = option_type(ascii_whole, lambda value: value >= 1, "a whole number >= 1")
probability = option_type(ascii_fraction, lambda value: 0 < value < 1,
                          "a number between 0 and 1")


def step_bounds(text):
    """'A:B', inclusive; either side may be empty."""
    low, sep, high = text.partition(":")
    if not sep:
        raise ValueError(text)
    return (ascii_whole(low) if low else None, ascii_whole(high) if high else None)


steps_range = option_type(step_bounds, lambda bounds: None in bounds or operator.le(*bounds),
                          "A:B with A <= B (either side optional)")
sort_column = option_type(lambda text: text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_ /]{0,40}", text)
                          else None, lambda text: True, "a column or a preamble key")


def whole_list(text):
    """'N[,N...]': whole numbers, in order, each once."""
    return list(dict.fromkeys(map(ascii_whole, text.split(","))))


cache_sizes = option_type(whole_list, lambda sizes: all(1 <= n <= MAX_CACHE_MB for n in sizes),
                          f"N[,N...]: cache sizes in whole MiB, 1 to {MAX_CACHE_MB}")


lane_counts = option_type(whole_list, lambda counts: all(1 <= n <= 1024 for n in counts),
                          "N[,N...]: lane counts, whole numbers from 1 to 1024")


def window_bounds(text):
    """'A:B': the A-th (0-based) to before the B-th exported token; either side optional."""
    low, high = step_bounds(text)
    return (0 if low is None else low, math.inf if high is None else high)


token_window = option_type(window_bounds, lambda bounds: operator.lt(*bounds),
                           "A:B with A < B (either side optional)")


def declared_setting(text):
    """'KEY=VALUE': a Setting declared on the command line; a key the tool reads takes only
    a value it can read (KNOWN_SETTINGS), so that nothing declared is shown and then ignored."""
    key, sep, value = text.partition("=")
    if not (sep and SETTING_KEY.fullmatch(key) and SETTING_VALUE.fullmatch(value)):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a lowercase key; a value of "
                                         f"letters, digits, . + - _), got {text!r}")
    known = KNOWN_SETTINGS.get(key)
    if known and not known.accepts(value):
        raise argparse.ArgumentTypeError(f"{key} takes {known.wanted}, got {value!r}")
    return Setting(key, value, "declared")


setting_option = option_type(declared_setting, lambda setting: True,
                             "KEY=VALUE (a lowercase key; a value of letters, digits, . + - _)")


DESCRIPTION, _, _ = __doc__.partition("\nMap of this file")  # the help: the docstring's head
# One argument of a command: add_argument(*flags, **settings).
Option = namedtuple("Option", "flags settings")


def option(*flags, **settings):
    return Option(flags, settings)


OUTPUT_FORMAT_OPTIONS = (
    option("--format", choices=("text", "json", "markdown", "csv"), default="text",
           help="text tables (default), the report as one JSON object, GitHub-flavoured "
                f"Markdown for an issue or a pull request, or tidy CSV ({','.join(CSV_HEADER)}: "
                f"one line per value of the JSON)"),
    option("--output", "-o", metavar="FILE",
           help="write the report to FILE instead of stdout: a regular file atomically (a "
                "temporary file beside it, then renamed), a FIFO or device as it is; never over "
                "an input trace"))
READING_OPTIONS = (  # a command that reads traces
    option("--phase", choices=("decode", "prefill", "all"),
           help="rows to use (default: decode, or all rows when there are no decode rows)"),
    option("--turn", type=non_negative, action="append", metavar="N",
           help="only this session turn, as the traces number it, from 0 (the engine's log "
                "says turn id=N+1; its table shows both); repeatable"),
    option("--steps", type=steps_range, metavar="A:B",
           help="only tokens whose step is in A..B, inclusive (A: or :B too)"),
    option("--skip", type=non_negative, default=0, metavar="N",
           help="drop the first N tokens of each turn (warm-up)"),
    option("--ascii", action="store_true",
           help="plain ASCII sparklines (no Unicode block characters)"),
    option("--skip-bad-rows", action="store_true",
           help="skip malformed rows (counted on stderr) instead of stopping"),
    option("--jobs", type=positive, metavar="N",
           help=f"processes reading a large plain file at once (default: 1 when no input is "
                f"over {trace_io.PARALLEL_MIN_BYTES >> 20} MiB, else the usable cores, at most "
                f"{MAX_JOBS}; report reads its files one after the other, each with all)"),
    option("--quiet", "-q", action="store_true",
           help="no progress line: while a read takes over a second, one line on stderr, "
                "rewritten in place, says the rows read, the share of the file and rows a "
                "second; only when stderr is a terminal (never in a pipe, a file or CI)"))
PICTURE_OPTIONS = {
    "svg": (option("--svg", metavar="FILE", help="also write the report's pictures to FILE: "
                                                 "one self-contained SVG"),),
    "perfetto": (
        option("--perfetto", metavar="FILE",
               help="also write a timeline of the tokens to FILE, in the Chrome Trace Event "
                    "Format (ui.perfetto.dev, chrome://tracing)"),
        option("--tokens", type=token_window, default=PERFETTO_TOKENS, metavar="A:B",
               help=f"the tokens --perfetto exports: the A-th (0-based) to before the B-th of "
                    f"the selection, decode tokens unless --phase says otherwise (default "
                    f"{window_text(PERFETTO_TOKENS)})")),
}
# What a command that lacks an option reads in its place: the drawing's view, and no picture.
ABSENT_OPTIONS = dict(top=View().top, layers=False, wide=False, explain=False, full=False,
                      svg=None,
                      perfetto=None,
                      tokens=PERFETTO_TOKENS, phase=None, turn=None, steps=None, skip=0,
                      ascii=False, skip_bad_rows=False, jobs=1, engine_log=None,
                      no_engine_log=False, declared=[])
# The engine's log: read by itself when it lies beside a trace (NAME.log), or named.
SET_OPTION = option("--set", type=setting_option, action="append", default=[], dest="declared",
           metavar="KEY=VALUE",
           help="a setting of the run its preamble lacks (repeatable): cache_mb, "
                "mem_limit_mb (MiB), cache, prefetch, overlap, o_direct, ngram (0 or 1), "
                "io_threads, n_threads, cores (whole numbers); joined to the preamble, marked "
                "declared; another key is shown, said to be read by nothing")
CALIBRATION_OUT_OPTION = option(
    "--calibration-out", metavar="FILE",
    help="write the costs fitted on the runs that are pairs (flash I/O ms per MiB at each lane "
         "count, cache management a lookup, the share overlap hid, the repeats' spread; each "
         "run predicted from the others) as JSON, for io and report's --calibration")
NO_ENGINE_LOG_OPTION = option("--no-engine-log", action="store_true",
                              help="ignore any engine log beside the traces")
ENGINE_LOG_OPTION = option("--engine-log", metavar="FILE",
                           help="the engine's end-of-run lines for this run (default: NAME.log "
                                "beside the trace, NAME its file name without .csv, or "
                                "without -ct.csv/-io.csv); its figures are shown beside the "
                                "tool's")
ENGINE_LOG_OPTIONS = (SET_OPTION, ENGINE_LOG_OPTION, NO_ENGINE_LOG_OPTION)


def layers_option(what):
    return option("--layers", action="store_true", help=what)


def what_if_options(what):
    return (option("--what-if", action="store_true", help=what),
            option("--cache-mb", type=cache_sizes, metavar="N[,N...]",
                   help="the cache sizes the what-if tries, in MiB as the engine's --cache-mb "
                        "(default: a quarter, a half and all of the experts' footprint, and "
                        "the run's own when its settings name one; a cached run: its own, "
                        "twice that and all)"),
            option("--io-threads", type=lane_counts, metavar="N[,N...]",
                   help=f"the lane counts the what-if tries, as the engine's --io-threads "
                        f"(default: {', '.join(map(str, DEFAULT_LANES))}, but the run's own)"),
            option("--explain", action="store_true",
                   help="say how each what-if band is made (its parts and their sources)"),
            option("--calibration", metavar="FILE",
                   help="the costs summary --calibration-out fitted on your runs: the "
                        "what-if's cache, lanes and overlap bands use them, said 'calibrated "
                        "on N runs'"))


FULL_OPTION = option("--full", action="store_true",
                     help="every table in full (the text's default shows a line for the "
                          "engine's figures that agree, the latency histogram, the lanes and "
                          "the cache curve, and says which it left; Markdown and JSON have all)")


def top_option(default):
    return option("--top", type=non_negative, default=default, metavar="N",
                  help=f"how many ops the by-op table lists (default {default}; JSON has all)")


FULL_LAYERS = f"the full by-layer table (past {COMPACT_LAYERS} layers the default shows the " \
              f"layers that stand out)"


# ── command line: the commands, declared once ────────────────────────────────────────────────────
# A command: its name, its synopsis and one-line summary (the help's command list and the
# module docstring's, checked by a test), the description of its --help, its inputs, its own
# options, how it analyses its inputs into a report (analyze(args, reading)) and the pictures
# it can draw. The parser, the dispatch, the checks of its output paths and the picture
# options all follow from here; the report's layout follows from its kind (KINDS).
# An input: the argument's name, the kind of trace it is ("compute", "io", "any": diff's, a
# trace or a saved report of either kind, or "run": summary's, "any" or CT+IO), its help and
# its nargs.
Input = namedtuple("Input", "dest kind help nargs", defaults=(None,))
Command = namedtuple("Command", "name synopsis summary description inputs options analyze "
                                "pictures")

COMMANDS = {command.name: command for command in (
    Command("compute", "compute CT",
            "where compute goes: by op, node category, layer and token; page faults",
            "Where a token's compute time goes, from a compute trace (ct.csv).",
            (Input("path", "compute", "the compute trace (ct.csv)"),),
            (top_option(12), layers_option("also the by-layer table"), FULL_OPTION,
             *ENGINE_LOG_OPTIONS),
            lambda args, reading: analyze_compute(args.path, reading), ("svg", "perfetto")),
    Command("io", "io IO",
            "the flash reads: latency, sizes, alignment, lanes, layers, experts, speculation",
            "What the flash reads are made of, from an io trace (io.csv).",
            (Input("path", "io", "the io trace (io.csv)"),),
            (option("--adjacent", action="store_true",
                    help="count contiguous runs per token: the most merging could save"),
             option("--cache", action="store_true",
                    help="re-reads, and what the engine's expert cache would have served at "
                         "sizes up to the footprint"),
             *what_if_options("what each engine setting would buy (--cache-mb implies it)"),
             layers_option(FULL_LAYERS), FULL_OPTION, *ENGINE_LOG_OPTIONS),
            lambda args, reading: analyze_io(args.path, reading, IoOptions.of(args)),
            ("svg", "perfetto")),
    Command("report", "report CT IO",
            "both traces of one run on one screen, I/O per decoded token",
            "The compute and io traces of one run together: I/O per decoded token (counting "
            "tokens that read nothing), compute and reads side by side per layer, the most "
            "useful tables of both, and the verdicts.",
            (Input("compute_path", "compute", "the compute trace (ct.csv)"),
             Input("io_path", "io", "the io trace of the same run (io.csv)")),
            (top_option(8), *what_if_options("what each engine setting would buy (always "
                                             "in report: accepted for io's sake)"),
             layers_option(FULL_LAYERS), FULL_OPTION, *ENGINE_LOG_OPTIONS),
            lambda args, reading: analyze_pair(args.compute_path, args.io_path, reading,
                                               asked_of(args)),
            ("svg", "perfetto")),
    Command("diff", "diff BASE NEW...",
            "before and after: runs (A1 A2 vs B1 B2) compared, tested over runs",
            """\
Compares runs: BASE against each NEW, figure by figure, per token (so runs of different
lengths compare). 'vs' splits the inputs into sides of repeated runs (A1 A2 A3 vs B1 B2 B3);
without it each input is a side of one run. A run's two traces (CT+IO, or a compute and an io
trace whose names pair, as summary pairs them) are one run, compared as report compares them.
Inputs are traces (all compute or all io) or
reports saved earlier with --format json by any command (a saved 'report' compares with compute
or io inputs through its matching half, with another 'report' through both). Shows the preamble
keys that differ, then the headline figures and every row of the by-op, by-category, by-layer
(compute) and by-lane, by-size, by-layer (io) tables, rows by largest change first: a side's
figure is the mean of its runs', ± their sd/mean, then delta (new - base) and ratio (new /
base). p is a two-sided Mann-Whitney U test over the runs (n=A+B), marked ~ when p >= --alpha;
with one run a side nothing is tested (a run's tokens are not independent samples of its
setting) and (±) is the run's own tokens' spread. Each run's first half of tokens is checked
against its second (drift). Selection options apply to trace inputs only. Stdin and pipes are
copied to a temporary file first.""",
            (Input("base", "any", "the base: a trace, or a report saved with --format json"),
             Input("new", "any", f"the runs to compare with the base, of its kind; with "
                                 f"'{SIDE_SEPARATOR}', the runs of each side: A1 A2 "
                                 f"{SIDE_SEPARATOR} B1 B2", "+")),
            (option("--alpha", type=probability, default=DEFAULT_ALPHA, metavar="P",
                    help=f"significance level: a tested change with p >= P is marked ~ "
                         f"(default {DEFAULT_ALPHA})"),
             option("--test", choices=("runs", "tokens"), default="runs",
                    help="what p is over: the runs of each side (default; none with one run a "
                         "side), or the tokens of one run each ('tokens': says only that two "
                         "runs differ, not that their settings do)"),
             option("--fail-if-worse", type=gate_of, action="append", metavar="FIGURE=SHARE",
                    help="exit 1 when a NEW's FIGURE (a headline field: ms_per_token, "
                         "mib_per_token, io_wall_ms_per_token.estimate, latency_us.p99, ...) is "
                         "worse than BASE's by more than SHARE (5%%, or 0.05) and the test over "
                         "runs says so; repeatable"),
             CALIBRATION_OUT_OPTION, FULL_OPTION, SET_OPTION, NO_ENGINE_LOG_OPTION),
            lambda args, reading: analyze_diff(
                [args.base] + args.new, reading,
                DiffAsked(args.alpha, args.test, tuple(args.fail_if_worse or ())),
                not args.no_engine_log),
            ("svg",)),
    Command("summary", "summary RUN...",
            "a sweep of settings, one row a configuration (repeats: n, mean ±sd)",
            "One row per configuration, as llama-bench -r prints repeats: runs whose kind, "
            "granularity and every setting are equal are one row of n runs, each figure their "
            "mean ± their sd (--no-group: a row a run). A row shows the preamble keys "
            "that tell the runs apart, tokens, decode ms per token (mean, p50, p99), the "
            "engine's split (compute, cache management, I/O estimate), MiB per token, the "
            "cache's hit share where the preamble names its size, faults, and the flagged "
            "verdicts. A RUN is a "
            "trace, a saved JSON report, CT+IO (one run's two traces), or a compute and an io "
            "trace among the RUNs whose names pair (ct.csv with io.csv, x.csv with x-io.csv).",
            (Input("runs", "run", "the runs: traces, saved reports, or CT+IO", "+"),),
            (option("--sort", type=sort_column, metavar="COLUMN",
                    help=f"sort the rows by a column ({', '.join(SUMMARY_SORTS)}; or by its "
                         f"head, as 'hit' or 'decode ms') or a preamble key, ascending, missing "
                         f"values last (default: as given)"),
             option("--wide", action="store_true",
                    help=f"every figure's column, past {SUMMARY_WIDTH} columns (the default "
                         f"leaves out the percentiles, the engine's hit share, faults, ... "
                         f"first, and says which)"),
             CALIBRATION_OUT_OPTION,
             option("--no-group", action="store_true",
                    help="one row per run: repeats of one configuration (kind, granularity "
                         "and every setting equal) are otherwise one row, n runs, each figure "
                         "their mean ± their standard deviation"),
             SET_OPTION, NO_ENGINE_LOG_OPTION),
            lambda args, reading: analyze_summary(args.runs, reading, args.sort,
                                                  not args.no_engine_log, not args.no_group),
            ()),
    Command("timeline", "timeline CT [IO]",
            "v2 traces: each decode's wall, reads, waits and overlap, measured",
            """\
What v2 traces' timestamps measure, per decode and summarised (p50, p99, total): the decode's
wall (its BMOE_DECODE span), the graph's wall (first node start to last node end), read busy
time (the union of the reads over every lane, and its share of the decode), expert wait (the
union of the io trace's wait rows), overlap achieved (read time while compute was not waiting)
and callbacks (BMOE_CALLBACK). Reads and waits count in a decode for the time they spent inside
its span. v1 traces have no timestamps: use report, whose I/O time is a range.""",
            (Input("compute_path", "compute", "the v2 compute trace (ct.csv)"),
             Input("io_path", "io", "the v2 io trace of the same run (io.csv), for the I/O "
                                    "figures", "?")),
            (),
            lambda args, reading: analyze_timeline(args.compute_path, args.io_path, reading),
            ("perfetto",)),
)}


EPILOG = """\
examples:
  decode-analyze report ct.csv io.csv           one run's two traces on one screen
  decode-analyze compute ct.csv --layers        compute by op, category, layer and token
  decode-analyze compute ct.csv --turn 2 --skip 8   one session turn, warm-up left out
  decode-analyze io io.csv --adjacent --cache   reads, plus merging and caching what-ifs
  decode-analyze io io.csv --format json        the whole report as one JSON object
  decode-analyze compute <(zcat ct.csv.gz)      pipes and stdin ('-'); gzip, bzip2, xz read too
  decode-analyze diff a1.csv a2.csv a3.csv a4.csv vs b1.csv b2.csv b3.csv b4.csv
                                                before and after: 4 runs a side, tested over runs
  decode-analyze summary runs/*/ct.csv          a sweep: repeats of a configuration one row
  decode-analyze diff monday.json today-ct.csv  against a report saved with --format json

figures: per token = total / tokens (io alone: per token that read; report: per decoded token).
I/O per token: a v1 trace has no timestamps, so it is estimated as the engine spends it (per layer,
its busiest lane's summed latency), within lane-busy / lanes (all at once) and lane-busy (one at a
time); report: decode = compute + cache management + flash I/O, as the engine says.
Percentiles take the value at 0-based index min(n-1, floor(n*q)) of the sorted values (not the
textbook nearest rank, the ceil(n*q)-th: with 100 values this p99 is the maximum). Every figure
is defined in docs/figures.md.

exit status: {exit_status}
"""
# Exit statuses, said once: main() returns them, the help and docs/usage.md list them.
EXIT_STATUS = {0: "ok", 1: "bad input, unwritable output, or a regression (diff --fail-if-worse)",
               2: "usage", 130: "interrupted",
               141: "output closed by its reader", 143: "terminated"}


def parser_of(commands):
    """The command line's parser: every command of the registry (a tuple), its inputs and
    options. Made once for the registry as it stands (PARSER_MADE): parsing changes nothing
    in it, and a process that runs main() many times (the tests, a script) need not build it
    again."""
    if PARSER_MADE.get("commands") == commands:
        return PARSER_MADE["parser"]
    lines, line = [], ""  # the exit statuses wrapped, a status never split from its meaning
    for status, meaning in EXIT_STATUS.items():
        entry = f"{status} {meaning}" + ("." if status == max(EXIT_STATUS) else ",")
        if line and len(line) + 1 + len(entry) > 84:
            lines.append(line)
            line = ""
        line += (" " if line else "") + entry
    epilog = EPILOG.format(exit_status="\n".join(lines + [line]))
    parser = argparse.ArgumentParser(
        prog="decode-analyze", description=DESCRIPTION, epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"decode-analyze {TOOL_VERSION} (JSON schema {SCHEMA})")
    names = ",".join(command.name for command in commands)
    subparsers = parser.add_subparsers(dest="command", metavar="{" + names + "}", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.summary, epilog=epilog,
                                    description=command.description,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        for each in command.inputs:
            sub.add_argument(each.dest, nargs=each.nargs,
                             help=f"{each.help} ('-' for stdin; compression is detected)")
        options = OUTPUT_FORMAT_OPTIONS + (READING_OPTIONS if command.inputs else ()) \
            + command.options + tuple(
            chain.from_iterable(PICTURE_OPTIONS[picture] for picture in command.pictures))
        given = {sub.add_argument(*each.flags, **each.settings).dest for each in options}
        sub.set_defaults(**{dest: value for dest, value in ABSENT_OPTIONS.items()
                            if dest not in given})
    PARSER_MADE.update(commands=commands, parser=parser)
    return parser


PARSER_MADE = {}  # the parser, and the registry it was made for


# ── command line: running ────────────────────────────────────────────────────────────────────────
def say(stream, message):
    """A line on stderr, if there is one to write to: a closed or broken stderr loses the
    message, never the run."""
    if stream is None:
        return
    trace_io.Progress.clear()  # a progress line drawn on the terminal gives way
    try:
        print(f"decode-analyze: {safe(message)}", file=stream, flush=True)
    except (OSError, ValueError):
        pass


class Warnings:
    """Collects warnings for stderr (and the JSON report), each said once."""

    def __init__(self, stream):
        self.stream, self.messages = stream, []

    def __call__(self, message):
        if message not in self.messages:
            self.messages.append(message)
            say(self.stream, f"warning: {message}")


def output_identity(path):
    """What a path names: the file it reaches (a symlink followed), or for a path that names
    none yet, the path made absolute; so that two outputs, or an output and an input, are told
    to be one file."""
    try:
        status = os.stat(path)
        return ("file", status.st_dev, status.st_ino)
    except OSError:
        return ("path", os.path.realpath(path))


def reading_from(args, warn, paths=()):
    """The Reading the command line asks for (of the inputs at `paths`)."""
    selection = Selection(phase=args.phase, turns=set(args.turn) if args.turn else None,
                          steps=args.steps or (None, None), skip=args.skip)
    jobs = args.jobs or default_jobs(paths, MAX_JOBS)
    # a long read shows its progress on stderr when it is a terminal, not in CI, and not --quiet
    stream = getattr(warn, "stream", None)
    try:
        terminal = stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    shown = terminal and not getattr(args, "quiet", False) and not os.environ.get("CI")
    return Reading(selection, args.skip_bad_rows, warn, jobs, per_lane=args.svg is not None,
                   progress=stream if shown else None)


FORMATS = {"text": text_of,  # Markdown's tables scroll on GitHub: every column there
           "markdown": lambda report, view: markdown_of(report, view._replace(wide=True)),
           "json": lambda report, view: json_chunks(report),
           "csv": lambda report, view: csv_chunks(report)}


def run(args, out, warn):
    """Build the command's report and write it in the chosen format."""
    command = COMMANDS[args.command]
    # a command of CT IO (report, timeline) given io first: the two swapped, with a note
    if [each.kind for each in command.inputs] == ["compute", "io"]:
        first, second = (getattr(args, each.dest) for each in command.inputs)
        for each, path in zip(command.inputs, () if second is None else
                              in_pair_order(first, second, warn)):
            setattr(args, each.dest, path)
    paths = []  # (kind, path) of every input named, in order (both parts of a CT+IO)
    for each in command.inputs:
        value = getattr(args, each.dest)
        for argument in value if isinstance(value, list) else [value]:
            if argument is not None and not (each.kind == "any" and argument == SIDE_SEPARATOR):
                paths += [(each.kind, path) for path in (
                    run_parts(argument) if each.kind in ("run", "any") else (argument,))]
    if [path for _, path in paths].count(trace_io.STDIN) > 1:
        raise TraceError(display_name(trace_io.STDIN), 0, "stdin can carry only one of the "
                                                          "inputs")
    check_outputs(args, paths)
    if args.engine_log is not None and args.no_engine_log:  # before any trace is read
        raise UsageError("--engine-log and --no-engine-log: give one of them")
    # the declared settings, each key once: a key given twice with two values is refused
    # (which one was meant?); a key the tool does not read is said
    declared = {}
    for setting in args.declared:
        if declared.get(setting.key, setting).value != setting.value:
            raise UsageError(f"--set {setting.key}: given as {declared[setting.key].value} and "
                             f"{setting.value}: give one")
        declared[setting.key] = setting
    for key in (key for key in declared if key not in KNOWN_SETTINGS):
        warn(f"--set {key}: not a setting this tool reads ({', '.join(KNOWN_SETTINGS)}): "
             f"shown as declared, used by nothing")
    # one run's log; summary and diff find one per run
    log = engine_log([path for _, path in paths], args.engine_log) \
        if ENGINE_LOG_OPTION in command.options and not args.no_engine_log else None
    reading = reading_with_log(reading_from(args, warn, [path for _, path in paths])._replace(
        settings=tuple(declared.values())), log)
    if getattr(args, "calibration", None) is not None:  # the user's runs' costs, beside the log's
        # checked: its schema, its model, and every number the what-if reads (a file of
        # anything else is refused, naming the field)
        fit = trace_io.read_json_object(args.calibration, "a calibration")
        problem = calibration_problem(fit)
        if problem:
            raise TraceError(args.calibration, 0, f"not a calibration summary "
                                                  f"--calibration-out wrote: {problem}")
        reading = reading._replace(measured={**(reading.measured or {}), "calibration": fit,
                                             "calibration_path": args.calibration})
    report = command.analyze(args, reading)
    if "engine" in KINDS[report["kind"]].record.names:
        report = with_engine_log(report, log, warn)
    report["warnings"] = list(warn.messages)  # diff's own among them: analyze_diff says each
    if args.perfetto is not None:
        traces = dict(paths)
        export = Export(traces.get("compute"), traces.get("io"), reading, args.tokens)
        if not export_perfetto(args.perfetto, export):
            reading.warn(f"{args.perfetto}: no token in --tokens {window_text(args.tokens)} "
                         f"of the selection: the timeline is empty")
    if args.svg is not None:
        write_output(args.svg, svg_of(report))
    if getattr(args, "calibration_out", None) is not None:
        if report["calibration"] is None:  # a diff whose sides hold fewer than two pairs
            raise UsageError("--calibration-out: a fit takes runs that are pairs (CT+IO, or "
                             "x-ct.csv beside x-io.csv; diff: two or more), its base one whose "
                             "compute is known (serial, or overlapped with the stall its log "
                             "or v2 trace gives)")
        write_output(args.calibration_out, "".join(json_chunks(report["calibration"])))
    view = View(args.top, args.layers or args.full, args.ascii, args.wide, args.explain,
                args.full)
    text = FORMATS[args.format](report, view)
    if args.output is not None:
        write_output(args.output, text)
    else:
        written(out, text, args, report, view)
    failed = [gate for gate in report.get("gate", ()) if gate["failed"]]
    if failed:
        raise Regressed("; ".join(f"{gate['new']}: {gate['figure']} worse by "
                                  f"{gate['worse_share']:.1%} (limit {gate['limit_share']:.1%})"
                                  for gate in failed))


class Regressed(Exception):
    """diff --fail-if-worse: a NEW is worse than allowed (exit status 1, after the report)."""


def written(out, text, args, report, view):
    """The report to the stream, in plain ASCII when the stream cannot take it. JSON and CSV
    come in chunks, each written as it is made; on a stream that takes no Unicode they are made
    ASCII from the start, since a chunk already written cannot be taken back."""
    if not isinstance(text, str):
        try:  # whether the stream's encoding is one of Unicode's (a text-only stream is)
            unicode = getattr(out, "buffer", None) is None or \
                codecs.lookup(out.encoding or "utf-8").name.startswith("utf")
        except LookupError:
            unicode = False
        if not unicode:
            text = json_chunks(report, ascii_only=True) if args.format == "json" else (
                chunk.encode("ascii", "backslashreplace").decode("ascii") for chunk in text)
        for chunk in text:
            write_out(out, chunk)
        return
    try:
        write_out(out, text)
    except UnicodeEncodeError:  # a cp1252 console, a non-UTF-8 locale: plain ASCII instead
        if args.format == "markdown":
            text = text.encode("ascii", "xmlcharrefreplace").decode("ascii")
        else:
            text = text_of(report, view._replace(ascii=True))
            text = text.encode("ascii", "backslashreplace").decode("ascii")
        write_out(out, text)


OUTPUT_OPTIONS = ("output", "svg", "perfetto", "calibration_out")


def check_outputs(args, paths):
    """Refused up front: an empty output path, two outputs on one path (one would be lost), an
    output over an input, or --perfetto on an input read only once."""
    targets = {option.replace("_", "-"): getattr(args, option, None)
               for option in OUTPUT_OPTIONS if getattr(args, option, None) is not None}
    try:  # stdin redirected from a regular file (`< ct.csv`) is that file; a pipe is none
        status = os.fstat(sys.stdin.fileno())
        stdin = ("file", status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None
    except (OSError, ValueError, AttributeError):
        stdin = None
    read = [(stdin if path == trace_io.STDIN else output_identity(path),
             f"the input {display_name(path)}") for _, path in paths]
    # The engine logs of the runs: the one named, and NAME.log beside each trace (for a pair,
    # beside both), read or not (--no-engine-log): a run's log is the user's record of it.
    names = [path for _, path in paths]
    read += [(output_identity(log), f"the engine log {log} of this run") for log in
             [args.engine_log, log_beside(names)] + [log_beside([name]) for name in names] if log]
    calibration = getattr(args, "calibration", None)
    if calibration:
        read.append((output_identity(calibration), f"the calibration {calibration} this run reads"))
    seen = {}
    for option, target in targets.items():
        if not target:
            raise UsageError(f"--{option}: an empty path")
        same = seen.get(output_identity(target))
        if same:
            raise UsageError(f"--{same} and --{option} are both {target}: one would be lost")
        seen[output_identity(target)] = option
        for identity, words in read:
            if identity == output_identity(target):
                raise OutputError(f"{target}: is {words}: not writing over it")
    if args.perfetto:
        for _, path in paths:
            if trace_io.read_once(path):
                raise TraceError(display_name(path), 0, "--perfetto reads its traces a second "
                                                        "time: give a file, not stdin or a pipe")


def write_out(out, text):
    """The whole text to the stream, or an error: encoded whole before any of it is written (a
    UnicodeEncodeError leaves nothing written), then written to the stream's bytes until every
    byte is taken, since an unbuffered stdout (PYTHONUNBUFFERED=1) takes a short write to a pipe
    as if it were whole."""
    try:
        binary = getattr(out, "buffer", None)
        if binary is None:  # a stream of text only (io.StringIO)
            out.write(text)
            out.flush()
            return
        data = memoryview(text.encode(out.encoding or "utf-8", out.errors or "strict"))
        out.flush()
        while data:
            written = binary.write(data)
            data = data[len(data) if written is None else written:]
        binary.flush()
    except (BrokenPipeError, UnicodeEncodeError):
        raise
    except (OSError, ValueError) as exc:
        raise OutputError(f"cannot write the output: {getattr(exc, 'strerror', None) or exc}")


def silence_stdout():
    """The reader (head, less) went away: stop quietly, and keep Python from complaining about
    the unflushable stdout at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv=None, out=None, err=None):
    """Run the CLI; returns the exit status (EXIT_STATUS)."""
    out = out or sys.stdout
    err = err or sys.stderr
    argv = sys.argv[1:] if argv is None else argv
    parser = parser_of(tuple(COMMANDS.values()))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    if out is None and args.output is None:
        say(err, "standard output is closed: nowhere to write the report")
        return 1
    warn = Warnings(err)
    try:
        run(args, out, warn)
    except (TraceError, OutputError) as problem:
        say(err, str(problem))
        return 1
    except Regressed as regression:
        say(err, f"regression: {regression}")
        return 1
    except UsageError as problem:
        say(err, str(problem))
        return 2
    except BrokenPipeError:
        silence_stdout()
        return 141
    except KeyboardInterrupt:
        return 130
    return 0


class Terminated(Exception):
    """SIGTERM: unwinds like an interrupt, so that a child process is ended too."""


def terminate(signum, frame):
    raise Terminated()


# glibc's mallopt(M_MMAP_THRESHOLD): past this size an allocation is mapped pages of its own
# (a batch's text, trace_io.BATCH_BYTES, stays under it).
M_MMAP_THRESHOLD, MMAP_THRESHOLD = -3, 128 * 1024


def map_large_arrays():
    """Keep glibc's threshold for mapping an allocation its own pages at its default, where
    freeing one large array would raise it for good: the token columns, grown a step at a time,
    then come from the heap and leave it in fragments. Fixed, each grows in place (mremap).
    Measured (one-row tokens, report): 800k tokens 152 MB before, 128 after; 125 bytes a token
    from 120k to 800k before, 94 after. Elsewhere (another libc) there is nothing to set."""
    try:
        import ctypes
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (ImportError, OSError, AttributeError):
        pass


def run_and_exit():
    """The command line's entry point: main(), its output flushed here (a reader that went
    away, head or less, is a status, not a complaint), then an exit that does not tear down
    the heap: freeing every object one by one is time the user waits for and nothing needs
    (measured: docs/performance.md)."""
    signal.signal(signal.SIGTERM, terminate)
    map_large_arrays()
    try:
        status = main()
    except Terminated:
        status = 143
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:
            silence_stdout()
            status = 141
        except (OSError, ValueError):
            status = status or 1
    os._exit(status)


if __name__ == "__main__":
    run_and_exit()
