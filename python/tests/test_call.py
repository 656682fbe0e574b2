"""The Python surface of the call: the seed's signature, what comes back, what the binding itself
refuses (not an array, two frameworks, wrong Python types), the library's own messages for what
the library checks, the extra keyword-only arguments, threads, fork, and the module's helpers."""

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from helpers import Problem, assert_unchanged, check_call, expect_refusal

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the seed's signature ------------------------------------------------------------------------


def test_seed_call_with_arrays_by_keyword_works(ropepool, fw):
    p = Problem(fw)
    before = p.snapshot()
    names = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]
    result = ropepool.rope_pool_fused(**dict(zip(names, p.arrays())), **p.kwargs())
    check_call(p, before, result)


def test_seed_configuration_is_keyword_only(ropepool, np_fw):
    p = Problem(np_fw)
    with pytest.raises(TypeError, match=r"takes 7 positional arguments but 8 were given"):
        ropepool.rope_pool_fused(*p.arrays(), 64, num_qo_heads=8, num_kv_heads=2, rope_base=1e4)


@pytest.mark.parametrize("missing", ["head_dim", "num_qo_heads", "num_kv_heads", "rope_base"])
def test_missing_seed_keyword_is_named(ropepool, np_fw, missing):
    p = Problem(np_fw)
    kw = p.kwargs()
    del kw[missing]
    with pytest.raises(TypeError, match=f"missing required keyword-only argument: '{missing}'"):
        ropepool.rope_pool_fused(*p.arrays(), **kw)


def test_missing_array_is_named(ropepool, np_fw):
    p = Problem(np_fw)
    with pytest.raises(TypeError, match="missing required argument: 'v_pool'"):
        ropepool.rope_pool_fused(*p.arrays()[:6], **p.kwargs())


