/*
 * internal.h — what the library's parts share and users never see: the validated problem that
 * every kernel consumes, error reporting, and the kernel entry points of each backend.
 */
#ifndef RP_INTERNAL_H
#define RP_INTERNAL_H

#include "ropepool.h"

#include <stdarg.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ----------------------------------------------------------------------------------- */

/* The caller's error buffer. Only the first error reported is kept. */
typedef struct rp_err {
    char *buf;
    size_t size;
} rp_err;

#if defined(__GNUC__)
#  define RP_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#  define RP_PRINTF(fmt_index, first_arg)
#endif

/* Formats the message into the caller's buffer (truncated, always NUL-terminated) and returns
 * status, so that checks read `return rp_fail(err, RP_ERR_..., "...", ...);`. */
rp_status rp_fail(rp_err *err, rp_status status, const char *fmt, ...) RP_PRINTF(3, 4);

/* A refused value beside the bound it passed, for a message: both as "%.*g" with `digits`
 * significant digits, or as many more as it takes for them to print apart (a k_scale one ulp
 * above its largest would read "8.50705917e+37 is outside [..., 8.50705917e+37]"). Each buffer
 * holds RP_NUMBER_TEXT bytes. */
#define RP_NUMBER_TEXT 32
void rp_format_past(char *value_text, char *bound_text, double value, double bound, int digits);
/* The same for a value outside [min, max]: the bound it passed as above, the other at `digits`. */
void rp_format_outside(char *value_text, char *min_text, char *max_text, double value, double min, double max,
                       int digits);

/* Writes a shape as Python prints a tuple: "(6, 8, 64)", "(6,)", "()". Returns buf. */
char *rp_format_shape(char *buf, size_t size, const rp_tensor *t);

/* ---- the validated problem ---------------------------------------------------------------------- */

/* Everything a kernel needs, after validation: sizes, base pointers and strides in elements for
 * the [token, head, dim] axes of q, k, v, q_rot, k_rot and the [block, row, head, dim] axes of the
 * pools. Kernels trust it completely. */
/* One QK-norm weight: D contiguous elements of dtype (RP_F32 or the inputs' dtype). */
typedef struct rp_norm_weight {
    const void *data;
    rp_dtype dtype;
} rp_norm_weight;

typedef struct rp_problem {
    int64_t num_tokens;   /* T  */
    int64_t num_qo_heads; /* Hq */
    int64_t num_kv_heads; /* Hk */
    int64_t head_dim;     /* D: q, k, q_rot, k_rot, k_pool heads */
    int64_t v_head_dim;   /* Dv: v and v_pool heads (D unless the call set v_head_dim) */
    int64_t pool_size;    /* P = num_blocks * block_size: the slots each pool holds */
    int64_t num_blocks;   /* pool dimension 0 (P for flat pools) */
    int64_t block_size;   /* rows per block: 1 for flat pools */
    int32_t block_shift;  /* log2(block_size) when it is a power of two (0 for flat), else -1 */
    int32_t kv_layout;    /* rp_kv_layout, for messages; kernels use the strides below */
    rp_dtype dtype;       /* of q, k, v, q_rot, k_rot */
    rp_dtype pool_dtype;  /* storage format of both pools: dtype, RP_F8_E4M3 or RP_F8_E5M2 */
    rp_dtype pos_dtype;   /* RP_I32 | RP_I64 */
    rp_dtype slot_dtype;  /* RP_I32 | RP_I64 */

    const void *q, *k, *v, *positions, *slots;
    void *q_rot, *k_rot, *k_pool, *v_pool;

    int64_t q_stride[3], k_stride[3], v_stride[3];
    int64_t q_rot_stride[3], k_rot_stride[3];
    /* Pools, whatever their layout: [block, row in block, head, dim]. Flat pools [P, Hk, D] are
     * blocks of one row ({s0, 0, s1, s2}); NHD and HND are the same four strides permuted. */
    int64_t k_pool_stride[4], v_pool_stride[4];
    int64_t pos_stride, slot_stride;

    /* fp8 pools: stored code = fp8(x / scale). rp_validate sets k_scale/v_scale from the call's
     * doubles (0 read as 1) and copies the pointers; the CPU entry point then replaces the scale
     * by *scale_ptr (host memory) after checking it, so CPU kernels read k_scale/v_scale only. The
     * CUDA kernels read *scale_ptr themselves when it is not NULL. Both 1 for non-fp8 pools. */
    double k_scale, v_scale;
    const float *k_scale_ptr, *v_scale_ptr;

    /* 1 when the innermost dimension has stride 1 in all seven tensors: the fast kernels need it. */
    int inner_contiguous;

    /* The variant. R = rotary_dim is even, 2 <= R <= D: pairs j in [0, R/2) rotate, dims R..D-1
     * pass through as bit copies. attention_scaling is s > 0 (1.0 when the caller gave 0). */
    int64_t rotary_dim;
    rp_rope_style style;
    double attention_scaling;
    double rope_base;

    /* Frequencies f_j, j in [0, R/2), in float64: the caller's table as given (caller_freq = 1),
     * or NULL after rp_validate, and then rope_base^(-2j/R) once the entry point (or
     * rp_problem_fill_freq) has filled it. */
    const double *inv_freq;
    int caller_freq;

    /* mRoPE: positions is [3, T], row r of token t at element r * pos_row_stride + t * pos_stride,
     * and frequency j takes row rp_mrope_row(mrope_section, mrope_interleaved, j). Without mRoPE
     * (mrope = 0) the section is {R/2, 0, 0} and pos_row_stride 0, so that the same rule gives
     * row 0 everywhere: a backend may apply it unconditionally (the CUDA kernels do). */
    int mrope;
    int32_t mrope_section[3];
    int mrope_interleaved;
    int64_t pos_row_stride;

    /* QK-norm: the [D] weights of q and k heads (data NULL = that side is not normalised), eps
     * and the offset added to every weight. */
    rp_norm_weight q_norm, k_norm;
    double norm_eps, norm_offset;
} rp_problem;

