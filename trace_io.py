"""Read the engine's preamble-CSV traces and fold them, in one process or several.

A trace is `#` key=value preamble lines, a header, then rows (the contract:
../shared/spec/trace-format.md, summarised in the README). This module knows the format and
nothing of what the figures mean:

  Trace        one open trace: kind, version, preamble, columns; batches() streams its rows
  Columns      what a fold reads of a trace: its kind, required columns, how they come out
  Reading      how a command reads its traces (selection, bad rows, warnings, processes, and
               where a long read shows its progress)
  Progress     one line on a terminal while a long read goes on, counted by every process
  fold_file    open a trace, check it, and fold its rows, in several processes when it is large

**Reading.** Rows are read in batches of whole lines (256 KiB) and handed out by column
(name -> list), so that splitting and converting happen inside C builtins. Lines that need it
(quoted fields, bad values) take the line-by-line path; nothing holds more than one batch.

**Integer columns.** Every integer column a caller reads is checked here, by integer_problem()
alone, before anything converts it: the same rule on the fast and line-by-line paths, with and
without skip_bad_rows, in rows the caller selects and rows it does not. A value is plain ASCII
digits (no sign, no spaces) below 2^64; `layer` may also be -1; `phase` and `spec` are 0 or 1.

**Folds.** A fold turns the batches of one stretch of a trace into sums:

  fold.feed(batch)    for each batch of the stretch, in file order
  fold.finish()       once, after the last batch
  fold.detach()       before the finished fold is pickled to another process: drops the open
                      trace and whatever is not needed after finish()
  fold.merge(later)   adds the finished fold of the stretch that follows this one's

Splitting a file relies on one property: for a file cut at a token boundary (a line whose
(turn, phase, step) differs from the line before it) into A and B, merging fold(B) into fold(A)
gives exactly fold(A + B).

Problems come out as TraceError("FILE:LINE: what is wrong"), never as a traceback; problems that
still leave a usable trace (a truncated last line, an unknown version, skipped bad rows) go to the
`warn` callback.
"""
import bz2
import codecs
import contextlib
import csv
import gc
import gzip
import io
import json
import lzma
import mmap
import os
import pickle
import re
import shutil
import signal
import stat
import struct
import sys
import time
import zipfile
import zlib
from collections import namedtuple
from functools import partial
from itertools import compress, groupby

KINDS = {"compute_trace": "compute", "io_trace": "io"}
KNOWN_VERSIONS = {"v1", "v2"}
# A file with no kind line is recognised by columns only its kind has.
KIND_COLUMNS = {"compute": {"wall_ns", "op"}, "io": {"latency_ns", "read_bytes"}}
TOKEN_COLUMNS = ("turn", "phase", "step")
# A batch's text, read and decoded, stays under glibc's mmap threshold, which the command line
# fixes at 128 KiB (decode_analyze.map_large_arrays): then each batch reuses the heap instead
# of mapping fresh pages twice (measured, io of 500k reads: 9% of its wall at 256 KiB).
BATCH_BYTES = 120 << 10
COMMA_STAND_IN = "\ue000"  # a private-use character: a comma inside a quoted field
MAX_LINE = 1 << 20  # a real row is under 1 KiB; a longer line is not a trace line
csv.field_size_limit(MAX_LINE + 1)  # so that the line bound, not csv's, is the one met
# Compressed streams, by their magic bytes: those the standard library reads, and the rest.
DECOMPRESSORS = {b"\x1f\x8b": lambda f: gzip.GzipFile(fileobj=f), b"BZh": bz2.BZ2File,
                 b"\xfd7zXZ\x00": lzma.LZMAFile}
OTHER_COMPRESSIONS = {b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4",
                      b"7z\xbc\xaf\x27\x1c": "7-zip", b"Rar!": "rar"}
ZIP_MAGIC = b"PK\x03\x04"
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)
_KEY_START = re.compile(r"(?:^|\s)([^\s=]+)=")

# ── the integer rule ─────────────────────────────────────────────────────────────────────────
INTEGER_LIMIT = 1 << 64
SIGNED_COLUMNS = {"layer"}  # may also be -1: no layer
FLAG_COLUMNS = {"phase", "spec"}  # 0 or 1
SHOWN_CHARS = 40  # of a bad value, in a message


def integer_problem(column, text):
    """None if `text` is a valid value of the integer column `column`, else what is wrong."""
    if column in FLAG_COLUMNS:
        if text in ("0", "1"):
            return None
        return f"column {column}: {shown(text)} is not 0 or 1"
    if text.isascii() and text.isdigit():
        if len(text) < 20 or len(text) == 20 and int(text) < INTEGER_LIMIT:
            return None
        return f"column {column}: {shown(text)} is too large (the largest is 2^64-1)"
    if column in SIGNED_COLUMNS:
        if text == "-1":
            return None
        return f"column {column}: {shown(text)} is not an integer >= -1"
    return f"column {column}: {shown(text)} is not a non-negative integer"


