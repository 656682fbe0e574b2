/*
 * call.c — ropepool.rope_pool_fused: the seed's call on NumPy arrays and PyTorch tensors.
 *
 * The path of a call: parse the arguments (vectorcall, no intermediate tuple or dict), convert the
 * keywords (keywords.c), describe the arrays as rp_tensors without copying, take the caller's
 * q_out / k_out or allocate q_rot and k_rot in q's framework, dtype and device, and call
 * rp_rope_pool_fused with the GIL released. Every check on shapes, dtypes, devices, strides,
 * writability, overlap and slot values is the library's, and so is every message: a failure
 * raises RopePoolError (a ValueError) carrying it verbatim, with the outputs called q_out / k_out
 * when the caller gave them. Before the library runs, the binding only refuses what the library
 * cannot see: an argument that is not an array, arrays of two frameworks, argument values of the
 * wrong Python type, dtypes the library has no name for, and what autograd could not follow.
 * Nothing of the caller's is written when a call fails; the outputs allocated for it are dropped.
 */
#include "binding.h"
#include "overlap.h" /* the library's overlap test, for the inputs it sees only as copies */
#include "ref/verify.h" /* the contract's accuracy check, as ropepool-bench runs it */

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum {
    P_Q, P_K, P_V, P_POSITIONS, P_SLOTS, P_K_POOL, P_V_POOL,          /* positional (or keyword) */
    P_HEAD_DIM, P_NUM_QO_HEADS, P_NUM_KV_HEADS, P_ROPE_BASE,          /* required keyword-only   */
    P_THREADS, P_CHECKED, P_IS_NEOX, P_ROTARY_DIM, P_INV_FREQ,        /* optional keyword-only   */
    P_ATTENTION_SCALING, P_KV_LAYOUT, P_V_HEAD_DIM, P_KV_CACHE_DTYPE, P_K_SCALE, P_V_SCALE,
    P_MROPE_SECTION, P_MROPE_INTERLEAVED, P_Q_NORM_WEIGHT, P_K_NORM_WEIGHT, P_NORM_EPS, P_NORM_WEIGHT_OFFSET,
    P_Q_OUT, P_K_OUT,
    NUM_PARAMS,
    NUM_ARRAYS = P_HEAD_DIM,
    NUM_REQUIRED = P_THREADS,
    MESSAGE_SIZE = 512,
    STACK_FREQS = 256 /* inv_freq entries held on the stack: rotary_dim up to 512 */
};

static const char *const param_names[NUM_PARAMS] = {
    "q", "k", "v", "positions", "slots", "k_pool", "v_pool",
    "head_dim", "num_qo_heads", "num_kv_heads", "rope_base",
    "threads", "checked", "is_neox", "rotary_dim", "inv_freq",
    "attention_scaling", "kv_layout", "v_head_dim", "kv_cache_dtype", "k_scale", "v_scale",
    "mrope_section", "mrope_interleaved", "q_norm_weight", "k_norm_weight", "norm_eps", "norm_weight_offset",
    "q_out", "k_out",
};
/* Keywords whose default is None: None means "not given". */
static const int none_defaults[] = {P_THREADS,       P_ROTARY_DIM,    P_INV_FREQ, P_V_HEAD_DIM, P_MROPE_SECTION,
                                    P_Q_NORM_WEIGHT, P_K_NORM_WEIGHT, P_NORM_EPS, P_Q_OUT,      P_K_OUT};
static PyObject *param_strings[NUM_PARAMS]; /* interned */

int rpy_call_init(void)
{
    for (int i = 0; i < NUM_PARAMS; i++)
        if ((param_strings[i] = PyUnicode_InternFromString(param_names[i])) == NULL)
            return -1;
    return 0;
}

