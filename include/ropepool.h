/*
 * ropepool.h — the whole public contract of libropepool.
 *
 * One operation, done once per layer per inference step: rotary position embedding (NeoX
 * "rotate-half" or GPT-J interleaved pairs, over the whole head or its leading rotary_dim, with
 * rope_base's frequencies or the caller's table, and an attention scaling) on the query and key
 * heads, fused with writing the rotated keys and the raw values into a KV-cache pool. It keeps the contract and the exact error texts of sglang's
 * `rope_pool_fused`:
 *
 *     rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, *, head_dim, num_qo_heads,
 *                     num_kv_heads, rope_base) -> (q_rot, k_rot, k_pool, v_pool)
 *
 * Everything a caller can use is declared here; nothing else in the library is public. All public
 * names carry the prefix rp_ / RP_. The header compiles as C99 and later, and as C++.
 *
 * Conventions used throughout:
 *   - Shapes are written [dim0, dim1, ...]; T = num_tokens, Hq = num_qo_heads,
 *     Hk = num_kv_heads, D = head_dim, P = pool_size (number of slots).
 *   - Strides are counted in ELEMENTS, not bytes (as in DLPack), and may be negative.
 *   - Every function returns an rp_status. When it is not RP_OK and the caller gave an error
 *     buffer, the buffer holds one NUL-terminated line naming the argument and the values at
 *     fault. The library keeps no "last error": the buffer belongs to the caller.
 */
#ifndef ROPEPOOL_H
#define ROPEPOOL_H

#include <stddef.h>
#include <stdint.h>

/* ---- version ------------------------------------------------------------------------------- */

#define RP_VERSION_MAJOR 0
#define RP_VERSION_MINOR 2
#define RP_VERSION_PATCH 0
#define RP_VERSION_NUMBER (RP_VERSION_MAJOR * 10000 + RP_VERSION_MINOR * 100 + RP_VERSION_PATCH)

/* Compatibility. The shared library's soname is libropepool.so.MAJOR, and libropepool.so.0.MINOR
 * before 1.0, where a new minor version may change the ABI. Within one soname, a program built
 * against an older header runs on a newer library: functions, enum and flag values are only added,
 * and every struct keeps its size and the offset of every field. New fields take the struct's
 * reserved space, which must be 0 (zero-initialise whole structs: {0} in C, RP_ZERO_INIT or {} in
 * C++), and a field left 0 keeps the behaviour from before it existed. The other way round, a
 * nonzero reserved entry (a field of a newer header than the library's) is refused with
 * RP_ERR_INVALID_ARGUMENT, never ignored. A binding compares rp_version_number() with
 * RP_VERSION_NUMBER to tell which library it runs on. */

/* ---- export ------------------------------------------------------------------------------------ */

#if defined(_WIN32) && defined(RP_SHARED_LIBRARY)
#  if defined(RP_BUILDING_LIBRARY)
#    define RP_API __declspec(dllexport)
#  else
#    define RP_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define RP_API __attribute__((visibility("default")))
#else
#  define RP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Returns RP_VERSION_NUMBER of the library actually loaded: a binding compares it with the
 * header it was built against to detect a mismatch. */
RP_API unsigned rp_version_number(void);
/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
RP_API const char *rp_version_string(void);

/* ---- status codes (values never change once published) ------------------------------------- */

typedef enum rp_status {
    RP_OK = 0,
    RP_ERR_INVALID_ARGUMENT = 1,  /* rank, shape, dtype, device, scalar argument, NULL data...  */
    RP_ERR_SLOT_OUT_OF_RANGE = 2, /* some slot >= pool_size                                   */
    RP_ERR_DUPLICATE_SLOT = 3,    /* two tokens name the same slot                             */
    RP_ERR_OVERLAP = 4,           /* an output overlaps an input or another output             */
    RP_ERR_UNSUPPORTED = 5,       /* valid request this build or version cannot do (yet)       */
    RP_ERR_OUT_OF_MEMORY = 6,     /* a host allocation failed                                  */
    RP_ERR_CUDA = 7               /* the CUDA runtime reported an error                        */
} rp_status;

/* "RP_ERR_SLOT_OUT_OF_RANGE" etc.; "RP_ERR_UNKNOWN" for a value not listed above. */
RP_API const char *rp_status_name(rp_status status);
/* A short static description, e.g. "slot out of range". Never NULL. */
RP_API const char *rp_status_string(rp_status status);

/* ---- tensors ----------------------------------------------------------------------------------- */

/* Element types. Accepted: F32/F16/BF16 for data, I32/I64 for positions and slots, and for pools
 * also F8_E4M3/F8_E5M2 or U8 with pool_dtype (fp8 pools, below); QK-norm weights take the data's
 * dtype or F32. The others exist so that a binding can pass any array and get the library's own
 * error message. */
