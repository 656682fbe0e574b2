#!/usr/bin/env bash
# test_cli.sh BENCH [PYTHON] — the benchmark CLI's contract:
#   - every argument error gives exactly one line on stderr, naming the problem, and a non-zero exit;
#   - --backend cuda without a usable GPU is such an error (with one, a short CUDA sweep must pass);
#   - a short CPU sweep runs, verifies every result, writes nothing to stderr (not a terminal), and
#     its --json holds the fields the README documents (check_json.py) and its --svg is well formed.
set -u
bench=$1
python=${2:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL $1"
    failures=$((failures + 1))
}

# expect_error NAME EXPECTED_TEXT ARGS... : non-zero exit, one stderr line containing the text.
expect_error() {
    local name=$1 want=$2
    shift 2
    "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq 0 ]; then
        fail "$name: exit status 0 for: $*"
    elif [ "$lines" -ne 1 ]; then
        fail "$name: $lines stderr lines, want 1: $(cat "$tmp/err")"
    elif ! grep -qF -- "$want" "$tmp/err"; then
        fail "$name: stderr lacks '$want': $(cat "$tmp/err")"
    else
        echo "ok   $name ($(cat "$tmp/err"))"
    fi
}

expect_error unknown_preset "unknown preset 'gpt5'" --preset gpt5
expect_error tokens_zero "'0' is not a token count" -T 0
expect_error tokens_negative "'-4' is not a token count" --tokens=-4
expect_error tokens_not_a_number "'many' is not a token count" -T 1,many
expect_error tokens_too_large "'99999999' is not a token count" -T 99999999
expect_error tokens_listed_twice "16 is listed twice" -T 16,16
expect_error tokens_empty_item "'1,,2' has an empty item" -T 1,,2
expect_error dtype_trailing_comma "'f32,' has an empty item" --dtype f32,
expect_error dtype_listed_twice "float32 is listed twice" --dtype f32,float32
expect_error threads_listed_twice "1 is listed twice" --threads 1,1
expect_error mrope_section_past_rotary_dim "sums to 64, which needs rotary_dim 128" --preset qwen2.5-vl-7b --rotary-dim 64
expect_error tokens_past_the_pool "T = 5000 exceeds the pool's 4096 slots" --backend cpu --pool 4096 -T 5000
expect_error sets_past_the_pool "needs 8000 distinct slots" --backend cpu --pool 4096 -T 1000 --sets 8
expect_error unknown_option "unknown option '--fast'" --fast
expect_error missing_value "--tokens needs a value" --tokens
# The next option is no value: "--json --no-verify" wrote the report to a file named --no-verify
# and verified anyway (exit 0).
expect_error option_as_value "--json needs a value, got the option '--no-verify'" --json --no-verify -T 1 \
    --backend cpu --pool 64 --seconds 0.01
expect_error short_option_as_value "--svg needs a value, got the option '-T'" --svg -T 1
expect_error unknown_dtype "unknown dtype 'f8'" --dtype f8
expect_error unknown_backend "unknown backend 'tpu'" --backend tpu
expect_error zero_threads "'0' is not a thread count" --threads 0
expect_error odd_head_dim "head_dim 127 is odd" --shape 32/8/127
expect_error preset_and_shape "give one" --preset llama3-8b --shape 8/8/64
expect_error bad_seconds "is not a time" --seconds 0
expect_error unknown_style "unknown style 'rotate'" --style rotate
expect_error odd_rotary_dim "'33' is not an even dim count" --rotary-dim 33
expect_error rotary_dim_past_head_dim "--rotary-dim 130 exceeds head_dim 128" --rotary-dim 130
expect_error unknown_scaling "'yarn' is not 'none'" --rope-scaling yarn
expect_error json_not_writable "--json: cannot write" --json "$tmp/no/such/dir/r.json"
expect_error subnormal_rope_base "'1e-320' is not a number in" --rope-base 1e-320
# What would otherwise be ignored, or changed, without a word
expect_error shape_given_twice "--shape is given twice" --shape 4/2/32 --shape 8/2/32
expect_error block_size_of_flat_pools "--block-size 8 needs a paged --kv-layout" --kv-layout flat --block-size 8
expect_error pool_of_part_blocks "--pool 64 is not a whole number of --block-size 7 blocks" --kv-layout NHD \
    --block-size 7 --pool 64