#if defined(__CUDACC__)
#  define RP_HOST_DEVICE __host__ __device__
#else
#  define RP_HOST_DEVICE
#endif

/* The position row (0 = t, 1 = h, 2 = w) that frequency j takes under mRoPE: consecutive chunks
 * [t, h, w] (Qwen2-VL's mrope_section), or interleaved (Qwen3-VL's apply_interleaved_mrope:
 * h at j = 1, 4, ... below 3h, w at j = 2, 5, ... below 3w, t elsewhere). The one statement of the
 * rule: the reference, the CPU kernels and the CUDA kernels all call it. */
static inline RP_HOST_DEVICE int rp_mrope_row(const int32_t section[3], int interleaved, int64_t j)
{
    if (!interleaved)
        return (j >= section[0]) + (j >= (int64_t)section[0] + section[1]);
    const int m = (int)(j % 3);
    return m == 1 && j < 3 * (int64_t)section[1] ? 1 : m == 2 && j < 3 * (int64_t)section[2] ? 2 : 0;
}

/* Float64 pieces of the QK-norm formula, shared by the reference kernel, the verifier and the
 * CPU kernels (src/ref/rope_pool_ref.c): w[i] + offset, and 1 / sqrt(mean(x^2) + eps) of head h
 * of row t of src (dtype p->dtype, strides [token, head, dim]). */
double rp_norm_gain(const rp_problem *p, const rp_norm_weight *w, int64_t i);
double rp_norm_rstd(const rp_problem *p, const void *src, const int64_t stride[3], int64_t t, int64_t h);

/* Element offset of head h of pool row `slot` (>= 0, < pool_size) in a pool with strides
 * stride[4] ([block, row, head, dim]). Every backend and the verifier address pool rows through
 * this one function; a power-of-two block (and the flat pool, block_shift 0) takes a shift and a
 * mask instead of the division. */
static inline int64_t rp_pool_offset(const rp_problem *p, const int64_t stride[4], int64_t slot,
                                     int64_t h)
{
    int64_t block, row;
    if (p->block_shift >= 0) {
        block = slot >> p->block_shift;
        row = slot & (((int64_t)1 << p->block_shift) - 1);
    } else {
        block = slot / p->block_size;
        row = slot % p->block_size;
    }
    return block * stride[0] + row * stride[1] + h * stride[2];
}

/* 1 when the pools store fp8 codes (RP_F8_E4M3 / RP_F8_E5M2) rather than the inputs' dtype. */
static inline int rp_pool_is_fp8(const rp_problem *p)
{
    return p->pool_dtype == RP_F8_E4M3 || p->pool_dtype == RP_F8_E5M2;
}

/* 1 when the call normalises q or k heads (QK-norm: either weight given). */
static inline int rp_has_qk_norm(const rp_problem *p)
{
    return p->q_norm.data != NULL || p->k_norm.data != NULL;
}

/* Validates args (everything but the slot values) and fills *p. CPU and CUDA share it. */
rp_status rp_validate(const rp_rope_pool_args *args, rp_problem *p, rp_err *err);

