"""CUDA tensors: what only the CUDA backend does. (Every contract test of the other files also runs
on CUDA tensors through the `fw` fixture's torch-cuda parameter.)

All tests here are marked `cuda` and skip without torch, a GPU, or ropepool's CUDA backend.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import Problem, TorchFramework, check_call, expect_refusal, make_framework

pytestmark = pytest.mark.cuda

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
OUT_OF_RANGE = [4, 5, 16, 7, 8, 9]  # token 2 names slot 16 of a 16-slot pool


@pytest.fixture
def gpu(ropepool):
    fw = make_framework("torch-cuda")  # skips without torch or a GPU
    if not ropepool.has_cuda():
        pytest.skip("this ropepool was built without its CUDA backend")
    try:
        ropepool.check_cuda()  # start from a clean device word
    except ropepool.RopePoolError:
        pass
    return fw


@pytest.fixture
def cpu():
    return make_framework("torch")


def cpu_message(ropepool, cpu, **problem):
    """The message the CPU backend gives for this problem."""
    p = Problem(cpu, **problem)
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool)
    return info.value


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cpu_and_gpu_agree_with_the_float64_reference(ropepool, gpu, cpu, dtype):
    shape = dict(T=67, Hq=32, Hk=8, D=128, P=256, dtype=dtype, max_pos=2**31 - 1, seed=21)
    g, c = Problem(gpu, **shape), Problem(cpu, **shape)
    assert np.array_equal(gpu.bits(g.q), cpu.bits(c.q))  # the same inputs on both
    g_before, c_before = g.snapshot(), c.snapshot()
    g_result, c_result = g.call(ropepool), c.call(ropepool)
    check_call(g, g_before, g_result)
    check_call(c, c_before, c_result)
    assert np.array_equal(gpu.bits(g.v_pool), cpu.bits(c.v_pool))


def test_out_of_range_slot_is_never_written_and_check_cuda_reports_the_cpu_message(ropepool, gpu, cpu):
    expected = cpu_message(ropepool, cpu, slots=OUT_OF_RANGE)
    p = Problem(gpu, slots=OUT_OF_RANGE)
    buffers = p.guard_pools()  # a write to slot 16 would land in row 16 of these
    guard_rows = [gpu.bits(b[p.P:]) for b in buffers]
    before = p.snapshot()
    result = p.call(ropepool)  # the kernel checks slots on the device: no host synchronisation
    gpu.sync()
    # Every other token's rows were written; the bad slot wrote nothing anywhere.
    assert all(np.array_equal(g, gpu.bits(b[p.P:])) for g, b in zip(guard_rows, buffers))
    p.slots = gpu.index([s if s < p.P else -1 for s in OUT_OF_RANGE])
    before[4] = gpu.bits(p.slots)
    check_call(p, before, result)
    with pytest.raises(ropepool.RopePoolError) as info:
        ropepool.check_cuda()
    assert isinstance(info.value, ValueError)
    assert str(info.value) == str(expected)
    assert info.value.status == expected.status == "RP_ERR_SLOT_OUT_OF_RANGE"
    assert ropepool.check_cuda() is None  # reported once, then cleared


def test_check_cuda_accepts_the_device_forms_torch_uses(ropepool, gpu):
    torch = gpu.torch
    index = torch.cuda.current_device()
    p = Problem(gpu, slots=OUT_OF_RANGE)
    for device in (None, index, f"cuda:{index}", torch.device("cuda", index)):
        p.call(ropepool)
        with pytest.raises(ropepool.RopePoolError, match="^slot 16 of token 2 is out of range"):
            ropepool.check_cuda(device)
    with pytest.raises(ValueError, match="device must be a CUDA device"):
        ropepool.check_cuda("cpu")


def test_checked_call_raises_the_cpu_message_immediately_and_writes_nothing(ropepool, gpu, cpu):
    expected = cpu_message(ropepool, cpu, slots=OUT_OF_RANGE)
    p = Problem(gpu, slots=OUT_OF_RANGE)
    expect_refusal(ropepool, gpu, p.arrays(), p.kwargs(checked=True), str(expected),
                   status="RP_ERR_SLOT_OUT_OF_RANGE")
    duplicate = [1, 5, 2, 5, -1, -1]
    expected = cpu_message(ropepool, cpu, slots=duplicate)
    p = Problem(gpu, slots=duplicate)
    expect_refusal(ropepool, gpu, p.arrays(), p.kwargs(checked=True), str(expected),
                   status="RP_ERR_DUPLICATE_SLOT")
    assert ropepool.check_cuda() is None  # nothing was launched, nothing recorded


def test_call_runs_on_the_current_stream(ropepool, gpu):
    torch = gpu.torch
    shape = dict(T=32, Hq=8, Hk=2, D=128, P=64, max_pos=2**31 - 1)
    p, new = Problem(gpu, seed=41, **shape), Problem(gpu, seed=42, **shape)
    pools = [gpu.bits(p.k_pool), gpu.bits(p.v_pool)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # The side stream is busy, then writes new inputs: a call launched anywhere but on this
        # stream would read the old ones.
        torch.cuda._sleep(100_000_000)
        for dst, src in zip(p.arrays()[:5], new.arrays()[:5]):
            dst.copy_(src)
        result = p.call(ropepool)
    torch.cuda.synchronize()
    check_call(p, new.snapshot()[:5] + pools, result)


def test_cuda_graph_capture_and_replay(ropepool, gpu):
    torch = gpu.torch
    shape = dict(T=8, Hq=32, Hk=8, D=128, P=64, max_pos=2**31 - 1)
    p = Problem(gpu, seed=31, **shape)
    p.call(ropepool)  # warm-up: the device's context is created outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_result = p.call(ropepool)
    for seed in (32, 33):  # new contents in the captured input buffers, then replay
        new = Problem(gpu, seed=seed, **shape)
        for dst, src in zip(p.arrays()[:5], new.arrays()[:5]):
            dst.copy_(src)
        torch.cuda.synchronize()
        before = p.snapshot()
        graph.replay()
        torch.cuda.synchronize()
        check_call(p, before, static_result)


def test_context_creation_during_capture_is_refused_with_a_clear_message(ropepool, gpu):
    code = f"""
