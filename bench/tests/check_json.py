"""check_json.py REPORT.json PLOT.svg — the benchmark's JSON holds the fields the README documents,
with values that fit the run test_cli.sh asked for; the SVG is well-formed and draws every series."""
import json
import sys
import xml.etree.ElementTree as ET

report_path, svg_path = sys.argv[1], sys.argv[2]
with open(report_path, encoding="utf-8") as f:  # JSON is UTF-8, whatever the locale
    report = json.load(f)

problems = []


def need(obj, where, **fields):
    for name, kind in fields.items():
        if name not in obj:
            problems.append(f"{where}: missing '{name}'")
        elif not isinstance(obj[name], kind) or isinstance(obj[name], bool) != (kind is bool):
            problems.append(f"{where}: '{name}' is {obj[name]!r}, want {kind.__name__}")


number = (int, float)
need(report, "report", tool=str, library_version=str, command=str, date_utc=str, machine=dict,
     build=dict, shape=dict, seed=int, seconds_per_point=number, hugepages=bool, runs=list)
need(report.get("machine", {}), "machine", cpu=str, online_cpus=int, last_level_cache_bytes=number,
     memory_bytes=number, os=str)
need(report.get("build", {}), "build", compiler=str, build_type=str, cpu_kernel=str,
     library_has_cuda=bool, cuda_timing_compiled=bool)
need(report.get("shape", {}), "shape", preset=str, model=str, num_qo_heads=int, num_kv_heads=int,
     head_dim=int, rope_base=number, style=str, rotary_dim=int, rope_scaling=str, attention_scaling=number,
     qk_norm=bool, variant=str)
shape = report.get("shape", {})
# what ran, as the banner's "rope:" line says it (a preset's model name is no witness: qwen3-8b's
# says "(QK-norm)" under --qk-norm off too)
if (shape.get("qk_norm"), shape.get("variant")) != (False, "neox R=64/64, rope_base's table, attention scaling 1"):
    problems.append(f"shape: qk_norm {shape.get('qk_norm')!r}, variant {shape.get('variant')!r}")
if (shape.get("preset"), shape.get("num_qo_heads"), shape.get("num_kv_heads"), shape.get("head_dim")) != \
        ("tinyllama-1.1b", 32, 4, 64):
    problems.append(f"shape: {shape}, want tinyllama-1.1b 32/4/64")

runs = report.get("runs", [])
if [r.get("threads") for r in runs] != [1, 2]:
    problems.append(f"runs: threads {[r.get('threads') for r in runs]}, want [1, 2]")
for i, run in enumerate(runs):
    where = f"runs[{i}]"
    need(run, where, backend=str, device=str, kernel=str, dtype=str, index_dtype=str, threads=int,
         pool_size=int, max_position=int, input_sets=int, roofline=dict, points=list)
    need(run.get("roofline", {}), where + ".roofline", bytes_per_s=number, what=str)
    if not run.get("roofline", {}).get("bytes_per_s", 0) > 0:
        problems.append(f"{where}: roofline is not positive")
    if [p.get("tokens") for p in run.get("points", [])] != [1, 8]:
        problems.append(f"{where}: tokens {[p.get('tokens') for p in run.get('points', [])]}, want [1, 8]")
    for p in run.get("points", []):
        pw = f"{where}.points[T={p.get('tokens')}]"
        need(p, pw, tokens=int, input_sets=int, op_bytes=number, fused=dict, unfused=dict,
             fusion_speedup=number)
        # float32, Hq 32, Hk 4, D 64, int64 positions and slots: (2*32 + 5*4) * 64 * 4 + 16 per token.
        if p.get("op_bytes") != p.get("tokens", 0) * ((2 * 32 + 5 * 4) * 64 * 4 + 16):
            problems.append(f"{pw}: op_bytes {p.get('op_bytes')} does not match the formula")
        for variant in ("fused", "unfused"):
            m = p.get(variant, {})
            need(m, f"{pw}.{variant}", median_s=number, min_s=number, max_s=number, samples=int,
                 calls_per_sample=int, gb_per_s=number, roofline_fraction=number, verified=dict)
            if not 0 < m.get("min_s", 0) <= m.get("median_s", 0) <= m.get("max_s", 0):
                problems.append(f"{pw}.{variant}: times not ordered min <= median <= max: {m}")
            v = m.get("verified", {})
            need(v, f"{pw}.{variant}.verified", done=bool, checked=int, failures=int,
                 worst_error_over_bound=number, first_failure=str)
            if not (v.get("done") is True and v.get("failures") == 0 and v.get("checked", 0) > 0):
                problems.append(f"{pw}.{variant}: not verified clean: {v}")

svg = ET.parse(svg_path).getroot()
lines = svg.findall(".//{http://www.w3.org/2000/svg}polyline")
if len(lines) != 2 * 2 * len(runs):  # 2 panels x (fused, unfused) per run
    problems.append(f"svg: {len(lines)} polylines, want {4 * len(runs)}")

for p in problems:
    print("check_json:", p)
sys.exit(1 if problems else 0)