typedef enum rp_dtype {
    RP_DTYPE_UNSET = 0, /* zero-initialised tensor: rejected, by the seed's dtype checks where the
                           others are set ("q/k/v dtypes must match"), else "q dtype is not set" */
    RP_F32 = 1,
    RP_F16 = 2,
    RP_BF16 = 3,
    RP_I32 = 4,
    RP_I64 = 5,
    RP_F64 = 6,
    RP_I8 = 7,
    RP_U8 = 8,
    RP_I16 = 9,
    RP_U16 = 10,
    RP_U32 = 11,
    RP_U64 = 12,
    RP_BOOL = 13,
    RP_F8_E4M3 = 14, /* OCP float8 e4m3fn (max 448, no infinities): pools only */
    RP_F8_E5M2 = 15, /* OCP float8 e5m2 (max 57344): pools only */
    RP_DTYPE_OTHER = 255 /* anything else (complex, strings, ...) */
} rp_dtype;

/* "float32", "bfloat16", "int64", ... (NumPy/PyTorch spelling). */
RP_API const char *rp_dtype_name(rp_dtype dtype);
/* Bytes per element; 0 for RP_DTYPE_UNSET and RP_DTYPE_OTHER. */
RP_API size_t rp_dtype_size(rp_dtype dtype);

/* Where a tensor's memory lives. Values match DLPack's DLDeviceType. */
typedef enum rp_device_type {
    RP_DEVICE_CPU = 1,
    RP_DEVICE_CUDA = 2
} rp_device_type;

typedef struct rp_device {
    int32_t type;  /* rp_device_type; 0 is read as RP_DEVICE_CPU so zeroed tensors are on the CPU */
    int32_t index; /* CUDA device ordinal (>= 0); 0 for the CPU */
} rp_device;

#define RP_MAX_DIMS 8

/* rp_tensor.flags */
#define RP_TENSOR_READ_ONLY 0x1u /* the library refuses to write this tensor */

/* A strided view of memory, DLPack style. Element (i0, i1, ...) lives at
 *     (char *)data + (i0 * strides[0] + i1 * strides[1] + ...) * rp_dtype_size(dtype).
 * ndim may exceed RP_MAX_DIMS only so that a binding can report a rank error: shape and strides
 * are read for the first min(ndim, RP_MAX_DIMS) dimensions. */
typedef struct rp_tensor {
    void *data;                     /* element [0, 0, ...]; may be NULL only when it has no elements */
    int64_t shape[RP_MAX_DIMS];
    int64_t strides[RP_MAX_DIMS];   /* in elements; any sign */
    int32_t ndim;
    int32_t dtype;                  /* rp_dtype */
    rp_device device;
    uint32_t flags;                 /* RP_TENSOR_* */
    uint32_t reserved;              /* must be 0 */
} rp_tensor;

/* Contiguous (row-major) tensors on the CPU; set .device for device memory. */
/* Value-initialised in C++ ({} there, {0} in C), so -Wextra stays quiet in both languages. The
 * dtype conversion is a static_cast in C++, where C's cast trips clang's -Wold-style-cast in every
 * file that includes this header (C needs the cast: gcc's enums are unsigned, -Wsign-conversion). */
#ifdef __cplusplus
#  define RP_ZERO_INIT {}
#  define RP_DTYPE_FIELD(dtype) static_cast<int32_t>(dtype)
#else
#  define RP_ZERO_INIT {0}
#  define RP_DTYPE_FIELD(dtype) ((int32_t)(dtype))
#endif

static inline rp_tensor rp_tensor_1d(void *data, rp_dtype dtype, int64_t n0)
{
    rp_tensor t = RP_ZERO_INIT;
    t.data = data;
    t.ndim = 1;
    t.dtype = RP_DTYPE_FIELD(dtype);
    t.shape[0] = n0;
    t.strides[0] = 1;
    return t;
}

static inline rp_tensor rp_tensor_3d(void *data, rp_dtype dtype, int64_t n0, int64_t n1, int64_t n2)
{
    rp_tensor t = RP_ZERO_INIT;
    t.data = data;
    t.ndim = 3;
    t.dtype = RP_DTYPE_FIELD(dtype);
    t.shape[0] = n0;
    t.shape[1] = n1;
    t.shape[2] = n2;
    t.strides[2] = 1;
    t.strides[1] = n2;
    t.strides[0] = n1 * n2;
    return t;
}

/* ---- context ------------------------------------------------------------------------------------ */

/* A context owns what is worth keeping between calls: the CPU worker threads, a cache of the
 * RoPE frequency table, and (CUDA) the device word where kernels record a bad slot. Create one per
 * engine (per CUDA device) and reuse it. A context may be used from several threads at once: a
 * call that finds the workers busy runs on its own thread instead, with bit-identical results.
 * The workers block every signal, so process-directed signals reach the program's own threads.
 * In a child of fork() a context made before the fork runs CPU calls on the caller's thread
 * alone (the workers stayed in the parent) and rp_context_destroy frees it without waiting for
 * them, also when another thread was inside a call on it at the fork: the child takes none of
 * its locks. Create a new context there for worker threads (and for CUDA, which a child cannot
 * use). */
typedef struct rp_context rp_context;

/* rp_context_options.flags */
#define RP_CONTEXT_CUDA 0x1u /* prepare for calls on CUDA device cuda_device */

