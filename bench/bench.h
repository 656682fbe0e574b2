/*
 * bench.h — what the parts of ropepool-bench share: the options, a model's shape, the host
 * inputs, the results of a sweep, and the functions each file provides.
 *
 * Roles: args.c (command line), presets.c (model shapes), inputs.c (seeded inputs, call
 * arguments, verification), sweep.c (the per-T loop every backend shares), bench_cpu.c and
 * bench_cuda.cu (how a backend allocates, times and reads back), report.c (the table and the
 * progress line), machine.c (what ran where), json.c and svg.c (the files), ropepool_bench.c
 * (main).
 */
#ifndef RP_BENCH_H
#define RP_BENCH_H

#include "ropepool.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    BENCH_MAX_LIST = 32,        /* entries of --tokens / --threads */
    BENCH_MAX_RUNS = 64,        /* backend x dtype x threads combinations in one invocation */
    BENCH_MAX_TOKENS = 1 << 24, /* largest T accepted */
    BENCH_MAX_SETS = 8192,      /* input sets one timed sequence may rotate among */
    BENCH_SETS_COLD = -1        /* --sets cold: enough sets to overflow the last-level cache */
};

/* ---- shapes ------------------------------------------------------------------------------------ */

/* How a preset's frequencies are made (transformers' rope types). */
enum bench_rope_scaling {
    BENCH_ROPE_DEFAULT = 0, /* rope_base^(-2j/R): the library's own table, attention scaling 1 */
    BENCH_ROPE_LLAMA3 = 1,  /* Llama 3.1: low-frequency division by factor, smooth in between */
    BENCH_ROPE_YARN = 2,    /* YaRN: ramp between interpolation and extrapolation, 0.1 ln(factor) + 1 */
    BENCH_ROPE_LONGROPE = 3 /* LongRoPE (Phi-3): per-frequency factors, sqrt(1 + ln f / ln L0) */
};

/* One attention layer's shape; for models normally run tensor-parallel, one GPU's shard. */
typedef struct bench_shape {
    const char *name;  /* preset name on the command line, e.g. "llama3-8b" */
    const char *model; /* what it is, e.g. "Llama-3-8B" */
    int64_t hq, hk, d;
    double rope_base;
    /* The RoPE variant (all zero: the seed's NeoX over the whole head, rope_base's table). */
    int32_t style;       /* rp_rope_style */
    int64_t rotary_dim;  /* R; 0 = d */
    int scaling;         /* enum bench_rope_scaling */
    double factor;       /* the scaling factor */
    double original_max; /* original_max_position_embeddings */
    double low, high;    /* llama3: low/high_freq_factor; yarn: beta_slow/beta_fast */
    int32_t mrope_section[3]; /* mRoPE (Qwen-VL): [t, h, w]; all zero: none */
    int32_t mrope_interleaved; /* Qwen3-VL's rule */
    int qk_norm;         /* per-head QK RMSNorm before RoPE (Qwen3, Gemma 3): q_norm_weight and
                            k_norm_weight in the inputs' dtype, norm_eps 1e-6 */
    double mscale, mscale_all_dim; /* yarn: DeepSeek's (0 = absent) */
    /* DeepSeek's MLA (0 = d): q is [T, Hq, q_head_dim] and its last d dims (q_pe) rotate; v is
     * [T, Hk, v_head_dim]; with latent, K and V share one cache row per slot, [v | k] per head
     * ([c_kv | k_pe]): k_pool and v_pool are its two column ranges. */
    int64_t q_head_dim, v_head_dim;
    int latent;
} bench_shape;

/* "neox R=128/128, rope_base's table" or "gptj R=64/256, llama3 table, s=1.19" */
const char *bench_variant_text(const bench_shape *s, double attention_scaling, char *buf, size_t size);
/* The shape's frequencies into inv_freq[R/2] and its attention scaling: transformers' float32
 * table (rp_hf_rope_frequencies). Returns 1, 0 for BENCH_ROPE_DEFAULT (no table: the library
 * uses rope_base's), or -1 after printing why to stderr. */
