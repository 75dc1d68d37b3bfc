"""The code's shape, as the project keeps it: functions of one story (a step used once is
written where it is used, not named apart: up to 100 lines, as bottle's longest stories) with
few parameters, and record fields by name, not by position (an integer subscript is an end of
a sorted array, a first member, never a field); the module read top to bottom: each section
uses only names of the sections above it (or its own), and the docstring's map names every
section in order."""
import ast
import re

import pytest

from helpers import ROOT

MODULES = ("decode_analyze.py", "trace_io.py")
MOST_LINES, MOST_PARAMETERS, MOST_INTEGER_SUBSCRIPTS = 100, 6, 35


def functions():
    for module in MODULES:
        tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield module, node


def parameters(function):
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs]
    names += [a.arg for a in (arguments.vararg, arguments.kwarg) if a]
    return [name for name in names if name not in ("self", "cls")]


@pytest.mark.parametrize("module", MODULES)
def test_no_function_is_long_or_takes_many_parameters(module):
    too_big = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines, "
               f"{len(parameters(node))} parameters)"
               for where, node in functions() if where == module and (
                   node.end_lineno - node.lineno + 1 > MOST_LINES
                   or len(parameters(node)) > MOST_PARAMETERS)]
    assert too_big == []


def test_few_integer_subscripts():
    found = []
    for module in MODULES:
        for node in ast.walk(ast.parse((ROOT / module).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Subscript):
                index = node.slice
                if isinstance(index, ast.UnaryOp):
                    index = index.operand
                if isinstance(index, ast.Constant) and type(index.value) is int:
                    found.append(f"{module}:{node.lineno}")
    assert len(found) <= MOST_INTEGER_SUBSCRIPTS, found


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def bound_in(function):
    """Names a function binds: its parameters and every name stored in its body (comprehension
    variables included), not those of the functions nested in it."""
    args = function.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a}
    stack = list(function.body) if isinstance(function.body, list) else [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        if not isinstance(node, SCOPES):
            stack.extend(ast.iter_child_nodes(node))
    return names


def section_starts(text):
    return [number for number, line in enumerate(text.splitlines(), 1)
            if line.startswith("# ── ")]


def test_no_name_is_used_in_a_section_above_its_own():
    text = (ROOT / "decode_analyze.py").read_text(encoding="utf-8")
    starts = section_starts(text)

    def section(line):
        return sum(start <= line for start in starts)
    tree = ast.parse(text)
    defined = {}
    for node in tree.body:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [
            target.id for target in getattr(node, "targets", []) if isinstance(target, ast.Name)]
        for name in names:
            defined.setdefault(name, node.lineno)
    above = []

    def visit(node, bound):
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)
                    and child.id in defined and child.id not in bound
                    and section(child.lineno) < section(defined[child.id])):
                above.append(f"{child.id} (line {child.lineno})")
            visit(child, bound | bound_in(child) if isinstance(child, SCOPES) else bound)
    visit(tree, frozenset())
    assert above == []


def test_the_map_names_every_section_in_order():
    import decode_analyze
    text = (ROOT / "decode_analyze.py").read_text(encoding="utf-8")
    heads = [re.match(r"# ── ([^:─]+)", line).group(1).strip()
             for line in text.splitlines() if line.startswith("# ── ")]
    in_order = list(dict.fromkeys(heads))
    mapped = re.findall(r"^  (\w[\w ]*?)  +\S", decode_analyze.__doc__.partition("Map of")[2],
                        re.M)
    assert mapped == in_order


# How a thing was argued, not what it is: the style's own examples of names to avoid
ARGUED = {"said", "judged"}


@pytest.mark.parametrize("module", MODULES)
def test_no_name_says_how_it_was_argued(module):
    """A name says what a thing is (`words`, `finding`, a `Saving`), never how it was argued:
    the module once had 101 names `said` and 32 `judged`. A JSON key users' scripts read
    (`reuse.judged`, a record's field given by keyword) is not a name of the code's, and
    stays."""
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    found = {getattr(node, attribute) for node in ast.walk(tree)
             if not isinstance(node, ast.keyword)
             for attribute in ("id", "name", "arg", "attr") if hasattr(node, attribute)}
    assert not {name for name in found if isinstance(name, str)
                and name.lower().strip("_") in ARGUED}


@pytest.mark.parametrize("module", MODULES)
def test_no_line_of_the_tool_is_over_100_columns(module):
    lines = (ROOT / module).read_text(encoding="utf-8").splitlines()
    assert [number for number, line in enumerate(lines, start=1) if len(line) > 100] == []


def test_the_test_extra_asks_for_what_the_requirements_do():
    """`pip install .[test]` and `pip install -r tests/requirements.txt` install the same
    packages: duckdb was missing from the extra, and test_csv imports it unskipped."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    with open(ROOT / "pyproject.toml", "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
    listed = (ROOT / "tests" / "requirements.txt").read_text().split()
    assert sorted(extra) == sorted(listed)


def test_ci_runs_the_readmes_test_command_in_a_fresh_environment():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m venv" in ci and 'source "$venv/bin/activate"' in ci
    assert "export DECODE_ANALYZE_ALL_TESTS=1" in ci  # no test skips for a missing package
    shown = [line for line in readme.splitlines()
             if line.startswith("python3 -m pip install -r tests/requirements.txt && ")]
    assert len(shown) == 1 and "pytest" in shown[0]