def shown(text):
    """repr() of a value for a message, cut short when it is long."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


# Fractions and exponents (. e E), strings ("), arrays ([), objects ({), true and false (e),
# null (l), NaN (N), Infinity (I): every JSON value that is not an integer holds one of these.
NOT_JSON_INTEGER = '.eE"[{lNI'


def _plain_digits(joined):
    return joined.isascii() and joined.isdigit()


def _bulk_integers(texts, last_column):
    """The integers written in `texts` if every one passes integer_problem() as a plain
    non-negative integer, else None (the line-by-line path then names the line).

    A quick test of the whole column at once, never a second rule: anything it is unsure of
    (leading zeros, empty fields) it leaves to the line-by-line path, which applies the rule.
    """
    zero = "0\n" if last_column else "0"
    head = texts[:64]  # a column of few zeros (latency_ns) is told by its head: no full count
    if head.count(zero) * 2 > len(head) and texts.count(zero) * 2 > len(texts):
        # mostly zeros (majflt): convert only the others
        values = [0] * len(texts)
        for position in compress(range(len(texts)), map(zero.__ne__, texts)):
            text = texts[position].rstrip("\n")
            if not _plain_digits(text) or len(text) > 20:  # 2^64 - 1 has 20 digits
                return None
            values[position] = int(text)
            if values[position] >= INTEGER_LIMIT:
                return None
        return values
    joined = ",".join(texts)
    # What JSON takes beyond plain digits: a sign, blanks (the only newlines are those that
    # end the lines, on the last column), and values other than integers, each of which has
    # one of NOT_JSON_INTEGER's characters. Searching for a character costs a fraction of
    # asking each parsed value its type.
    if "-" in joined or " " in joined or "\t" in joined or "\r" in joined or \
            any(char in joined for char in NOT_JSON_INTEGER):
        return None
    try:  # the JSON parser reads a list of integers faster than int() one by one
        values = json.loads("[" + joined + "]")
    except ValueError:  # leading zeros, empty fields, too many digits
        return None
    if len(values) != len(texts):  # one empty field alone reads as "[]"
        return None
    return values if not values or max(values) < INTEGER_LIMIT else None


# ── what is read, and how ────────────────────────────────────────────────────────────────────
# What a fold reads of a trace: the kind it must be, the columns it requires, and how
# Trace.batches() hands them out: `ints` as ints, `keys` (integer columns of few distinct
# values) checked but kept as text, `strings` as text; drop=Drop(column, values) leaves out
# the rows whose column holds one of the values.
Drop = namedtuple("Drop", "column values")
Columns = namedtuple("Columns", "kind required ints keys strings drop",
                     defaults=((), (), (), None))
# How a command reads its traces, one record from the command line down to every fold: which
# tokens (`selection`, decode_analyze.Selection: this module only passes it on), whether bad
# rows are skipped, where warnings go (a callable), how many processes may read one file, and
# what the pictures need (`per_lane`: each token's bytes by lane, counted only for --svg), and
# the run's settings its preamble lacks (decode_analyze.Setting each: this module passes them on).
# settings: the Settings the preamble lacks; measured: what the engine's log measured of the
# run ({figure: value}, ms per token as the tool counts them), which the verdicts weigh against
Reading = namedtuple("Reading", "selection skip_bad_rows warn jobs per_lane settings measured "
                     "progress", defaults=(False, None, 1, False, (), None, None))
STDIN = "-"


def display_name(path):
    """How an input is named in messages and reports: stdin as <stdin>."""
    return "<stdin>" if path == STDIN else path


def read_once(path):
    """Whether the input can be read only once: stdin ("-") or a pipe (a FIFO, or a shell's
    <(zcat run-io.csv.gz)), whose head is gone once looked at."""
    if path == STDIN:
        return True
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


# ── opening ──────────────────────────────────────────────────────────────────────────────────
class TraceError(Exception):
    """An input problem, printed as 'FILE:LINE: message' (LINE omitted when it is not one)."""

    def __init__(self, path, line, message):
        super().__init__(message)
        self.path, self.line, self.message = path, line, message

    def __str__(self):
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


def parse_preamble_line(text):
    """Split one preamble line (without '#') into (leading words, [(key, value)] in order).

    A value runs up to the next `key=` token, so a value may hold spaces (`model=tiny moe.gguf`).
    """
    starts = list(_KEY_START.finditer(text))
    if not starts:
        return text.split(), []
    words = text[: starts[0].start(1)].split()
    ends = [following.start(1) for following in starts[1:]] + [len(text)]
    return words, [(this.group(1), text[this.end(): end].strip())
                   for this, end in zip(starts, ends)]


def _open_binary(path):
    if path == STDIN:
        binary = getattr(sys.stdin, "buffer", None)
        if binary is None:
            raise TraceError(display_name(path), 0, "standard input is closed")
        # Magic bytes are peeked at: a stdin replaced by one that cannot peek is wrapped.
        return (binary if hasattr(binary, "peek") else io.BufferedReader(binary)), False
    try:
        return open(path, "rb"), True
    except IsADirectoryError:
        raise TraceError(path, 0, "is a directory, not a trace file") from None
    except FileNotFoundError:
        raise TraceError(path, 0, "no such file") from None
    except PermissionError:
        raise TraceError(path, 0, "permission denied") from None
    except OSError as exc:
        raise TraceError(path, 0, f"cannot open: {exc.strerror or exc}") from None


def _text_stream(binary, name):
    """The stream of the trace's text: `binary` itself, or what it decompresses to; and
    whether it was compressed. Refuses what is neither text nor a compression it reads."""
    try:
        head = binary.peek(8)[:8]
    except READ_ERRORS as exc:
        raise TraceError(name, 0, f"cannot read: {exc}") from None
    for magic, opener in DECOMPRESSORS.items():
        if head.startswith(magic):
            return opener(binary), True
    if head.startswith(ZIP_MAGIC):
        return _zip_member(binary, name), True
    for magic, label in OTHER_COMPRESSIONS.items():
        if head.startswith(magic):
            raise TraceError(name, 0, f"{label}-compressed: decompress it first")
    return binary, False


def _zip_member(binary, name):
    """The one file in a zip archive, as a binary stream."""
    if not binary.seekable():
        raise TraceError(name, 0, "a zip archive must be read from a file, not a stream: "
                                  "unzip it first")
    try:
        archive = zipfile.ZipFile(binary)
        members = [info for info in archive.infolist() if not info.is_dir()]
        if len(members) != 1:
            raise TraceError(name, 0, f"the zip archive holds {len(members)} files, not one "
                                      f"trace: unzip it first")
        return archive.open(members[0])
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError) as exc:
        raise TraceError(name, 0, f"cannot read the zip archive: {exc}") from None


def _seekable(stream):
    try:
        return stream.seekable()
    except (OSError, ValueError):
        return False


def _chunks(stream, limit):
    """The next `limit` bytes of a binary stream, in batches."""
    while limit > 0:
        chunk = stream.read(min(BATCH_BYTES, limit))
        if not chunk:
            return
        limit -= len(chunk)
        yield chunk


# ── tokens ───────────────────────────────────────────────────────────────────────────────
# A token is one (turn, phase, step). A TokenRun is a stretch of consecutive rows of one token,
# [start, end) in a batch, with the token's values as the trace wrote them.
TokenRun = namedtuple("TokenRun", "turn phase step start end")
# The valid values of a key column (and decode_analyze's IntCache) kept at most: a trace of
# many distinct values has them checked again, never held without bound
KEPT_VALUES = 1 << 16
KEPT_TOKENS = 1 << 12  # token keys known valid: a batch's, and then some
HOLD_ROWS = 1 << 14  # a token longer than this is handed out in pieces


def token_runs(turns, phases, steps):
    """The TokenRuns of rows given by their token columns."""
    runs = []
    start = 0
    for step, rows in groupby(steps):
        end = start + len(list(rows))
        if turns[start:end].count(turns[start]) == end - start and \
                phases[start:end].count(phases[start]) == end - start:
            runs.append(TokenRun(turns[start], phases[start], step, start, end))
        else:  # rare: one step value shared by neighbouring turns or phases
            for (turn, phase), inner in groupby(zip(turns[start:end], phases[start:end])):
                inner_end = start + len(list(inner))
                runs.append(TokenRun(turn, phase, step, start, inner_end))
                start = inner_end
        start = end
    return runs


def shifted(runs, offset):
    """The TokenRuns moved by `offset` rows (built whole: _replace() costs three times as
    much, and a batch that follows a held token has every run moved)."""
    return [TokenRun(turn, phase, step, start + offset, end + offset)
            for turn, phase, step, start, end in runs]


class Batch(dict):
    """The columns of consecutive rows (name -> list), and `runs`: their TokenRuns, in order."""
    __slots__ = ("runs",)

    def __init__(self, columns, runs):
        super().__init__(columns)
        self.runs = runs

    def rows(self):
        return self.runs[-1].end if self.runs else 0

    def split(self, at):
        """(rows before `at`, rows from `at` on); `at` is the start of a run."""
        first = [run for run in self.runs if run.end <= at]
        rest = shifted(self.runs[len(first):], -at)
        return (Batch({name: column[:at] for name, column in self.items()}, first),
                Batch({name: column[at:] for name, column in self.items()}, rest))

    def joined(self, later):
        """This batch's rows followed by `later`'s, a token that spans the two one run."""
        offset = self.rows()
        runs = list(self.runs)
        following = shifted(later.runs, offset)
        if following and runs and runs[-1][:3] == following[0][:3]:
            runs[-1] = runs[-1]._replace(end=following.pop(0).end)
        return Batch({name: column + later[name] for name, column in self.items()},
                     runs + following)


# ── what a file holds ────────────────────────────────────────────────────────────────────────
SAVED_REPORT_LIMIT = 256 << 20  # a saved JSON report is a few MB; past this it is not one


def sniff(path):
    """What the file at `path` (reopenable: not stdin) holds, from its head: "json" for a
    report saved with --format json, else the trace's kind ("compute" or "io")."""
    if _first_character(path) in (b"{", b"["):
        return "json"
    with Trace(path) as trace:
        if trace.kind is None:
            trace.require("compute", ())  # says what a trace needs
        return trace.kind