int bench_rope_table(const bench_shape *s, double *inv_freq, double *attention_scaling);

/* The preset named `name`, or NULL. */
const bench_shape *bench_find_preset(const char *name);
/* All presets; *count receives their number. */
const bench_shape *bench_presets(int *count);

/* ---- options ----------------------------------------------------------------------------------- */

enum bench_backend { BENCH_CPU = 1, BENCH_CUDA = 2 };

typedef struct bench_options {
    bench_shape shape;
    int backends;        /* BENCH_CPU | BENCH_CUDA */
    int cuda_required;   /* --backend cuda: no usable GPU is an error, not a skip */
    int num_tokens;      /* 0: the backend's default sweep */
    int64_t tokens[BENCH_MAX_LIST];
    int num_dtypes;      /* 0: the backend's default dtype */
    rp_dtype dtypes[3];
    int num_threads;     /* 0: one per online CPU */
    int threads[BENCH_MAX_LIST];
    int64_t pool_size;   /* 0: the backend's default */
    int64_t max_position; /* positions are drawn from [0, max_position); 0: backend default */
    rp_dtype index_dtype; /* of positions and slots */
    int64_t sets;        /* > 0, BENCH_SETS_COLD, or 0: the backend's default */
    uint64_t seed;
    double seconds;      /* timing budget per measured (T, variant) */
    int unfused;         /* time the rotate-then-scatter baseline too */
    int baseline_seed;   /* CPU: the baseline is instead the seed's call (NeoX, R = D, rope_base's
                            table, s = 1) on the same buffers: the variant's cost, side by side */
    int verify;
    int hugepages;       /* back host buffers with transparent huge pages (madvise) */
    int32_t kv_layout;   /* rp_kv_layout of the pools (--kv-layout) */
    int64_t block_size;  /* paged layouts: rows per block (--block-size) */
    int block_size_given, pool_given; /* --block-size, --pool on the command line (checked against the layout) */
    rp_dtype kv_dtype;   /* pool format: 0 = the inputs' dtype, or RP_F8_E4M3 / RP_F8_E5M2 */
    const char *json_path, *svg_path;
    char command[1024];  /* the command line, for the JSON */
    /* The shape's RoPE table (bench_rope_table), filled once the options are parsed. */
    int has_table;
    double inv_freq[512];
    double attention_scaling;
} bench_options;

/* Parses argv into *o. Returns 0 to run, 1 when it printed help or a list and the program should
 * exit 0, and -1 after printing one line "ropepool-bench: ..." to stderr for a bad argument. */
int bench_parse_args(int argc, char **argv, bench_options *o);

/* *out = o with every "backend default" filled in for `backend`, checked against the rest
 * (every T must fit the pool). Returns 0, or -1 after printing one line to stderr. */
int bench_options_for(const bench_options *o, int backend, bench_options *out);

/* ---- inputs, call arguments, verification ------------------------------------------------------ */

/* Sizes and dtypes of one sweep's calls. The pools are allocated as vLLM does: flat, two
 * [pool_size, Hk, D] arrays; NHD, one [num_blocks, 2, block_size, Hk, D] allocation (K and V
 * interleaved per block, FlashAttention's cache); HND, the packed (num_blocks, Hk, block_size,
 * 2 * D) split on its last dimension. fp8 pools are uint8 arrays with pool_dtype. */
