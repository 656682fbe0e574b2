/*
 * args.c — the command line. Every mistake gets one line on stderr naming the option and the
 * value, and a non-zero exit: a benchmark that silently ran something else would mislead.
 */
#include "bench.h"

#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defaults per backend: the CPU figures of the project's core issue (2-core machine, pool
 * 262,144, positions < 8192) and the GPU ones of the CUDA issue (pool 2^20, positions < 131,072). */
static const int64_t cpu_tokens[] = {1, 16, 256, 4096, 16384};
static const int64_t cuda_tokens[] = {1, 64, 256, 1024, 4096, 16384, 65536};

static const char usage[] =
    "Usage: ropepool-bench [options]\n"
    "Times rp_rope_pool_fused on a model's attention shape over a sweep of token counts T, next to\n"
    "an unfused baseline (rotate, then scatter), against this machine's copy bandwidth measured in\n"
    "the same run, and verifies every result against the float64 reference.\n"
    "\n"
    "  --preset NAME       model shape (default llama3-8b); --list-presets shows them all\n"
    "  --shape HQ/HK/D     a custom shape instead of a preset, e.g. 32/8/128\n"
    "  --rope-base X       rope_theta (default: the preset's; 10000 for --shape)\n"
    "  --style neox|gptj   RoPE pair style (default: the preset's; neox for --shape)\n"
    "  --rotary-dim R      rotate the first R dims of each head, pass the rest (0 = head_dim;\n"
    "                      default: the preset's)\n"
    "  --rope-scaling none rope_base's own table and attention scaling 1 instead of the preset's\n"
    "                      llama3/yarn/longrope table (with --style neox --rotary-dim 0: the\n"
    "                      seed's variant of the same shape, to compare against)\n"
    "  --qk-norm on|off    per-head QK RMSNorm before RoPE (default: the preset's; qwen3-8b, gemma3-12b: on)\n"
    "  -T, --tokens LIST   token counts, comma-separated\n"
    "                      (default cpu 1,16,256,4096,16384; cuda 1,64,256,1024,4096,16384,65536)\n"
    "  --dtype LIST        f32, f16, bf16, comma-separated (default cpu f32, cuda bf16)\n"
    "  --backend NAME      cpu, cuda, or auto: cpu, then cuda when built with it and a GPU is\n"
    "                      present (default auto)\n"
    "  --threads LIST      CPU threads per call, comma-separated (default: one per online CPU)\n"
    "  --pool N            KV-pool slots (default cpu 262144, cuda 1048576)\n"
    "  --max-pos N         positions are drawn from [0, N) (default cpu 8192, cuda 131072)\n"
    "  --index i32|i64     dtype of positions and slots (default i64)\n"
    "  --kv-layout NAME    flat (two [P, Hk, D] pools), NHD (vLLM's [blocks, 2, block, Hk, D]\n"
    "                      FlashAttention cache) or HND (its packed (blocks, Hk, block, 2D) split)\n"
    "                      (default flat)\n"
    "  --block-size N      rows per block of a paged layout (default 16)\n"
    "  --kv-dtype NAME     auto (pools of the inputs' dtype), fp8_e4m3 or fp8_e5m2 (uint8 pools)\n"
    "                      (default auto)\n"
    "  --sets N|cold       input sets the timed calls rotate among; cold = enough to overflow the\n"
    "                      last-level cache twice (default cpu 1, cuda cold)\n"
    "  --seed N            seed of the random inputs (default 1)\n"
    "  --seconds S         timing budget per T and variant (default 0.25)\n"
    "  --no-unfused        skip the unfused baseline\n"
    "  --baseline seed     cpu: the second series is the seed's call (NeoX, whole head, rope_base's\n"
    "                      table, s = 1) on the same buffers instead of the unfused one, its samples\n"
    "                      interleaved with the variant's: the variant's cost side by side\n"
    "  --hugepages         back host buffers (the KV pools too) with transparent huge pages\n"
    "  --no-verify         skip the verification against the reference\n"
    "  --json FILE         write every figure, the machine and the build as JSON\n"
    "  --svg FILE          plot time per call and % of roofline against T\n"
    "  --list-presets      print the presets and exit\n"
    "  --list-backends     print which backends can run here and exit\n"
    "  -h, --help          print this and exit\n"
    "\n"
    "Exit status: 0 every result verified; 1 a run failed; 2 a bad argument, or --backend cuda\n"
    "without a usable GPU; 3 some result failed verification.\n";

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ropepool-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* A whole-string decimal integer in [lo, hi]. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    if (*s == '\0' || *s == ' ' || *s == '+')
        return 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

