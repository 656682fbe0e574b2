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
    (["--seconds", "1e300"], "the time must be at most 600"),  # batches sized from it never ended
]


def bench(*argv, **environ):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **environ)
    return subprocess.run([sys.executable, "-m", "ropepool.bench", *argv], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("argv, message", CASES)
def test_an_argument_it_cannot_honour_is_refused(ropepool, argv, message):
    done = bench(*argv)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and done.stdout == ""


def test_cuda_without_a_gpu_is_refused_naming_what_is_missing(ropepool):
    """As ropepool-bench refuses it: exit 2 and one line on stderr (it was exit 1 on stdout)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available() and ropepool.has_cuda():
        pytest.skip("a GPU and the CUDA backend are here: --backend cuda runs")
    done = bench("--backend", "cuda")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert "--backend cuda needs torch with CUDA, a GPU and ropepool's CUDA backend: " in done.stderr


def test_a_token_count_too_large_to_allocate_is_one_line_not_a_traceback(ropepool):
    done = bench("-T", "100000000", "--pool", "100000000", "--rounds", "1", "--seconds", "0.001")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("ropepool.bench: out of memory for the arrays of T = 100000000: ")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_torch_compile_without_a_cxx_compiler_says_so_and_times_the_rest(ropepool):
    """make run passes --torch-compile; a machine with the C compiler the README asks for and no
    C++ one ended there in Inductor's traceback (InvalidCxxCompiler), exit 1."""
    pytest.importorskip("torch")
    done = bench("--torch-compile", "-T", "1", "--rounds", "1", "--seconds", "0.001",
                 CXX="/nonexistent/g++", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--torch-compile: not timed, Inductor finds no C++ compiler (" in done.stdout
    assert "/nonexistent/g++" in done.stdout and "torch.compile plain" not in done.stdout
    assert "| 1 | " in done.stdout  # the Python and C calls still timed