def test_unknown_and_repeated_keywords_are_refused(ropepool, np_fw):
    p = Problem(np_fw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_heads'"):
        ropepool.rope_pool_fused(*p.arrays(), num_heads=8, **p.kwargs())
    with pytest.raises(TypeError, match="multiple values for argument 'q'"):
        ropepool.rope_pool_fused(*p.arrays(), q=p.q, **p.kwargs())


def test_keyword_names_built_at_run_time_are_recognised(ropepool, np_fw):
    p = Problem(np_fw)
    before = p.snapshot()
    kw = {"".join(["head", "_dim"]): p.D, **{k: v for k, v in p.kwargs().items() if k != "head_dim"}}
    check_call(p, before, ropepool.rope_pool_fused(*p.arrays(), **kw))


def test_signature_is_introspectable(ropepool):
    import inspect

    sig = inspect.signature(ropepool.rope_pool_fused)
    params = list(sig.parameters.values())
    assert [x.name for x in params[:7]] == ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]
    keyword_only = [x.name for x in params if x.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only[:4] == ["head_dim", "num_qo_heads", "num_kv_heads", "rope_base"]
    assert set(keyword_only[4:]) == {"threads", "checked", "is_neox", "rotary_dim", "inv_freq", "attention_scaling",
                                     "kv_layout", "v_head_dim", "kv_cache_dtype", "k_scale", "v_scale",
                                     "mrope_section", "mrope_interleaved", "q_norm_weight", "k_norm_weight",
                                     "norm_eps", "norm_weight_offset", "q_out", "k_out"}


def test_numpy_integers_and_int_rope_base_are_accepted(ropepool, fw):
    p = Problem(fw)
    before = p.snapshot()
    kw = dict(head_dim=np.int64(p.D), num_qo_heads=np.int32(p.Hq), num_kv_heads=p.Hk, rope_base=500000)
    check_call(p, before, ropepool.rope_pool_fused(*p.arrays(), **kw))


def test_configuration_of_the_wrong_python_type_is_named(ropepool, np_fw):
    p = Problem(np_fw)
    with pytest.raises(TypeError, match="head_dim must be an int, got float"):
        p.call(ropepool, head_dim=64.0)
    with pytest.raises(TypeError, match="num_kv_heads must be an int, got NoneType"):
        p.call(ropepool, num_kv_heads=None)
    with pytest.raises(TypeError, match="rope_base must be a number, got str"):
        p.call(ropepool, rope_base="500000")
    with pytest.raises(ValueError, match=r"head_dim = 340282366920938463463374607431768211456 is out of range"):
        p.call(ropepool, head_dim=2**128)


@pytest.mark.parametrize("name", ["num_qo_heads", "rope_base", "threads", "attention_scaling", "rotary_dim"])
@pytest.mark.parametrize("flag", [True, np.True_])
def test_a_bool_is_not_a_number(ropepool, np_fw, name, flag):
    """bool is an int in Python: rope_base=True would otherwise run with rope_base 1 (every
    frequency 1), silently. Refused like any other type that is not a number, nothing written."""
    p = Problem(np_fw)
    before = p.snapshot()
    kind = "an int" if name in ("num_qo_heads", "threads", "rotary_dim") else "a number"
    with pytest.raises(TypeError, match=f"{name} must be {kind}, got (bool|numpy.bool)"):
        p.call(ropepool, **{name: flag})
    assert_unchanged(p, before)


# ---- what comes back -----------------------------------------------------------------------------


def test_outputs_are_new_arrays_and_pools_are_the_callers_objects(ropepool, fw):
    p = Problem(fw, T=5)
    before = p.snapshot()
    result = p.call(ropepool)
    assert type(result) is tuple and len(result) == 4
    check_call(p, before, result)  # checks framework, dtype, shape, contiguity, no shared memory


def test_each_call_returns_fresh_outputs(ropepool, fw):
    p = Problem(fw, T=3)
    first, second = p.call(ropepool), p.call(ropepool)
    assert not fw.shares_memory(first[0], second[0]) and not fw.shares_memory(first[1], second[1])
    assert np.array_equal(fw.bits(first[0]), fw.bits(second[0]))


# ---- what the binding refuses itself ----------------------------------------------------------------


@pytest.mark.parametrize("index", range(7))
def test_argument_that_is_not_an_array_is_named(ropepool, fw, index):
    p = Problem(fw)
    args = p.arrays()
    name = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"][index]
    before = [fw.bits(a) for a in args]
    args[index] = np.asarray(fw.f64(args[index])).tolist()  # the same numbers, as a list
    expected = ("q must be a numpy.ndarray or a torch.Tensor, got list" if index == 0 else
                f"{name} must be a {'numpy.ndarray' if fw.name == 'numpy' else 'torch.Tensor'} like q, got list")
    with pytest.raises(TypeError) as info:
        ropepool.rope_pool_fused(*args, **p.kwargs())
    assert str(info.value) == expected
    for old, a in zip(before, args):
        if not isinstance(a, list):
            assert np.array_equal(old, fw.bits(a))


def test_arrays_of_two_frameworks_are_refused(ropepool, torch_fw, np_fw):
    p = Problem(torch_fw)
    numpy_pool = np_fw.array(torch_fw.f64(p.k_pool), "float32")
    args = p.arrays()
    args[5] = numpy_pool
    before = np_fw.bits(numpy_pool)
    with pytest.raises(TypeError) as info:
        ropepool.rope_pool_fused(*args, **p.kwargs())
    assert str(info.value) == "k_pool is a numpy.ndarray but q is a torch.Tensor: pass all arrays from one framework"
    assert np.array_equal(before, np_fw.bits(numpy_pool))
    with pytest.raises(TypeError) as info:
        ropepool.rope_pool_fused(np_fw.array(torch_fw.f64(p.q), "float32"), *p.arrays()[1:], **p.kwargs())
    assert str(info.value) == "k is a torch.Tensor but q is a numpy.ndarray: pass all arrays from one framework"


def test_non_native_byte_order_is_named(ropepool, np_fw):
    p = Problem(np_fw)
    swapped = p.v.astype(p.v.dtype.newbyteorder(">"))
    with pytest.raises(ropepool.RopePoolError, match=r"^v has non-native byte order"):
        p.call(ropepool, p.q, p.k, swapped)


@pytest.mark.parametrize("which", [2, 5])  # v, k_pool
def test_masked_arrays_are_refused_for_the_mask_they_would_ignore(ropepool, np_fw, which):
    p = Problem(np_fw)
    args = p.arrays()
    mask = np.zeros(args[which].shape, dtype=bool)
    mask[0] = True
    args[which] = np.ma.masked_array(args[which], mask=mask)
    before = p.snapshot()
    name = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"][which]
    with pytest.raises(ropepool.RopePoolError, match=rf"^{name} is a numpy.ma.MaskedArray, whose mask ropepool "
                                                     rf"cannot honour: pass {name}.data"):
        ropepool.rope_pool_fused(*args, **p.kwargs())
    assert_unchanged(p, before)


def test_stride_that_splits_elements_is_named(ropepool, np_fw):
    p = Problem(np_fw)
    raw = np.zeros(2 * p.T * p.Hk * p.D, dtype=np.float32)
    odd = np.lib.stride_tricks.as_strided(raw, shape=(p.T, p.Hk, p.D), strides=(p.Hk * p.D * 8, p.D * 8, 6))
    with pytest.raises(ropepool.RopePoolError,
                       match=r"^v has a stride of 6 bytes on axis 2, not a multiple of its 4-byte elements"):
        p.call(ropepool, p.q, p.k, odd)


# ---- what the library checks, with its messages --------------------------------------------------


def test_read_only_pool_gets_the_librarys_message(ropepool, np_fw):
    p = Problem(np_fw)
    p.v_pool.flags.writeable = False
    expect_refusal(ropepool, np_fw, p.arrays(), p.kwargs(), "v_pool is read-only, but the call writes it")


def test_read_only_inputs_are_fine(ropepool, np_fw):
    p = Problem(np_fw)
    for x in (p.q, p.k, p.v, p.positions, p.slots):
        x.flags.writeable = False
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


@pytest.mark.parametrize("dtype", ["float64", "int8", "int32"])
def test_unsupported_data_dtype_gets_the_librarys_message(ropepool, fw, dtype):
    p = Problem(fw)
    arrays = [fw.astype(x, dtype) for x in (p.q, p.k, p.v)] + p.arrays()[3:5]
    arrays += [fw.astype(p.k_pool, dtype), fw.astype(p.v_pool, dtype)]
    expect_refusal(ropepool, fw, arrays, p.kwargs(),
                   f"q/k/v dtype {dtype} is not supported: use float32, float16 or bfloat16")


@pytest.mark.parametrize("dtype", ["float32", "uint32", "int16"])
def test_index_dtype_gets_the_librarys_message(ropepool, fw, dtype):
    p = Problem(fw)
    arrays = p.arrays()
    arrays[3] = fw.astype(p.positions, dtype)
    expect_refusal(ropepool, fw, arrays, p.kwargs(), f"positions dtype must be int32 or int64, got {dtype}")


def test_rank_above_the_librarys_limit_is_a_rank_error(ropepool, fw):
    p = Problem(fw)
    deep = p.q.reshape((1,) * 7 + tuple(p.q.shape))  # 10-D
    arrays = p.arrays()
    arrays[0] = deep
    expect_refusal(ropepool, fw, arrays, p.kwargs(), "rope_pool_fused expects q/k/v to be 3-D")


def test_pools_sharing_memory_are_refused(ropepool, fw):
    p = Problem(fw)
    arrays = p.arrays()
    arrays[6] = arrays[5]
    expect_refusal(ropepool, fw, arrays, p.kwargs(), "v_pool overlaps k_pool: outputs must not share memory",
                   status="RP_ERR_OVERLAP")


def test_pool_sharing_memory_with_an_input_is_refused(ropepool, fw):
    p = Problem(fw, T=6, P=16)
    arrays = p.arrays()
    arrays[2] = p.v_pool[:6]  # v read from the pool it is written to
    expect_refusal(ropepool, fw, arrays, p.kwargs(),
                   "v_pool overlaps v: outputs may share memory with inputs only as q_out = q or "
                   "k_out = k (same data, shape and strides)", status="RP_ERR_OVERLAP")


def test_misaligned_data_gets_the_librarys_message(ropepool, np_fw):
    p = Problem(np_fw)
    raw = np.zeros(p.k_pool.nbytes + 4, dtype=np.uint8)
    misaligned = raw[2:2 + p.k_pool.nbytes].view(np.float32).reshape(p.k_pool.shape)
    arrays = p.arrays()
    arrays[5] = misaligned
    before = [np_fw.bits(a) for a in arrays]
    with pytest.raises(ropepool.RopePoolError) as info:
        ropepool.rope_pool_fused(*arrays, **p.kwargs())
    assert re.fullmatch(r"k_pool data 0x[0-9a-f]+ is not aligned to its 4-byte float32 elements", str(info.value))
    assert all(np.array_equal(b, np_fw.bits(a)) for b, a in zip(before, arrays))


def test_bad_rope_base_gets_the_librarys_message(ropepool, fw):
    p = Problem(fw)
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(rope_base=float("nan")),
                   "rope_base must be a positive finite number, got nan")
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(rope_base=0),
                   "rope_base must be a positive finite number, got 0")