static int cmp_int64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A comma-separated list's items, in place in buf (at most `most`); an empty item ("1,,2", "1,")
 * is a mistake, not nothing: refused, as the whole list being empty is. */
static int split_list(const char *opt, const char *arg, char *buf, size_t size, char **items, int most,
                      int *count)
{
    if (strlen(arg) >= size)
        return fail("%s: list too long", opt);
    strcpy(buf, arg);
    *count = 0;
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        if (*item == '\0')
            return fail("%s: '%s' has an empty item", opt, arg);
        if (*count == most)
            return fail("%s: at most %d values", opt, most);
        items[(*count)++] = item;
    }
    return 0;
}

/* A comma-separated list of distinct integers in [lo, hi], sorted; "what" names an element in
 * the message. */
static int parse_list(const char *opt, const char *arg, int64_t lo, int64_t hi, const char *what,
                      int64_t *out, int *count)
{
    char buf[512], *items[BENCH_MAX_LIST];
    int n = 0;
    if (split_list(opt, arg, buf, sizeof buf, items, BENCH_MAX_LIST, &n))
        return -1;
    *count = 0;
    for (int i = 0; i < n; i++) {
        const char *item = items[i];
        if (!parse_int(item, lo, hi, &out[*count]))
            return fail("%s: '%s' is not %s (want an integer from %lld to %lld)", opt, item, what,
                        (long long)lo, (long long)hi);
        ++*count;
    }
    qsort(out, (size_t)*count, sizeof out[0], cmp_int64);
    for (int j = 1; j < *count; j++)
        if (out[j] == out[j - 1])
            return fail("%s: %lld is listed twice", opt, (long long)out[j]);
    return 0;
}

static int parse_dtype(const char *s, rp_dtype *out)
{
    static const struct { const char *name; rp_dtype dtype; } names[] = {
        {"f32", RP_F32}, {"float32", RP_F32}, {"f16", RP_F16}, {"float16", RP_F16},
        {"bf16", RP_BF16}, {"bfloat16", RP_BF16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].dtype;
            return 1;
        }
    return 0;
}

static int parse_dtypes(const char *arg, bench_options *o)
{
    char buf[128], *items[3];
    int n = 0;
    if (split_list("--dtype", arg, buf, sizeof buf, items, 3, &n))
        return -1;
    o->num_dtypes = 0;
    for (int i = 0; i < n; i++) {
        rp_dtype d;
        if (!parse_dtype(items[i], &d))
            return fail("--dtype: unknown dtype '%s' (known: f32, f16, bf16)", items[i]);
        for (int j = 0; j < o->num_dtypes; j++)
            if (o->dtypes[j] == d)
                return fail("--dtype: %s is listed twice", rp_dtype_name(d));
        o->dtypes[o->num_dtypes++] = d;
    }
    return 0;
}