const char rpy_rope_pool_fused_doc[] =
    "rope_pool_fused($module, q, k, v, positions, slots, k_pool, v_pool, *, head_dim, "
    "num_qo_heads, num_kv_heads, rope_base, threads=None, checked=False, is_neox=True, "
    "rotary_dim=None, inv_freq=None, attention_scaling=1.0, kv_layout='flat', v_head_dim=None, "
    "kv_cache_dtype='auto', k_scale=1.0, v_scale=1.0, mrope_section=None, mrope_interleaved=False, "
    "q_norm_weight=None, k_norm_weight=None, norm_eps=None, norm_weight_offset=0.0, q_out=None, k_out=None)\n"
    "--\n"
    "\n"
    "Apply RoPE to q and k, and write the rotated keys and the values into the KV pool.\n"
    "\n"
    "The call of sglang's sgl_kernel.metal.rope_pool_fused, backed by libropepool.\n"
    "\n"
    "Args:\n"
    "    q: [num_tokens, num_qo_heads, head_dim], float32 | float16 | bfloat16.\n"
    "    k: [num_tokens, num_kv_heads, head_dim], q's dtype.\n"
    "    v: [num_tokens, num_kv_heads, v_head_dim], q's dtype.\n"
    "    positions: [num_tokens] int32 | int64, the token's position in its sequence\n"
    "        ([3, num_tokens], rows t, h, w, with mrope_section).\n"
    "    slots: [num_tokens] int32 | int64, the pool row of each token; < 0 skips its write.\n"
    "    k_pool, v_pool: [pool_size, num_kv_heads, head_dim (v: v_head_dim)], q's dtype or fp8,\n"
    "        updated in place (paged layouts: see kv_layout).\n"
    "    head_dim, num_qo_heads, num_kv_heads, rope_base: the model's configuration.\n"
    "    threads: at most this many CPU threads for this call (default: the module's,\n"
    "        ROPEPOOL_NUM_THREADS or one per CPU).\n"
    "    checked: CUDA: validate slot values on the host before launching (one sync).\n"
    "    is_neox: True: NeoX rotate-half pairs (x[i], x[i + rotary_dim/2]); False: GPT-J\n"
    "        interleaved pairs (x[2i], x[2i + 1]).\n"
    "    rotary_dim: the rotated leading part of each head (default head_dim); the rest of the\n"
    "        head passes through unchanged.\n"
    "    inv_freq: [rotary_dim/2] float32 | float64 frequencies replacing rope_base's (scaled\n"
    "        RoPE); read on the host (a device tensor is copied there, one sync).\n"
    "    attention_scaling: cos and sin are multiplied by it (YaRN, LongRoPE); a normal\n"
    "        float32 value (the kernels scale cos and sin in float32).\n"
    "    kv_layout: 'flat' [P, Hk, D] pools; 'NHD' [blocks, block_size, Hk, D] or 'HND'\n"
    "        [blocks, Hk, block_size, D] paged pools, slot = block * block_size + row.\n"
    "    v_head_dim: the width of v and v_pool heads (default head_dim).\n"
    "    kv_cache_dtype: 'auto' (the pools' dtype, float8_e4m3fn / float8_e5m2 included), or\n"
    "        'fp8_e4m3' ('fp8') / 'fp8_e5m2' for fp8 pools stored as uint8.\n"
    "    k_scale, v_scale: fp8 pools: the stored value is fp8(x / scale), scale > 0. A number, or a\n"
    "        one-element float32 array: a CUDA tensor is read by the kernel when it runs\n"
    "        (CUDA graphs see updates), a host array when the call is made.\n"
    "    mrope_section: multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): [t, h, w], three\n"
    "        non-negative ints summing to rotary_dim/2; frequency j takes position row t, h or w\n"
    "        in consecutive chunks (j < t: t; j < t + h: h; else w).\n"
    "    mrope_interleaved: Qwen3-VL's rule instead: h where j % 3 == 1 and j < 3h, w where\n"
    "        j % 3 == 2 and j < 3w, t elsewhere. Needs mrope_section.\n"
    "    q_norm_weight, k_norm_weight: [head_dim] weights (q's dtype or float32, q's device) of\n"
    "        the per-head RMSNorm applied to q / k before RoPE (Qwen3, Gemma 3): each head becomes\n"
    "        x / sqrt(mean(x^2) + norm_eps) * (w + norm_weight_offset), in float64 with one\n"
    "        float32 rounding. Either may be given alone.\n"
    "    norm_eps: the model's rms_norm_eps (default 1e-6, Qwen3's and Gemma 3's, when a weight\n"
    "        is given).\n"
    "    norm_weight_offset: 1.0 for Gemma's (1 + w) weights (default 0.0).\n"
    "    q_out, k_out: arrays of q's / k's shape, dtype and device (any strides) that receive\n"
    "        q_rot / k_rot and are returned; q_out=q, k_out=k rotate in place.\n"
    "\n"
    "Arrays are NumPy arrays (bfloat16 and float8 through ml_dtypes) or torch tensors (CPU, or\n"
    "CUDA on the tensor's device and current stream), all of one framework, passed without\n"
    "copying: strided views such as slices of a fused QKV projection are fine.\n"
    "\n"
    "Returns:\n"
    "    (q_rot, k_rot, k_pool, v_pool): q_rot and k_rot are q_out and k_out when given, else\n"
    "    new contiguous arrays of q's and k's shape, dtype and device; k_pool and v_pool are the\n"
    "    caller's objects, updated.\n"
    "\n"
    "Raises:\n"
    "    RopePoolError (a ValueError) with the library's message; nothing is written then.\n"
    "    TypeError for an argument that is not an array, or arrays of two frameworks.\n";

static int find_keyword(PyObject *key)
{
    for (int i = 0; i < NUM_PARAMS; i++)
        if (key == param_strings[i])
            return i;
    for (int i = 0; i < NUM_PARAMS; i++) /* a name built at run time is not interned */
        if (PyUnicode_Check(key) && PyUnicode_Compare(key, param_strings[i]) == 0)
            return i;
    return -1;
}

/* Python's own rules for `def f(q, k, v, positions, slots, k_pool, v_pool, *, head_dim, ...)`. */
static int parse_arguments(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                           PyObject *values[NUM_PARAMS])
{
    for (int i = 0; i < NUM_PARAMS; i++)
        values[i] = NULL;
    if (nargs > NUM_ARRAYS) {
        PyErr_Format(PyExc_TypeError,
                     "rope_pool_fused() takes %d positional arguments but %zd were given "
                     "(head_dim, num_qo_heads, num_kv_heads and rope_base are keyword-only)",
                     (int)NUM_ARRAYS, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        values[i] = args[i];
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        const int i = find_keyword(key);
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "rope_pool_fused() got an unexpected keyword argument '%S'", key);
            return -1;
        }
        if (values[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "rope_pool_fused() got multiple values for argument '%s'",
                         param_names[i]);
            return -1;
        }
        values[i] = args[nargs + j];
    }
    for (size_t i = 0; i < sizeof none_defaults / sizeof none_defaults[0]; i++)
        if (values[none_defaults[i]] == Py_None)
            values[none_defaults[i]] = NULL;
    for (int i = 0; i < NUM_REQUIRED; i++)
        if (values[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "rope_pool_fused() missing required %sargument: '%s'",
                         i < NUM_ARRAYS ? "" : "keyword-only ", param_names[i]);
            return -1;
        }
    return 0;
}

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int optional_integer(PyObject *obj, const char *name, long long lo, long long hi, long long *out)
{
    *out = 0;
    return obj == NULL ? 0 : rpy_integer(obj, name, lo, hi, out);
}