expect_error seed_baseline_turned_off "--baseline seed is the second series" --baseline seed --no-unfused
# --list-presets is a table: every row's Hq and model columns start where the header's do (fixed
# widths let deepseek-v3-mla-tp8's name and the mRoPE variants push them out of line).
"$bench" --list-presets | awk '
    NR == 1 { hq = index($0, "  Hq "); model = index($0, "model"); next }
    { name_end = index($0, " ");
      if (substr($0, hq, 5) !~ /^ *[0-9]+ $/ || substr($0, model - 2, 2) != "  " || substr($0, model, 1) == " ") bad = bad " " substr($0, 1, name_end - 1) }
    END { if (bad != "") { print "misaligned:" bad; exit 1 } }' >"$tmp/presets" 2>&1 &&
    echo "ok   list_presets_columns_line_up" || fail "list_presets_columns_line_up: $(cat "$tmp/presets")"
expect_error list_presets_with_options "--list-presets takes no other options" --list-presets -T abc
expect_error help_with_a_value "--help takes no value" --help=1
expect_error list_presets_with_a_value "--list-presets takes no value" --list-presets=all
expect_error json_and_svg_one_file "--json and --svg name one file" --json "$tmp/one" --svg "$tmp/one"
# A run refused after the report paths were probed leaves no empty report behind.
expect_error refused_run_leaves_no_report "exceeds the pool's 10 slots" --backend cpu --pool 10 -T 100 \
    --json "$tmp/refused.json" --svg "$tmp/refused.svg"
if [ -e "$tmp/refused.json" ] || [ -e "$tmp/refused.svg" ]; then
    fail "refused_run_leaves_no_report: $(ls "$tmp"/refused.*) left behind"
fi

# CUDA: without a usable GPU, asking for it by name is an error; with one, a short sweep passes.
if "$bench" --list-backends | grep -q '^cuda: available'; then
    if "$bench" --backend cuda --preset tinyllama-1.1b -T 1,64 --pool 65536 --seconds 0.02 >"$tmp/out" 2>"$tmp/err"; then
        echo "ok   cuda_short_sweep"
    else
        fail "cuda_short_sweep: $(cat "$tmp/err")"
    fi
else
    expect_error cuda_unavailable "--backend cuda: " --backend cuda
fi

# A short CPU sweep: verified, quiet on stderr, JSON and SVG written.
if "$bench" --backend cpu --preset tinyllama-1.1b -T 1,8 --pool 4096 --threads 1,2 --seconds 0.02 \
        --json "$tmp/r"$'\xff'".json" --svg "$tmp/r.svg" >"$tmp/out" 2>"$tmp/err"; then
    if [ -s "$tmp/err" ]; then
        fail "short_sweep: wrote to stderr: $(cat "$tmp/err")"
    elif [ "$(grep -cE '^ +(1|8) +1 .* ok [0-9.]+ / ok [0-9.]+$' "$tmp/out")" -ne 4 ]; then
        fail "short_sweep: want 4 verified rows (T 1 and 8, 1 and 2 threads):"
        cat "$tmp/out"
    else
        echo "ok   short_sweep"
    fi
    # the path's byte 0xff is no UTF-8: the report's command line must still be valid JSON
    if "$python" "$here/check_json.py" "$tmp/r"$'\xff'".json" "$tmp/r.svg"; then
        echo "ok   json_fields_and_svg"
    else
        fail "json_fields_and_svg"
    fi
else
    fail "short_sweep: exit status $?: $(cat "$tmp/err")"
fi

# RoPE variant presets run verified against the float64 reference (the banner names the variant):
# GPT-J pairs on a partial head, and a caller table with attention scaling, each next to the seed call. (Each run measures the
# memory roofline, ~25 s here, so not all six; the kernels' variants are test_numerics' job.)
for preset in gpt-j-6b qwen2.5-7b-yarn; do
    if "$bench" --backend cpu --preset "$preset" -T 3 --pool 4096 --threads 1 --seconds 0.01 --dtype bf16 --baseline seed \
            --svg "$tmp/seed.svg" --json "$tmp/seed.json" >"$tmp/out" 2>"$tmp/err" && grep -q '^rope: ' "$tmp/out" &&
            grep -qE '^ +3 +1 .* ok [0-9.]+ / ok [0-9.]+$' "$tmp/out"; then
        echo "ok   variant_sweep $preset"
    else
        fail "variant_sweep $preset: $(cat "$tmp/out" "$tmp/err")"
    fi
    # The plot's dashed series is the seed call, as the table's header says (its legend and
    # tooltips called it the unfused baseline).
    if grep -q '>seed call: NeoX, whole head' "$tmp/seed.svg" && grep -q 'seed call, T = 3' "$tmp/seed.svg" &&
            ! grep -q 'unfused' "$tmp/seed.svg"; then
        echo "ok   svg_names_the_seed_baseline $preset"
    else
        fail "svg_names_the_seed_baseline $preset: $(grep -o '<text[^<]*dash[^<]*\|unfused[^<]*' "$tmp/seed.svg")"
    fi
    # The JSON's ratio is the table's var/seed (it wrote seed/variant as fusion_speedup: the inverse,
    # under a name that said fusion)
    if "$python" -c '
