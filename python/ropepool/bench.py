"""The call users make, timed beside the C call: ``python -m ropepool.bench``.

For each token count T it times, in one process, on the same memory (torch tensors are
``torch.from_numpy`` views of the NumPy arrays, CUDA tensors their copies):

- ``C``: ``rp_rope_pool_fused`` alone, the arguments converted once (``_ropepool._time_calls``);
- the Python call on NumPy arrays and on torch tensors (when torch is importable), with fresh
  outputs (q_rot and k_rot allocated by the call, dropped by the caller) and with ``q_out`` /
  ``k_out`` (the caller's arrays, reused);
- on torch tensors, the torch operator's ``out`` overload (``torch.ops.ropepool.rope_pool_fused.out``,
  what torch.compile's code calls), with ``q_out`` / ``k_out``;

in interleaved rounds, and prints the median over rounds of the mean time per call, each
Python figure's ratio to C, and the minor page faults per call. Before it is timed at a T, each of
those calls is made once on new inputs, its outputs and pool rows poisoned first, and checked
against the float64 reference (``_ropepool._verify``, the check ropepool-bench runs): a failure is
reported on stderr and the exit status is 3, as ropepool-bench's. (torch.compile's plain code is a
baseline of another precision, float32 angles, and is not checked.) ``--backend cuda`` does the same
on torch CUDA tensors, where the figures are the host's time per call of an eager loop (chunks of
200 calls, each timed over its launches, the stream synchronised between chunks outside the
timing), the wall time per call of the same loop back to back (synchronised once per batch: the
GPU's pace in eager mode when it is slower than the host), and the GPU time per call (CUDA events
around a CUDA graph of the same calls). ``--profile`` prints where the binding's time goes per call at
the smallest T (argument parsing, array description, autograd checks, context and stream,
outputs, the library call, version bumps and result), from ``_ropepool._profile``;
``--fresh-outputs`` compares where fresh outputs' pages come from at T >= 1024
(``ROPEPOOL_FRESH_OUTPUTS``, python/src/fresh_memory.c: the cache of freed outputs' blocks, the
default, or new pages first touched in one of four ways).

``--torch-compile`` (CPU) adds the same step written in plain torch and compiled by Inductor (issue
20's baseline), cos and sin from the positions (transformers' form) and from a cos/sin cache
indexed by position (vLLM's form), with their ratios to the call.

    python -m ropepool.bench [--backend cpu|cuda] [-T 1,256,4096] [--rounds 5] [--profile] [--fresh-outputs]
                             [--torch-compile]
"""

import argparse
import os
import resource
import statistics
import sys
import time

import numpy as np

import ropepool
from ropepool import _ropepool

SHAPE = dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, rope_base=500000.0)  # Llama-3-8B
MAX_POSITION = 8192  # positions are drawn from [0, MAX_POSITION)


def make_arrays(T, P, seed=1):
    rng = np.random.default_rng(seed)
    Hq, Hk, D = SHAPE["num_qo_heads"], SHAPE["num_kv_heads"], SHAPE["head_dim"]
    return dict(
        q=rng.standard_normal((T, Hq, D), dtype=np.float32),
        k=rng.standard_normal((T, Hk, D), dtype=np.float32),
        v=rng.standard_normal((T, Hk, D), dtype=np.float32),
        positions=rng.integers(0, MAX_POSITION, T).astype(np.int64),
        slots=rng.permutation(P)[:T].astype(np.int64),
        k_pool=np.zeros((P, Hk, D), np.float32),
        v_pool=np.zeros((P, Hk, D), np.float32),
    )


ORDER = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]


def python_batch(arrays, calls, outs, sync, f=None):
    """`calls` Python calls of f (default ropepool.rope_pool_fused), keywords spelled out as users
    write them (a ``**SHAPE`` would build and unpack a dict in every call, some 0.3 us at T = 1 that
    is the benchmark's, not the binding's); fresh outputs (dropped at once) when outs is None.
    threads is None unless --clock thread."""
    f = f or ropepool.rope_pool_fused
    a0, a1, a2, a3, a4, a5, a6 = arrays
    D, Hq, Hk, base = SHAPE["head_dim"], SHAPE["num_qo_heads"], SHAPE["num_kv_heads"], SHAPE["rope_base"]
    threads = SHAPE.get("threads")
    if outs is None:
        for _ in range(calls):
            f(a0, a1, a2, a3, a4, a5, a6, head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=base,
              threads=threads)
    else:
        qo, ko = outs
        for _ in range(calls):
            f(a0, a1, a2, a3, a4, a5, a6, head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=base,
              threads=threads, q_out=qo, k_out=ko)
    sync()