static int optional_float(PyObject *obj, const char *name, double *out)
{
    *out = 0.0; /* the library's "not set": 1.0 */
    return obj == NULL ? 0 : rpy_float(obj, name, out);
}

/* Everything but the arrays and the scales (which need q's device). */
static int scalar_arguments(PyObject *const values[NUM_PARAMS], rp_rope_pool_args *a, int32_t *kv_cache_dtype)
{
    long long head_dim, num_qo_heads, num_kv_heads, threads, rotary_dim, v_head_dim;
    const long long big = LLONG_MAX, small = LLONG_MIN;
    if (rpy_integer(values[P_HEAD_DIM], "head_dim", small, big, &head_dim) < 0 ||
        rpy_integer(values[P_NUM_QO_HEADS], "num_qo_heads", small, big, &num_qo_heads) < 0 ||
        rpy_integer(values[P_NUM_KV_HEADS], "num_kv_heads", small, big, &num_kv_heads) < 0 ||
        rpy_float(values[P_ROPE_BASE], "rope_base", &a->rope_base) < 0 ||
        optional_integer(values[P_THREADS], "threads", INT_MIN, INT_MAX, &threads) < 0 ||
        optional_integer(values[P_ROTARY_DIM], "rotary_dim", small, big, &rotary_dim) < 0 ||
        optional_integer(values[P_V_HEAD_DIM], "v_head_dim", small, big, &v_head_dim) < 0 ||
        optional_float(values[P_ATTENTION_SCALING], "attention_scaling", &a->attention_scaling) < 0 ||
        optional_float(values[P_NORM_EPS], "norm_eps", &a->norm_eps) < 0 ||
        optional_float(values[P_NORM_WEIGHT_OFFSET], "norm_weight_offset", &a->norm_weight_offset) < 0 ||
        rpy_is_neox(values[P_IS_NEOX], &a->style) < 0 || rpy_kv_layout(values[P_KV_LAYOUT], &a->kv_layout) < 0 ||
        rpy_kv_cache_dtype(values[P_KV_CACHE_DTYPE], kv_cache_dtype) < 0 ||
        rpy_mrope(values[P_MROPE_SECTION], values[P_MROPE_INTERLEAVED], a->mrope_section, &a->mrope_interleaved) < 0)
        return -1;
    a->head_dim = head_dim;
    a->num_qo_heads = num_qo_heads;
    a->num_kv_heads = num_kv_heads;
    a->num_threads = (int32_t)threads;
    a->rotary_dim = rotary_dim;
    a->v_head_dim = v_head_dim;
    /* In C a zero field means "not set"; from Python that is None, so an explicit 0 is a value the
     * library cannot honour, refused rather than read as the default. So are the other values
     * below the least allowed: the library's message would offer C's 0 for the default. */
    if (values[P_THREADS] != NULL && threads <= 0)
        return rpy_refuse("threads must be >= 1 (None = the module's setting), got %lld", threads);
    if (values[P_ROTARY_DIM] != NULL && rotary_dim < 2)
        return rpy_refuse("rotary_dim must be >= 2 (None = head_dim), got %lld", rotary_dim);
    if (values[P_V_HEAD_DIM] != NULL && v_head_dim <= 0)
        return rpy_refuse("v_head_dim must be positive (None = head_dim), got %lld", v_head_dim);
    if (values[P_ATTENTION_SCALING] != NULL && !(isfinite(a->attention_scaling) && a->attention_scaling > 0.0))
        return rpy_refuse("attention_scaling must be positive and finite (default 1.0), got %R",
                          values[P_ATTENTION_SCALING]);
    if (values[P_NORM_EPS] != NULL && a->norm_eps == 0.0)
        return rpy_refuse("norm_eps must be a positive finite number with a QK-norm weight (the model's "
                          "rms_norm_eps, e.g. 1e-06; None = 1e-6), got %R",
                          values[P_NORM_EPS]);
    /* The library reads a zero section as "no mRoPE"; from Python, None is that. */
    const int32_t *sec = a->mrope_section;
    if (values[P_MROPE_SECTION] != NULL && sec[0] == 0 && sec[1] == 0 && sec[2] == 0)
        return rpy_refuse("mrope_section [0, 0, 0] sums to 0, but must sum to rotary_dim / 2 = %lld (None = no mRoPE)",
                          (long long)((rotary_dim ? rotary_dim : head_dim) / 2));
    if (values[P_CHECKED] != NULL) {
        int checked;
        if (rpy_strict_bool(values[P_CHECKED], "checked", rpy_flag_meanings[RPY_FLAG_CHECKED][1], &checked) < 0)
            return -1;
        a->flags = checked ? RP_CHECK_SLOTS : 0;
    }
    return 0;
}

static const rpy_framework *const frameworks[] = {&rpy_numpy, &rpy_torch};

const rpy_framework *rpy_framework_of(PyObject *obj)
{
    for (size_t i = 0; i < sizeof frameworks / sizeof frameworks[0]; i++)
        if (frameworks[i]->is_array(obj))
            return frameworks[i];
    return NULL;
}