typedef struct rp_context_options {
    int32_t num_threads; /* CPU threads per call, the caller's included, at most 4096; 0 = one
                            per online CPU (up to 1024) */
    uint32_t flags;      /* RP_CONTEXT_* */
    int32_t cuda_device; /* with RP_CONTEXT_CUDA: the device whose calls this context serves;
                            without it: 0 */
    uint32_t reserved[5]; /* must be 0 */
} rp_context_options;

/* Creates a context. opts may be NULL (all defaults). On success *out is set; on failure *out is
 * NULL. Creation allocates and starts threads; nothing later in the hot path does. */
RP_API rp_status rp_context_create(const rp_context_options *opts, rp_context **out,
                                   char *errbuf, size_t errbuf_size);
/* Stops the workers and frees everything. NULL is a no-op. No call may be running on ctx. */
RP_API void rp_context_destroy(rp_context *ctx);
/* The number of threads a CPU call on ctx may use (>= 1). */
RP_API int32_t rp_context_num_threads(const rp_context *ctx);

/* CUDA only. Waits for `stream` (a cudaStream_t; NULL = the legacy default stream), then reports
 * and clears the first out-of-range slot that a kernel launched through ctx recorded: returns
 * RP_ERR_SLOT_OUT_OF_RANGE with the same message a CPU call would have given, or RP_OK. Such a
 * slot was never written. Returns RP_ERR_UNSUPPORTED for a context without RP_CONTEXT_CUDA. */
RP_API rp_status rp_context_check(rp_context *ctx, void *stream, char *errbuf, size_t errbuf_size);

/* ---- the operation ------------------------------------------------------------------------------- */

typedef enum rp_rope_style {
    RP_ROPE_NEOX = 0, /* rotate-half: pairs (x[j], x[j + rotary_dim/2])                          */
    RP_ROPE_GPTJ = 1  /* interleaved: pairs (x[2j], x[2j + 1])                                    */
} rp_rope_style;

/* How a pool tensor maps a slot to its row (rp_rope_pool_args.kv_layout). FlashInfer's names. */
typedef enum rp_kv_layout {
    RP_KV_FLAT = 0, /* [P, Hk, D]: slot s is row s (the seed's and sglang's token pool)            */
    RP_KV_NHD = 1,  /* [num_blocks, block_size, Hk, D]: slot s is row s % block_size of block
                       s / block_size (vLLM's FlashAttention cache, FlashInfer NHD)                */
    RP_KV_HND = 2   /* [num_blocks, Hk, block_size, D]: the same slot order, heads outside rows
                       (FlashInfer HND, vLLM's packed layout split per K and V)                   */
} rp_kv_layout;

/* rp_rope_pool_args.flags */
#define RP_CHECK_SLOTS 0x1u /* CUDA: copy slots to the host and validate range and duplicates
                               before anything is written (one host synchronisation). CPU calls
                               always validate, with or without this flag. */
#define RP_VALIDATE_ONLY 0x2u /* run every check that needs no memory (the seed's, dtypes, scalars,
                               extension fields, output shapes, dtypes and read-only flags, devices, a
                               ROPEPOOL_CPU level that cannot run) and return:
                               no tensor's data pointer is read or dereferenced (NULL is fine), nothing is
                               written, slot values are not checked. Host parameters are still read
                               and checked: each inv_freq entry (a host array). For lazy frameworks (MLX) that
                               refuse a bad call when it is made, before any array exists. */

