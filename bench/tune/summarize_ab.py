"""Median of each side's rounds, and NEW / OLD, from an interleaved ropepool-bench A/B log whose
sections are headed "== round R SIDE ARGS... hot|cold" (bench/tune/run_s47.sh).

    python3 bench/tune/summarize_ab.py decode-split-ab.log
"""
import re
import statistics
import sys
from collections import defaultdict


def main(path):
    times = defaultdict(list)  # (args, mode, T, side) -> us per call
    order = []
    head = None
    for line in open(path):
        m = re.match(r"== round \d+ (\S+) (.*) (hot|cold)$", line.strip())
        if m:
            head = m.groups()
            continue
        m = re.match(r"\s+(\d+)\s+\d+\s+([\d.]+) us", line)
        if m and head:
            side, args, mode = head
            key = (args, mode, int(m.group(1)))
            if key not in order:
                order.append(key)
            times[key + (side,)].append(float(m.group(2)))
    print(f"{'shape':34} {'mode':4} {'T':>5} {'NEW':>8} {'OLD':>8} {'NEW/OLD':>8}  rounds (NEW | OLD)")
    for key in order:
        new, old = times.get(key + ("NEW",), []), times.get(key + ("OLD",), [])
        if not new or not old:
            continue
        n, o = statistics.median(new), statistics.median(old)
        print(f"{key[0]:34} {key[1]:4} {key[2]:5d} {n:8.2f} {o:8.2f} {n / o:8.3f}  "
              f"{' '.join(f'{x:.2f}' for x in new)} | {' '.join(f'{x:.2f}' for x in old)}")


if __name__ == "__main__":
    main(sys.argv[1])