def call_once(arrays, outs, f=None):
    """One call as python_batch makes it; returns its (q_rot, k_rot)."""
    f = f or ropepool.rope_pool_fused
    keywords = dict(head_dim=SHAPE["head_dim"], num_qo_heads=SHAPE["num_qo_heads"],
                    num_kv_heads=SHAPE["num_kv_heads"], rope_base=SHAPE["rope_base"], threads=SHAPE.get("threads"))
    if outs is None:
        return tuple(f(*arrays, **keywords)[:2])
    f(*arrays, **keywords, q_out=outs[0], k_out=outs[1])
    return outs


def checked(run, once):
    """run, with once() -> (q_rot, k_rot): the same call made once, for verify."""
    run.once = once
    return run


CLOCK = time.perf_counter_ns  # --clock thread: time.thread_time_ns
COMPILED_PLAIN = {}  # --torch-compile: name -> plain_torch(torch, ...)
PAUSE_S = 0.02  # before each timed batch (measure)
SAMPLES = {}  # T -> method -> each round's ns per call (measure)


def plain_torch(torch, table=False):
    """The same step in plain torch, as an engine writes it without ropepool (NeoX RoPE in float32,
    then the pool rows by index), compiled by Inductor once for every T (dynamic shapes): issue
    20's torch.compile baseline. cos and sin come from the positions (transformers' form), or with
    `table` from a float32 cos/sin cache indexed by position, built once (vLLM's form: no
    trigonometry per call). Fresh q_rot and k_rot, as from the call."""
    D = SHAPE["head_dim"]
    half = D // 2
    inv_freq = torch.from_numpy(1.0 / SHAPE["rope_base"] ** (np.arange(0, D, 2) / D)).float()
    angles = torch.arange(MAX_POSITION, dtype=torch.float32)[:, None] * inv_freq
    cos_cache, sin_cache = angles.cos(), angles.sin()

    def step(q, k, v, positions, slots, k_pool, v_pool):
        if table:
            cos, sin = cos_cache[positions][:, None, :], sin_cache[positions][:, None, :]
        else:
            angle = positions[:, None].float() * inv_freq
            cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]

        def rotate(x):
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        q_rot, k_rot = rotate(q), rotate(k)
        k_pool.index_copy_(0, slots, k_rot)
        v_pool.index_copy_(0, slots, v)
        return q_rot, k_rot

    return torch.compile(step, dynamic=True)


def _inductor_has_no_cxx(torch):
    """Why Inductor cannot build plain_torch's CPU code, or None. It needs a C++ compiler, which
    ropepool does not (make run on a machine with gcc alone ended in Inductor's traceback)."""
    try:
        from torch._inductor import cpp_builder, exc

        find, invalid = cpp_builder.get_cpp_compiler, exc.InvalidCxxCompiler
    except (ImportError, AttributeError):  # a torch without them: let torch.compile say what it lacks
        return None
    try:
        find()
    except invalid as e:
        return f"Inductor finds no C++ compiler ({str(e).strip()})"
    return None


def plain_batch(f, arrays, calls):
    a0, a1, a2, a3, a4, a5, a6 = arrays
    for _ in range(calls):
        f(a0, a1, a2, a3, a4, a5, a6)


