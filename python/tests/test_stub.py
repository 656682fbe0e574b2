"""The type stub (_ropepool.pyi) against the extension module it describes: every function the
module has is in the stub, with the same parameter names, kinds (positional-only, keyword-only)
and defaults where the module states its signature."""

import ast
import inspect
import os

import pytest

import ropepool
from ropepool import _ropepool

STUB = os.path.join(os.path.dirname(ropepool.__file__), "_ropepool.pyi")


def stub_functions():
    tree = ast.parse(open(STUB).read())
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def stub_parameters(fn):
    """(name, kind, default) of a stub function's parameters, as inspect names them."""
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((arg.arg, kind, None if default is None else ast.literal_eval(default)))
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", None))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out.append((arg.arg, "KEYWORD_ONLY", None if default is None else ast.literal_eval(default)))
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", None))
    return out


def module_functions():
    return sorted(n for n in dir(_ropepool) if callable(getattr(_ropepool, n))
                  and not isinstance(getattr(_ropepool, n), type))


def test_every_function_of_the_module_is_in_the_stub():
    missing = set(module_functions()) - set(stub_functions())
    assert not missing, f"functions of ropepool._ropepool missing from _ropepool.pyi: {sorted(missing)}"


@pytest.mark.parametrize("name", module_functions())
def test_stub_signature_matches_the_module(name):
    try:
        signature = inspect.signature(getattr(_ropepool, name))
    except ValueError:  # no __text_signature__: the docstring states it, nothing to compare
        pytest.skip(f"{name} states no signature")
    have = [(p.name, p.kind.name, None if p.default is inspect.Parameter.empty else p.default)
            for p in signature.parameters.values()]
    assert stub_parameters(stub_functions()[name]) == have