/* Describes values[index] (an array of framework fw) into *t. */
static int array_argument(const rpy_framework *fw, PyObject *const values[NUM_PARAMS], int index, rp_tensor *t)
{
    PyObject *obj = values[index];
    if (!fw->is_array(obj)) {
        const rpy_framework *other = rpy_framework_of(obj);
        if (other != NULL)
            PyErr_Format(PyExc_TypeError, "%s is a %s but q is a %s: pass all arrays from one framework",
                         param_names[index], other->type_name, fw->type_name);
        else
            PyErr_Format(PyExc_TypeError, "%s must be a %s like q, got %.200s", param_names[index],
                         fw->type_name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (fw->to_tensor(obj, param_names[index], t) < 0)
        return -1;
    if (t->dtype == RP_DTYPE_OTHER) { /* the library cannot name it: say what it is */
        PyObject *dtype = PyObject_GetAttrString(obj, "dtype");
        if (dtype != NULL)
            rpy_refuse("%s has dtype %S" RPY_DTYPE_NOT_TAKEN, param_names[index], dtype);
        Py_XDECREF(dtype);
        return -1;
    }
    return 0;
}

/* Fills the seven input tensors, all of q's framework. */
static const rpy_framework *array_arguments(PyObject *const values[NUM_PARAMS], rp_tensor *tensors[NUM_ARRAYS])
{
    const rpy_framework *fw = rpy_framework_of(values[P_Q]);
    if (fw == NULL) {
        PyErr_Format(PyExc_TypeError, "q must be a numpy.ndarray or a torch.Tensor, got %.200s",
                     Py_TYPE(values[P_Q])->tp_name);
        return NULL;
    }
    for (int i = 0; i < NUM_ARRAYS; i++)
        if (array_argument(fw, values, i, tensors[i]) < 0)
            return NULL;
    return fw;
}

/* Whether the head_dim keyword is q's last dimension. Where it is not, the library refuses q's
 * shape first, and the arrays sized by head_dim (inv_freq, the norm weights) are left unread:
 * checked against a wrong head_dim they would blame themselves, or ask for 2^40 entries. */
static int head_dim_is_qs(const rp_rope_pool_args *a)
{
    return a->q.ndim == 3 && a->q.shape[2] == a->head_dim;
}

/* inv_freq into freqs (the caller's buffer of `capacity` doubles, or one allocated here and
 * returned in *owned). Its length is rotary_dim/2; with a rotary_dim the library will refuse,
 * inv_freq is left NULL so that the library's message about rotary_dim is the one reported. */
static int frequency_argument(PyObject *obj, rp_rope_pool_args *a, double *freqs, int64_t capacity, double **owned)
{
    *owned = NULL;
    a->inv_freq = NULL;
    const int64_t R = a->rotary_dim ? a->rotary_dim : a->head_dim;
    if (obj == NULL || R <= 0 || R % 2 != 0 || R > a->head_dim || !head_dim_is_qs(a))
        return 0;
    if (R / 2 > capacity && (freqs = *owned = PyMem_Malloc((size_t)(R / 2) * sizeof(double))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (rpy_inv_freq(obj, R / 2, freqs) < 0)
        return -1;
    a->inv_freq = freqs;
    return 0;
}

/* A device as torch names it: "cpu" or "cuda:N". */
static const char *device_text(char buf[24], rp_device d)
{
    if (d.type != RP_DEVICE_CUDA)
        return "cpu";
    snprintf(buf, 24, "cuda:%d", (int)d.index);
    return buf;
}

/* The QK-norm weights, described in q's framework: the library takes a pointer to [head_dim]
 * contiguous elements and their dtype, so their rank, length, contiguity and device (what a pointer
 * does not carry) are checked here; dtype and everything else by the library. norm_eps not given
 * is 1e-6 (Qwen3's and Gemma 3's rms_norm_eps) when a weight is, else not set. */
static int norm_arguments(const rpy_framework *fw, PyObject *const values[NUM_PARAMS], rp_rope_pool_args *a)
{
    const int index[2] = {P_Q_NORM_WEIGHT, P_K_NORM_WEIGHT};
    const void **data[2] = {&a->q_norm_weight, &a->k_norm_weight};
    int32_t *dtype[2] = {&a->q_norm_weight_dtype, &a->k_norm_weight_dtype};
    for (int i = 0; i < 2; i++) {
        rp_tensor w;
        if (values[index[i]] == NULL || !head_dim_is_qs(a))
            continue;
        if (array_argument(fw, values, index[i], &w) < 0)
            return -1;
        if (w.ndim != 1 || w.shape[0] != a->head_dim || (w.shape[0] > 1 && w.strides[0] != 1)) {
            PyObject *shape = rpy_shape_tuple(&w);
            if (shape != NULL)
                rpy_refuse("%s must be a contiguous 1-D array of head_dim = %lld weights, got shape %R%s",
                           param_names[index[i]], (long long)a->head_dim, shape,
                           w.ndim == 1 && w.shape[0] == a->head_dim ? " with a stride" : "");
            Py_XDECREF(shape);
            return -1;
        }
        if (w.device.type != a->q.device.type || w.device.index != a->q.device.index) {
            char w_device[24], q_device[24];
            return rpy_refuse("%s must be on q's device: it is on %s but q is on %s", param_names[index[i]],
                              device_text(w_device, w.device), device_text(q_device, a->q.device));
        }
        *data[i] = w.data;
        *dtype[i] = w.dtype;
    }
    if (values[P_NORM_EPS] == NULL && (a->q_norm_weight != NULL || a->k_norm_weight != NULL))
        a->norm_eps = 1e-6;
    return 0;
}

/* The outputs: q_out / k_out when given (described like the inputs), else new arrays. outs[i]
 * receives a new reference. */
static int output_arguments(const rpy_framework *fw, PyObject *const values[NUM_PARAMS], rp_rope_pool_args *a,
                            PyObject *outs[2])
{
    const int given[2] = {P_Q_OUT, P_K_OUT}, like[2] = {P_Q, P_K};
    rp_tensor *const like_t[2] = {&a->q, &a->k}, *const out_t[2] = {&a->q_rot, &a->k_rot};
    outs[0] = outs[1] = NULL;
    for (int i = 0; i < 2; i++) {
        if (values[given[i]] != NULL) {
            if (array_argument(fw, values, given[i], out_t[i]) < 0)
                return -1;
            Py_INCREF(outs[i] = values[given[i]]);
        } else if ((outs[i] = fw->empty_like(values[like[i]], like_t[i], out_t[i])) == NULL) {
            return -1;
        }
    }
    return 0;
}

/* A library message in Python's words: uint8 pools name their format with kv_cache_dtype, not
 * pool_dtype; the outputs are q_out and k_out, not q_rot and k_rot (and the in-place form is
 * q_out = q), whole words rewritten in place (same lengths). */
static void in_python_words(char *message)
{
    if (strncmp(message, RPY_UINT8_POOLS_C, strlen(RPY_UINT8_POOLS_C)) == 0) {
        snprintf(message, MESSAGE_SIZE, "%s", RPY_UINT8_POOLS_PYTHON);
        return;
    }
    static const char *const from[2] = {"q_rot", "k_rot"}, *const to[2] = {"q_out", "k_out"};
    for (int i = 0; i < 2; i++)
        for (char *p = message; (p = strstr(p, from[i])) != NULL; p += 5) {
            const int starts = p == message || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z'));
            const int ends = !(p[5] == '_' || (p[5] >= 'a' && p[5] <= 'z'));
            if (starts && ends)
                memcpy(p, to[i], 5);
        }
}

/* The context (and, on CUDA, the stream) for a call whose q is on `device`. */
static rp_context *context_for(rp_device device, void **stream)
{
    *stream = NULL;
    if (device.type != RP_DEVICE_CUDA)
        return rpy_cpu_context();
    rp_context *ctx = rpy_cuda_context(device.index, 1);
    if (ctx == NULL || rpy_torch_current_stream(device.index, stream) < 0)
        return NULL;
    return ctx;
}

/* A call converted for the library: its arguments, the buffer inv_freq is copied into, and the
 * outputs (new references) and context it runs with. */
typedef struct prepared_call {
    rp_rope_pool_args a;
    double freqs[STACK_FREQS], *owned_freqs; /* inv_freq: on the stack, or allocated when longer */
    const rpy_framework *fw;
    PyObject *outs[2];
    rp_context *ctx;
} prepared_call;

static int prepare(PyObject *const values[NUM_PARAMS], prepared_call *c, unsigned long long *stamps);

static void release(prepared_call *c)
{
    PyMem_Free(c->owned_freqs);
    c->owned_freqs = NULL;
    Py_CLEAR(c->outs[0]);
    Py_CLEAR(c->outs[1]);
}

/* _time_calls(calls, <rope_pool_fused's arguments>): the C call alone, for the benchmark's C
 * figure in the same process: the arguments are converted once (outputs allocated once when not
 * given), then rp_rope_pool_fused runs `calls` times back to back with the GIL released. Returns
 * the mean ns per call. */
PyObject *rpy_time_calls(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    nargs = PyVectorcall_NARGS(nargs);
    long long calls;
    PyObject *values[NUM_PARAMS];
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "_time_calls(calls, q, k, ...) needs the number of calls first");
        return NULL;
    }
    if (rpy_integer(args[0], "calls", 1, LLONG_MAX, &calls) < 0 ||
        parse_arguments(args + 1, nargs - 1, kwnames, values) < 0)
        return NULL;
    prepared_call c;
    if (prepare(values, &c, NULL) < 0)
        return NULL;
    char message[MESSAGE_SIZE];
    rp_status st = RP_OK;
    unsigned long long elapsed;
    Py_BEGIN_ALLOW_THREADS
    const unsigned long long start = now_ns();
    for (long long i = 0; i < calls && st == RP_OK; i++)
        st = rp_rope_pool_fused(c.ctx, &c.a, message, sizeof message);
    elapsed = now_ns() - start;
    Py_END_ALLOW_THREADS
    release(&c);
    if (st != RP_OK)
        return rpy_raise(st, message);
    return PyFloat_FromDouble((double)elapsed / (double)calls);
}

/* _verify(<rope_pool_fused's arguments, q_out and k_out holding a finished call's q_rot and
 * k_rot>): the outputs of that call checked against the float64 reference (rp_ref_verify, the check
 * ropepool-bench runs), for the Python benchmark's figures. Host memory only. Returns (checked,
 * failures, worst error over bound, first failure). */
PyObject *rpy_verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    PyObject *values[NUM_PARAMS];
    if (parse_arguments(args, PyVectorcall_NARGS(nargs), kwnames, values) < 0)
        return NULL;
    if (values[P_Q_OUT] == NULL || values[P_K_OUT] == NULL) {
        PyErr_SetString(PyExc_TypeError, "_verify needs q_out and k_out: the outputs to check");
        return NULL;
    }
    prepared_call c;
    if (prepare(values, &c, NULL) < 0)
        return NULL;
    char message[MESSAGE_SIZE];
    rp_err err = {message, sizeof message};
    rp_problem p;
    rp_status st = c.a.q.device.type == RP_DEVICE_CPU
                       ? rp_validate(&c.a, &p, &err)
                       : rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "_verify reads host memory: copy the arrays to the CPU");
    double *freq = st == RP_OK && !p.caller_freq ? PyMem_Malloc((size_t)(p.rotary_dim / 2 + 1) * sizeof *freq) : NULL;
    if (st == RP_OK && !p.caller_freq && freq == NULL)
        st = rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory for the frequencies");
    rp_verify_result r;
    if (st == RP_OK) {
        if (freq != NULL)
            rp_problem_fill_freq(&p, freq);
        Py_BEGIN_ALLOW_THREADS
        rp_ref_verify(&p, &r);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(freq);
    release(&c);
    if (st != RP_OK)
        return rpy_raise(st, message);
    return Py_BuildValue("(LLds)", (long long)r.checked, (long long)r.failures, r.worst_ratio, r.first_failure);
}

/* ---- per-stage timing (ropepool._ropepool._profile) ------------------------------------------ */

enum { ST_START, ST_ARGUMENTS, ST_ARRAYS, ST_AUTOGRAD, ST_CONTEXT, ST_OUTPUTS, ST_LIBRARY, ST_FINISH, NUM_STAMPS };
static const char *const stage_names[NUM_STAMPS] = {
    NULL, "arguments", "arrays", "autograd", "context_stream", "outputs", "library_call", "finish"};
static int profiling;                      /* set by _profile(True); read without the GIL is fine */
static unsigned long long stage_ns[NUM_STAMPS], profiled_calls;

/* Stamps the end of stage `i` when profiling (stamps is NULL otherwise). */
static void stamp(unsigned long long *stamps, int i)
{
    if (stamps != NULL)
        stamps[i] = now_ns();
}

PyObject *rpy_profile(PyObject *module, PyObject *enable)
{
    (void)module;
    PyObject *result = PyDict_New();
    for (int i = 1; result != NULL && i < NUM_STAMPS; i++) {
        PyObject *mean = PyFloat_FromDouble(profiled_calls ? (double)stage_ns[i] / (double)profiled_calls : 0.0);
        if (mean == NULL || PyDict_SetItemString(result, stage_names[i], mean) < 0)
            Py_CLEAR(result);
        Py_XDECREF(mean);
    }
    PyObject *calls = result ? PyLong_FromUnsignedLongLong(profiled_calls) : NULL;
    if (calls == NULL || PyDict_SetItemString(result, "calls", calls) < 0)
        Py_CLEAR(result);
    Py_XDECREF(calls);
    memset(stage_ns, 0, sizeof stage_ns);
    profiled_calls = 0;
    const int on = PyObject_IsTrue(enable);
    if (on < 0)
        Py_CLEAR(result);
    else
        profiling = on;
    return result;
}

/* inv_freq reaches the library as the binding's float64 copy and a host scale as its value, so the
 * library's overlap check cannot see the caller's arrays behind them: they are checked here against
 * q_out and k_out, with the library's own test (overlap.h) and words. Only outputs of q's and k's
 * shape and dtype: the library reports what else is wrong with an output first. */
static int refuse_outputs_over_copied_inputs(PyObject *const values[NUM_PARAMS], const rp_rope_pool_args *a)
{
    static const int outs[2] = {P_Q_OUT, P_K_OUT}, copied[3] = {P_INV_FREQ, P_K_SCALE, P_V_SCALE};
    const rp_tensor *const out_t[2] = {&a->q_rot, &a->k_rot}, *const like_t[2] = {&a->q, &a->k};
    for (int o = 0; o < 2; o++) {
        const rp_tensor *out = out_t[o], *like = like_t[o];
        if (values[outs[o]] == NULL || out->dtype != like->dtype || out->ndim != like->ndim ||
            memcmp(out->shape, like->shape, sizeof out->shape) != 0 || rp_tensor_is_empty(out))
            continue;
        for (int c = 0; c < 3; c++) {
            rp_tensor t;
            if (values[copied[c]] == NULL) /* the usual call: nothing to describe */
                continue;
            if (rpy_array_memory(values[copied[c]], &t) < 0)
                return -1;
            if (t.data != NULL && t.device.type == out->device.type && t.device.index == out->device.index &&
                !rp_tensor_is_empty(&t) && rp_tensors_overlap(out, &t)) {
                char message[MESSAGE_SIZE];
                snprintf(message, sizeof message, "%s overlaps %s: outputs must not share memory with inputs",
                         param_names[outs[o]], param_names[copied[c]]);
                rpy_raise(RP_ERR_OVERLAP, message);
                return -1;
            }
        }
    }
    return 0;
}

/* Converts the arguments into c (see prepare). */
static int prepare_arguments(PyObject *const values[NUM_PARAMS], prepared_call *c, unsigned long long *stamps)
{
    rp_rope_pool_args *a = &c->a;
    rp_tensor *tensors[NUM_ARRAYS] = {&a->q, &a->k, &a->v, &a->positions, &a->slots, &a->k_pool, &a->v_pool};
    int32_t kv_cache_dtype;
    if (scalar_arguments(values, a, &kv_cache_dtype) < 0)
        return -1;
    stamp(stamps, ST_ARGUMENTS);
    const rpy_framework *fw = c->fw = array_arguments(values, tensors);
    if (fw == NULL || rpy_pool_format(values[P_KV_CACHE_DTYPE], kv_cache_dtype, &a->k_pool, &a->pool_dtype) < 0 ||
        rpy_scale(values[P_K_SCALE], "k_scale", a->q.device, &a->k_scale, &a->k_scale_ptr) < 0 ||
        rpy_scale(values[P_V_SCALE], "v_scale", a->q.device, &a->v_scale, &a->v_scale_ptr) < 0 ||
        frequency_argument(values[P_INV_FREQ], a, c->freqs, STACK_FREQS, &c->owned_freqs) < 0 ||
        norm_arguments(fw, values, a) < 0)
        return -1;
    stamp(stamps, ST_ARRAYS);
    if (fw->check_autograd != NULL) {
        PyObject *objs[NUM_ARRAYS + 7];
        const char *names[NUM_ARRAYS + 7];
        /* q, k, v, the norm weights, inv_freq and the scales read (the last three may be no
         * tensors at all); the pools and the caller's outputs written. positions and slots are
         * integer tensors, which cannot require grad. */
        static const int checked[] = {P_Q, P_K, P_V, P_Q_NORM_WEIGHT, P_K_NORM_WEIGHT, P_INV_FREQ, P_K_SCALE,
                                      P_V_SCALE, P_K_POOL, P_V_POOL, P_Q_OUT, P_K_OUT};
        int n = 0, num_read = 0;
        for (size_t i = 0; i < sizeof checked / sizeof checked[0]; i++)
            if (values[checked[i]] != NULL) {
                objs[n] = values[checked[i]], names[n++] = param_names[checked[i]];
                num_read += i < 8;
            }
        if (fw->check_autograd(objs, names, num_read, n) < 0)
            return -1;
    }
    stamp(stamps, ST_AUTOGRAD);
    void *stream;
    if ((c->ctx = context_for(a->q.device, &stream)) == NULL)
        return -1;
    a->stream = stream;
    stamp(stamps, ST_CONTEXT);
    if (output_arguments(fw, values, a, c->outs) < 0 || refuse_outputs_over_copied_inputs(values, a) < 0)
        return -1;
    stamp(stamps, ST_OUTPUTS);
    return 0;
}

/* Everything up to the library call: c's arguments, outputs (new references) and context. 0, or
 * -1 with an exception and c released. */
static int prepare(PyObject *const values[NUM_PARAMS], prepared_call *c, unsigned long long *stamps)
{
    memset(c, 0, sizeof *c);
    if (prepare_arguments(values, c, stamps) == 0)
        return 0;
    release(c);
    return -1;
}

/* _keyword_fields(q_shape, k_pool_dtype, /, **keywords): rope_pool_fused's keywords (not its
 * seven arrays) converted and refused exactly as the call converts and refuses them, for a binding
 * whose arrays this module cannot describe (ropepool.mlx): one set of checks and messages for every
 * surface. q_shape (a tuple, or None) stands for q where inv_freq's conversion asks whether
 * head_dim is q's last dimension, and k_pool_dtype (the library's name of k_pool's dtype) for
 * k_pool where kv_cache_dtype is matched with the pools; host scales and inv_freq are NumPy arrays
 * or numbers. Returns the rp_rope_pool_args fields as a dict. */
PyObject *rpy_keyword_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    PyObject *values[NUM_PARAMS];
    nargs = PyVectorcall_NARGS(nargs);
    const char *pool_dtype_name;
    if (nargs != 2 || (pool_dtype_name = PyUnicode_AsUTF8(args[1])) == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "_keyword_fields(q_shape, k_pool_dtype, /, **keywords) takes q's shape "
                                         "and the name of k_pool's dtype first");
        return NULL;
    }
    /* the arrays' places filled with None, so that parse_arguments asks only for the keywords */
    PyObject *stack[NUM_ARRAYS + NUM_PARAMS];
    const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nkw > NUM_PARAMS) {
        PyErr_SetString(PyExc_TypeError, "_keyword_fields() got too many keywords");
        return NULL;
    }
    for (int i = 0; i < NUM_ARRAYS; i++)
        stack[i] = Py_None;
    for (Py_ssize_t j = 0; j < nkw; j++)
        stack[NUM_ARRAYS + j] = args[2 + j];
    if (parse_arguments(stack, NUM_ARRAYS, kwnames, values) < 0)
        return NULL;
    rp_rope_pool_args a;
    memset(&a, 0, sizeof a);
    int32_t kv_cache_dtype;
    double freqs[STACK_FREQS], *owned = NULL;
    const rp_device host = {RP_DEVICE_CPU, 0};
    const float *device_scale;
    if (args[0] != Py_None) {
        Py_ssize_t n = PySequence_Size(args[0]);
        a.q.ndim = n < 0 ? 0 : (int32_t)(n < RP_MAX_DIMS ? n : RP_MAX_DIMS);
        for (int d = 0; d < a.q.ndim; d++) {
            PyObject *extent = PySequence_GetItem(args[0], d);
            a.q.shape[d] = extent ? PyLong_AsLongLong(extent) : -1;
            Py_XDECREF(extent);
        }
        if (PyErr_Occurred())
            return NULL;
    }
    a.k_pool.dtype = RP_DTYPE_OTHER;
    for (int d = RP_F32; d <= RP_F8_E5M2; d++)
        if (strcmp(pool_dtype_name, rp_dtype_name((rp_dtype)d)) == 0)
            a.k_pool.dtype = d;
    if (scalar_arguments(values, &a, &kv_cache_dtype) < 0 ||
        rpy_pool_format(values[P_KV_CACHE_DTYPE], kv_cache_dtype, &a.k_pool, &a.pool_dtype) < 0 ||
        rpy_scale(values[P_K_SCALE], "k_scale", host, &a.k_scale, &device_scale) < 0 ||
        rpy_scale(values[P_V_SCALE], "v_scale", host, &a.v_scale, &device_scale) < 0 ||
        frequency_argument(values[P_INV_FREQ], &a, freqs, STACK_FREQS, &owned) < 0)
        return NULL;
    PyObject *table = PyList_New(a.inv_freq ? (a.rotary_dim ? a.rotary_dim : a.head_dim) / 2 : 0);
    for (Py_ssize_t i = 0; table != NULL && i < PyList_GET_SIZE(table); i++) {
        PyObject *f = PyFloat_FromDouble(a.inv_freq[i]);
        if (f == NULL)
            Py_CLEAR(table);
        else
            PyList_SET_ITEM(table, i, f);
    }
    PyMem_Free(owned);
    if (table == NULL)
        return NULL;
    return Py_BuildValue(
        "{sLsLsLsdsisLsNsdsLsisisdsds[iii]sIsisIsdsd}", "head_dim", (long long)a.head_dim, "num_qo_heads",
        (long long)a.num_qo_heads, "num_kv_heads", (long long)a.num_kv_heads, "rope_base", a.rope_base, "style",
        (int)a.style, "rotary_dim", (long long)a.rotary_dim, "inv_freq", table, "attention_scaling",
        a.attention_scaling, "v_head_dim", (long long)a.v_head_dim, "kv_layout", (int)a.kv_layout, "pool_dtype",
        (int)a.pool_dtype, "k_scale", a.k_scale, "v_scale", a.v_scale, "mrope_section", (int)a.mrope_section[0],
        (int)a.mrope_section[1], (int)a.mrope_section[2], "mrope_interleaved", (unsigned)a.mrope_interleaved,
        "num_threads", (int)a.num_threads, "flags", (unsigned)a.flags, "norm_eps", a.norm_eps, "norm_weight_offset",
        a.norm_weight_offset);
}