typedef struct rp_rope_pool_args {
    /* Inputs: read only, never written. */
    rp_tensor q;         /* [T, Hq, D]  f32 | f16 | bf16                                         */
    rp_tensor k;         /* [T, Hk, D]  same dtype as q                                          */
    rp_tensor v;         /* [T, Hk, Dv] same dtype as q; Dv = v_head_dim (default D)             */
    rp_tensor positions; /* [T]         i32 | i64: the token's position in its sequence
                            ([3, T] with mrope_section: rows t, h, w)                            */
    rp_tensor slots;     /* [T]         i32 | i64: pool row for the token; any value < 0 skips   */
    /* In-out: row slots[t] of each pool is overwritten for every slots[t] >= 0; no other row is
     * read or written. Strided over slots is fine (one layer of a [layers, P, Hk, D] buffer,
     * or k and v interleaved as [P, 2, Hk, D]). Paged layouts: see kv_layout. */
    rp_tensor k_pool;    /* [P, Hk, D]  same dtype as q (or fp8, see pool_dtype); receives RoPE(k) */
    rp_tensor v_pool;    /* [P, Hk, Dv] same format as k_pool; receives v (bit copy, or fp8)      */
    /* Outputs. q_rot may be q itself (same data, shape and strides) and k_rot may be k itself:
     * that is the in-place call. Any other overlap of an output with an input or with another
     * output is rejected. */
    rp_tensor q_rot;     /* [T, Hq, D]  same dtype as q                                          */
    rp_tensor k_rot;     /* [T, Hk, D]  same dtype as q                                          */

    /* The seed's keyword arguments. */
    int64_t head_dim;     /* D: even, > 0                                                         */
    int64_t num_qo_heads; /* Hq > 0                                                                */
    int64_t num_kv_heads; /* Hk > 0                                                                */
    double rope_base;     /* theta: positive and finite (without inv_freq, at least DBL_MIN, below
                             which the frequencies overflow, and with its largest frequency, below 1
                             rope_base^(-(R-2)/R), at most DBL_MAX / 2^63 as inv_freq's entries);
                             frequency j is rope_base^(-2j/rotary_dim)
                             unless inv_freq is given (then rope_base is checked but not used)  */

    /* Extensions. All-zero keeps the seed's behaviour; a value this version cannot honour is
     * rejected with RP_ERR_UNSUPPORTED, never ignored. */
    int32_t style;        /* rp_rope_style                                                         */
    int32_t num_threads;  /* CPU: at most this many threads for this call; 0 = the context's       */
    int64_t rotary_dim;   /* R: the rotated leading part of each head, even, 2 <= R <= D; dims
                             R..D-1 pass through unchanged. 0 = head_dim                           */
    const double *inv_freq; /* [R/2] caller's frequencies in radians per position (>= 0, at most
                             DBL_MAX / 2^63 so that every int64 position's angle is finite; 0
                             leaves its pair unrotated), host memory read during the call and
                             not kept; NULL = rope_base's. A float32 table: widen it (exactly)   */
    uint32_t flags;       /* RP_CHECK_SLOTS | RP_VALIDATE_ONLY                                     */
    int32_t kv_layout;    /* rp_kv_layout; RP_KV_FLAT (0) = the seed's [P, Hk, D] pools             */
    void *stream;         /* CUDA: the cudaStream_t to launch on (NULL = legacy default stream)    */
    double attention_scaling; /* s in float32's normal range [FLT_MIN, FLT_MAX]: cos and sin are
                                 multiplied by s (YaRN, LongRoPE); 0 = 1.0                        */
    int64_t v_head_dim;   /* Dv: width of v and v_pool heads (MLA's latent row); 0 = head_dim     */
    /* fp8 pools. pool_dtype names the storage format of both pools when they are RP_U8 arrays
     * (sglang's uint8 fp8 pools): RP_F8_E4M3 or RP_F8_E5M2; 0 = the pools' own dtype. Stored
     * value = fp8(x / scale), round to nearest even, saturating to the format's finite range. */
    int32_t pool_dtype;
    uint32_t reserved0;   /* must be 0                                                             */
    double k_scale;       /* fp8 pools: K's scale, in [1/FLT_MAX, 1/FLT_MIN] (1 / scale is a normal
                             float32); 0 = 1.0 (must be 0 or 1 with a k_scale_ptr); with other
                             pools only 0 or 1                                                     */
    double v_scale;       /* fp8 pools: V's scale; 0 = 1.0                                          */
    const float *k_scale_ptr; /* or one float32 in the tensors' memory (device memory on CUDA),
                                 read when the kernel runs, so a captured graph sees updates;
                                 NULL = k_scale                                                   */
    const float *v_scale_ptr; /* likewise for v_scale                                             */
    /* mRoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): each token has three positions, rows t, h, w of a
     * positions tensor [3, T] (any strides), and frequency j takes the row row(j):
     *   chunked (mrope_interleaved = 0, Qwen2-VL / Qwen2.5-VL): 0 for j < t, 1 for j < t + h, else 2;
     *   interleaved (1, Qwen3-VL): 1 where j % 3 == 1 and j < 3h, 2 where j % 3 == 2 and j < 3w,
     *   else 0;
     * with [t, h, w] = mrope_section: non-negative, summing to rotary_dim / 2 (an empty h or w
     * section is fine). All zero = no mRoPE: positions is [T] (the seed's call). */
    int32_t mrope_section[3];
    uint32_t mrope_interleaved; /* 0 or 1; 1 needs mrope_section                                     */
    uint64_t reserved[9]; /* must be 0: room for what comes next                                  */
    /* Per-head QK RMSNorm in front of RoPE (Qwen3, Gemma 3; not OLMo 2's, which spans all heads):
     * with a weight w given, every head of q (q_norm_weight) or k (k_norm_weight) becomes
     *     y[i] = x[i] / sqrt(mean over the D dims of x^2 + norm_eps) * (w[i] + norm_weight_offset)
     * before the rotation, over all D dims (the pass-through dims R..D-1 hold y too); v never is.
     * Either weight may be given alone. These fields sit at the far end of the reserved space,
     * which keeps the struct's size and every earlier offset. */
    const void *q_norm_weight; /* [D] contiguous, dtype q_norm_weight_dtype, in the tensors' memory
                                  (device memory on CUDA); NULL = q is not normalised             */
    const void *k_norm_weight; /* [D] likewise for k; NULL = k is not normalised                  */
    int32_t q_norm_weight_dtype; /* q's dtype or RP_F32; 0 = q's dtype                            */
    int32_t k_norm_weight_dtype; /* likewise                                                       */
    double norm_eps;           /* > 0 and finite when a weight is given (the model's rms_norm_eps:
                                  no default, a wrong eps is a silent error); else 0              */
    double norm_weight_offset; /* finite: Gemma's (1 + w) is 1.0; 0 without a weight              */
} rp_rope_pool_args;

