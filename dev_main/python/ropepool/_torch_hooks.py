"""Registers ropepool's torch operator once torch is imported, and its compile path once
torch._dynamo is, whichever of ropepool and torch is imported first.

ropepool does not import torch (it serves NumPy alone), and importing torch._dynamo costs seconds,
so neither is imported here. A module already imported is handled at once; for one not imported
yet, a finder placed first on sys.meta_path wraps that module's loader so that the registration
runs right after the module has executed, and then steps aside. This is what makes
``import ropepool`` before ``import torch`` (isort's order) compile without a graph break.
"""

import sys
import warnings

# Module name -> what to run once it is imported (in ropepool.torch_op).
_AFTER = {"torch": "_define", "torch._dynamo": "register_compile_path"}


def _run(step):
    try:
        from . import torch_op  # registers the operator on import

        if step != "_define":
            getattr(torch_op, step)()
    except Exception as error:  # never break the import of torch itself
        warnings.warn(f"ropepool could not register its torch operator ({step}): {error!r}",
                      RuntimeWarning, stacklevel=2)


class _AfterImport:
    """A meta path finder that finds nothing itself: it decorates the loader the others find."""

    def __init__(self, pending):
        self.pending = pending

    def find_spec(self, name, path=None, target=None):
        step = self.pending.pop(name, None)
        if step is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            del loader.exec_module  # back to the class's method for any later use of the loader
            _run(step)

        loader.exec_module = exec_then_register
        return spec


def install():
    pending = {}
    for name, step in _AFTER.items():
        if name in sys.modules:
            _run(step)
        else:
            pending[name] = step
    if pending:
        sys.meta_path.insert(0, _AfterImport(pending))