/* A call the torch dispatcher must see runs as the operator, through ropepool.torch_op.call_op
 * with the caller's arguments:
 * - q is a torch FakeTensor (non-strict torch.export, make_fx and other tracers run the model on
 *   them; Dynamo traces call_op itself): it has no memory to describe;
 * - a TorchDispatchMode is active (make_fx on real tensors, FlopCounterMode, a caller's own): it
 *   sees every operator, and a direct call would be missing from what it records (a trace
 *   replayed without the pool writes).
 * The operator's kernel calls this function again, with the modes off; should a caller's mode
 * leave one on (a kernel run under DisableTorchDispatch), `routed` keeps that call direct. */
static PyObject *is_fake, *call_op; /* torch._subclasses.fake_tensor.is_fake, torch_op.call_op */
static _Thread_local int routed;    /* this thread is inside a call routed to the operator */

/* call_op, or NULL if torch cannot give it (the call then runs directly). No exception pending. */
static PyObject *operator_call(void)
{
    if (is_fake == NULL) {
        PyObject *fake = PyImport_ImportModule("torch._subclasses.fake_tensor");
        PyObject *op = fake ? PyImport_ImportModule("ropepool.torch_op") : NULL;
        is_fake = fake ? PyObject_GetAttrString(fake, "is_fake") : NULL;
        call_op = op ? PyObject_GetAttrString(op, "call_op") : NULL;
        Py_XDECREF(fake);
        Py_XDECREF(op);
        if (is_fake == NULL || call_op == NULL) {
            Py_CLEAR(is_fake);
            Py_CLEAR(call_op);
            PyErr_Clear();
        }
    }
    return call_op;
}

