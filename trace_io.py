"""Read the engine's preamble-CSV traces: `#` key=value lines, a header, then rows.

A trace is read in batches of whole lines and handed out by column (name -> list), so that the
per-row work (splitting, integer conversion, validation) happens inside C builtins; only lines
that need it (quoted fields, bad rows) take the slow, line-by-line path. Nothing holds more than
one batch of rows. See ../shared/spec/trace-format.md for the format.

Problems come out as TraceError("FILE:LINE: what is wrong"), never as a traceback; problems that
still leave a usable trace (a truncated last line, an unknown version, skipped bad rows) go to the
`warn` callback.
"""
import codecs
import csv
import gzip
import json
import re
import sys
import zlib
from itertools import compress

KINDS = {"compute_trace": "compute", "io_trace": "io"}
KNOWN_VERSIONS = {"v1", "v2"}
# A file with no kind line is recognised by columns only its kind has.
KIND_COLUMNS = {"compute": {"wall_ns", "op"}, "io": {"latency_ns", "read_bytes"}}
BATCH_BYTES = 1 << 18
_KEY_START = re.compile(r"(?:^|\s)([^\s=]+)=")


def _chunks(stream, limit):
    """The next `limit` bytes of a binary stream, in batches."""
    while limit > 0:
        chunk = stream.read(min(BATCH_BYTES, limit))
        if not chunk:
            return
        limit -= len(chunk)
        yield chunk


class TraceError(Exception):
    """An input problem, printed as 'FILE:LINE: message' (LINE omitted when it is not one)."""

    def __init__(self, path, line, message):
        super().__init__(message)
        self.path, self.line, self.message = path, line, message

    def __str__(self):
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.message}"


def parse_preamble_line(text):
    """Split one preamble line (without '#') into (leading words, {key: value}).

    A value runs up to the next `key=` token, so a value may hold spaces (`model=tiny moe.gguf`).
    """
    starts = list(_KEY_START.finditer(text))
    if not starts:
        return text.split(), {}
    words = text[: starts[0].start(1)].split()
    meta = {}
    for this, following in zip(starts, starts[1:] + [None]):
        end = following.start(1) if following else len(text)
        meta[this.group(1)] = text[this.end(): end].strip()
    return words, meta


def _open_binary(path):
    if path == "-":
        return sys.stdin.buffer, False
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


def integers_ok(values, floor):
    """True iff every value is written as plain ASCII digits (or is '-1' when floor is -1).

    Checked on the joined text, at C speed; the slow path strips blanks first.
    """
    joined = "".join(values)
    if floor < 0:
        minus_ones = values.count("-1")
        if joined.count("-") != minus_ones:
            return False
        joined = joined.replace("-", "")
        if minus_ones == len(values):
            return True
    return joined.isascii() and joined.isdigit() and "" not in values


def not_integer(column, value, floor):
    """The message for a value of an integer column that is not one."""
    kind = "a non-negative integer" if floor == 0 else "an integer >= -1"
    return f"column {column}: {value!r} is not {kind}"


def _parse_ints(texts):
    """The non-negative integers written in `texts`, or None if any is not one.

    The JSON parser reads a list of integers faster than int() one by one; what JSON takes
    beyond plain digits (a minus, a fraction, an exponent, true, null) is caught before or by
    the type check, and what it refuses (leading zeros) goes to the slow path with the rest.
    """
    zero = "0\n" if texts and texts[0][-1:] == "\n" else "0"
    zeros = texts.count(zero)
    if zeros * 2 > len(texts):  # mostly zeros (majflt): convert only the others
        values = [0] * len(texts)
        for position in compress(range(len(texts)), map(zero.__ne__, texts)):
            text = texts[position].rstrip("\n")
            if not plain_integer(text):
                return None
            values[position] = int(text)
        return values
    joined = ",".join(texts)
    if "-" in joined:
        return None
    try:
        values = json.loads("[" + joined + "]")
    except ValueError:
        return None
    return values if not values or set(map(type, values)) == {int} else None


def plain_integer(text):
    """True iff text is a non-negative integer written in plain ASCII digits."""
    return text.isascii() and text.isdigit()


