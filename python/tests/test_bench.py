"""python -m ropepool.bench: an argument it cannot honour is refused before anything is timed
(exit 2, argparse's one line naming it), never silently changed or dropped."""

import os
import subprocess
import sys

import pytest

CASES = [
    (["-T", "65", "--pool", "64"], "T = 65 exceeds --pool 64"),
    (["-T", "4,4"], "T = 4 is listed twice"),
    (["-T", "0"], "each token count"),
    (["--fresh-outputs", "-T", "1,16"], "--fresh-outputs compares fresh outputs at T >= 1024"),
    (["--backend", "cuda", "--fresh-outputs", "-T", "1024"], "--fresh-outputs compares CPU calls"),
    (["--backend", "cuda", "--torch-compile"], "--torch-compile compares CPU calls"),
]


@pytest.mark.parametrize("argv, message", CASES)
def test_an_argument_it_cannot_honour_is_refused(ropepool, argv, message):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-m", "ropepool.bench", *argv], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and done.stdout == ""