def test_odd_head_dim_gets_the_librarys_message(ropepool, fw):
    p = Problem(fw, Hq=1, Hk=1, D=64)
    q3 = p.q[:, :, :63]
    arrays = [q3, p.k[:, :, :63], p.v[:, :, :63]] + p.arrays()[3:5] + [p.k_pool[:, :, :63], p.v_pool[:, :, :63]]
    expect_refusal(ropepool, fw, arrays, p.kwargs(head_dim=63),
                   "head_dim must be a positive even number, got 63")


# ---- the extra keyword-only arguments ----------------------------------------------------------------


def test_threads_cap_gives_the_same_bits(ropepool, cpu_fw):
    p = Problem(cpu_fw, T=512, Hq=8, Hk=2, D=64, P=1024, max_pos=2**31 - 1)
    pools = [cpu_fw.bits(p.k_pool), cpu_fw.bits(p.v_pool)]
    many = p.call(ropepool)
    one = p.call(ropepool, threads=1)
    for a, b in zip(many[:2], one[:2]):
        assert np.array_equal(cpu_fw.bits(a), cpu_fw.bits(b))
    assert not np.array_equal(pools[0], cpu_fw.bits(p.k_pool))  # the pools were written


def test_negative_threads_is_refused_in_pythons_terms(ropepool, fw):
    """The library's message would speak of C's num_threads and its 0."""
    p = Problem(fw)
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(threads=-1),
                   "threads must be >= 1 (None = the module's setting), got -1")