/*
 * rp_rope_pool_fused — RoPE on q and k, and the KV-pool write, in one pass.
 *
 * With R = rotary_dim (0 = D), s = attention_scaling (0 = 1.0) and, for j in [0, R/2), the
 * frequency f_j = inv_freq[j] (the caller's table, used as given) or rope_base^(-2j/R) (the
 * denominator is R, as in transformers and vLLM), for every token t and head h:
 *     angle = positions[t] * f_j        c = s * cos(angle)        n = s * sin(angle)
 *     (mRoPE: angle = positions[row(j), t] * f_j, the row of mrope_section's rule; when the three
 *     rows are equal the result is bit-identical to the call with that one row as positions [T])
 *     pair (a, b) = (j, j + R/2) for RP_ROPE_NEOX, (2j, 2j + 1) for RP_ROPE_GPTJ
 *     q_rot[t,h,a] = q[t,h,a] * c - q[t,h,b] * n
 *     q_rot[t,h,b] = q[t,h,b] * c + q[t,h,a] * n
 *     q_rot[t,h,i] = q[t,h,i] for i in [R, D) (a bit copy: the pass-through dims)
 * and the same for k -> k_rot. Then, for every t with slots[t] >= 0:
 *     k_pool[slots[t]] = k_rot[t]     and     v_pool[slots[t]] = v[t].
 * The seed's call (all extension fields 0) is NeoX over the whole head with rope_base's table.
 * With QK-norm (q_norm_weight / k_norm_weight), x above is the normalised y of that head, and
 * q_rot[t,h,i] = y[i] for i in [R, D).
 *
 * Numerics: the angle is the float64 product positions[t] * f_j, range-reduced in double
 * precision, once per (token, frequency), and shared by all Hq + Hk heads; c and n are formed in
 * float64 and rounded to float32 once. Every rotated output is within one ulp of its dtype plus
 * 8 * 2^-24 * s * (|x[a]| + |x[b]|) of the same formula evaluated in float64 with the table as
 * given (a float32 table is used exactly, as float64), at any int32 or int64 position, where
 * s * (|x[a]| + |x[b]|) stays below the float32 maximum, 3.4e38 (s = 1 included: two values near
 * that maximum pass it). Beyond it the float32 products and their sum may overflow to infinity,
 * or to NaN where two infinities cancel, though the float64 result is finite, and an fp8 pool
 * stores the code of what resulted (the reference kernel, in float64, stores the finite value's
 * code; so the fp8 exactness below holds only below that maximum too). float16 outputs overflow
 * far sooner, at 65520 (its largest finite value is 65504): a float64 value below 65520 by more
 * than the bound above stays finite, one above it by more is +-inf (its correctly rounded float16),
 * and one within the bound of 65520 may be either (the fast levels round through float32, where
 * 65519.9988 lands on 65520 itself, which float16 rounds to infinity; the reference kernel rounds
 * once); the same holds for QK-norm's float16 pass-through dims. The pass-through
 * dims R..D-1 of q_rot, k_rot and k_pool, and v into v_pool, are copied bit for bit. The same
 * inputs give bit-identical outputs for any thread count. Calls compute in the default
 * floating-point mode whatever the calling thread's (a flush-to-zero, denormals-are-zero or
 * rounding mode it set applies neither to the call, its worker threads, nor the host-side values
 * such as rope_base's frequency table that a context caches for later calls), and restore it; so
 * does rp_hf_rope_frequencies.
 *
 * QK-norm numerics: the sum of the D squares is accumulated in float64 (each square of a float32
 * is exact there), 1 / sqrt(sum / D + eps) and the factor (w[i] + offset) are formed in float64,
 * and y[i] is rounded to float32 once (a y beyond float32's maximum, which takes |w + offset| near
 * 3.4e38 / sqrt(D), becomes infinite there though the float64 formula may be finite; the reference
 * kernel keeps y in float64). Every rotated output is then within one ulp of its dtype
 * plus 10 * 2^-24 * s * (|y[a]| + |y[b]|) + s * 2^-148 of the float64 formula (y the float64
 * normalised value, no intermediate rounding; the last term covers normalised values below
 * float32's normal range, whose rounding is absolute), the pass-through dims within one ulp plus
 * 2 * 2^-24 * |y[i]| + 2^-149, on every backend and for every dtype (float32 included). CUDA and
 * the CPU's fast levels form y in float32 for float16 and bfloat16 inputs (CUDA: pairs of exact
 * squares rounded once and summed in float32 per 16 bytes; the CPU: pairs of exact squares rounded
 * once and summed in float64; then rstd rounded to float32, w + offset and two products rounded
 * once each: relative error below 6 * 2^-24, inside the same bounds, which the rounding to the
 * 16-bit dtype dominates) unless the
 * offset is not a float32 value, a head's mean square plus eps lies outside [2^-100, 2^64), or a
 * product could overflow float32 (CUDA: where |w + offset| exceeds 2^84; the CPU: a weight with
 * an |w + offset| neither 0 nor in [2^-87, 2^123)); those calls, heads and 16-byte vectors, float32
 * inputs, and the CPU's reference kernel, take the float64 path above. transformers differs:
 * Qwen3RMSNorm rounds the normalised value x * rstd to the input dtype before multiplying by the
 * weight (and multiplies in that dtype; Gemma3RMSNorm computes in float32 and rounds y once), and
 * its RoPE rounds cos, sin, both products and the sum to the dtype. For bfloat16 inputs the two
 * results differ by up to a few 2^-8 * (|y[a]| + |y[b]|): measured up to 3.9 times that (Qwen3
 * and Gemma 3 modules, 8192 tokens of 32 heads, positions to 30,000), at most 7 times by counting
 * the roundings (transformers' five, our one ulp) plus 2^-23 * |angle| times it (its
 * float32 angle); ours is the one within the bound above. For float32 they differ by transformers'
 * float32 angle and mean of squares. Weights are read
 * as given: a NaN weight gives NaN outputs. The outputs must not overlap the weights.
 * CPU calls with QK-norm and head_dim > 512 run on the reference kernel. CUDA normalises on its
 * vectorized kernels (head rows contiguous and 16-byte aligned, head_dim / 2 and rotary_dim / 2
 * multiples of the 16-byte vector, head_dim / 2 / vector a power of two up to 32, v_head_dim a
 * multiple of head_dim with v's heads end to end unless Hk = 1); other QK-norm calls on CUDA are
 * RP_ERR_UNSUPPORTED.
 *
 * Pools (kv_layout). Slot s >= 0 is row s of a flat pool [P, Hk, D], and row s % block_size of
 * block s / block_size of a paged one: NHD [num_blocks, block_size, Hk, D] or HND [num_blocks,
 * Hk, block_size, D]; P = num_blocks * block_size, any block_size >= 1, any strides on every
 * dimension (vLLM's kv_cache.unbind(1) views of [num_blocks, 2, block_size, Hk, D], the packed
 * (num_blocks, Hk, block_size, 2 * D) split on its last dimension, one layer of a larger cache).
 * With v_head_dim = Dv, v is [T, Hk, Dv] and v_pool is k_pool's shape with Dv as its last
 * dimension (MLA: k_pool and v_pool as the two column ranges of one [P, Dv + D] row); v is copied,
 * never rotated. v_head_dim = 0 keeps the seed's "v shape must match k shape". On CUDA, a Dv that
 * is a multiple of D (MLA: 512 of 64) runs on the vectorized kernels, v read as Dv / D heads of D
 * dims, when Hk = 1 or v's and v_pool's heads lie end to end; other Dv take the strided kernel.
 *
 * fp8 pools (RP_F8_E4M3 / RP_F8_E5M2 pools, or RP_U8 pools with pool_dtype): k_pool receives
 * fp8(y / k_scale) where y is the rotated value itself (after attention scaling), not the
 * rounded k_rot, and the pass-through dims fp8(k / k_scale) (with k_norm_weight, fp8 of the
 * normalised value / k_scale, not of k nor of the rounded k_rot); v_pool receives fp8(v / v_scale).
 * fp8() rounds to nearest-even and saturates to the format's finite range (+-448 for e4m3fn,
 * +-57344 for e5m2, infinities included); NaN stays NaN. Exactness: every stored code equals the
 * correctly rounded fp8 of the float64 value y / scale, except where that value lies within the
 * kernel's own arithmetic error (8 * 2^-24 * s * (|x[a]| + |x[b]|) / scale plus a few float32
 * ulps of y / scale) of a rounding midpoint, where either neighbour may be stored. With scale 1
 * (or a power of two) the codes of v are exact. With another scale a few land there: v_pool
 * e4m3 of every finite bfloat16 v with the float32 scale 0.7f, 32 of 65,280 codes take the other
 * neighbour, the same 32 as torch's (v.float() / scale).to(torch.float8_e4m3fn) (none with the
 * float64 scale 0.7; the reference kernel, ROPEPOOL_CPU=reference, rounds every one correctly). q_rot and k_rot keep their dtype and meaning.
 *
 * Validation runs completely before the first byte is written; a call that fails writes nothing
 * at all. The seed's checks come first, in the seed's order and with its exact messages:
 *     rope_pool_fused expects q/k/v to be 3-D
 *     rope_pool_fused expects positions/slots to be 1-D   (positions: unless mrope_section is set)
 *     rope_pool_fused expects pool tensors to be 3-D
 *     q shape must be [num_tokens, num_qo_heads, head_dim], got (T, Hq, D)
 *     k shape must be [num_tokens, num_kv_heads, head_dim], got (...)
 *     v shape must match k shape, got (...) vs (...)
 *     positions/slots must have one entry per token
 *     k_pool has incompatible shape (...)
 *     v_pool shape must match k_pool shape, got (...) vs (...)
 *     q/k/v dtypes must match
 *     pool dtypes must match q/k/v dtype
 * (with kv_layout, the pool rank and shape checks name the layout; with v_head_dim, v's and
 * v_pool's; the last one stands for every pool dtype that is not fp8), then ours: dtypes,
 * head_dim and counts, rope_base, extension fields (style, rotary_dim, each inv_freq entry,
 * attention_scaling (a normal float32 value), mrope_section and mrope_interleaved; the QK-norm
 * weights' dtypes, alignment, norm_eps and norm_weight_offset; k_scale / v_scale: > 0 with
 * 1 / scale a normal float32, other than 1 only with fp8 pools, a pointer's value checked on the
 * CPU before anything is written), output shapes and dtypes, devices, read-only outputs, NULL
 * data, alignment, strides, overlaps, and last the slot values (any slot >= P = num_blocks *
 * block_size, and a slot named by two tokens).
 *
 * Devices: every tensor must be on one device. CPU tensors run on the CPU backend (threads from
 * ctx, which may be NULL: then the call runs on the caller's thread alone and recomputes the
 * frequency table). CUDA tensors need a ctx created with RP_CONTEXT_CUDA for their device (a build
 * without the CUDA backend refuses them with RP_ERR_UNSUPPORTED); the
 * launch goes to args->stream, never allocates, never synchronises the host (unless
 * RP_CHECK_SLOTS) and may be captured in a CUDA graph. On CUDA, slot values are checked by the
 * kernel itself: an out-of-range slot is never written, and is recorded in the context (device
 * memory, and a host-mapped copy). rp_context_check() reports it at once; without it, the next
 * rp_rope_pool_fused call on ctx that starts after the recording kernel has finished returns
 * RP_ERR_SLOT_OUT_OF_RANGE naming that earlier token and slot, and writes nothing (it reads the
 * host-mapped copy: no synchronisation, and kernels replayed from a CUDA graph record there too).
 * Duplicates are found only with RP_CHECK_SLOTS. Every variant (mRoPE included: positions [3, T]
 * are read by the kernel), pool layout, fp8 format and v_head_dim runs on CUDA; device-memory scales (k_scale_ptr, v_scale_ptr) are read by the kernel
 * and not checked: they must hold a positive float32 whose reciprocal is a normal float32.
 *
 * Never writes outside q_rot, k_rot and the rows slots[t] of k_pool and v_pool.
 * Threads: calls may run at once (on one context or several) on pools they share when their
 * slots differ. Two running calls that write one slot race: the row may end up mixing them (k from
 * one call, v from the other). Arrays a running call reads must not be changed meanwhile; a slot
 * changed during a call leaves unspecified rows, but a value outside the pool is never written
 * (the CPU kernels check each slot again as they read it).
 * T = 0 is a valid no-op (shapes are still checked). Neither T = 0 nor RP_VALIDATE_ONLY reaches a
 * backend: what only the CUDA backend refuses (head_dim past 4096, QK-norm outside its vectorized
 * kernels, both RP_ERR_UNSUPPORTED, and a bad slot an earlier kernel recorded) is reported by the
 * first call on CUDA that has tokens.
 */