import json, sys
for run in json.load(open(sys.argv[1]))["runs"]:
    for p in run["points"]:
        want = p["fused"]["median_s"] / p["unfused"]["median_s"]
        assert "fusion_speedup" not in p and abs(p["variant_over_seed"] - want) <= 1e-6 * want, p
' "$tmp/seed.json" 2>"$tmp/err"; then
        echo "ok   json_ratio_is_variant_over_seed $preset"
    else
        fail "json_ratio_is_variant_over_seed $preset: $(tail -1 "$tmp/err")"
    fi
done

# The seed baseline beside fp8 pools: the seed's call is fused, so its k_pool holds the fp8 of the
# float64 rotation and is verified as such (verified as the unfused scatter's fp8 of the rounded
# k_rot, it "failed" at fp8 midpoints: 9 of 2816 values here). The same run: int32 positions below
# --max-pos 2^31 all fit (that bound was refused as "does not fit --index i32").
if "$bench" --backend cpu --preset tinyllama-1.1b -T 1 --pool 4096 --threads 1 --seconds 0.01 --dtype bf16 \
        --kv-dtype fp8_e4m3 --baseline seed --index i32 --max-pos 2147483648 >"$tmp/out" 2>"$tmp/err" &&
        grep -q 'positions < 2147483648, int32 indices' "$tmp/out" &&
        grep -qE '^ +1 +1 .* ok [0-9.]+ / ok [0-9.]+$' "$tmp/out"; then
    echo "ok   seed_baseline_fp8_pools"
else
    fail "seed_baseline_fp8_pools: $(cat "$tmp/out" "$tmp/err")"
fi

# DeepSeek's MLA: q_pe inside q [T, 16, 192], the latent row [c_kv | k_pe] in a paged fp8 cache,
# verified (c_kv's codes and the rotated k_pe against the float64 reference) next to the unfused
# baseline; the latent row has no HND form.
if "$bench" --backend cpu --preset deepseek-v3-mla-tp8 -T 3 --pool 4096 --threads 1 --seconds 0.01 --dtype bf16 \
        --kv-layout NHD --block-size 64 --kv-dtype fp8_e4m3 >"$tmp/out" 2>"$tmp/err" &&
        grep -q 'MLA: q_pe of 192, v 512, one latent row' "$tmp/out" &&
        grep -qE '^ +3 +1 .* ok [0-9.]+ / ok [0-9.]+$' "$tmp/out"; then
    echo "ok   mla_latent_sweep"
else
    fail "mla_latent_sweep: $(cat "$tmp/out" "$tmp/err")"
fi
expect_error mla_hnd "the latent cache row [c_kv | k_pe] is flat or NHD, not HND" --preset deepseek-v3-mla \
    --kv-layout HND --backend cpu

# Huge-page-backed buffers: same results, and the banner says so.
if "$bench" --backend cpu --preset tinyllama-1.1b -T 4 --pool 4096 --threads 1 --seconds 0.02 --hugepages \
        --no-unfused --svg "$tmp/fused.svg" >"$tmp/out" 2>"$tmp/err" && grep -q "transparent huge pages" "$tmp/out" &&
        grep -qE '^ +4 +1 .* ok [0-9.]+$' "$tmp/out"; then
    echo "ok   hugepages_sweep"
else
    fail "hugepages_sweep: $(cat "$tmp/out" "$tmp/err")"
fi
# --no-unfused: the plot's legend has no dashed baseline that nothing is drawn for
if grep -q 'stroke-dasharray=.6 4' "$tmp/fused.svg" || grep -q 'unfused' "$tmp/fused.svg"; then
    fail "svg_without_a_baseline_has_no_baseline_legend"
else
    echo "ok   svg_without_a_baseline_has_no_baseline_legend"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_cli: $failures failure(s)"
    exit 1
fi
echo "test_cli: all passed"