/* Whether the call on q (a torch tensor or anything else) runs as the operator. Called with no
 * exception pending, it leaves none. */
static int for_the_operator(PyObject *q)
{
    if (routed || rpy_numpy.is_array(q))
        return 0;
    /* A tracer's tensors are subclasses: asked before anything is read, since reading a traced
     * size would fix it (torch.export's dynamic T would become a constant). */
    if (rpy_torch_subclass(q) && operator_call() != NULL) {
        PyObject *fake = PyObject_CallOneArg(is_fake, q);
        const int traced = fake != NULL && PyObject_IsTrue(fake) == 1;
        Py_XDECREF(fake);
        PyErr_Clear();
        if (traced)
            return 1;
    }
    return rpy_torch_dispatch_mode(q) && operator_call() != NULL;
}

PyObject *rpy_rope_pool_fused(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    (void)module;
    unsigned long long stamps_buf[NUM_STAMPS], *stamps = profiling ? stamps_buf : NULL;
    stamp(stamps, ST_START);
    PyObject *values[NUM_PARAMS];
    prepared_call c;
    if (parse_arguments(args, PyVectorcall_NARGS(nargs), kwnames, values) < 0)
        return NULL;
    if (for_the_operator(values[P_Q])) {
        routed = 1;
        PyObject *result = PyObject_Vectorcall(call_op, args, (size_t)nargs, kwnames);
        routed = 0;
        return result;
    }
    if (prepare(values, &c, stamps) < 0)
        return NULL;
    char message[MESSAGE_SIZE];
    rp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = rp_rope_pool_fused(c.ctx, &c.a, message, sizeof message);
    Py_END_ALLOW_THREADS
    stamp(stamps, ST_LIBRARY);
    PyObject *result = NULL;
    if (st != RP_OK) {
        in_python_words(message);
        rpy_raise(st, message);
    } else {
        /* Written in place: the pools, and q_out / k_out when the caller gave them. */
        PyObject *written[4] = {values[P_K_POOL], values[P_V_POOL]};
        int n = 2;
        for (int i = 0; i < 2; i++)
            if (values[P_Q_OUT + i] != NULL)
                written[n++] = c.outs[i];
        if (c.fw->mark_written == NULL || c.fw->mark_written(written, n) == 0)
            result = PyTuple_Pack(4, c.outs[0], c.outs[1], values[P_K_POOL], values[P_V_POOL]);
    }
    release(&c);
    stamp(stamps, ST_FINISH);
    if (stamps != NULL && result != NULL) {
        for (int i = 1; i < NUM_STAMPS; i++)
            stage_ns[i] += stamps[i] - stamps[i - 1];
        profiled_calls++;
    }
    return result;
}