RP_API rp_status rp_rope_pool_fused(rp_context *ctx, const rp_rope_pool_args *args,
                                    char *errbuf, size_t errbuf_size);

/* ---- transformers-exact frequency tables ---------------------------------------------------- */

/* The rope types of transformers' modeling_rope_utils.py (config "rope_type", formerly "type"). */
typedef enum rp_hf_rope_type {
    RP_HF_ROPE_DEFAULT = 0,  /* theta^(-2j/R)                                                   */
    RP_HF_ROPE_LINEAR = 1,   /* default / factor                                                */
    RP_HF_ROPE_DYNAMIC = 2,  /* NTK: theta grown for seq_len > max_position_embeddings          */
    RP_HF_ROPE_YARN = 3,     /* YaRN ramp between default and default / factor; attention factor */
    RP_HF_ROPE_LONGROPE = 4, /* default / short_factor or long_factor; attention factor          */
    RP_HF_ROPE_LLAMA3 = 5,   /* Llama 3.1 wavelength bands                                       */
    RP_HF_ROPE_PROPORTIONAL = 6 /* Gemma 4's full attention: default / factor on the first
                                   int(partial_rotary_factor * R // 2) pairs, 0 on the rest        */
} rp_hf_rope_type;

/* rp_hf_rope_params.flags */
#define RP_HF_YARN_NO_TRUNCATE 0x1u /* yarn "truncate": false (the correction range is not rounded) */

