/*
 * call.c — ropepool.rope_pool_fused: the seed's call on NumPy arrays and PyTorch tensors.
 *
 * The path of a call: parse the arguments (vectorcall, no intermediate tuple or dict), describe the
 * seven arrays as rp_tensors without copying, allocate q_rot and k_rot in q's framework, dtype and
 * device, and call rp_rope_pool_fused with the GIL released. Every check on shapes, dtypes,
 * devices, strides, writability, overlap and slot values is the library's, and so is every message:
 * a failure raises RopePoolError (a ValueError) carrying it verbatim. Before the library runs, the
 * binding only refuses what the library cannot see: an argument that is not an array, arrays of
 * two frameworks, and argument values of the wrong Python type. Nothing of the caller's is written
 * when a call fails; the outputs allocated for it are dropped.
 */
#include "binding.h"

#include <limits.h>
#include <string.h>

enum {
    P_Q, P_K, P_V, P_POSITIONS, P_SLOTS, P_K_POOL, P_V_POOL,          /* positional (or keyword) */
    P_HEAD_DIM, P_NUM_QO_HEADS, P_NUM_KV_HEADS, P_ROPE_BASE,          /* required keyword-only   */
    P_THREADS, P_CHECKED, P_STYLE, P_ROTARY_DIM,                      /* optional keyword-only   */
    NUM_PARAMS,
    NUM_ARRAYS = P_HEAD_DIM,
    NUM_REQUIRED = P_THREADS,
    MESSAGE_SIZE = 512
};

static const char *const param_names[NUM_PARAMS] = {
    "q", "k", "v", "positions", "slots", "k_pool", "v_pool",
    "head_dim", "num_qo_heads", "num_kv_heads", "rope_base",
    "threads", "checked", "style", "rotary_dim",
};
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
    "num_qo_heads, num_kv_heads, rope_base, threads=None, checked=False, style='neox', "
    "rotary_dim=None)\n"
    "--\n"
    "\n"
    "Apply NeoX RoPE to q and k, and write the rotated keys and the values into the KV pool.\n"
    "\n"
    "The call of sglang's sgl_kernel.metal.rope_pool_fused, backed by libropepool.\n"
    "\n"
    "Args:\n"
    "    q: [num_tokens, num_qo_heads, head_dim], float32 | float16 | bfloat16.\n"
    "    k, v: [num_tokens, num_kv_heads, head_dim], q's dtype.\n"
    "    positions: [num_tokens] int32 | int64, the token's position in its sequence.\n"
    "    slots: [num_tokens] int32 | int64, the pool row of each token; < 0 skips its write.\n"
    "    k_pool, v_pool: [pool_size, num_kv_heads, head_dim], q's dtype, updated in place.\n"
    "    head_dim, num_qo_heads, num_kv_heads, rope_base: the model's configuration.\n"
    "    threads: at most this many CPU threads for this call (default: the module's,\n"
    "        ROPEPOOL_NUM_THREADS or one per CPU).\n"
    "    checked: CUDA: validate slot values on the host before launching (one sync).\n"
    "    style, rotary_dim: reserved for later RoPE variants ('neox' and head_dim only now).\n"
    "\n"
    "Arrays are NumPy arrays (bfloat16 through ml_dtypes) or torch tensors (CPU, or CUDA on\n"
    "the tensor's device and current stream), all of one framework, passed without copying:\n"
    "strided views such as slices of a fused QKV projection are fine.\n"
    "\n"
    "Returns:\n"
    "    (q_rot, k_rot, k_pool, v_pool): q_rot and k_rot are new contiguous arrays of q's and\n"
    "    k's shape, dtype and device; k_pool and v_pool are the caller's objects, updated.\n"
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
    for (int i = 0; i < NUM_REQUIRED; i++)
        if (values[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "rope_pool_fused() missing required %sargument: '%s'",
                         i < NUM_ARRAYS ? "" : "keyword-only ", param_names[i]);
            return -1;
        }
    return 0;
}

/* An integer argument (int, numpy integer, anything with __index__). [lo, hi] is the range of the
 * library's field; the library checks the value itself. */
