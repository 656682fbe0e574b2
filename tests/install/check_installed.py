"""Calls of the installed ropepool (the package under sys.argv[1], not the tree's), checked as the
Python tests check every call (python/tests/helpers.py: the float64 reference and its bound, the
pool rows, nothing else written): on NumPy arrays, or on each framework named after the site
(helpers.make_framework: numpy, torch, torch-cuda; the device machine checks a CUDA wheel so)."""
import importlib.util
import os
import sys

import ropepool

site = os.path.realpath(sys.argv[1])
assert os.path.realpath(ropepool.__file__).startswith(site + os.sep), ropepool.__file__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
from helpers import Problem, check_call, make_framework  # noqa: E402  (after the package is found)

for name in sys.argv[2:] or ["numpy"]:
    if name == "torch-cuda":
        assert ropepool.has_cuda(), "the wheel was built without the CUDA backend, or no GPU is visible"
    problem = Problem(make_framework(name), T=5, Hq=4, Hk=2, D=64, P=32)
    before = problem.snapshot()
    check_call(problem, before, problem.call(ropepool))
    print(f"ok: {name}")
native = importlib.util.find_spec("ropepool._ropepool_torch") is not None
print(f"ok: ropepool {ropepool.__version__} from the sdist's wheel (torch's native extension "
      f"{'built' if native else 'not built'})")