/* Validates slot values: the first token, in token order, whose slot is >= P or repeats an
 * earlier token's slot. `slots` is host memory laid out as described by p (slot_dtype, stride). */
rp_status rp_validate_slots(const rp_problem *p, const void *slots, rp_err *err);

/* The message for an out-of-range slot, shared by the CPU check and the CUDA status report. */
rp_status rp_fail_slot_out_of_range(rp_err *err, int64_t slot, int64_t token, int64_t pool_size);

/* CPU calls: replaces p->k_scale / p->v_scale by the float32 that k_scale_ptr / v_scale_ptr point
 * to (host memory), after checking it is positive and finite; nothing is written on failure. */
rp_status rp_resolve_host_scales(rp_problem *p, rp_err *err);

/* Reads entry t of a positions or slots array. */
static inline int64_t rp_load_index(const void *base, rp_dtype dtype, int64_t stride, int64_t t)
{
    return dtype == RP_I64 ? ((const int64_t *)base)[t * stride]
                           : (int64_t)((const int32_t *)base)[t * stride];
}

/* The pool row token t writes, or -1 when it writes none: every CPU kernel reads slots through
 * this. The call validated every slot before its first write, but the slots are the caller's
 * memory, and another thread may change them while the kernel runs (a Python thread can, while
 * the binding has released the GIL): the value read is checked again, so one outside the pool
 * skips the token's pool write instead of writing past the pool. The entry is read once, as a
 * relaxed atomic load (a plain load on x86 and arm64), so that the compiler cannot read it again
 * after the check; a volatile read of slots and positions cost 0.15 us a call at T = 1. */
static inline int64_t rp_load_slot(const rp_problem *p, int64_t t)
{
#if defined(__GNUC__) || defined(__clang__)
    const int64_t slot = p->slot_dtype == RP_I64
                             ? __atomic_load_n((const int64_t *)p->slots + t * p->slot_stride, __ATOMIC_RELAXED)
                             : (int64_t)__atomic_load_n((const int32_t *)p->slots + t * p->slot_stride, __ATOMIC_RELAXED);
#else
    const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
#endif
    return slot < p->pool_size ? slot : -1;
}

/* Position row r (rp_mrope_row; 0 without mRoPE) of token t. */
static inline int64_t rp_load_position(const rp_problem *p, int64_t t, int row)
{
    return rp_load_index(p->positions, p->pos_dtype, 1, row * p->pos_row_stride + t * p->pos_stride);
}

/* mRoPE's angles of token t for frequencies [i0, i0 + n): angles[i] = positions[row(i0 + i), t] *
 * inv_freq[i0 + i], the float64 product the plain call forms (so a kernel that takes a position
 * and a table can take these angles and position 1.0, exactly). */
static inline void rp_mrope_angles(const rp_problem *p, int64_t t, int64_t i0, int64_t n, double *angles)
{
    const double pos[3] = {(double)rp_load_position(p, t, 0), (double)rp_load_position(p, t, 1),
                           (double)rp_load_position(p, t, 2)};
    const int32_t *s = p->mrope_section;
    const double *f = p->inv_freq + i0;
    if (!p->mrope_interleaved) {
        for (int64_t i = 0; i < n; i++)
            angles[i] = pos[rp_mrope_row(s, 0, i0 + i)] * f[i];
        return;
    }
    /* rp_mrope_row's interleaved rule with j % 3 carried along rather than divided for each
     * frequency, once per token (a division per frequency cost the CPU kernels 10% at T = 256 on
     * Qwen3-VL-8B's shape; tests/test_mrope.c checks every frequency's row against the rule). */
    const int64_t h_end = 3 * (int64_t)s[1], w_end = 3 * (int64_t)s[2];
    int m = (int)(i0 % 3);
    for (int64_t i = 0; i < n; i++) {
        const int64_t j = i0 + i;
        angles[i] = pos[m == 1 && j < h_end ? 1 : m == 2 && j < w_end ? 2 : 0] * f[i];
        m = m == 2 ? 0 : m + 1;
    }
}

/* ---- frequencies -------------------------------------------------------------------------------- */

/* inv_freq[j] = pow(rope_base, -2j/rotary_dim) for j in [0, rotary_dim/2): the exact float64
 * value the contract is stated against. Every backend and the reference use this one function. */
void rp_compute_inv_freq(double rope_base, int64_t rotary_dim, double *inv_freq);

/* Fills inv_freq[0 .. rotary_dim/2) from ctx's cache, keyed by (rope_base, rotary_dim), computing
 * it on a miss. ctx may be NULL. In a child of fork() a context made before the fork computes it
 * without the cache (its lock may be held by a parent thread). */