typedef struct bench_layout {
    int64_t hq, hk, d, pool_size;
    double rope_base;
    rp_dtype dtype, index_dtype;
    /* The RoPE variant of every call (bench_layout_set_variant; all zero: the seed's). */
    int32_t style;
    int64_t rotary_dim;
    const double *inv_freq;
    double attention_scaling;
    int32_t kv_layout;   /* rp_kv_layout; 0 (flat) when zero-initialised */
    int64_t block_size;  /* paged: rows per block (pool_size is a multiple of it) */
    rp_dtype kv_dtype;   /* 0: pools of dtype; RP_F8_E4M3 | RP_F8_E5M2: fp8 pools */
    int32_t mrope_section[3];  /* mRoPE: the calls' section (all zero: none) and rule */
    int32_t mrope_interleaved;
    int64_t positions_per_token; /* 3 (rows t, h, w, token-major: [T, 3] memory read as [3, T]
                                    with strides {1, 3}) for mRoPE inputs; 0 or 1: one */
    /* QK-norm (bench_layout_set_variant): the q and k weights, [2][D] of dtype, on the host, and
     * their copy on the device that CUDA calls read (the CUDA bench sets it); NULL: no norm. */
    const void *norm_weights, *norm_weights_dev;
    /* MLA (bench_shape): q's and v's head widths (0 = d) and the shared cache row. */
    int64_t dq, dv;
    int latent;
} bench_layout;

static inline int64_t bench_dq(const bench_layout *L)
{
    return L->dq ? L->dq : L->d;
}

static inline int64_t bench_dv(const bench_layout *L)
{
    return L->dv ? L->dv : L->d;
}

/* Gives L the variant of o's shape: style, rotary_dim, o's table and attention scaling, and with
 * QK-norm weights near 1 drawn from a fixed generator (allocated once per call, kept for the run). */
void bench_layout_set_variant(bench_layout *L, const bench_options *o);

/* The nine buffers of a call, on the host or the device, each holding `tokens` rows (pools:
 * pool_size rows). */
typedef struct bench_buffers {
    void *q, *k, *v, *positions, *slots, *q_rot, *k_rot, *k_pool, *v_pool;
} bench_buffers;

/* Host inputs for `tokens` tokens, drawn from the seed: q, k, v uniform in [-2, 2), positions
 * uniform in [0, max_position) (mRoPE: an image's, t constant and (h, w) walking a grid of
 * BENCH_IMAGE_COLUMNS columns from a base drawn so), slots distinct and uniform in [0, pool_size). A call of T tokens on
 * input set s uses tokens [s*T, (s+1)*T), so any prefix names distinct slots. */
enum { BENCH_IMAGE_COLUMNS = 32 }; /* patches per row of an mRoPE benchmark's image grid */

typedef struct bench_inputs {
    int64_t tokens;
    void *q, *k, *v, *positions, *slots;
} bench_inputs;

int bench_inputs_create(bench_inputs *in, const bench_layout *L, int64_t tokens,
                        int64_t max_position, uint64_t seed, char *msg, size_t msg_size);
void bench_inputs_free(bench_inputs *in);

/* 64-byte aligned host memory (free() releases it), or NULL. */
void *bench_alloc(size_t bytes);
/* From now on, bench_alloc asks for transparent huge pages (Linux madvise; elsewhere a no-op). */
void bench_alloc_use_hugepages(int on);

/* Bytes of the [T, heads, D] rows and of one index array. */
size_t bench_rows_bytes(const bench_layout *L, int64_t tokens, int64_t heads);
size_t bench_index_bytes(const bench_layout *L, int64_t tokens);
/* Bytes of the positions of `tokens` tokens: one index each, or three for mRoPE. */
size_t bench_positions_bytes(const bench_layout *L, int64_t tokens);
/* Bytes of q's and v's input rows (their heads are dq and dv wide). */
size_t bench_q_bytes(const bench_layout *L, int64_t tokens);
size_t bench_v_bytes(const bench_layout *L, int64_t tokens);
/* Bytes of the data of one pool (which: 0 K, 1 V) in its storage format. */
size_t bench_pool_bytes(const bench_layout *L, int which);
/* Bytes of the pool allocations: which = 0 the one b->k_pool points to (flat: K's; paged or latent:
 * one allocation holding both), 1 V's own (flat only; else 0). */
size_t bench_pool_alloc_bytes(const bench_layout *L, int which);
/* The pool tensor (K when which = 0, V when 1) of buffers b, in L's layout and format: b->k_pool
 * is the allocation (flat: K's), b->v_pool V's array for flat pools. */