/* The numbers a transformers config gives for one rope (a binding reads the config; C has no JSON
 * parser). Fields a type does not use are ignored; 0 means "not given" where a default exists
 * (never for proportional, whose factor and partial_rotary_factor the binding always passes). */
typedef struct rp_hf_rope_params {
    int32_t rope_type;        /* rp_hf_rope_type                                                    */
    uint32_t flags;           /* RP_HF_*                                                            */
    int64_t rotary_dim;       /* R = int(head_dim * partial_rotary_factor): even, >= 2 (dynamic: >= 4);
                                 proportional: R = head_dim, the table spans the head             */
    double rope_theta;        /* > 0 and finite (yarn: > 1)                                         */
    double factor;            /* linear, dynamic, llama3, proportional (transformers' default 1): > 0,
                                 required. yarn, longrope: 0 = the config's max_position_embeddings /
                                 original_max_position_embeddings                                 */
    double attention_factor;  /* yarn, longrope: > 0, or 0 = derived as transformers does           */
    int64_t seq_len;          /* dynamic, longrope: the sequence length served; 0 = none (init)     */
    int64_t max_position_embeddings;          /* dynamic: required; yarn/longrope with factor 0   */
    int64_t original_max_position_embeddings; /* yarn, longrope, llama3: required, > 0             */
    double beta_fast, beta_slow;              /* yarn: 0 = 32 and 1                                */
    double mscale, mscale_all_dim;            /* yarn: 0 = absent                                  */
    double low_freq_factor, high_freq_factor; /* llama3: required, high > low                      */
    const double *short_factor, *long_factor; /* longrope: [R/2] each, finite, > 0                 */
    double partial_rotary_factor;             /* proportional: in [0, 1], required (transformers'
                                                 default 1; 0 is a value: no pair rotated)         */
    uint64_t reserved[3];     /* must be 0                                                          */
} rp_hf_rope_params;