static int parse_shape(const char *arg, bench_options *o)
{
    int64_t v[3];
    char buf[64], *parts[3] = {0};
    if (strlen(arg) >= sizeof buf)
        return fail("--shape: '%s' is not HQ/HK/D", arg);
    strcpy(buf, arg);
    parts[0] = buf;
    for (int i = 1; i < 3; i++) {
        char *slash = parts[i - 1] ? strchr(parts[i - 1], '/') : NULL;
        if (slash) {
            *slash = '\0';
            parts[i] = slash + 1;
        }
    }
    for (int i = 0; i < 3; i++)
        if (!parts[i] || !parse_int(parts[i], 1, i == 2 ? 1024 : 4096, &v[i]))
            return fail("--shape: '%s' is not HQ/HK/D (heads 1..4096, D even, 2..1024), e.g. 32/8/128", arg);
    if (v[2] % 2)
        return fail("--shape: head_dim %lld is odd; RoPE rotates pairs", (long long)v[2]);
    if (v[0] % v[1])
        return fail("--shape: %lld query heads are not a multiple of %lld kv heads", (long long)v[0],
                    (long long)v[1]);
    o->shape = (bench_shape){"custom", "custom shape", v[0], v[1], v[2], 10000.0, RP_ROPE_NEOX, 0,
                             BENCH_ROPE_DEFAULT, 0.0, 0.0, 0.0, 0.0, {0, 0, 0}, 0, 0, 0.0, 0.0, 0, 0, 0};
    return 0;
}

/* A preset's variant text into buf, or NULL when its table cannot be made (then it is not listed). */
static const char *preset_variant(const bench_shape *p, char *buf, size_t size)
{
    double scaling;
    double table[512];
    return bench_rope_table(p, table, &scaling) < 0 ? NULL : bench_variant_text(p, scaling, buf, size);
}

static void list_presets(void)
{
    int n;
    const bench_shape *p = bench_presets(&n);
    char variant[128];
    /* Columns as wide as their longest entry: fixed widths let the longest names and variants
     * push the columns after them out of line. */
    int name_width = (int)strlen("preset"), variant_width = (int)strlen("variant");
    for (int i = 0; i < n; i++)
        if (preset_variant(&p[i], variant, sizeof variant)) {
            if ((int)strlen(p[i].name) > name_width)
                name_width = (int)strlen(p[i].name);
            if ((int)strlen(variant) > variant_width)
                variant_width = (int)strlen(variant);
        }
    printf("%-*s %4s %4s %4s %10s  %-*s  %s\n", name_width, "preset", "Hq", "Hk", "D", "rope_base",
           variant_width, "variant", "model");
    for (int i = 0; i < n; i++)
        if (preset_variant(&p[i], variant, sizeof variant))
            printf("%-*s %4lld %4lld %4lld %10.0f  %-*s  %s\n", name_width, p[i].name, (long long)p[i].hq,
                   (long long)p[i].hk, (long long)p[i].d, p[i].rope_base, variant_width, variant, p[i].model);
}

static void list_backends(void)
{
    char why[256];
    printf("cpu: available, kernel %s, %d CPUs\n", rp_cpu_kernel_name(), bench_machine_info()->online_cpus);
    if (bench_cuda_available(why, sizeof why))
        printf("cuda: available\n");
    else
        printf("cuda: not available: %s\n", why);
}