void rp_context_inv_freq(rp_context *ctx, double rope_base, int64_t rotary_dim, double *inv_freq);

/* For code that checks a validated problem outside the entry point (tests, the benchmark's
 * verifier): when p has no table yet (no caller table), computes rope_base's into buf
 * [rotary_dim/2] and points p->inv_freq at it. */
void rp_problem_fill_freq(rp_problem *p, double *buf);

/* ---- kernels --------------------------------------------------------------------------------- */

/* Which parts of the operation a kernel call performs. The public call always does both; the
 * benchmark runs them separately to show what fusion saves. */
typedef enum rp_parts {
    RP_PARTS_ALL = 0,     /* rotate q and k, write both pools (the fused operation) */
    RP_PARTS_ROTATE = 1,  /* q -> q_rot, k -> k_rot only                           */
    RP_PARTS_SCATTER = 2  /* k_rot -> k_pool, v -> v_pool only (reads k_rot)       */
} rp_parts;

/* A CPU kernel processes tokens [t_begin, t_end) of a validated problem. */
typedef void (*rp_cpu_kernel_fn)(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                 int64_t t_end);

/* The scalar, fully strided reference kernel: every dtype, every stride. The oracle of the tests
 * and the fallback when no fast kernel fits. Computes in float64, rounds once to the dtype. */
void rp_ref_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end);

/* CPU backend: runs a validated problem with ctx's threads (ctx may be NULL). */
rp_status rp_cpu_rope_pool(rp_context *ctx, const rp_problem *p, rp_parts parts,
                           int32_t num_threads, rp_err *err);

/* The CPU kernel table, filled once: the reference first, then what this CPU can do better. */
typedef struct rp_cpu_kernels {
    const char *name;                    /* "avx512", "avx2", "neon", "portable", "reference" */
    rp_cpu_kernel_fn rope_pool[4];       /* indexed by rp_dtype: RP_F32, RP_F16, RP_BF16 */
} rp_cpu_kernels;

const rp_cpu_kernels *rp_cpu_kernel_table(void);
/* RP_OK, or an error naming ROPEPOOL_CPU when it asks for a level this process cannot run (such a
 * cap is refused, never served by another level), or ROPEPOOL_VERBOSE when it is neither 0 nor 1
 * (dispatch.c). */
rp_status rp_cpu_check_settings(rp_err *err);

/* ---- context internals shared with the CPU backend ------------------------------------------------ */

/* Runs fn(arg, i, n) for i in [0, n) on the context's workers and the calling thread, and waits.
 * n <= the context's thread count. Falls back to running all parts on the caller when ctx is NULL
 * or its workers are busy with another call. */
typedef void (*rp_parallel_fn)(void *arg, int part, int num_parts);
void rp_context_parallel(rp_context *ctx, rp_parallel_fn fn, void *arg, int num_parts);
/* 1 in a child of fork() for a context made before the fork: its workers stayed in the parent,
 * and its locks may have been held there by a thread inside a call, so the child takes none. */
int rp_context_made_before_fork(const rp_context *ctx);

/* ---- CUDA backend hooks (src/cuda/; a CPU-only build links src/cuda_absent.c) ------------------ */

/* Prepares `device` for a context: allocates the device word where kernels record the first
 * out-of-range slot. *state receives the backend's per-context state. */
rp_status rp_cuda_context_init(int32_t device, void **state, rp_err *err);
void rp_cuda_context_free(void *state);
/* rp_context_check() for a CUDA context. */
rp_status rp_cuda_context_check(void *state, void *stream, rp_err *err);
/* Launches a validated problem whose tensors are on a CUDA device (with RP_CHECK_SLOTS: validates
 * the slots on the host first). inv_freq is host memory [rotary_dim/2]. */
rp_status rp_cuda_rope_pool(void *state, const rp_problem *p, rp_parts parts, uint32_t flags,
                            void *stream, rp_err *err);

/* ---- the entry point, with the parts selectable (benchmark's unfused baseline) ------------------ */

/* rp_rope_pool_fused() is rp_rope_pool_run(ctx, args, RP_PARTS_ALL, ...). RP_PARTS_SCATTER reads
 * k_rot as its input: run RP_PARTS_ROTATE first. */
rp_status rp_rope_pool_run(rp_context *ctx, const rp_rope_pool_args *args, rp_parts parts,
                           char *errbuf, size_t errbuf_size);

#ifdef __cplusplus
}
#endif

#endif /* RP_INTERNAL_H */