/*
 * rp_hf_rope_frequencies — the inverse-frequency table and attention scaling transformers uses.
 *
 * Follows transformers 5's operation order (its ROPE_INIT_FUNCTIONS and models' default init) in
 * float32, because the float32 table is the one the model was trained with; only pow differs:
 * ours is correctly rounded (double pow, then one rounding), torch's CPU powf is within 1 ulp.
 * Later operations keep that within 3 ulps, except llama3's smoothing, whose subtraction of nearly
 * equal terms can amplify it by about factor * low_freq_factor / (high_freq_factor -
 * low_freq_factor): up to ~120 ulps on random configs; the published Llama 3.1 and 3.2 configs
 * give transformers' table bit for bit. Dynamic NTK with seq_len > max_position_embeddings forms its grown theta in float32, as
 * transformers' runtime update does. Writes R/2 float32 values, widened, to inv_freq[0..R/2) and
 * the cos/sin scale (1.0 unless yarn or longrope) to *attention_scaling: ready to pass as
 * rp_rope_pool_args.inv_freq and .attention_scaling. Proportional's zero frequencies (the pairs
 * past int(partial_rotary_factor * R // 2), R = head_dim) leave those pairs unrotated there, as
 * transformers' cos 1 and sin 0 do. A call that fails writes neither.
 */
RP_API rp_status rp_hf_rope_frequencies(const rp_hf_rope_params *params, double *inv_freq,
                                        double *attention_scaling, char *errbuf, size_t errbuf_size);

/*
 * rp_hf_rope_style — the pair style transformers' modeling code uses for a config "model_type"
 * (its text model's, for a multimodal config): RP_ROPE_NEOX or RP_ROPE_GPTJ into *style.
 * rope_interleave is the config's flag of that name (1 / 0), or -1 when the config has none; only
 * deepseek_v3, kimi_k2 (Kimi-K2's name for it) and the MLA families whose attention copies
 * DeepSeek-V3's (sarvam_mla, glm4_moe_lite, mistral4, axk1, youtu) read it (default true: GPT-J
 * pairs; false: NeoX). The other MLA families' attentions always rotate adjacent pairs
 * (deepseek_v32, longcat_flash, glm_moe_dsa, hy_v4, axk2, bailing_hybrid) or halves (minicpm3),
 * whatever the flag says. An unknown model type is RP_ERR_UNSUPPORTED
 * with a message saying to pass the style explicitly: a wrong style is a silent accuracy bug, so
 * it is never guessed.
 */
RP_API rp_status rp_hf_rope_style(const char *model_type, int32_t rope_interleave, int32_t *style,
                                  char *errbuf, size_t errbuf_size);

/* ---- what runs ------------------------------------------------------------------------------------ */

/* The CPU kernel level the library chose, detected once: "avx512", "avx2" (x86-64), "neon"
 * (aarch64), "portable", or "reference". The environment variable ROPEPOOL_CPU (same names)
 * forces a lower level; a name that is no level of this build, or a level this CPU cannot run,
 * makes every CPU call fail with RP_ERR_INVALID_ARGUMENT naming it (RP_VALIDATE_ONLY and T = 0 calls
 * included; never another level run in its place), and this function return "none". With ROPEPOOL_VERBOSE=1 the choice (or that refusal)
 * is printed to stderr once; a ROPEPOOL_VERBOSE other than 0 or 1 is refused the same way. Calls whose
 * head_dim is not the innermost contiguous dimension of every tensor fall back to the reference
 * kernel. */
RP_API const char *rp_cpu_kernel_name(void);

/* 1 if this library was built with its CUDA backend, 0 if not. */
RP_API int rp_has_cuda(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ROPEPOOL_H */