rp_tensor bench_pool_tensor(const bench_layout *L, const bench_buffers *b, int which);
/* Address of head h of pool row `slot` of that tensor. */
char *bench_pool_row(const bench_layout *L, const rp_tensor *pool, int64_t slot, int64_t h);

/* Bytes one call of T tokens must move, per token: (2 Hq + 3 Hk) D sizeof(dtype) (q, q_rot; k,
 * k_rot; v) + 2 Hk D sizeof(pool element) (k_pool, v_pool) + positions and slots. The unfused
 * baseline is charged the same bytes: it does the same work. */
double bench_op_bytes(const bench_layout *L, int64_t tokens);

/* The arguments of the call on tokens [first, first + T) of b, on `device`. */
rp_rope_pool_args bench_call_args(const bench_layout *L, const bench_buffers *b, int64_t first,
                                  int64_t T, rp_device device);

/* The arguments of the calls of T tokens on input sets 0 .. sets-1 (set s: tokens [s*T, (s+1)*T)),
 * launched on `stream` for CUDA. malloc'd; NULL when out of memory. */
rp_rope_pool_args *bench_set_args(const bench_layout *L, const bench_buffers *b, int64_t T,
                                  int64_t sets, rp_device device, void *stream);

/* How a result compared with the float64 reference (rp_ref_verify). */
typedef struct bench_check {
    int done;
    int64_t checked, failures;
    double worst_ratio; /* max |error| / bound over elements not correctly rounded */
    char first_failure[256];
} bench_check;

/* Checks the outputs of tokens [0, tokens) of host buffers b (inputs included) against the
 * reference. Returns 0, or -1 with msg set when b does not even form a valid call. */
int bench_verify(const bench_layout *L, const bench_buffers *b, int64_t tokens, int fused, bench_check *c,
                 char *msg, size_t msg_size);

/* ---- timing ------------------------------------------------------------------------------------ */

typedef struct bench_timing {
    double median_s, min_s, max_s; /* per call */
    int samples;                   /* timed batches */
    int64_t calls_per_sample;
} bench_timing;

double bench_now(void); /* seconds, monotonic */
/* n calls on ctx, rotating over args[0 .. sets) from *next (updated): the fused call, or the
 * unfused baseline (rp_rope_pool_run with RP_PARTS_ROTATE, then RP_PARTS_SCATTER). Returns 0, or
 * -1 with msg naming the library's error. */
int bench_calls(rp_context *ctx, int fused, const rp_rope_pool_args *args, int64_t sets, int64_t n,
                int64_t *next, char *msg, size_t msg_size);
/* Sorts per_call[0 .. n) and summarises it. */
void bench_summarize(double *per_call, int n, int64_t calls_per_sample, bench_timing *t);

/* ---- results ----------------------------------------------------------------------------------- */

typedef struct bench_measure {
    bench_timing time;
    bench_check check;
} bench_measure;

typedef struct bench_point {
    int64_t tokens, sets;
    double op_bytes;
    bench_measure fused, unfused;
} bench_point;

typedef struct bench_run {
    int backend;        /* BENCH_CPU | BENCH_CUDA */
    char device[320];   /* CPU model or GPU name */
    char kernel[32];    /* CPU kernel level, or "cuda" */
    bench_layout layout;
    int threads;        /* CPU: most threads a call may use */
    int64_t max_position;
    int64_t sets_option;
    double roofline_bytes_per_s;
    char roofline_what[160];
    int unfused;
    int baseline_seed;  /* the second series is the seed's call (bench_options.baseline_seed) */
    int num_points;
    bench_point points[BENCH_MAX_LIST];
} bench_run;

typedef struct bench_report {
    const bench_options *options;
    int num_runs;
    bench_run runs[BENCH_MAX_RUNS];
} bench_report;

/* ---- the per-T loop backends share ------------------------------------------------------------- */

