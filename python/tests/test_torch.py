"""What only torch tensors have: devices and layouts ropepool does not take, parameters and
subclasses, inference mode, and the three ways the binding reads tensors (torch's C++ API through
ropepool._ropepool_torch where it is built, DLPack's C exchange API, forced with
ROPEPOOL_TORCH_NATIVE=0, and the tensor's Python surface, forced with ROPEPOOL_TORCH_EXCHANGE=0)."""

import importlib.util

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import Problem, check_call

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def torch(torch_fw):
    return torch_fw.torch


def test_tensor_on_an_unsupported_device_is_named(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool, p.q, p.k, p.v, p.positions, p.slots, p.k_pool.to("meta"))
    assert str(info.value) == "k_pool is on device 'meta': ropepool takes cpu and cuda tensors"


def test_sparse_tensor_is_named(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    with pytest.raises(TypeError) as info:
        p.call(ropepool, p.q, p.k.to_sparse())
    assert str(info.value) == "k must be a dense (strided) tensor, got torch.sparse_coo"


def test_parameters_as_pools_are_updated_in_place(ropepool, torch_fw, torch):
    p = Problem(torch_fw, max_pos=2**31 - 1)
    p.k_pool = torch.nn.Parameter(p.k_pool, requires_grad=False)
    p.v_pool = torch.nn.Parameter(p.v_pool, requires_grad=False)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_tensor_subclass_inputs_are_read_through_their_python_surface(ropepool, torch_fw, torch):
    class Tagged(torch.Tensor):
        pass

    p = Problem(torch_fw, max_pos=2**31 - 1)
    p.q, p.v = p.q.as_subclass(Tagged), p.v.as_subclass(Tagged)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_inference_mode_tensors(ropepool, torch_fw, torch):
    with torch.inference_mode():
        p = Problem(torch_fw, max_pos=2**31 - 1)
        before = p.snapshot()
        check_call(p, before, p.call(ropepool))


@pytest.mark.parametrize("name", ["q_out", "k_out"])
@pytest.mark.parametrize("wrong", ["numpy", "list", "str", "numpy scalar"])
def test_outputs_that_are_not_tensors_are_refused_with_grad_on(ropepool, torch_fw, torch, name, wrong):
    """The autograd check looks at the caller's outputs before their types are checked: it must
    leave a non-tensor to that check (it used to call a tensor getter on it: a crash)."""
    p = Problem(torch_fw)
    other = {"numpy": np.empty(tuple(p.q.shape if name == "q_out" else p.k.shape), np.float32),
             "list": [1.0], "str": "x", "numpy scalar": np.float32(1)}[wrong]
    before = [torch_fw.bits(a) for a in p.arrays()]
    assert torch.is_grad_enabled()
    with pytest.raises(TypeError) as info:
        p.call(ropepool, **{name: other})
    message = str(info.value)  # names the argument, what it must be and what it is
    assert message.startswith(f"{name} ") and "torch.Tensor" in message and type(other).__name__ in message
    for old, a in zip(before, p.arrays()):
        assert np.array_equal(old, torch_fw.bits(a))


def test_inputs_that_require_grad_are_read_under_no_grad(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.q = p.q.clone().requires_grad_()
    before = p.snapshot()
    with torch.no_grad():
        check_call(p, before, p.call(ropepool))


NATIVE_BUILT = importlib.util.find_spec("ropepool._ropepool_torch") is not None


@pytest.mark.skipif(sys.platform != "linux", reason="runs a second pytest")
@pytest.mark.parametrize("switch", ["ROPEPOOL_TORCH_EXCHANGE", "ROPEPOOL_TORCH_NATIVE"])
def test_suite_passes_through_the_other_readers_as_well(torch_fw, switch):
    """The same torch tests with the native extension turned off (DLPack's exchange API reads the
    tensors), and with the exchange API turned off too (the Python surface reads them)."""
    names = ["test_seed_errors.py", "test_accuracy.py", "test_torch.py", "test_adversarial.py"]
    if switch == "ROPEPOOL_TORCH_NATIVE":
        names.append("test_outputs.py")  # the output cache (fresh_memory.c) serves the exchange API's tensors
        names.append("test_torch_op.py")  # the operator's Python kernel
    files = [os.path.join(TESTS_DIR, f) for f in names]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not cuda", "-k",
         "torch and not other_readers_as_well", *files],
        env=dict(os.environ, **{switch: "0"}), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_the_reader_is_the_one_chosen(ropepool, torch):
    """Where ropepool._ropepool_torch is built (against this torch), it reads the tensors; the
    switches choose the slower readers, and the suite above runs under each."""
    expected = ("surface" if os.environ.get("ROPEPOOL_TORCH_EXCHANGE") == "0" else
                "exchange" if os.environ.get("ROPEPOOL_TORCH_NATIVE") == "0" or not NATIVE_BUILT else "native")
    assert ropepool._ropepool._torch_reader() == expected
    if NATIVE_BUILT:
        from ropepool import _ropepool_torch
        assert _ropepool_torch.torch_version == torch.__version__