def test_checked_is_accepted_on_the_cpu(ropepool, cpu_fw):
    p = Problem(cpu_fw)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool, checked=True))


def test_is_neox_replaces_the_reserved_style_keyword(ropepool, fw):
    p = Problem(fw)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool, is_neox=True, rotary_dim=p.D))
    with pytest.raises(TypeError, match="unexpected keyword argument 'style'"):
        p.call(ropepool, style="neox")
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(rotary_dim=33), "rotary_dim must be even, got 33")


# ---- threads, the GIL, fork ----------------------------------------------------------------------


def test_concurrent_calls_from_python_threads_match_sequential_ones(ropepool, cpu_fw):
    problems = [Problem(cpu_fw, T=64 + i, P=128, max_pos=2**31 - 1, seed=100 + i) for i in range(6)]
    expected = [[cpu_fw.bits(x) for x in Problem(cpu_fw, T=64 + i, P=128, max_pos=2**31 - 1,
                                                 seed=100 + i).call(ropepool)] for i in range(6)]
    results = [None] * len(problems)

    def run(i):
        for _ in range(20):
            results[i] = problems[i].call(ropepool)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(problems))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, result in enumerate(results):
        for want, got in zip(expected[i], result):
            assert np.array_equal(want, cpu_fw.bits(got))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_can_call_after_the_parent_did(ropepool, np_fw):
    p = Problem(np_fw, T=256, P=512, max_pos=2**31 - 1)
    parent = [np_fw.bits(x) for x in p.call(ropepool)[:2]]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's worker threads are gone; a new context must be made
        status = 1
        try:
            child = [np_fw.bits(x) for x in p.call(ropepool)[:2]]
            status = 0 if all(np.array_equal(a, b) for a, b in zip(parent, child)) else 2
        finally:
            os.write(write_end, bytes([status]))
            os._exit(0)
    os.close(write_end)
    import select

    ready, _, _ = select.select([read_end], [], [], 60)
    status = os.read(read_end, 1) if ready else b""
    os.close(read_end)
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert ready, "the forked child hung in the call"
    assert status == b"\x00", f"the forked child's call failed (status {status!r})"