import sys; sys.path.insert(0, {TESTS_DIR!r})
import torch, ropepool, helpers
p = helpers.Problem(helpers.make_framework("torch-cuda"))
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        p.call(ropepool)
except Exception as e:
    print(repr(e), repr(e.__context__))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    device = gpu.torch.cuda.current_device()
    assert (f"ropepool has no context for cuda:{device} yet, and creating one allocates device memory, "
            f"which CUDA graph capture forbids: call rope_pool_fused once on cuda:{device} before "
            f"capturing (a warm-up run)") in done.stdout


FIRST_CALLS_FROM_TWO_THREADS = f"""
import sys, threading
sys.path.insert(0, {TESTS_DIR!r})
import torch, ropepool, helpers
asked = torch.cuda.is_current_stream_capturing
bad_call_done = threading.Event()
def ask():  # where the binding asks torch (Python code) before it makes the device's context
    if threading.current_thread().name == "good":
        bad_call_done.wait(60)  # as a thread switch there would: the other first call goes first
    return asked()
torch.cuda.is_current_stream_capturing = ask
fw = helpers.make_framework("torch-cuda")
problems = {{"bad": helpers.Problem(fw, slots={OUT_OF_RANGE!r}), "good": helpers.Problem(fw)}}
raised = []
def first_call():
    try:
        problems[threading.current_thread().name].call(ropepool)
    except ropepool.RopePoolError as e:
        raised.append(str(e))
    finally:
        if threading.current_thread().name == "bad":
            bad_call_done.set()
threads = [threading.Thread(target=first_call, name=name) for name in ("good", "bad")]
for t in threads:
    t.start()
for t in threads:
    t.join()
try:
    ropepool.check_cuda()
except ropepool.RopePoolError as e:
    raised.append(str(e))
print(raised)
"""


def test_first_calls_from_two_threads_share_one_context(ropepool, gpu, cpu):
    """Two threads' first calls on a device: the binding asks torch (Python code, where the GIL
    may pass) whether a graph is being captured before it makes the context, and both made one;
    the second replaced the first, and the bad slot the first call's kernel recorded there was
    never reported (neither by the second call nor by check_cuda)."""
    done = subprocess.run([sys.executable, "-c", FIRST_CALLS_FROM_TWO_THREADS], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr([str(cpu_message(ropepool, cpu, slots=OUT_OF_RANGE))])


def test_tensors_on_another_device_than_the_current_one(ropepool, gpu):
    torch = gpu.torch
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    other = TorchFramework("cuda:1")
    p = Problem(other, T=16, Hq=8, Hk=2, D=128, P=32, max_pos=2**31 - 1, seed=51)
    before = p.snapshot()
    with torch.cuda.device(0):
        result = p.call(ropepool)
    check_call(p, before, result)
    assert result[0].device == torch.device("cuda", 1)
    assert ropepool.check_cuda(1) is None


def test_cpu_and_cuda_tensors_in_one_call_are_refused(ropepool, gpu, cpu):
    p = Problem(gpu)
    arrays = p.arrays()
    arrays[5] = Problem(cpu).k_pool
    device = gpu.torch.cuda.current_device()
    expect_refusal(ropepool, gpu, arrays, p.kwargs(),
                   f"all tensors must be on one device: k_pool is on cpu but q is on cuda:{device}")


def test_outputs_live_on_the_inputs_device(ropepool, gpu):
    p = Problem(gpu)
    q_rot, k_rot, _, _ = p.call(ropepool)
    assert q_rot.device == p.q.device and k_rot.device == p.k.device


@pytest.mark.parametrize("name", ["q_norm_weight", "k_norm_weight"])
def test_a_norm_weight_on_another_device_is_refused_naming_both(ropepool, gpu, cpu, name):
    p = Problem(gpu)
    weight = cpu.torch.ones(p.D, dtype=cpu.torch.float32)
    device = gpu.torch.cuda.current_device()
    expect_refusal(ropepool, gpu, p.arrays(), dict(p.kwargs(), **{name: weight}),
                   f"{name} must be on q's device: it is on cpu but q is on cuda:{device}")