@contextlib.contextmanager
def _decompressed(path):
    """The stream of the file at `path`, decompressed; a read error is a TraceError."""
    binary, owned = _open_binary(path)
    try:
        stream, _ = _text_stream(binary, path)
        yield stream
    except READ_ERRORS as exc:
        raise TraceError(path, 0, f"cannot read: {exc}") from None
    finally:
        if owned:
            binary.close()


def _first_character(path):
    """The first byte of the file at `path` (decompressed) after a BOM and white space,
    however much white space comes first (up to MAX_LINE bytes); b"" for none."""
    with _decompressed(path) as stream:
        head = stream.read(3)
        head = head[3:] if head.startswith(codecs.BOM_UTF8) else head
        for _ in range(MAX_LINE // BATCH_BYTES + 1):
            rest = head.lstrip(b" \t\r\n")
            if rest or not head:
                return rest[:1]
            head = stream.read(BATCH_BYTES)
        return b""


def _opening_bytes(path, limit):
    """Up to `limit` bytes from the start of the file at `path`, decompressed."""
    with _decompressed(path) as stream:
        return stream.read(limit)


def read_json_object(path, what):
    """The dict a JSON file holds (compressed too, or stdin): a report saved with --format
    json, or a calibration (`what` names it in errors). Only the JSON is checked here; what
    it holds is its reader's to check."""
    data = _opening_bytes(path, SAVED_REPORT_LIMIT + 1)
    if len(data) > SAVED_REPORT_LIMIT:
        raise TraceError(path, 0, f"over {SAVED_REPORT_LIMIT >> 20} MiB: not {what}")
    try:
        found = json.loads(data.decode("utf-8-sig"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise TraceError(path, 0, f"not UTF-8 text (byte {exc.start}): not {what}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(path, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno})") \
            from None
    except (ValueError, RecursionError) as exc:
        raise TraceError(path, 0, f"not {what}: {exc}") from None
    if not isinstance(found, dict):
        raise TraceError(path, 1, f"not {what}: the JSON is not an object")
    return found


def _no_constant(name):
    raise ValueError(f"{name} is not a number a report holds")


# ── one trace ────────────────────────────────────────────────────────────────────────────────
class Trace:
    """One open trace: `kind`, `version`, `meta` and `columns` are known after construction;
    `batches()` then streams the rows. Use as a context manager."""

    def __init__(self, path, skip_bad_rows=False, warn=None, byte_range=None):
        """byte_range=(start, end): read only the rows in that part of a plain file (start is
        a line start after the header, or None for right after it; end None for the end)."""
        self.path = path
        self.name = display_name(path)
        self.skip_bad_rows = skip_bad_rows
        self.warn = warn or (lambda message: None)
        self.kind = self.kind_word = self.version = None
        self.meta = {}
        self.columns = []
        self.skipped = 0
        self.first_skipped = None
        self.line = 0  # number of the last line consumed
        self.compressed = False
        self.progress, self._slot, self._bytes_read, self._first_line = None, 0, 0, 0
        binary, self._owned = _open_binary(path)
        self._binary = self._stream = binary
        try:
            self._stream, self.compressed = _text_stream(binary, self.name)
            self._refuse_binary()
            self._read_head()
            plain = not self.compressed and path != STDIN and _seekable(binary)
            self.body_start = self._stream.tell() if plain else None
            self._end = None
            if byte_range:
                self._seek(*byte_range)
        except BaseException:
            self.close()
            raise

    def _refuse_binary(self):
        try:
            head = self._stream.peek(4096)[:4096]
        except READ_ERRORS as exc:
            raise TraceError(self.name, 0, f"cannot read: {exc}") from None
        if b"\0" in head:
            raise TraceError(self.name, 0, "not a text trace: binary data (NUL bytes) at the "
                                           "start")

    # -- head --------------------------------------------------------------------------------
    def _read_head(self):
        while True:
            line = self._readline()
            if not line:
                raise TraceError(self.name, 0, "empty file: no header line"
                                 if self.line == 0 else "no header line after the preamble")
            if line.startswith("#"):
                words, pairs = parse_preamble_line(line[1:])
                if words and self.kind_word is None:
                    self.kind_word, self.version = (words + [None])[:2]
                for key, value in pairs:  # a key said twice is a contradiction: said, once
                    if self.meta.get(key, value) != value:
                        self.warn(f"{self.name}:{self.line}: the preamble names "
                                  f"{key if key.isascii() and key.isprintable() else shown(key)}"
                                  f" again: {shown(self.meta[key])}, then {shown(value)}: the "
                                  f"last stands")
                    self.meta[key] = value
                continue
            if not line.strip():
                continue
            self.header_line = self.line
            self.columns = [c.strip() for c in self._fields(line.rstrip("\n"), self.line)]
            twice = sorted({c for c in self.columns if self.columns.count(c) > 1 and c})
            if twice:  # which of the two would the reader read, and which the splitter?
                raise TraceError(self.name, self.line, f"the header names {shown(twice[0])} "
                                                       f"twice: which column is it?")
            break
        self._recognise_kind()

    def _readline(self):
        try:
            raw = self._stream.readline(MAX_LINE + 1)
        except READ_ERRORS as exc:
            raise TraceError(self.name, self.line + 1, f"cannot read: {exc}") from None
        if not raw:
            return ""
        if len(raw) > MAX_LINE:
            raise self._too_long(self.line + 1)
        if self.line == 0 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        self.line += 1
        # Undecodable bytes in a node name must not stop the analysis: shown as U+FFFD.
        return raw.decode("utf-8", "replace").replace("\r\n", "\n")

    def _too_long(self, number):
        return TraceError(self.name, number, f"line longer than {MAX_LINE >> 20} MiB: not a "
                                             f"trace line (a real row is under 1 KiB)")

    def _recognise_kind(self):
        if self.kind_word in KINDS:
            self.kind = KINDS[self.kind_word]
            if self.version not in KNOWN_VERSIONS:
                self.warn(f"{self.name}:1: unknown {self.kind_word} version "
                          f"{self.version or '(none)'}; reading columns by name")
            return
        present = set(self.columns)
        for kind, needed in KIND_COLUMNS.items():
            if needed <= present:
                self.kind = kind
                return

    def require(self, kind, columns):
        """Fail unless this trace is of `kind` and has every one of `columns`, and the token
        columns, by which every read of the rows is grouped (batches, splits)."""
        if self.kind is None and "".join(self.columns).startswith(("{", "[")):
            raise TraceError(self.name, self.header_line,
                             "a JSON file (a report saved with --format json?), not a trace: "
                             "diff and summary read saved reports")
        if self.kind is None:
            raise TraceError(self.name, self.header_line,
                             "not a decode trace: no '# compute_trace' / '# io_trace' line and "
                             "the header has neither wall_ns nor latency_ns")
        if self.kind != kind:
            how = (" ".join(filter(None, ("#", self.kind_word, self.version)))
                   if self.kind_word else "recognised by its columns")
            raise TraceError(self.name, 1 if self.kind_word else self.header_line,
                             f"this is {'an' if self.kind == 'io' else 'a'} {self.kind} trace "
                             f"({how}), not {'an' if kind == 'io' else 'a'} {kind} trace; "
                             f"read it with 'decode-analyze {self.kind}'")
        missing = [c for c in dict.fromkeys((*TOKEN_COLUMNS, *columns)) if c not in self.columns]
        if missing:
            raise TraceError(self.name, self.header_line,
                             f"missing required column{'s' if len(missing) > 1 else ''}: "
                             f"{', '.join(missing)} (header has: {', '.join(self.columns)})")

    # -- where to read -----------------------------------------------------------------------
    def _seek(self, start, end):
        if self.body_start is None:
            raise ValueError("only a plain file can be read by parts")
        if start is not None:
            self._stream.seek(0)
            self.line = sum(chunk.count(b"\n") for chunk in _chunks(self._stream, start))
            self._stream.seek(start)
        self._end = end
        self._first_line = self.line

    def limit(self, end):
        """Read rows only up to byte offset `end` (a line start)."""
        self._end = end

    def _read_chunk(self):
        size = BATCH_BYTES
        if self._end is not None:
            size = min(size, self._end - self._stream.tell())
            if size <= 0:
                return b""
        try:
            raw = self._stream.read(size)
        except READ_ERRORS as exc:
            raise TraceError(self.name, self.line + 1, f"cannot read: {exc}") from None
        if self.progress is not None:
            self._bytes_read += len(raw)
            self.progress.count(self._slot, self.line - self._first_line, self._bytes_read)
        return raw

    def watched(self, progress, slot=0):
        """This trace, counting its rows and bytes into progress's `slot` as it reads."""
        self.progress, self._slot = progress, slot
        return self

    # -- rows --------------------------------------------------------------------------------
    def batches(self, columns):
        """Yield Batches of whole tokens, in file order, of the Columns `columns`.

        `ints` come back as ints. `keys` are integer columns of few distinct values (turn,
        layer, lane...), checked like `ints` but kept as text, for the caller to group by and
        convert once per distinct value. `strings` are text. `drop` (a Drop) leaves out
        rows whose column is in values (the v2 synthetic rows); columns the trace does not
        have are not read. A bad row raises TraceError, or with skip_bad_rows is counted and
        left out before any row around it is seen.

        A token's rows stay together: the last token of a batch is held back until the next
        batch shows where it ends, unless it is over HOLD_ROWS rows already (then it comes in
        pieces, each a run of the same token).
        """
        self._prepare(columns)
        held = None
        for batch in self._row_batches():
            if held is not None:
                batch = held.joined(batch)
            last = batch.runs[-1]
            if last.start > 0:
                ready, held = batch.split(last.start)
                yield ready
            elif batch.rows() < HOLD_ROWS:
                held = batch
            else:
                held = None
                yield batch
        if held is not None:
            yield held

    def _prepare(self, columns):
        """What batches() reads of each row: the columns wanted, which are checked as
        integers, and the rows it drops."""
        index = {c: i for i, c in enumerate(self.columns)}
        ints, keys, strings, drop = columns.ints, columns.keys, columns.strings, columns.drop
        # v1 writers have no synthetic rows: checking for them would cost a pass per batch.
        if self.version == "v1":
            drop = None
        self._drop_by = drop if drop and drop.column in index else None
        wanted = [c for c in (*ints, *TOKEN_COLUMNS, *keys, *strings) if c in index]
        wanted = list(dict.fromkeys(wanted))
        if self._drop_by and self._drop_by.column not in wanted:
            wanted.append(self._drop_by.column)
        self._shape = (index, wanted, set(ints), set(ints) | set(keys) | set(TOKEN_COLUMNS))
        # Token columns are checked once per run of rows (_token_runs); the rest per batch.
        self._valid_keys = {column: set() for column in keys if column not in TOKEN_COLUMNS}
        self._valid_tokens = set()

    def _row_batches(self):
        """Batch by batch of whole lines, their surviving rows."""
        remainder = ""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            raw = self._read_chunk()
            chunk = remainder + decoder.decode(raw, final=not raw)
            if "\r" in chunk:
                chunk = chunk.replace("\r\n", "\n")
            if not raw:
                break
            cut = chunk.rfind("\n") + 1
            remainder = chunk[cut:]
            if len(remainder) > MAX_LINE:
                raise self._too_long(self.line + chunk.count("\n", 0, cut) + 1)
            if cut:
                batch = self._batch(chunk[:cut])
                if batch is not None:
                    yield batch
        if chunk.strip():
            # The engine ends every row with a newline: a line without one is a run cut short.
            self.warn(f"{self.name}:{self.line + 1}: last line has no newline at the end (a run "
                      f"cut short?): ignored, {shown(chunk)}")

    def _skip_row(self, problem):
        """Count a row left out as bad (with skip_bad_rows)."""
        self.skipped += 1
        if self.first_skipped is None:
            self.first_skipped = problem

    def _drop(self, columns):
        if self._drop_by is None:
            return columns
        column, values = self._drop_by
        if values.isdisjoint(columns[column]):
            return columns
        keep = [value not in values for value in columns[column]]
        return {name: list(compress(col, keep)) for name, col in columns.items()}

    def _batch(self, text):
        """The Batch of the complete lines in `text`, or None when no row survives."""
        first_line = self.line + 1
        batch = None
        # A carriage return left after CRLF became LF is inside a line: the line-by-line path
        # judges it (an error, or a skipped row), as it judges every line it cannot split.
        plain = None if "\r" in text else self._unquoted(text) if '"' in text else text
        if plain is not None:
            spread = plain.replace("\n", "\n,")  # each line's newline stays on its last field
            n_lines = len(spread) - len(plain)  # what count("\n") would say, without a pass
            self.line += n_lines
            columns = self._fast_batch(spread, n_lines,
                                       restore=plain is not text and COMMA_STAND_IN in plain)
            if columns is not None:
                columns = self._drop(columns)
                runs = self._token_runs(columns)
                if runs is not None:
                    batch = Batch(columns, runs)
        if batch is None:
            lines = text.split("\n")
            lines.pop()
            self.line = first_line - 1 + len(lines)  # counted here when there was no fast path
            columns = self._slow_batch(lines, first_line)
            if columns is not None:
                columns = self._drop(columns)
                batch = Batch(columns, self._token_runs(columns))
        return batch if batch and batch.runs else None

    def _unquoted(self, text):
        """`text` with each line that holds a quote rewritten without quoting (a comma inside
        a field as COMMA_STAND_IN), so that the batch can still be split at C speed; None when
        that cannot be done (the stand-in is in the text, or a quoted line is not valid CSV).
        Only the quoted lines are parsed one by one."""
        if COMMA_STAND_IN in text:
            return None
        spans, position = [], 0
        while True:
            quote = text.find('"', position)
            if quote < 0:
                break
            position = text.find("\n", quote)
            spans.append((text.rfind("\n", 0, quote) + 1, position))
        lines = [text[start:end] for start, end in spans]
        try:  # one reader for all of them: a line that ran on into the next is found by count
            rows = list(csv.reader(lines))
        except csv.Error:
            return None
        if len(rows) != len(lines):
            return None
        parts, position = [], 0
        for (start, end), fields in zip(spans, rows):
            parts += [text[position:start],
                      ",".join([field.replace(",", COMMA_STAND_IN) for field in fields])]
            position = end
        parts.append(text[position:])
        return "".join(parts)

    def _token_runs(self, columns):
        """The TokenRuns of a batch's rows; None if a token value breaks the integer rule
        (then the line-by-line path names its line)."""
        if not columns:
            return []
        runs = token_runs(*(columns[name] for name in TOKEN_COLUMNS))
        valid = self._valid_tokens
        if len(valid) >= KEPT_TOKENS:  # a long run's tokens are many: keep the latest only
            valid.clear()
        for run in runs:
            token = (run.turn, run.phase, run.step)
            if token not in valid:
                if any(integer_problem(name, text) for name, text in zip(TOKEN_COLUMNS, token)):
                    return None
                valid.add(token)
        return runs

    def _fast_batch(self, spread, n_lines, restore=False):
        """Split a batch of n plain lines at C speed; None sends it to the line-by-line path.
        `spread`: their text with a comma after each newline. `restore`: commas inside fields
        are written as COMMA_STAND_IN (see _unquoted).

        Each line keeps its newline on its last field, so the batch is aligned (every line has
        exactly `width` fields) iff the n slots that should end the n lines hold all n newlines.
        """
        index, wanted, ints, _ = self._shape
        width = len(self.columns)
        flat = spread.split(",")
        flat.pop()
        if len(flat) != n_lines * width or "".join(flat[width - 1::width]).count("\n") != n_lines:
            return None
        columns = {}
        for name in wanted:
            column = flat[index[name]::width]
            last_column = index[name] == width - 1
            if name in ints:
                column = _bulk_integers(column, last_column)
                if column is None:
                    return None
            else:
                if last_column:  # its newline only: white space is the value's, as line by line
                    column = [value[:-1] for value in column]
                if restore and COMMA_STAND_IN in "".join(column):
                    column = [value.replace(COMMA_STAND_IN, ",") for value in column]
                valid = self._valid_keys.get(name)
                # Few distinct values: each new one is checked once, by the rule itself.
                if valid is not None and not self._keys_valid(name, valid, column):
                    return None
            columns[name] = column
        return columns

    @staticmethod
    def _keys_valid(name, valid, column):
        """True iff every value passes integer_problem(): a column of one-digit values (lane,
        spec) is told at C speed from its joined text; any other, by its new values."""
        if len(column[0]) == 1:  # likely a column of one-character values: try the quick way
            joined, n = ",".join(column), len(column)
            if len(joined) == 2 * n - 1 and joined[1::2] == "," * (n - 1) and \
                    not joined[::2].strip("01" if name in FLAG_COLUMNS else "0123456789"):
                return True  # every value is one character (no empty one), each a digit
        if valid.issuperset(column):
            return True
        if len(valid) >= KEPT_VALUES:  # not a key of few values after all: start over
            valid.clear()
        for text in set(column) - valid:
            if integer_problem(name, text):
                return False
            valid.add(text)
        return True

    def _slow_batch(self, lines, first_line):
        index, wanted, ints, integers = self._shape
        width = len(self.columns)
        rows = []
        for number, line in enumerate(lines, first_line):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                fields = self._fields(line, number) if '"' in line or "\r" in line else \
                    line.split(",")
            except TraceError as bad:
                fields, problem = None, bad.message
            else:
                problem = self._row_problem(fields, width, index, wanted, integers)
            if problem is None:
                rows.append([int(fields[index[name]]) if name in ints else fields[index[name]]
                             for name in wanted])
            elif self.skip_bad_rows:
                self._skip_row(f"line {number}: {problem}")
            else:
                raise TraceError(self.name, number, problem)
        if not rows:
            return None
        return {name: list(values) for name, values in zip(wanted, zip(*rows))}

    @staticmethod
    def _row_problem(fields, width, index, wanted, integers):
        if len(fields) != width:
            return f"expected {width} fields, found {len(fields)}"
        return next(filter(None, (integer_problem(name, fields[index[name]])
                                  for name in wanted if name in integers)), None)

    def _fields(self, line, number):
        if "\r" in line:
            raise TraceError(self.name, number, "a carriage return inside a line (lines must "
                                                "end with LF or CRLF)")
        try:
            return next(csv.reader([line]), [])
        except csv.Error as exc:
            raise TraceError(self.name, number, f"not valid CSV: {exc}") from None

    def close(self):
        if self._owned:
            self._binary.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ── folding a file, in several processes when it is large ──────────────────────────────────
# A plain file this large is cut at token boundaries into parts of at least half of it, up to
# `jobs` parts: child processes fold the later parts while this one folds the first, and send
# their finished folds back to be merged in file order.
PARALLEL_MIN_BYTES = 8 << 20
SPLIT_SCAN_LINES = 1 << 16


def usable_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs(paths, most):
    """--jobs when not given: one process for inputs too small to split, else the usable
    cores, at most `most`. Measured on 2 cores, a 499k-read io trace's wall: 0.85 s in two
    processes against 0.98 in one with the other core busy, 0.62 against 1.04 idle; a default
    that ran one process on a busy machine (idle ticks over 50 ms) was 1.39x the release's."""
    def large(path):
        try:
            return os.stat(path).st_size >= PARALLEL_MIN_BYTES
        except (OSError, TypeError, ValueError):
            return False
    return min(most, usable_cores()) if any(map(large, paths)) else 1


class Progress:
    """One line on a terminal while a long read goes on: the rows read, the share of the file
    where its size is known (a plain file), rows a second; drawn from a second in (AFTER), at
    most four times a second, rewritten in place, and cleared when the read ends or a warning
    is said. Forked readers count into a shared page, a slot each; the first process draws."""

    AFTER = 1.0  # seconds; DECODE_ANALYZE_PROGRESS_AFTER sets it (the tests: 0)
    SLOT = struct.Struct("qq")  # rows, bytes
    SLOTS = 64
    active = None  # the one drawn now, cleared before a warning

    def __init__(self, stream, name, size):
        self.stream, self.name, self.size = stream, name, size
        try:  # a value that is no number of seconds is the default
            self.after = max(0.0, float(os.environ.get("DECODE_ANALYZE_PROGRESS_AFTER",
                                                       self.AFTER)))
        except ValueError:
            self.after = self.AFTER
        self.counts = mmap.mmap(-1, self.SLOT.size * self.SLOTS)  # shared with forked readers
        self.started, self.drawn = time.monotonic(), None

    def count(self, slot, rows, read):
        self.SLOT.pack_into(self.counts, self.SLOT.size * (slot % self.SLOTS), rows, read)
        now = time.monotonic()
        if slot == 0 and now - self.started >= self.after and (
                self.drawn is None or now - self.drawn >= 0.25):
            self.drawn = now
            self.draw(now - self.started)

    def draw(self, seconds):
        rows = read = 0
        for slot in range(self.SLOTS):
            more_rows, more_bytes = self.SLOT.unpack_from(self.counts, self.SLOT.size * slot)
            rows, read = rows + more_rows, read + more_bytes
        share = f"{min(read / self.size, 1):.0%} of {self.size / 1e6:,.0f} MB, " \
            if self.size else ""
        line = (f"reading {os.path.basename(self.name)}: {share}{rows:,} rows, "
                f"{rows / max(seconds, 1e-9):,.0f} rows/s")
        width = shutil.get_terminal_size((80, 24)).columns - 1
        Progress.active = self
        try:
            self.stream.write("\r" + line[:width] + "\x1b[K")
            self.stream.flush()
        except (OSError, ValueError):
            self.stream = None
            Progress.active = None

    @classmethod
    def clear(cls):
        """The line taken off the terminal, if one is drawn."""
        progress, cls.active = cls.active, None
        if progress is not None and progress.stream is not None:
            try:
                progress.stream.write("\r\x1b[K")
                progress.stream.flush()
            except (OSError, ValueError):
                pass


def fold_file(path, columns, make_fold, reading, check=None):
    """Open the trace at `path`, check it is `columns.kind` with the required columns (and
    passes check(trace), which raises TraceError), and fold the batches of `columns` into
    make_fold(), in up to `reading.jobs` processes.

    Returns (trace, fold). Skipped rows are counted into the trace, and said once through
    `reading.warn`."""
    warn = reading.warn or (lambda message: None)
    with Trace(path, reading.skip_bad_rows, warn) as trace:
        if check is not None and trace.kind == columns.kind:
            check(trace)
        trace.require(columns.kind, columns.required)
        splits = split_points(trace, reading.jobs) if hasattr(os, "fork") else []
        parts = list(zip(splits, splits[1:] + [None]))
        progress = None if reading.progress is None else Progress(
            reading.progress, trace.name, None if trace.body_start is None
            else os.path.getsize(trace.path))
        children = [Forked(_fold_part, trace.path, part, columns, make_fold,
                           reading.skip_bad_rows, progress and (progress, slot))
                    for slot, part in enumerate(parts, start=1)]
        try:
            if splits:
                trace.limit(splits[0])
            fold = _fold_batches(trace.watched(progress) if progress else trace, make_fold(),
                                 columns)
            for child, part in zip(children, parts):
                _merge_part(trace, fold, child.result(), part,
                            partial(_refold, trace, columns, make_fold))
        finally:
            for child in children:
                child.cancel()
            Progress.clear()
    if trace.skipped:
        warn(f"{trace.name}: skipped {trace.skipped} bad row(s) (first: {trace.first_skipped})")
    return trace, fold


def _fold_batches(trace, fold, columns):
    with _cyclic_gc_paused():
        for batch in trace.batches(columns):
            fold.feed(batch)
        fold.finish()
    return fold


@contextlib.contextmanager
def _cyclic_gc_paused():
    """The cyclic collector off while a fold runs. A fold makes no cycles, but each batch
    makes many containers, and each of the collections they set off walks the batch's young
    lists (60k fields a batch), and in a process that holds many reports (summary, diff, a
    caller of main()) the whole heap at each oldest collection. Reference counting still frees
    every batch as the next one comes."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def split_points(trace, jobs):
    """Byte offsets, in order, where new tokens start, cutting the rows into up to `jobs`
    parts of about equal size, each at least half of PARALLEL_MIN_BYTES: [] for one piece."""
    if trace.body_start is None or jobs < 2:
        return []
    size = os.path.getsize(trace.path)
    body = size - trace.body_start
    if body < PARALLEL_MIN_BYTES:
        return []
    parts = max(1, min(jobs, body // max(1, PARALLEL_MIN_BYTES // 2)))
    points = []
    for i in range(1, parts):
        point = _token_start_after(trace, trace.body_start + body * i // parts)
        if point is not None and (not points or point > points[-1]):
            points.append(point)
    return points


def _token_start_after(trace, start):
    """The first line past `start` whose token columns differ from those of the row before
    it, both read as the reader reads them (quoted lines too); a line that does not parse is
    no row, so the split is never put before a line that continues a token. None if there is
    none near."""
    positions = [trace.columns.index(c) for c in TOKEN_COLUMNS]
    with open(trace.path, "rb") as f:
        f.seek(start)
        f.readline()  # the rest of a line cut in the middle
        previous = None
        for _ in range(SPLIT_SCAN_LINES):
            offset, line = f.tell(), f.readline(MAX_LINE + 1)
            if not line.endswith(b"\n"):
                return None  # the end, or a line the reader refuses: one piece
            key = _token_key(line, positions, len(trace.columns))
            if key is None:
                continue
            if previous is not None and key != previous:
                return offset
            previous = key
    return None


def _token_key(line, positions, width):
    """The token columns of one row as the reader sees them, or None for no row: a line the
    reader skips or refuses (a carriage return inside it, a wrong field count, a token value
    that breaks the integer rule) never decides where a token ends."""
    text = line.decode("utf-8", "replace")
    text = text[:-2] if text.endswith("\r\n") else text[:-1]
    if "\r" in text or not text.strip() or text.startswith("#"):
        return None
    try:
        fields = next(csv.reader([text]), []) if '"' in text else text.split(",")
    except csv.Error:
        return None
    if len(fields) != width:
        return None
    key = tuple(fields[p] for p in positions)
    return None if any(map(integer_problem, TOKEN_COLUMNS, key)) else key


def _fold_part(path, part, columns, make_fold, skip_bad_rows, watch=None):
    """In a child: fold the rows of one part (watch: the Progress and the slot it counts
    into); what it returns travels back pickled."""
    warnings = []
    try:
        with Trace(path, skip_bad_rows, warnings.append, byte_range=part) as trace:
            fold = _fold_batches(trace.watched(*watch) if watch else trace, make_fold(),
                                 columns)
            fold.detach()
            return "ok", (fold, trace.skipped, trace.first_skipped, warnings)
    except TraceError as problem:
        return "error", (problem.path, problem.line, problem.message, warnings)


def _merge_part(trace, fold, outcome, part, refold):
    """Merge what a child sent; refold(part) reads a dead child's part here instead. Parts are
    merged in file order, after this process's own part was read, so the first error in file
    order is the one raised."""
    warn = trace.warn
    status, payload = outcome or ("died", None)
    if status == "error":
        path, line, message, warnings = payload
    elif status == "ok":
        later, skipped, first_skipped, warnings = payload
    else:
        start, _ = part
        warn(f"{trace.name}: the process reading bytes {start}- of the file died; that part "
             f"was read again here")
        later, skipped, first_skipped, warnings = refold(part)
    for warning in warnings:  # what the part said before it stopped, or when it was done
        warn(warning)
    if status == "error":
        raise TraceError(path, line, message)
    trace.skipped += skipped
    trace.first_skipped = trace.first_skipped or first_skipped
    fold.merge(later)


def _refold(trace, columns, make_fold, part):
    warnings = []
    with Trace(trace.path, trace.skip_bad_rows, warnings.append, byte_range=part) as rest:
        later = _fold_batches(rest, make_fold(), columns)
        return later, rest.skipped, rest.first_skipped, warnings


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
        pid, self.pid = self.pid, None  # reaped: never to be signalled again
        try:  # unpickled as it arrives: the whole message is never held beside what it holds
            outcome = pickle.load(self.reader)
        except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError,
                IndexError, KeyError, MemoryError):
            outcome = None  # a child that died part-way
        finally:
            self.reader.close()
            _, status = os.waitpid(pid, 0)
        return outcome if os.waitstatus_to_exitcode(status) == 0 else None

    def cancel(self):
        """End the child, unless its result was taken already."""
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.reader.close()
