"""The code's shape, as the project keeps it: small functions with few parameters, and record
fields by name, not by position (an integer subscript is an end of a sorted array, a first
member, never a field)."""
import ast

import pytest

from helpers import ROOT

MODULES = ("decode_analyze.py", "trace_io.py")
MOST_LINES, MOST_PARAMETERS, MOST_INTEGER_SUBSCRIPTS = 60, 6, 35


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
