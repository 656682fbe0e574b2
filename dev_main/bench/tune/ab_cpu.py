"""Old against new on the CPU: two ropepool-bench binaries run alternately, so that both see the
same load, and the medians over rounds printed with each round's paired ratio.

    python3 bench/tune/ab_cpu.py OLD_BENCH NEW_BENCH ROUNDS <ropepool-bench arguments>

e.g. an old tree built beside this one (cmake -DROPEPOOL_CUDA=OFF -DROPEPOOL_TESTS=OFF
-DROPEPOOL_PYTHON=OFF) and `... 5 --dtype bf16 --threads 2 -T 4096,16384 --kv-dtype fp8_e4m3`.
Each round runs `BENCH --backend cpu ARGS --no-unfused --no-verify --json FILE`, the old binary
first; a row reads | T | old: median ms (median % of memcpy) | new: the same | the median of the
rounds' new/old ratios (their range) |. Running one binary as both checks the order's bias.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    binaries = {"old": argv[1], "new": argv[2]}
    rounds, args = int(argv[3]), argv[4:]
    got = {name: {} for name in binaries}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        for _ in range(rounds):
            for name, binary in binaries.items():
                subprocess.run([binary, "--backend", "cpu", *args, "--no-unfused", "--no-verify", "--json", out],
                               stdout=subprocess.DEVNULL, check=True)
                with open(out) as f:
                    for point in json.load(f)["runs"][0]["points"]:
                        fused = point["fused"]
                        got[name].setdefault(point["tokens"], []).append(
                            (fused["median_s"] * 1e3, fused["roofline_fraction"] * 100))
    for T in got["new"]:
        old, new = got["old"][T], got["new"][T]
        ratios = [n[0] / o[0] for o, n in zip(old, new)]

        def cell(xs):
            return f"{statistics.median(x[0] for x in xs):.3g} ms ({statistics.median(x[1] for x in xs):.1f}%)"

        print(f"| {T} | {cell(old)} | {cell(new)} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
