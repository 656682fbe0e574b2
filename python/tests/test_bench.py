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
    # the last of a repeated option won without a word: "-T 1 -T 4096" timed T = 4096 alone
    (["-T", "1", "-T", "2"], "argument -T/--tokens: is given twice: give it once"),
    (["--backend", "cpu", "--backend", "cuda"], "argument --backend: is given twice"),
    (["--pool", "64", "--pool=128"], "argument --pool: is given twice"),
    (["--rounds", "1", "--rounds", "2"], "argument --rounds: is given twice"),
    (["--seconds", "1", "--seconds", "2"], "argument --seconds: is given twice"),
    (["--stat", "min", "--stat", "min"], "argument --stat: is given twice"),
    (["--clock", "wall", "--clock", "thread"], "argument --clock: is given twice"),
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


def run_in_process(ropepool, monkeypatch, capsys, call=None, backend="cpu"):
    """ropepool.bench's main at T = 1 and 3, one short round; with `call`, ropepool.rope_pool_fused
    replaced by it, as a binding that got a result wrong would be. (exit status, stdout, stderr)"""
    from ropepool import bench as module

    if call is not None:
        monkeypatch.setattr(ropepool, "rope_pool_fused", call)
    status = module.main(["--backend", backend, "-T", "1,3", "--pool", "64", "--rounds", "1", "--seconds", "0.001"])
    out, err = capsys.readouterr()
    return status, out, err


def test_every_call_it_times_is_verified_before_timing(ropepool, monkeypatch, capsys):
    status, out, err = run_in_process(ropepool, monkeypatch, capsys)
    assert status == 0 and err == "", err
    assert "every ropepool call verified against the float64 reference before it is timed" in out


def corrupting_q_rot(ropepool):
    """The real call, then one element of q_rot off by 1: a wrong result the timing cannot see."""
    real = ropepool.rope_pool_fused

    def call(*args, **keywords):
        result = real(*args, **keywords)
        q_rot = keywords.get("q_out")
        if q_rot is None:
            q_rot = result[0]
        q_rot[0, 0, 0] += 1
        return result

    return call


def skipping_token_0s_pool_write(ropepool):
    """The real call with token 0's slot made negative: its pool rows are never written."""
    real = ropepool.rope_pool_fused

    def call(q, k, v, positions, slots, *rest, **keywords):
        slots = slots.clone() if hasattr(slots, "clone") else slots.copy()
        slots[0] = -1
        return real(q, k, v, positions, slots, *rest, **keywords)

    return call


@pytest.mark.parametrize("broken, what", [(corrupting_q_rot, "q_rot[token 0, head 0, dim 0]"),
                                          (skipping_token_0s_pool_write, "_pool")])
def test_a_wrong_result_fails_the_run_with_exit_status_3(ropepool, monkeypatch, capsys, broken, what):
    """It timed every call without looking at a single output: a binding that wrote q_rot wrong,
    or no pool row, was reported as fast, exit 0."""
    status, out, err = run_in_process(ropepool, monkeypatch, capsys, broken(ropepool))
    assert status == 3, out + err
    for T in (1, 3):
        for name in ("numpy fresh", "numpy q_out"):
            assert f"ropepool.bench: T = {T}, {name}: FAILED verification against the float64 reference" in err
    assert what in err
    assert "T = 1, C: FAILED" not in err  # the C call did not go through the broken binding


def needs_gpu(ropepool):
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and ropepool.has_cuda()):
        pytest.skip("needs a GPU and ropepool's CUDA backend")


@pytest.mark.cuda
def test_cuda_backend_verifies_every_call_it_times(ropepool, monkeypatch, capsys):
    """--backend cuda checks each call's device outputs (the CUDA graph replay's included), copied
    back to the host, against the float64 reference, the pool rows poisoned on the device first.
    (Written without a GPU.)"""
    needs_gpu(ropepool)
    status, out, err = run_in_process(ropepool, monkeypatch, capsys, backend="cuda")
    assert status == 0 and err == "", err
    assert "| 3 | " in out


@pytest.mark.cuda
@pytest.mark.parametrize("broken, what", [(corrupting_q_rot, "q_rot[token 0, head 0, dim 0]"),
                                          (skipping_token_0s_pool_write, "_pool")])
def test_a_wrong_cuda_result_fails_the_run_with_exit_status_3(ropepool, monkeypatch, capsys, broken, what):
    """A wrong q_rot, or a pool row left unwritten (its device copy poisoned with NaN, so a row a
    call skipped cannot hold an earlier call's value), fails --backend cuda: in the eager calls and
    in the graph the GPU figure replays, which captured the same broken call. (Written without a GPU.)"""
    needs_gpu(ropepool)
    status, out, err = run_in_process(ropepool, monkeypatch, capsys, broken(ropepool), backend="cuda")
    assert status == 3, out + err
    for T in (1, 3):
        for name in ("torch fresh", "torch q_out", "gpu"):
            assert f"ropepool.bench: T = {T}, {name}: FAILED verification against the float64 reference" in err
    assert what in err
    assert "T = 1, C: FAILED" not in err  # the C call did not go through the broken binding