static void record_command(int argc, char **argv, bench_options *o)
{
    size_t used = 0;
    o->command[0] = '\0';
    for (int i = 0; i < argc && used + 1 < sizeof o->command; i++) {
        int n = snprintf(o->command + used, sizeof o->command - used, "%s%s", i ? " " : "", argv[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int bench_parse_args(int argc, char **argv, bench_options *o)
{
    memset(o, 0, sizeof *o);
    o->shape = *bench_find_preset("llama3-8b");
    o->backends = BENCH_CPU | BENCH_CUDA;
    o->index_dtype = RP_I64;
    o->seed = 1;
    o->seconds = 0.25;
    o->unfused = 1;
    o->block_size = 16;
    o->verify = 1;
    record_command(argc, argv, o);
    double rope_base = 0;
    int have_preset = 0, have_shape = 0, style = -1, no_scaling = 0, qk_norm = -1;
    int64_t rotary_dim = -1;
    unsigned given = 0; /* bit j: valued[j] seen */

    for (int i = 1; i < argc; i++) {
        char opt[64];
        const char *arg = NULL, *eq = strchr(argv[i], '=');
        if (strncmp(argv[i], "--", 2) == 0 && eq && (size_t)(eq - argv[i]) < sizeof opt) {
            memcpy(opt, argv[i], (size_t)(eq - argv[i]));
            opt[eq - argv[i]] = '\0';
            arg = eq + 1;
        } else {
            snprintf(opt, sizeof opt, "%s", argv[i]);
        }
        if (strcmp(opt, "-T") == 0)
            strcpy(opt, "--tokens");

        /* Flags without a value. */
        if (arg && (!strcmp(opt, "--help") || !strcmp(opt, "--list-presets") || !strcmp(opt, "--list-backends")))
            return fail("%s takes no value", opt);
        if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
            fputs(usage, stdout);
            return 1;
        }
        if ((!strcmp(opt, "--list-presets") || !strcmp(opt, "--list-backends")) && argc != 2)
            return fail("%s takes no other options", opt);
        if (!strcmp(opt, "--list-presets")) {
            list_presets();
            return 1;
        }
        if (!strcmp(opt, "--list-backends")) {
            list_backends();
            return 1;
        }
        if (!strcmp(opt, "--no-unfused") || !strcmp(opt, "--no-verify") || !strcmp(opt, "--hugepages")) {
            if (arg)
                return fail("%s takes no value", opt);
            if (!strcmp(opt, "--no-unfused"))
                o->unfused = 0;
            else if (!strcmp(opt, "--no-verify"))
                o->verify = 0;
            else
                o->hugepages = 1;
            continue;
        }

        static const char *const valued[] = {"--preset", "--shape", "--rope-base", "--tokens",
                                             "--dtype", "--backend", "--threads", "--pool",
                                             "--max-pos", "--index", "--sets", "--seed",
                                             "--seconds", "--json", "--svg", "--style",
                                             "--rotary-dim", "--rope-scaling", "--qk-norm", "--baseline",
                                             "--kv-layout", "--block-size", "--kv-dtype"};
        int known = -1;
        for (size_t j = 0; j < sizeof valued / sizeof valued[0]; j++)
            if (strcmp(opt, valued[j]) == 0)
                known = (int)j;
        if (known < 0)
            return fail("unknown option '%s' (see --help)", argv[i]);
        if (given & (1u << known)) /* the last would win silently */
            return fail("%s is given twice: give it once", opt);
        given |= 1u << known;
        if (!arg) {
            if (i + 1 >= argc)
                return fail("%s needs a value (see --help)", opt);
            arg = argv[++i];
            /* "--json --no-verify" would write the report to a file named --no-verify and verify
             * anyway: an option where a value belongs is a missing value. */
            if (strncmp(arg, "--", 2) == 0 || !strcmp(arg, "-T") || !strcmp(arg, "-h"))
                return fail("%s needs a value, got the option '%s' (a value that starts with '--' is "
                            "given as %s=VALUE)", opt, arg, opt);
        }

        int64_t v, list[BENCH_MAX_LIST];
        int count;
        if (!strcmp(opt, "--preset")) {
            const bench_shape *p = bench_find_preset(arg);
            if (!p) {
                int n;
                const bench_shape *all = bench_presets(&n);
                char names[512] = "";
                for (int j = 0; j < n; j++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", j ? ", " : "", all[j].name);
                return fail("unknown preset '%s' (known: %s)", arg, names);
            }
            o->shape = *p;
            have_preset = 1;
        } else if (!strcmp(opt, "--shape")) {
            if (parse_shape(arg, o))
                return -1;
            have_shape = 1;
        } else if (!strcmp(opt, "--rope-base")) {
            char *end;
            rope_base = strtod(arg, &end);
            if (*arg == '\0' || *end != '\0' || !(rope_base >= DBL_MIN) || rope_base > 1e300)
                return fail("--rope-base: '%s' is not a number in [%g, 1e300] (the library refuses "
                            "a rope_base below float64's normal range)", arg, DBL_MIN);
        } else if (!strcmp(opt, "--style")) {
            if (strcmp(arg, "neox") && strcmp(arg, "gptj"))
                return fail("--style: unknown style '%s' (known: neox, gptj)", arg);
            style = strcmp(arg, "gptj") == 0 ? RP_ROPE_GPTJ : RP_ROPE_NEOX;
        } else if (!strcmp(opt, "--rotary-dim")) {
            if (!parse_int(arg, 0, 1024, &rotary_dim) || rotary_dim % 2)
                return fail("--rotary-dim: '%s' is not an even dim count from 0 to 1024", arg);
        } else if (!strcmp(opt, "--baseline")) {
            if (strcmp(arg, "seed") && strcmp(arg, "unfused"))
                return fail("--baseline: unknown baseline '%s' (known: unfused, seed)", arg);
            o->baseline_seed = strcmp(arg, "seed") == 0;
        } else if (!strcmp(opt, "--rope-scaling")) {
            if (strcmp(arg, "none"))
                return fail("--rope-scaling: '%s' is not 'none' (the presets carry their own scaling)", arg);
            no_scaling = 1;
        } else if (!strcmp(opt, "--qk-norm")) {
            if (strcmp(arg, "on") && strcmp(arg, "off"))
                return fail("--qk-norm: '%s' is not 'on' or 'off'", arg);
            qk_norm = strcmp(arg, "on") == 0;
        } else if (!strcmp(opt, "--tokens")) {
            if (parse_list(opt, arg, 1, BENCH_MAX_TOKENS, "a token count", o->tokens, &o->num_tokens))
                return -1;
        } else if (!strcmp(opt, "--dtype")) {
            if (parse_dtypes(arg, o))
                return -1;
        } else if (!strcmp(opt, "--backend")) {
            if (!strcmp(arg, "cpu"))
                o->backends = BENCH_CPU, o->cuda_required = 0;
            else if (!strcmp(arg, "cuda"))
                o->backends = BENCH_CUDA, o->cuda_required = 1;
            else if (!strcmp(arg, "auto"))
                o->backends = BENCH_CPU | BENCH_CUDA, o->cuda_required = 0;
            else
                return fail("--backend: unknown backend '%s' (known: cpu, cuda, auto)", arg);
        } else if (!strcmp(opt, "--threads")) {
            if (parse_list(opt, arg, 1, 1024, "a thread count", list, &count))
                return -1;
            o->num_threads = count;
            for (int j = 0; j < count; j++)
                o->threads[j] = (int)list[j];
        } else if (!strcmp(opt, "--pool")) {
            if (!parse_int(arg, 1, (int64_t)1 << 31, &o->pool_size))
                return fail("--pool: '%s' is not a slot count (want an integer from 1 to 2^31)", arg);
            o->pool_given = 1;
        } else if (!strcmp(opt, "--max-pos")) {
            if (!parse_int(arg, 1, (int64_t)1 << 31, &o->max_position))
                return fail("--max-pos: '%s' is not a position bound (want an integer from 1 to 2^31)", arg);
        } else if (!strcmp(opt, "--index")) {
            if (!strcmp(arg, "i32") || !strcmp(arg, "int32"))
                o->index_dtype = RP_I32;
            else if (!strcmp(arg, "i64") || !strcmp(arg, "int64"))
                o->index_dtype = RP_I64;
            else
                return fail("--index: unknown index dtype '%s' (known: i32, i64)", arg);
        } else if (!strcmp(opt, "--kv-layout")) {
            if (!strcmp(arg, "flat"))
                o->kv_layout = RP_KV_FLAT;
            else if (!strcmp(arg, "NHD"))
                o->kv_layout = RP_KV_NHD;
            else if (!strcmp(arg, "HND"))
                o->kv_layout = RP_KV_HND;
            else
                return fail("--kv-layout: unknown layout '%s' (known: flat, NHD, HND)", arg);
        } else if (!strcmp(opt, "--block-size")) {
            if (!parse_int(arg, 1, 1 << 20, &o->block_size))
                return fail("--block-size: '%s' is not a block size (want an integer from 1 to 2^20)", arg);
            o->block_size_given = 1;
        } else if (!strcmp(opt, "--kv-dtype")) {
            if (!strcmp(arg, "auto"))
                o->kv_dtype = RP_DTYPE_UNSET;
            else if (!strcmp(arg, "fp8_e4m3") || !strcmp(arg, "fp8"))
                o->kv_dtype = RP_F8_E4M3;
            else if (!strcmp(arg, "fp8_e5m2"))
                o->kv_dtype = RP_F8_E5M2;
            else
                return fail("--kv-dtype: unknown pool format '%s' (known: auto, fp8_e4m3, fp8_e5m2)", arg);
        } else if (!strcmp(opt, "--sets")) {
            if (!strcmp(arg, "cold"))
                o->sets = BENCH_SETS_COLD;
            else if (parse_int(arg, 1, BENCH_MAX_SETS, &v))
                o->sets = v;
            else
                return fail("--sets: '%s' is neither 'cold' nor an integer from 1 to %d", arg, BENCH_MAX_SETS);
        } else if (!strcmp(opt, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long seed = strtoull(arg, &end, 10);
            if (*arg == '\0' || *arg == '-' || *end != '\0' || errno)
                return fail("--seed: '%s' is not a non-negative integer", arg);
            o->seed = seed;
        } else if (!strcmp(opt, "--seconds")) {
            char *end;
            o->seconds = strtod(arg, &end);
            if (*arg == '\0' || *end != '\0' || !(o->seconds > 0 && o->seconds <= 600))
                return fail("--seconds: '%s' is not a time in (0, 600] seconds", arg);
        } else if (!strcmp(opt, "--json")) {
            o->json_path = arg;
        } else {
            o->svg_path = arg;
        }
    }
    if (have_preset && have_shape)
        return fail("--preset and --shape both name a shape; give one");
    if (o->kv_layout == RP_KV_FLAT && o->block_size_given)
        return fail("--block-size %lld needs a paged --kv-layout (NHD or HND): the flat pools have no blocks",
                    (long long)o->block_size);
    if (o->baseline_seed && !o->unfused)
        return fail("--baseline seed is the second series, which --no-unfused turns off: give one");
    if (o->kv_layout != RP_KV_FLAT && o->pool_given && o->pool_size % o->block_size != 0)
        return fail("--pool %lld is not a whole number of --block-size %lld blocks", (long long)o->pool_size,
                    (long long)o->block_size);
    if (rope_base > 0)
        o->shape.rope_base = rope_base;
    if (style >= 0)
        o->shape.style = style;
    if (rotary_dim >= 0)
        o->shape.rotary_dim = rotary_dim;
    if (no_scaling)
        o->shape.scaling = BENCH_ROPE_DEFAULT;
    if (qk_norm >= 0)
        o->shape.qk_norm = qk_norm;
    if (o->shape.rotary_dim > o->shape.d)
        return fail("--rotary-dim %lld exceeds head_dim %lld", (long long)o->shape.rotary_dim,
                    (long long)o->shape.d);
    const int64_t section = (int64_t)o->shape.mrope_section[0] + o->shape.mrope_section[1] + o->shape.mrope_section[2];
    const int64_t rotary = o->shape.rotary_dim ? o->shape.rotary_dim : o->shape.d;
    if (section && section != rotary / 2) /* the preset's mRoPE section spans its own rotary_dim */
        return fail("--rotary-dim %lld: preset %s's mrope_section [%d, %d, %d] sums to %lld, which needs "
                    "rotary_dim %lld", (long long)rotary, o->shape.name, o->shape.mrope_section[0],
                    o->shape.mrope_section[1], o->shape.mrope_section[2], (long long)section, (long long)(2 * section));
    if ((o->has_table = bench_rope_table(&o->shape, o->inv_freq, &o->attention_scaling)) < 0)
        return -1;
    if (o->index_dtype == RP_I32 && o->max_position - 1 > INT32_MAX) /* positions < max_position */
        return fail("--max-pos %lld does not fit --index i32", (long long)o->max_position);
    return 0;
}

int bench_options_for(const bench_options *o, int backend, bench_options *out)
{
    *out = *o;
    const int cpu = backend == BENCH_CPU;
    if (!out->num_tokens) {
        const int64_t *t = cpu ? cpu_tokens : cuda_tokens;
        out->num_tokens = cpu ? (int)(sizeof cpu_tokens / sizeof *t) : (int)(sizeof cuda_tokens / sizeof *t);
        memcpy(out->tokens, t, (size_t)out->num_tokens * sizeof *t);
    }
    if (!out->num_dtypes) {
        out->num_dtypes = 1;
        out->dtypes[0] = cpu ? RP_F32 : RP_BF16;
    }
    if (!out->num_threads) {
        out->num_threads = 1;
        out->threads[0] = bench_machine_info()->online_cpus;
    }
    if (!out->pool_size)
        out->pool_size = cpu ? 262144 : 1 << 20;
    if (!out->max_position)
        out->max_position = cpu ? 8192 : 131072;
    if (!out->sets)
        out->sets = cpu ? 1 : BENCH_SETS_COLD;
    const char *name = cpu ? "cpu" : "cuda";
    if (!cpu && out->baseline_seed && out->unfused) {
        fprintf(stderr, "ropepool-bench: cuda: --baseline seed is implemented for the cpu backend only\n");
        return -1;
    }
    if (out->shape.latent && out->kv_layout == RP_KV_HND) {
        fprintf(stderr, "ropepool-bench: %s: the latent cache row [c_kv | k_pe] is flat or NHD, not HND\n",
                out->shape.name);
        return -1;
    }
    if ((out->shape.v_head_dim || out->shape.q_head_dim) && out->baseline_seed) {
        fprintf(stderr, "ropepool-bench: %s: --baseline seed needs q and v heads of head_dim\n", out->shape.name);
        return -1;
    }
    if (out->kv_layout != RP_KV_FLAT && out->block_size > out->pool_size) {
        fprintf(stderr, "ropepool-bench: --block-size %lld is larger than the pool's %lld slots: lower "
                        "--block-size or raise --pool\n", (long long)out->block_size, (long long)out->pool_size);
        return -1;
    }
    if (out->kv_layout != RP_KV_FLAT) /* whole blocks: the last one is full */
        out->pool_size -= out->pool_size % out->block_size;
    else
        out->block_size = 1;
    const int64_t largest = out->tokens[out->num_tokens - 1];
    if (largest > out->pool_size) {
        fprintf(stderr, "ropepool-bench: %s: T = %lld exceeds the pool's %lld slots (each token "
                        "writes its own slot); raise --pool or lower --tokens\n",
                name, (long long)largest, (long long)out->pool_size);
        return -1;
    }
    if (out->sets > 0 && out->sets * largest > out->pool_size) {
        fprintf(stderr, "ropepool-bench: %s: --sets %lld x T = %lld needs %lld distinct slots, more "
                        "than the pool's %lld; raise --pool or lower --sets\n",
                name, (long long)out->sets, (long long)largest, (long long)(out->sets * largest),
                (long long)out->pool_size);
        return -1;
    }
    if (out->index_dtype == RP_I32 && out->pool_size - 1 > INT32_MAX) { /* slots < pool_size */
        fprintf(stderr, "ropepool-bench: --pool %lld does not fit --index i32\n", (long long)out->pool_size);
        return -1;
    }
    return 0;
}