/* What a backend does for the sweep; every function returns 0 or -1 with msg set. */
typedef struct bench_backend_ops {
    void *self;
    /* Overwrites the outputs of tokens [0, tokens) — q_rot, k_rot and the pool rows their slots
     * name — with NaN bytes, so that the verification after a run proves that run wrote them. */
    int (*poison)(void *self, int64_t tokens, char *msg, size_t msg_size);
    /* One call of T tokens on each input set 0 .. sets-1 (fused: one call; otherwise rotate,
     * then scatter). */
    int (*run_once)(void *self, int64_t T, int64_t sets, int fused, char *msg, size_t msg_size);
    /* Verifies the outputs of tokens [0, tokens) of the fused call or (fused = 0) the baseline. */
    int (*verify)(void *self, int64_t tokens, int fused, bench_check *c, char *msg, size_t msg_size);
    /* Times calls of T tokens that rotate among the input sets: the fused call into out[0] and,
     * when variants == 2, the unfused baseline into out[1], their samples interleaved so that
     * both see the same machine (a noisy neighbour slows both, not one). */
    int (*time)(void *self, int64_t T, int64_t sets, int variants, double seconds,
                bench_timing out[2], char *msg, size_t msg_size);
} bench_backend_ops;

/* Input sets for calls of T tokens: o->sets, or for BENCH_SETS_COLD enough sets that one pass
 * over them moves at least twice cache_bytes; never more than the pool has distinct slots for. */
int64_t bench_sets_for(const bench_options *o, const bench_layout *L, int64_t T, double cache_bytes);
/* Tokens a backend must hold inputs for: the most any T of the sweep needs. */
int64_t bench_arena_tokens(const bench_options *o, const bench_layout *L, double cache_bytes);

/* Runs the sweep of o->tokens on a backend, printing each row as it completes. Returns 0, or -1
 * with msg set. Verification failures are recorded in run, not returned. */
int bench_sweep(const bench_options *o, const bench_backend_ops *ops, double cache_bytes,
                bench_run *run, char *msg, size_t msg_size);

/* ---- backends ---------------------------------------------------------------------------------- */

/* CPU: the best memcpy bandwidth (read + write bytes over time) with 1 thread and with each
 * thread count of o->threads, buffers well past the last-level cache, pages touched first;
 * `what` receives each count's figure. */
int bench_cpu_roofline(const bench_options *o, double *bytes_per_s, char *what, size_t what_size,
                       char *msg, size_t msg_size);
/* CPU: one run per entry of o->threads for dtype; appends them to rep. */
int bench_cpu_runs(const bench_options *o, rp_dtype dtype, double roofline, const char *roofline_what,
                   bench_report *rep, char *msg, size_t msg_size);

/* CUDA: 1 if this binary can run on a GPU now; otherwise 0 and msg says why in one line. */
int bench_cuda_available(char *msg, size_t msg_size);
/* CUDA: one run for dtype (roofline measured inside); appends it to rep. */
int bench_cuda_runs(const bench_options *o, rp_dtype dtype, bench_report *rep, char *msg,
                    size_t msg_size);

/* ---- output ------------------------------------------------------------------------------------ */

void bench_print_banner(const bench_options *o);
void bench_print_run_header(const bench_run *run);
void bench_print_point(const bench_run *run, const bench_point *pt);
/* Formats seconds as "2.86 us", "559 us", "12.5 ms", "1.20 s". */
const char *bench_format_time(double seconds, char *buf, size_t size);
/* A transient status line on stderr when it is a terminal; NULL clears it. */
void bench_progress(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Machine and build, for the banner and the JSON. */
typedef struct bench_machine {
    char cpu[128];
    int online_cpus;
    double llc_bytes;   /* last-level cache */
    double memory_bytes;
    char os[200];
    char compiler[96];
    char build_type[32];
    int cuda_compiled;  /* this binary has the CUDA timing code */
} bench_machine;

const bench_machine *bench_machine_info(void);

int bench_write_json(const char *path, const bench_report *rep, char *msg, size_t msg_size);
int bench_write_svg(const char *path, const bench_report *rep, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif /* RP_BENCH_H */