def timed(run, calls):
    """(ns per call, (minor faults, kernel-mode CPU ns) per call) of run(calls). The system time
    is what page faults cost the process: less sensitive than wall time to other load."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = CLOCK()
    run(calls)
    ns = (CLOCK() - start) / calls
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ns, ((after.ru_minflt - before.ru_minflt) / calls, (after.ru_stime - before.ru_stime) * 1e9 / calls)


def methods_for(T, P, backend, torch):
    """(name -> run(calls): the timed variants at T, each ropepool call's with run.once (checked);
    io: base, the NumPy arrays they are made from; pools(), the pools as host arrays; renew(rng),
    new values of q, k, v and positions in every method's arrays, for verify)."""
    base = make_arrays(T, P)
    arrays = [base[n] for n in ORDER]
    methods = {}
    no_sync = lambda: None  # noqa: E731
    if backend == "cpu":
        np_outs = (np.empty_like(base["q"]), np.empty_like(base["k"]))
        caller_outs = list(np_outs)

        def c_calls(n):
            return _ropepool._time_calls(n, *arrays, **SHAPE, q_out=np_outs[0], k_out=np_outs[1])

        def python_calls(arrays, outs, f=None):
            return checked(lambda n: python_batch(arrays, n, outs, no_sync, f), lambda: call_once(arrays, outs, f))

        methods["C"] = checked(c_calls, lambda: (c_calls(1), np_outs)[1])
        methods["numpy fresh"] = python_calls(arrays, None)
        methods["numpy q_out"] = python_calls(arrays, np_outs)
        if torch is not None:
            t_arrays = [torch.from_numpy(a) for a in arrays]
            t_outs = tuple(torch.from_numpy(a) for a in np_outs)
            methods["torch fresh"] = python_calls(t_arrays, None)
            methods["torch q_out"] = python_calls(t_arrays, t_outs)
            # outputs of torch's own allocator: no huge-page advice (NumPy's arrays above have it),
            # so at large T every access walks more of the page table (README: Python)
            e_outs = (torch.empty_like(t_arrays[0]), torch.empty_like(t_arrays[1]))
            caller_outs += e_outs
            methods["torch q_out, torch.empty"] = python_calls(t_arrays, e_outs)
            op = operator(torch)
            if op is not None:
                methods["torch op q_out"] = python_calls(t_arrays, t_outs, op)
            for name, f in COMPILED_PLAIN.items():
                methods[name] = lambda n, f=f: plain_batch(f, t_arrays, n)

        def pools():  # the torch tensors are views of them
            return base["k_pool"], base["v_pool"]

        renew_copies = no_sync
    else:
        sync = torch.cuda.synchronize
        t_arrays = [torch.from_numpy(a).cuda() for a in arrays]
        t_outs = (torch.empty_like(t_arrays[0]), torch.empty_like(t_arrays[1]))
        caller_outs = list(t_outs)

        def c_chunk(n):
            return _ropepool._time_calls(n, *t_arrays, **SHAPE, q_out=t_outs[0], k_out=t_outs[1]) * n

        def python_calls(outs, f=None):
            return checked(host_timer(lambda n: python_chunk(t_arrays, n, outs, f), sync),
                           lambda: call_once(t_arrays, outs, f))

        methods["C"] = checked(host_timer(c_chunk, sync), lambda: (c_chunk(1), t_outs)[1])
        methods["torch fresh"] = python_calls(None)
        methods["torch q_out"] = python_calls(t_outs)
        op = operator(torch)
        if op is not None:
            methods["torch op q_out"] = python_calls(t_outs, op)
        methods["torch q_out, back to back"] = lambda n: python_batch(t_arrays, n, t_outs, sync)  # torch q_out's call
        gpu = methods["gpu"] = gpu_timer(torch, t_arrays, t_outs)
        gpu.once = lambda: (gpu(1), t_outs)[1]  # a replay of the timed graph

        def pools():
            return t_arrays[5].cpu().numpy(), t_arrays[6].cpu().numpy()

        def renew_copies():
            for i in range(4):  # q, k, v, positions; the pool rows are poisoned on the device
                t_arrays[i].copy_(torch.from_numpy(arrays[i]))
            t_arrays[5][t_arrays[4]] = float("nan")
            t_arrays[6][t_arrays[4]] = float("nan")

    def renew(rng):
        for name in ("q", "k", "v"):
            base[name][...] = rng.standard_normal(base[name].shape, dtype=np.float32)
        base["positions"][...] = rng.integers(0, MAX_POSITION, T)
        base["k_pool"][base["slots"]] = np.nan
        base["v_pool"][base["slots"]] = np.nan
        for out in caller_outs:
            out[...] = float("nan")
        renew_copies()

    return methods, dict(base=base, pools=pools, renew=renew)


def verify(T, methods, io):
    """Each checked method's call made once, on new inputs (a call that wrote nothing, or fresh
    outputs on a freed block of the last call's, cannot pass), its caller's outputs and the pool
    rows its slots name poisoned first, then checked against the float64 reference by the
    library's own check. Returns one line per failure."""
    rng = np.random.default_rng(T)
    base = io["base"]
    failures = []
    for name, run in methods.items():
        once = getattr(run, "once", None)
        if once is None:
            continue
        io["renew"](rng)
        outs = once()
        host = [o if isinstance(o, np.ndarray) else o.detach().cpu().numpy() for o in outs]
        k_pool, v_pool = io["pools"]()
        checked_values, failed, worst, first = _ropepool._verify(
            base["q"], base["k"], base["v"], base["positions"], base["slots"], k_pool, v_pool, **SHAPE,
            q_out=host[0], k_out=host[1])
        if failed:
            failures.append(f"T = {T}, {name}: FAILED verification against the float64 reference, "
                            f"{failed} of {checked_values} values; first: {first}")
    return failures


# CUDA host time: chunks of calls fewer than the launch queue holds, each timed from its first call
# to its last (the launches), the stream synchronised outside the timing, so that the figure is
# the host's own cost and not the GPU's pace when calls come back to back.
HOST_CHUNK = 200


def python_chunk(arrays, calls, outs, f=None):
    """ns spent in `calls` Python calls (no synchronisation)."""
    start = CLOCK()
    python_batch(arrays, calls, outs, lambda: None, f)
    return CLOCK() - start


def operator(torch):
    """The torch operator's out overload, as compiled code calls it; None where ropepool.torch_op
    could not register it (it warned)."""
    try:
        from ropepool import torch_op  # registered when torch was imported; a no-op here
    except Exception:
        return None
    return torch_op.rope_pool_fused.out


def host_timer(launch_chunk, sync):
    """run(calls) -> host ns per call: launch_chunk(n) (returning its ns) over chunks of HOST_CHUNK."""

    def run(calls):
        total, done = 0.0, 0
        while done < calls:
            n = min(HOST_CHUNK, calls - done)
            total += launch_chunk(n)
            sync()
            done += n
        return total / calls

    run.self_timed = True
    return run


def gpu_timer(torch, arrays, outs, per_graph=20):
    """GPU time per call: CUDA events around replays of a graph of `per_graph` calls."""
    return graph_timer(torch, lambda: ropepool.rope_pool_fused(*arrays, **SHAPE, q_out=outs[0], k_out=outs[1]),
                       per_graph)


def graph_timer(torch, body, per_graph=20):
    """run(n) -> GPU ns per call of body(), from about n calls: CUDA events around replays of a
    graph of `per_graph` calls of it (python/tools use it for other calls)."""
    body()  # the device context, workspaces and lazy loads exist before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            body()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def run(n):
        replays = max(1, n // per_graph)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e6 / (replays * per_graph)

    run.self_timed = True
    return run


def calibrate(run, budget_s):
    """Calls per batch so that a batch takes about budget_s."""
    run(1)  # untimed: the first call of a process starts the thread pool and maps the pool's pages
    calls = 1
    while True:
        start = time.perf_counter()
        run(calls)
        elapsed = time.perf_counter() - start
        if elapsed >= budget_s / 4 or calls >= 1 << 20:
            return max(1, int(calls * budget_s / max(elapsed, 1e-9)))
        calls *= 4


def measure(T, P, backend, torch, rounds, budget_s, stat):
    """({name: (figure, (faults, sys ns))}, the verification failures) at T."""
    methods, io = methods_for(T, P, backend, torch)
    failures = verify(T, methods, io)
    calls = {name: calibrate(run, budget_s) for name, run in methods.items()}
    samples = {name: [] for name in methods}
    faults = {name: [] for name in methods}
    for _ in range(rounds):
        for name, run in methods.items():
            # a pause first: the threads of the method before (torch's OpenMP workers after compiled
            # code) spin on for a while after it returns, and slowed whatever came next by up to 25%
            time.sleep(PAUSE_S)
            if getattr(run, "self_timed", False):
                ns, f = run(calls[name]), (0.0, 0.0)
            else:
                ns, f = timed(run, calls[name])
            samples[name].append(ns)
            faults[name].append(f)
    SAMPLES[T] = samples
    pick = min if stat == "min" else statistics.median
    return {name: (pick(samples[name]), tuple(statistics.median(f[i] for f in faults[name])
                                                          for i in range(2))) for name in methods}, failures


def profile(backend, torch, P, calls=20000, batches_of=40):
    """The binding's stages at T = 1: NumPy and torch CPU tensors, or torch CUDA tensors."""
    base = make_arrays(1, P)
    frameworks = {}
    if backend == "cpu":
        frameworks["numpy"] = [base[n] for n in ORDER]
    if torch is not None:
        device = "cuda" if backend == "cuda" else "cpu"
        frameworks[f"torch {device}"] = [torch.from_numpy(base[n]).to(device) for n in ORDER]
    sync = torch.cuda.synchronize if backend == "cuda" else (lambda: None)
    keys = ["arguments", "arrays", "autograd", "context_stream", "outputs", "library_call", "finish"]
    print(f"\nWhere a call's host time goes (T = 1; {calls} calls in {batches_of} batches; ns per call, the least "
          "batch mean of each stage):")
    print("| call | " + " | ".join(keys) + " | total |")
    print("| --- |" + " ---: |" * (len(keys) + 1))
    for label, arrays in frameworks.items():
        copy = (lambda a: a.copy()) if label == "numpy" else (lambda a: a.clone())
        for name, o in (("fresh", None), ("q_out/k_out", (copy(arrays[0]), copy(arrays[1])))):
            python_batch(arrays, 1000, o, sync)
            batches = []
            for _ in range(batches_of):
                _ropepool._profile(True)
                python_batch(arrays, calls // batches_of, o, sync)
                batches.append(_ropepool._profile(False))
            # the least of each stage over the batches: the cost with the least interference
            stages = {k: min(b[k] for b in batches) for k in keys}
            total = sum(stages[k] for k in keys)
            print(f"| {label}, {name} | " + " | ".join(f"{stages[k]:.0f}" for k in keys) + f" | {total:.0f} |")
    print("(arguments: parsing and keywords; arrays: describing the 7 arrays (DLPack / NumPy C API) and the\n"
          " negative-bit check; autograd: grad mode and requires_grad; context_stream: the context and the\n"
          " current CUDA stream; outputs: allocating q_rot and k_rot, or describing q_out and k_out;\n"
          " library_call: rp_rope_pool_fused with the GIL released (validation and the kernel, or the\n"
          " launch on CUDA); finish: version-counter bumps and the result tuple. Dropping fresh outputs\n"
          " happens in the caller and is not included.)")


STRATEGIES = ["cache", "huge", "none", "populate", "huge+populate"]


def fresh_output_sweep(tokens, P, torch, rounds, budget_s):
    """Fresh outputs under each ROPEPOOL_FRESH_OUTPUTS strategy (see python/src/fresh_memory.c),
    interleaved in one process: wall time, minor faults and system CPU time per call."""
    print("\nFresh outputs by first-touch strategy (ROPEPOOL_FRESH_OUTPUTS), interleaved; us per call, "
          "minor faults per call, system CPU us per call:")
    print("| T | framework | " + " | ".join(STRATEGIES) + " |")
    print("| ---: | --- |" + " ---: |" * len(STRATEGIES))
    saved = os.environ.get("ROPEPOOL_FRESH_OUTPUTS")
    for T in tokens:
        base = make_arrays(T, P)
        frameworks = {"numpy": [base[n] for n in ORDER]}
        if torch is not None:
            frameworks["torch"] = [torch.from_numpy(base[n]) for n in ORDER]
        runs = {}
        for fw, arrays in frameworks.items():
            for strategy in STRATEGIES:
                def run(n, arrays=arrays, strategy=strategy):
                    os.environ["ROPEPOOL_FRESH_OUTPUTS"] = strategy
                    python_batch(arrays, n, None, lambda: None)
                runs[(fw, strategy)] = run
        calls = {key: calibrate(run, budget_s) for key, run in runs.items()}
        samples = {key: [] for key in runs}
        for _ in range(rounds):
            for key, run in runs.items():
                samples[key].append(timed(run, calls[key]))
        for fw in frameworks:
            cells = []
            for strategy in STRATEGIES:
                got = samples[(fw, strategy)]
                ns = statistics.median(x[0] for x in got)
                faults = statistics.median(x[1][0] for x in got)
                sys_ns = statistics.median(x[1][1] for x in got)
                cells.append(f"{ns / 1e3:.0f} ({faults:.0f} faults, sys {sys_ns / 1e3:.0f})")
            print(f"| {T} | {fw} | " + " | ".join(cells) + " |")
    if saved is None:
        os.environ.pop("ROPEPOOL_FRESH_OUTPUTS", None)
    else:
        os.environ["ROPEPOOL_FRESH_OUTPUTS"] = saved


def _us(ns):
    """ns as us, three significant digits, never in exponent form."""
    us = ns / 1e3
    return f"{us:.3g}" if us < 100 else f"{us:.0f}"


def _positive(kind, what, most=float("inf")):
    """An argparse type: a positive `kind` (int or float), at most `most` where given, or a usage
    error naming `what`."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):  # NaN fails the comparison too
            raise argparse.ArgumentTypeError(f"{what} must be a positive {kind.__name__}, got {text!r}")
        if value > most:  # a batch sized from it would run for ever
            raise argparse.ArgumentTypeError(f"{what} must be at most {most:g}, got {text!r}")
        return value
    return parse


def _token_counts(text):
    """-T: comma-separated token counts, each >= 1."""
    counts = []
    for part in text.split(","):
        count = _positive(int, "each token count")(part.strip())
        if count in counts:
            raise argparse.ArgumentTypeError(f"T = {count} is listed twice")
        counts.append(count)
    return counts


class _Once(argparse.Action):
    """Stores an option's value; a second occurrence is a usage error: argparse would let the last
    one win without a word ("-T 1 -T 4096" timed T = 4096 alone), which ropepool-bench refuses too."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(self, "given", False):
            raise argparse.ArgumentError(self, "is given twice: give it once")
        self.given = True
        setattr(namespace, self.dest, values)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m ropepool.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", action=_Once, choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("-T", "--tokens", action=_Once, type=_token_counts, default=None, help="token counts, comma-separated "
                        "(default cpu 1,16,256,1024,4096; cuda 1,64,1024,4096)")
    parser.add_argument("--pool", action=_Once, type=_positive(int, "the slot count"), default=65536, help="KV-pool slots (default 65536)")
    parser.add_argument("--rounds", action=_Once, type=_positive(int, "the round count"), default=5)
    parser.add_argument("--seconds", action=_Once, type=_positive(float, "the time", most=600), default=0.04,
                        help="time per batch, at most 600 (default 0.04)")
    parser.add_argument("--stat", action=_Once, choices=["median", "min"], default="median",
                        help="per figure, the median (default) or the least of the rounds' means")
    parser.add_argument("--clock", action=_Once, choices=["wall", "thread"], default="wall",
                        help="wall (default), or thread: the calling thread's CPU time, with every call on one "
                        "thread (threads=1, torch.set_num_threads(1)), so that other load on the machine does not "
                        "count (T = 1 overheads)")
    parser.add_argument("--fresh-outputs", action="store_true",
                        help="also compare the first-touch strategies of fresh outputs at T >= 1024")
    parser.add_argument("--profile", action="store_true", help="also print the per-stage breakdown at T = 1")
    parser.add_argument("--torch-compile", action="store_true",
                        help="cpu: also time torch.compile (Inductor) of the same step in plain torch code")
    args = parser.parse_args(argv)
    tokens = args.tokens or _token_counts("1,16,256,1024,4096" if args.backend == "cpu" else "1,64,1024,4096")
    if max(tokens) > args.pool:
        parser.error(f"T = {max(tokens)} exceeds --pool {args.pool} (each token writes its own slot): raise "
                     "--pool or lower -T")
    for flag, given in (("--fresh-outputs", args.fresh_outputs), ("--torch-compile", args.torch_compile)):
        if given and args.backend != "cpu":
            parser.error(f"{flag} compares CPU calls: it needs --backend cpu")
    if args.fresh_outputs and max(tokens) < 1024:
        parser.error("--fresh-outputs compares fresh outputs at T >= 1024: give such a T")
    try:
        import torch
    except ImportError:
        torch = None
    if args.backend == "cuda":  # refused as ropepool-bench refuses it: exit 2, naming what is missing
        missing = ("torch is not installed" if torch is None
                   else "this torch has no usable GPU (torch.cuda.is_available() is False)"
                   if not torch.cuda.is_available()
                   else "ropepool was built without its CUDA backend" if not ropepool.has_cuda() else None)
        if missing:
            parser.error(f"--backend cuda needs torch with CUDA, a GPU and ropepool's CUDA backend: {missing}")
    if args.clock == "thread":
        global CLOCK
        CLOCK = time.thread_time_ns
        SHAPE["threads"] = 1
        if torch is not None:  # torch.compile's code too: its other threads' time would not count
            torch.set_num_threads(1)
    P = args.pool
    where = f"cpu kernel {ropepool.cpu_kernel()}, {ropepool.num_threads()} threads" if args.backend == "cpu" \
        else f"cuda {torch.cuda.get_device_name()}"
    print(f"ropepool {ropepool.version()}: the Python call beside the C call; Llama-3-8B (Hq 32, Hk 8, D 128), "
          f"float32, int64 positions/slots, pool {P}; {where}; numpy {np.__version__}"
          + (f", torch {torch.__version__}" if torch is not None else ", no torch")
          + f"; {args.stat} of {args.rounds} interleaved rounds, us per call ({args.clock} clock) (x: ratio to C; faults: minor page "
          "faults per call; sys: kernel-mode CPU us per call); every ropepool call verified against the float64 "
          "reference before it is timed; load average "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    no_compiler = args.torch_compile and torch is not None and _inductor_has_no_cxx(torch)
    if args.torch_compile and (torch is None or no_compiler):
        print("--torch-compile: not timed, " + (no_compiler or "torch is not installed"))
    elif args.torch_compile:
        COMPILED_PLAIN["torch.compile plain"] = plain_torch(torch)
        COMPILED_PLAIN["torch.compile plain, cos/sin cache"] = plain_torch(torch, table=True)
    results, failures = {}, []
    for T in tokens:
        try:
            results[T], failed = measure(T, P, args.backend, torch, args.rounds, args.seconds, args.stat)
            failures += failed
        except MemoryError as e:  # a T too large for this machine: one line, as ropepool-bench says it
            print(f"ropepool.bench: out of memory for the arrays of T = {T}: {e}", file=sys.stderr)
            return 1
    names = [n for n in results[tokens[0]] if n not in ("C", "gpu")]
    head = ["T", "C call" if args.backend == "cpu" else "C call (host)"]
    if args.backend == "cuda":
        head.append("GPU time")
    head += names
    print("\n| " + " | ".join(head) + " |")
    print("| " + " | ".join(["---:"] * len(head)) + " |")
    for T, r in results.items():
        c = r["C"][0]
        row = [str(T), f"{c / 1e3:.2f}"]
        if "gpu" in r:
            row.append(f"{r['gpu'][0] / 1e3:.2f}")
        for n in names:
            ns, (f, sys_ns) = r[n]
            row.append(f"{ns / 1e3:.2f} ({ns / c:.2f}x" + (f", {f:.0f} faults, sys {sys_ns / 1e3:.0f})"
                                                          if "fresh" in n or "compile" in n else ")"))
        print("| " + " | ".join(row) + " |")
    if 1 in results:
        c = results[1]["C"][0]
        print("\nOverhead over the C call at T = 1: " + ", ".join(
            f"{n} {(results[1][n][0] - c) / 1e3:+.2f} us" for n in names))
    for name in COMPILED_PLAIN:
        # with its rounds' range: compiled code's OpenMP threads stall for milliseconds when other
        # work shares the CPUs, and a ratio from such rounds means nothing
        print(f"\n{name} against the call with fresh outputs (times faster; the compiled code's rounds, us): "
              + "; ".join(f"T = {T}: numpy {r[name][0] / r['numpy fresh'][0]:.2f}x, torch "
                          f"{r[name][0] / r['torch fresh'][0]:.2f}x ({_us(min(SAMPLES[T][name]))}-"
                          f"{_us(max(SAMPLES[T][name]))})" for T, r in results.items()))
    if args.fresh_outputs and args.backend == "cpu":
        fresh_output_sweep([T for T in tokens if T >= 1024], P, torch, args.rounds, args.seconds)
    if args.profile:
        profile(args.backend, torch, P)
    for line in failures:
        print(f"ropepool.bench: {line}", file=sys.stderr)
    return 3 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