def run_python(code, **env):
    environ = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)


def test_environment_sets_the_cpu_thread_count(ropepool):
    done = run_python("import ropepool; print(ropepool.num_threads())", ROPEPOOL_NUM_THREADS="1")
    assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr
    default = run_python("import ropepool; print(ropepool.num_threads())", ROPEPOOL_NUM_THREADS="")
    assert default.returncode == 0 and int(default.stdout) == os.cpu_count(), default.stderr


def test_bad_thread_environment_is_named(ropepool):
    done = run_python("import ropepool; ropepool.num_threads()", ROPEPOOL_NUM_THREADS="many")
    assert done.returncode != 0
    assert "ropepool.RopePoolError: ROPEPOOL_NUM_THREADS must be an integer in [0, 4096] (0 = one thread per CPU), got 'many'" in done.stderr


# ---- the module ------------------------------------------------------------------------------------


def test_version_is_the_headers(ropepool):
    header = open(os.path.join(REPO, "include", "ropepool.h")).read()
    parts = [re.search(rf"#define RP_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert ropepool.version() == ropepool.__version__ == ".".join(parts)
    major, minor, patch = map(int, parts)
    assert ropepool._ropepool.VERSION_NUMBER == major * 10000 + minor * 100 + patch


def test_cpu_kernel_and_cuda_flag_are_reported(ropepool):
    assert ropepool.cpu_kernel() in {"avx512", "avx2", "neon", "portable", "reference"}
    assert isinstance(ropepool.has_cuda(), bool)


def test_check_cuda_before_any_cuda_call_has_nothing_to_report(ropepool):
    """A fresh process (no CUDA call yet, torch imported, with or without a GPU): None, not torch's
    error for a machine without a driver."""
    if not ropepool.has_cuda():
        pytest.skip("this build has no CUDA backend")
    pytest.importorskip("torch")
    done = run_python("import torch, ropepool; print(ropepool.check_cuda())")
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr


def test_check_cuda_says_when_the_build_has_no_cuda(ropepool):
    if ropepool.has_cuda():
        pytest.skip("this build has its CUDA backend (check_cuda is tested in test_cuda.py)")
    with pytest.raises(ropepool.RopePoolError, match=r"no CUDA backend \(ropepool.has_cuda\(\) is False\)"):
        ropepool.check_cuda()


def test_forced_cpu_kernel_level_is_reported_and_exact(ropepool):
    code = ("import sys; sys.path.insert(0, %r); import ropepool, helpers; "
            "fw = helpers.make_framework('numpy'); p = helpers.Problem(fw, T=16, max_pos=2**31 - 1); "
            "b = p.snapshot(); helpers.check_call(p, b, p.call(ropepool)); print(ropepool.cpu_kernel())"
            % os.path.dirname(os.path.abspath(__file__)))
    done = run_python(code, ROPEPOOL_CPU="reference")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reference"


# A call in a fresh process that prints the refusal it expects and then the CPU kernel level, and
# fails if the refused call wrote anything.
REFUSED_CALL = ("import sys; sys.path.insert(0, %r); import ropepool, helpers; "
                "fw = helpers.make_framework('numpy'); p = helpers.Problem(fw, T=16); b = p.snapshot()\n"
                "try:\n    p.call(ropepool)\nexcept ropepool.RopePoolError as e:\n    print(e)\n"
                "assert all((old == fw.bits(x)).all() for old, x in zip(b, p.arrays())), 'written'\n"
                "print(ropepool.cpu_kernel())" % os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("level", ["bogus", "AVX2", "above"])
def test_a_cpu_kernel_level_this_process_cannot_run_is_refused(ropepool, level):
    """ROPEPOOL_CPU naming no level of this build, or one above what the CPU runs, fails every CPU
    call with a message naming it, and writes nothing: never another level in its place."""
    if level == "above":  # the x86-64 levels, lowest first (aarch64's highest, neon, has none above)
        levels, kernel = ["reference", "portable", "avx2", "avx512"], ropepool.cpu_kernel()
        if kernel not in levels[:-1]:
            pytest.skip(f"this CPU runs the highest level of this build ({kernel})")
        level = levels[levels.index(kernel) + 1]
    done = run_python(REFUSED_CALL, ROPEPOOL_CPU=level, ROPEPOOL_VERBOSE="1")
    assert done.returncode == 0, done.stderr
    message, kernel = done.stdout.strip().split("\n")
    assert message.startswith(f"ROPEPOOL_CPU={level} is "), done.stdout
    assert ("not a CPU kernel level" if level in ("bogus", "AVX2") else "cannot run") in message
    assert kernel == "none"  # what runs: nothing, never the level detected
    assert f"ropepool: CPU kernels: none, every CPU call is refused: {message}" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["false", "off", "2", " 1"])
def test_a_verbose_setting_that_is_neither_0_nor_1_is_refused(ropepool, value):
    """ROPEPOOL_VERBOSE=false (meant as off) printed the kernel choice, as any value but "0" did:
    a setting read as neither, so every CPU call is refused naming it, and nothing is written."""
    done = run_python(REFUSED_CALL, ROPEPOOL_VERBOSE=value)
    assert done.returncode == 0, done.stderr
    message, kernel = done.stdout.strip().split("\n")
    assert message == (f"ROPEPOOL_VERBOSE={value} is neither 0 nor 1 (1 prints the CPU kernel choice to stderr); "
                       "set it to 0 or 1, or unset it"), done.stdout
    assert kernel == "none"
    for quiet in ("0", ""):
        done = run_python("import ropepool; print(ropepool.cpu_kernel())", ROPEPOOL_VERBOSE=quiet)
        assert done.returncode == 0 and done.stdout.strip() != "none" and "ropepool:" not in done.stderr, done


@pytest.mark.parametrize("switch", ["ROPEPOOL_TORCH_NATIVE", "ROPEPOOL_TORCH_EXCHANGE"])
def test_a_torch_reader_switch_that_is_neither_0_nor_1_fails_the_import(ropepool, switch):
    """ROPEPOOL_TORCH_NATIVE=false kept the native reader on: only "0" turned it off. A value
    that is neither 0 nor 1 now fails the import, naming it, before any tensor is read."""
    done = run_python("import ropepool", **{switch: "false"})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: ropepool: {switch}=false is neither 0 nor 1 (0 "), done.stderr
    assert last.endswith("); set it to 0 or 1, or unset it"), done.stderr
    done = run_python("import ropepool", **{switch: "1"})
    assert done.returncode == 0, done.stderr


def test_error_type_is_a_value_error(ropepool):
    assert issubclass(ropepool.RopePoolError, ValueError)



def test_mlx_module_of_a_build_without_its_extension_says_to_rebuild(ropepool):
    """A plain pip install on Linux builds no MLX extension; with MLX missing too, importing
    ropepool.mlx asked for MLX alone, which would not have made it work (the rebuild was said only
    after). Both hidden here as they are absent there (None in sys.modules)."""
    done = run_python("import sys\n"
                      "sys.modules.update(dict.fromkeys(['mlx', 'mlx.core', 'ropepool._ropepool_mlx']))\n"
                      "import ropepool.mlx")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ropepool was built without its MLX extension"), done.stderr
    assert "--no-build-isolation" in last