static int integer_argument(PyObject *obj, const char *name, long long lo, long long hi, long long *out)
{
    if (!PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.200s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLong(obj);
    if (*out == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
    } else if (*out >= lo && *out <= hi) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s = %S is out of range [%lld, %lld]", name, obj, lo, hi);
    return -1;
}

static int optional_integer(PyObject *obj, const char *name, long long lo, long long hi, long long *out)
{
    *out = 0;
    return obj == NULL || obj == Py_None ? 0 : integer_argument(obj, name, lo, hi, out);
}

static int float_argument(PyObject *obj, const char *name, double *out)
{
    *out = PyFloat_AsDouble(obj);
    if (*out == -1.0 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be a number, got %.200s", name, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    return 0;
}

/* style: 'neox' (the default), 'gptj', or the rp_rope_style value; the library decides what it
 * supports. */
static int style_argument(PyObject *obj, int32_t *out)
{
    static const char *const names[] = {"neox", "gptj"}; /* indexed by rp_rope_style */
    *out = RP_ROPE_NEOX;
    if (obj == NULL || obj == Py_None)
        return 0;
    if (PyUnicode_Check(obj)) {
        for (int i = 0; i < 2; i++)
            if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0) {
                *out = i;
                return 0;
            }
        PyErr_Format(PyExc_ValueError, "style must be 'neox' or 'gptj', got %R", obj);
        return -1;
    }
    long long value;
    if (integer_argument(obj, "style", INT_MIN, INT_MAX, &value) < 0)
        return -1;
    *out = (int32_t)value;
    return 0;
}

static int scalar_arguments(PyObject *const values[NUM_PARAMS], rp_rope_pool_args *a)
{
    long long head_dim, num_qo_heads, num_kv_heads, threads, rotary_dim;
    const long long big = LLONG_MAX, small = LLONG_MIN;
    if (integer_argument(values[P_HEAD_DIM], "head_dim", small, big, &head_dim) < 0 ||
        integer_argument(values[P_NUM_QO_HEADS], "num_qo_heads", small, big, &num_qo_heads) < 0 ||
        integer_argument(values[P_NUM_KV_HEADS], "num_kv_heads", small, big, &num_kv_heads) < 0 ||
        float_argument(values[P_ROPE_BASE], "rope_base", &a->rope_base) < 0 ||
        optional_integer(values[P_THREADS], "threads", INT_MIN, INT_MAX, &threads) < 0 ||
        optional_integer(values[P_ROTARY_DIM], "rotary_dim", small, big, &rotary_dim) < 0 ||
        style_argument(values[P_STYLE], &a->style) < 0)
        return -1;
    a->head_dim = head_dim;
    a->num_qo_heads = num_qo_heads;
    a->num_kv_heads = num_kv_heads;
    a->num_threads = (int32_t)threads;
    a->rotary_dim = rotary_dim;
    if (values[P_CHECKED] != NULL) {
        const int checked = PyObject_IsTrue(values[P_CHECKED]);
        if (checked < 0)
            return -1;
        a->flags = checked ? RP_CHECK_SLOTS : 0;
    }
    return 0;
}

static const rpy_framework *const frameworks[] = {&rpy_numpy, &rpy_torch};

static const rpy_framework *framework_of(PyObject *obj)
{
    for (size_t i = 0; i < sizeof frameworks / sizeof frameworks[0]; i++)
        if (frameworks[i]->is_array(obj))
            return frameworks[i];
    return NULL;
}

/* Fills the seven input tensors, all of q's framework. */
static const rpy_framework *array_arguments(PyObject *const values[NUM_PARAMS], rp_tensor *tensors[NUM_ARRAYS])
{
    const rpy_framework *fw = framework_of(values[P_Q]);
    if (fw == NULL) {
        PyErr_Format(PyExc_TypeError, "q must be a numpy.ndarray or a torch.Tensor, got %.200s",
                     Py_TYPE(values[P_Q])->tp_name);
        return NULL;
    }
    for (int i = 0; i < NUM_ARRAYS; i++) {
        PyObject *obj = values[i];
        if (i != P_Q && !fw->is_array(obj)) {
            const rpy_framework *other = framework_of(obj);
            if (other != NULL)
                PyErr_Format(PyExc_TypeError, "%s is a %s but q is a %s: pass all arrays from one framework",
                             param_names[i], other->type_name, fw->type_name);
            else
                PyErr_Format(PyExc_TypeError, "%s must be a %s like q, got %.200s", param_names[i],
                             fw->type_name, Py_TYPE(obj)->tp_name);
            return NULL;
        }
        if (fw->to_tensor(obj, param_names[i], tensors[i]) < 0)
            return NULL;
    }
    return fw;
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

PyObject *rpy_rope_pool_fused(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    (void)module;
    PyObject *values[NUM_PARAMS];
    rp_rope_pool_args a;
    memset(&a, 0, sizeof a);
    rp_tensor *tensors[NUM_ARRAYS] = {&a.q, &a.k, &a.v, &a.positions, &a.slots, &a.k_pool, &a.v_pool};
    if (parse_arguments(args, PyVectorcall_NARGS(nargs), kwnames, values) < 0 ||
        scalar_arguments(values, &a) < 0)
        return NULL;
    const rpy_framework *fw = array_arguments(values, tensors);
    if (fw == NULL)
        return NULL;
    void *stream;
    rp_context *ctx = context_for(a.q.device, &stream);
    if (ctx == NULL)
        return NULL;
    a.stream = stream;

    PyObject *q_rot = fw->empty_like(values[P_Q], &a.q, &a.q_rot);
    PyObject *k_rot = q_rot ? fw->empty_like(values[P_K], &a.k, &a.k_rot) : NULL;
    if (k_rot == NULL) {
        Py_XDECREF(q_rot);
        return NULL;
    }

    char message[MESSAGE_SIZE];
    rp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = rp_rope_pool_fused(ctx, &a, message, sizeof message);
    Py_END_ALLOW_THREADS
    if (st != RP_OK) {
        Py_DECREF(q_rot);
        Py_DECREF(k_rot);
        return rpy_raise(st, message);
    }
    PyObject *result = PyTuple_Pack(4, q_rot, k_rot, values[P_K_POOL], values[P_V_POOL]);
    Py_DECREF(q_rot);
    Py_DECREF(k_rot);
    return result;
}