class Trace:
    """One open trace: `kind`, `version`, `meta` and `columns` are known after construction;
    `batches()` then streams the rows. Use as a context manager."""

    def __init__(self, path, skip_bad_rows=False, warn=None, byte_range=None):
        """byte_range=(start, end): read only the rows in that part of a plain file (start is
        a line start after the header, or None for right after it; end None for the end)."""
        self.path = path
        self.name = "<stdin>" if path == "-" else path
        self.skip_bad_rows = skip_bad_rows
        self.warn = warn or (lambda message: None)
        self.kind = self.kind_word = self.version = None
        self.meta = {}
        self.columns = []
        self.skipped = 0
        self.first_skipped = None
        self.line = 0  # number of the last line consumed
        self.compressed = False
        binary, self._owned = _open_binary(path)
        self._binary = self._stream = binary
        try:
            if binary.peek(2)[:2] == b"\x1f\x8b":
                self._stream = gzip.GzipFile(fileobj=binary)
                self.compressed = True
            self._read_head()
            self.body_start = None if self.compressed or path == "-" else self._stream.tell()
            self._end = None
            if byte_range:
                self._seek(*byte_range)
        except BaseException:
            self.close()
            raise

    # -- head --------------------------------------------------------------------------------
    def _read_head(self):
        while True:
            line = self._readline()
            if not line:
                raise TraceError(self.name, 0, "empty file: no header line"
                                 if self.line == 0 else "no header line after the preamble")
            if line.startswith("#"):
                words, meta = parse_preamble_line(line[1:])
                if words and self.kind_word is None:
                    self.kind_word = words[0]
                    self.version = words[1] if len(words) > 1 else None
                self.meta.update(meta)
                continue
            if not line.strip():
                continue
            self.columns = [c.strip() for c in next(csv.reader([line.rstrip("\n")]))]
            self.header_line = self.line
            break
        self._recognise_kind()

    def _readline(self):
        try:
            raw = self._stream.readline()
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(self.name, self.line + 1, f"cannot read: {exc}") from None
        if not raw:
            return ""
        if self.line == 0 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8):]
        self.line += 1
        # Undecodable bytes in a node name must not stop the analysis: shown as U+FFFD.
        return raw.decode("utf-8", "replace").replace("\r\n", "\n")

    def _seek(self, start, end):
        if self.body_start is None:
            raise ValueError("only a plain file can be read by parts")
        if start is not None:
            self._stream.seek(0)
            self.line = sum(chunk.count(b"\n") for chunk in _chunks(self._stream, start))
            self._stream.seek(start)
        self._end = end

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
            return self._stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceError(self.name, self.line + 1, f"cannot read: {exc}") from None

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
        """Fail unless this trace is of `kind` and has every one of `columns`."""
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
        missing = [c for c in columns if c not in self.columns]
        if missing:
            raise TraceError(self.name, self.header_line,
                             f"missing required column{'s' if len(missing) > 1 else ''}: "
                             f"{', '.join(missing)} (header has: {', '.join(self.columns)})")

    # -- rows --------------------------------------------------------------------------------
    def batches(self, ints=(), keys=(), signed_keys=(), strings=(), drop=None):
        """Yield {column: list} for runs of rows, in file order.

        `ints` come back as non-negative ints. `keys` are non-negative integers (`signed_keys`:
        integers >= -1, the layer column) kept as text: they have few distinct values, which
        the caller converts, and checks with check_key(), once each (with skip_bad_rows they
        are checked here, row by row). `strings` are text.
        `drop=(column, values)` leaves out rows whose column is in values (the v2 synthetic
        rows). Bad rows raise TraceError, or are counted and skipped with skip_bad_rows.
        """
        index = {c: i for i, c in enumerate(self.columns)}
        # v1 writers have no synthetic rows: checking for them would cost a pass per batch.
        if self.version == "v1":
            drop = None
        drop_column, drop_values = drop if drop and drop[0] in index else (None, None)
        wanted = [c for c in (*ints, *keys, *signed_keys, *strings) if c in index]
        if drop_column and drop_column not in wanted:
            wanted.append(drop_column)
        floors = {**{c: 0 for c in (*ints, *keys)}, **{c: -1 for c in signed_keys}}
        self._shape = (index, wanted, set(ints), floors)
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
            if cut:
                batch = self._batch(chunk[:cut], last=False)
                if batch is not None:
                    yield self._drop(batch, drop_column, drop_values)
        if chunk:
            batch = self._batch(chunk + "\n", last=True)
            if batch is not None:
                yield self._drop(batch, drop_column, drop_values)

    def check_key(self, column, text, floor=0):
        """int(text) of a key column value, or TraceError naming the first line that has it."""
        if integers_ok([text], floor):
            return int(text)
        raise TraceError(self.name, self.locate(column, text), not_integer(column, text, floor))

    def skip_rows(self, count, problem):
        """Count rows the caller found bad (with skip_bad_rows)."""
        self.skipped += count
        if self.first_skipped is None:
            self.first_skipped = problem

    def locate(self, column, value):
        """Line number of the first row whose `column` is `value`, or 0 if it cannot be told.

        For error messages about columns validated by the caller: it reads the file again.
        """
        if self.path == "-" or column not in self.columns:
            return 0
        position = self.columns.index(column)
        try:
            with Trace(self.path) as again:
                while True:
                    line = again._readline()
                    if not line:
                        break
                    fields = next(csv.reader([line.rstrip("\n")]), [])
                    if len(fields) > position and fields[position] == value:
                        return again.line
        except (TraceError, OSError, UnicodeError, EOFError, zlib.error):
            pass
        return 0

    @staticmethod
    def _drop(batch, column, values):
        if column is None or values.isdisjoint(batch[column]):
            return batch
        keep = [value not in values for value in batch[column]]
        return {name: list(compress(col, keep)) for name, col in batch.items()}

    def _batch(self, text, last):
        """Columns of the complete lines in `text`, or None when no row survives."""
        first_line = self.line + 1
        n_lines = text.count("\n")
        self.line += n_lines
        columns = None if last or '"' in text else self._fast_batch(text, n_lines)
        if columns is None:
            lines = text.split("\n")
            lines.pop()
            columns = self._slow_batch(lines, first_line, last)
        return columns

    def _fast_batch(self, text, n_lines):
        """Split a batch of plain lines at C speed; None sends it to the slow path.

        Each line keeps its newline on its last field, so the batch is aligned (every line has
        exactly `width` fields) iff the n slots that should end the n lines hold all n newlines.
        """
        index, wanted, ints, floors = self._shape
        width = len(self.columns)
        flat = text.replace("\n", "\n,").split(",")
        flat.pop()
        if len(flat) != n_lines * width or "".join(flat[width - 1::width]).count("\n") != n_lines:
            return None
        columns = {}
        for name in wanted:
            column = flat[index[name]::width]
            if name in ints:
                column = _parse_ints(column)
                if column is None:
                    return None  # the slow path names the line and the column
            else:
                if index[name] == width - 1:
                    column = list(map(str.rstrip, column))
                # Key columns hold few distinct values: unless bad rows are to be skipped (and so
                # must be known row by row), the caller checks each distinct value once.
                if self.skip_bad_rows and name in floors and not integers_ok(column, floors[name]):
                    return None
            columns[name] = column
        return columns

    def _slow_batch(self, lines, first_line, last):
        index, wanted, ints, floors = self._shape
        width = len(self.columns)
        rows = []
        for number, line in enumerate(lines, first_line):
            if not line.strip() or line.startswith("#"):
                continue
            fields = next(csv.reader([line])) if '"' in line else line.split(",")
            problem = None
            if len(fields) != width:
                problem = f"expected {width} fields, found {len(fields)}"
            else:
                row = []
                for name in wanted:
                    value = fields[index[name]]
                    floor = floors.get(name)
                    if floor is not None:
                        text = value.strip()
                        if not integers_ok([text], floor):
                            problem = not_integer(name, value, floor)
                            break
                        value = int(text) if name in ints else text
                    row.append(value)
            if problem is None:
                rows.append(row)
            elif last:
                self.warn(f"{self.name}:{number}: truncated last line ignored "
                          f"(no newline at the end; {problem})")
            elif self.skip_bad_rows:
                self.skip_rows(1, f"line {number}: {problem}")
            else:
                raise TraceError(self.name, number, problem)
        if not rows:
            return None
        return {name: list(values) for name, values in zip(wanted, zip(*rows))}

    def close(self):
        if self._owned:
            self._binary.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
