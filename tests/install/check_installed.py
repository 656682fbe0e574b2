"""One call of the installed ropepool (the package under sys.argv[1], not the tree's), checked as
the Python tests check every call (python/tests/helpers.py: the float64 reference and its bound,
the pool rows, nothing else written)."""
import os
import sys

import ropepool

site = os.path.realpath(sys.argv[1])
assert os.path.realpath(ropepool.__file__).startswith(site + os.sep), ropepool.__file__
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))
from helpers import Problem, check_call, make_framework  # noqa: E402  (after the package is found)

problem = Problem(make_framework("numpy"), T=5, Hq=4, Hk=2, D=64, P=32)
before = problem.snapshot()
check_call(problem, before, problem.call(ropepool))
print(f"ok: ropepool {ropepool.__version__} from the sdist's wheel")
