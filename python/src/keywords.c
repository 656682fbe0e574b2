/*
 * keywords.c — the call's scalar keyword arguments as the fields of rp_rope_pool_args.
 *
 * The binding converts; the library validates. A value of the wrong Python type, or one that has
 * no field value at all (a string that names no layout, a number too large for a double), is
 * refused here with a RopePoolError naming the argument and the value; every range check (is
 * rotary_dim even, is k_scale positive, ...) is the library's. Also the environment's integer
 * settings (ROPEPOOL_NUM_THREADS, ROPEPOOL_OUTPUT_CACHE_MB).
 */
#include "binding.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* True, False or a numpy.bool_: never a number here (rope_base=True would silently mean 1.0). */
static int is_bool(PyObject *obj)
{
    const char *type = Py_TYPE(obj)->tp_name;
    return PyBool_Check(obj) || strcmp(type, "numpy.bool") == 0 || strcmp(type, "numpy.bool_") == 0;
}

int rpy_integer(PyObject *obj, const char *name, long long lo, long long hi, long long *out)
{
    if (!PyIndex_Check(obj) || is_bool(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.200s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    *out = PyLong_AsLongLong(obj);
    if (*out == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) { /* an index type that refuses: a 1-element array */
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be an int, got %.200s", name, Py_TYPE(obj)->tp_name);
            return -1;
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
    } else if (*out >= lo && *out <= hi) {
        return 0;
    }
    return rpy_refuse("%s = %S is out of range [%lld, %lld]", name, obj, lo, hi);
}

/* repr(obj), shortened to its head and its length when it is long (10**400 has 401 digits). */
static PyObject *short_repr(PyObject *obj)
{
    PyObject *r = PyObject_Repr(obj);
    if (r == NULL || PyUnicode_GET_LENGTH(r) <= 40)
        return r;
    PyObject *head = PyUnicode_Substring(r, 0, 16);
    PyObject *text = head ? PyUnicode_FromFormat("%U... (%zd characters)", head, PyUnicode_GET_LENGTH(r)) : NULL;
    Py_XDECREF(head);
    Py_DECREF(r);
    return text;
}

int rpy_float(PyObject *obj, const char *name, double *out)
{
    if (PyFloat_CheckExact(obj)) { /* the usual rope_base=1e4: none of the checks below applies */
        *out = PyFloat_AS_DOUBLE(obj);
        return 0;
    }
    /* NumPy's complex scalars convert to float by dropping the imaginary part, with a warning
     * only (k_scale=np.complex128(0.5 + 1j) would run with 0.5): refused as Python's complex is. */
    if (is_bool(obj) || PyComplex_Check(obj) || rpy_numpy_is_complex_scalar(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a number, got %.200s", name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (!PyLong_CheckExact(obj) && rpy_torch_check_number(obj, name) < 0)
        return -1;
    *out = PyFloat_AsDouble(obj);
    if (*out != -1.0 || !PyErr_Occurred())
        return 0;
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a number, got %.200s", name, Py_TYPE(obj)->tp_name);
    } else if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Clear();
        PyObject *r = short_repr(obj);
        if (r != NULL) /* "finite", not "positive": norm_weight_offset may be negative */
            rpy_refuse("%s must be a finite number, got %U, too large for a float64", name, r);
        Py_XDECREF(r);
    } else if (PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_RuntimeError)) {
        /* an object whose __float__ refuses: a torch tensor of two elements, complex or on 'meta' */
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        const rpy_framework *fw = rpy_framework_of(obj);
        PyErr_Format(PyExc_TypeError, "%s must be a number, got %.200s (%S)", name,
                     fw ? fw->type_name : Py_TYPE(obj)->tp_name, value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(trace);
    }
    return -1;
}

/* What each flag means, in its refusal: the Python layers that check a flag before the binding
 * sees it (torch_op.call_op, which Dynamo traces) read them as ropepool._ropepool._FLAG_MEANINGS. */
const char *const rpy_flag_meanings[RPY_NUM_FLAGS][2] = {
    {"is_neox", "True (NeoX rotate-half) or False (GPT-J interleaved)"},
    {"checked", "True (CUDA: validate the slot values on the host first) or False"},
    {"mrope_interleaved", "True (Qwen3-VL's interleaved rule) or False"},
};

/* A bool or numpy.bool_ (not a truthy string or list, which would be a mistake): 0 or 1 in
 * *truth, -1 with a RopePoolError telling what the argument means. */
int rpy_strict_bool(PyObject *obj, const char *name, const char *meaning, int *truth)
{
    if (!is_bool(obj))
        return rpy_refuse("%s must be %s, got %R", name, meaning, obj);
    return (*truth = PyObject_IsTrue(obj)) < 0 ? -1 : 0;
}

int rpy_mrope(PyObject *section, PyObject *interleaved, int32_t out[3], uint32_t *interleaved_out)
{
    int truth = 0;
    out[0] = out[1] = out[2] = 0;
    *interleaved_out = 0;
    if (interleaved != NULL &&
        rpy_strict_bool(interleaved, "mrope_interleaved", rpy_flag_meanings[RPY_FLAG_MROPE_INTERLEAVED][1], &truth) < 0)
        return -1;
    *interleaved_out = (uint32_t)truth;
    if (section == NULL)
        return 0;
    /* a set or dict has no order of its own: {24, 20, 16} is read in hash order, not as written */
    const int unordered = PyAnySet_Check(section) || PyDict_Check(section);
    PyObject *seq = PyUnicode_Check(section) || unordered ? NULL : PySequence_Fast(section, "");
    if (seq == NULL || PySequence_Fast_GET_SIZE(seq) != 3) {
        PyErr_Clear();
        Py_XDECREF(seq);
        return rpy_refuse("mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, got %R", section);
    }
    int result = 0;
    for (int i = 0; i < 3 && result == 0; i++) {
        long long value;
        result = rpy_integer(PySequence_Fast_GET_ITEM(seq, i), "mrope_section entry", INT32_MIN, INT32_MAX, &value);
        out[i] = (int32_t)value;
    }
    Py_DECREF(seq);
    return result;
}

int rpy_is_neox(PyObject *obj, int32_t *style)
{
    *style = RP_ROPE_NEOX;
    if (obj == NULL)
        return 0;
    int truth = 1;
    if (rpy_strict_bool(obj, "is_neox", rpy_flag_meanings[RPY_FLAG_IS_NEOX][1], &truth) < 0)
        return -1;
    *style = truth ? RP_ROPE_NEOX : RP_ROPE_GPTJ;
    return 0;
}

/* The index of obj (a str) in names[0, n), or -1 after raising a RopePoolError listing them. */
static int choose(PyObject *obj, const char *name, const char *const *names, int n, const char *choices)
{
    if (PyUnicode_Check(obj))
        for (int i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(obj, names[i]) == 0)
                return i;
    return rpy_refuse("%s must be one of %s, got %R", name, choices, obj);
}

int rpy_kv_layout(PyObject *obj, int32_t *layout)
{
    static const char *const names[] = {"flat", "NHD", "HND"}; /* indexed by rp_kv_layout */
    *layout = RP_KV_FLAT;
    if (obj == NULL)
        return 0;
    const int i = choose(obj, "kv_layout", names, 3, "'flat' ([P, Hk, D]), 'NHD' ([blocks, block_size, Hk, D]) "
                         "or 'HND' ([blocks, Hk, block_size, D])");
    if (i < 0)
        return -1;
    *layout = i;
    return 0;
}

int rpy_kv_cache_dtype(PyObject *obj, int32_t *format)
{
    static const char *const names[] = {"auto", "fp8_e4m3", "fp8", "fp8_e5m2"};
    static const int32_t formats[] = {0, RP_F8_E4M3, RP_F8_E4M3, RP_F8_E5M2};
    *format = 0;
    if (obj == NULL)
        return 0;
    const int i = choose(obj, "kv_cache_dtype", names, 4, "'auto', 'fp8_e4m3' (or vLLM's 'fp8') or 'fp8_e5m2'");
    if (i < 0)
        return -1;
    *format = formats[i];
    return 0;
}

int rpy_pool_format(PyObject *obj, int32_t kv_cache_dtype, const rp_tensor *k_pool, int32_t *pool_dtype)
{
    const rp_dtype dt = (rp_dtype)k_pool->dtype;
    *pool_dtype = 0;
    /* uint8 without a format: the library refuses it after the seed's checks (call.c: in_python_words) */
    if (dt == RP_U8) {
        *pool_dtype = kv_cache_dtype;
        return 0;
    }
    if (kv_cache_dtype == 0 || (int32_t)dt == kv_cache_dtype)
        return 0; /* the pools' dtype says it (float8_e4m3fn and float8_e5m2 pools included) */
    if (dt == RP_F8_E4M3 || dt == RP_F8_E5M2)
        return rpy_refuse("kv_cache_dtype=%R does not match k_pool's dtype %s", obj, rp_dtype_name(dt));
    return rpy_refuse("kv_cache_dtype=%R needs fp8 pools (uint8, float8_e4m3fn or float8_e5m2), got k_pool %s",
                      obj, rp_dtype_name(dt));
}

/* An array argument of any framework the binding knows, described; 1 if obj is one, 0 if it is
 * not an array at all, -1 on error. */
static int describe_array(PyObject *obj, const char *name, rp_tensor *t)
{
    const rpy_framework *fw = rpy_framework_of(obj);
    if (fw == NULL)
        return 0;
    return fw->to_tensor(obj, name, t) < 0 ? -1 : 1;
}

static int64_t element_count(const rp_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim && d < RP_MAX_DIMS; d++)
        n *= t->shape[d];
    return n;
}

/* A tensor with elements but no data (torch's efficient zero tensors) cannot be read. */
static int has_data(const rp_tensor *t, const char *name)
{
    if (t->data != NULL || element_count(t) == 0)
        return 1;
    rpy_refuse("%s data is NULL but it has %lld elements", name, (long long)element_count(t));
    return 0;
}

/* Element i of a 1-D float32/float64 host tensor, exactly as a double. */
static double host_element(const rp_tensor *t, int64_t i)
{
    const int64_t at = i * (t->ndim ? t->strides[0] : 0);
    return t->dtype == RP_F32 ? (double)((const float *)t->data)[at] : ((const double *)t->data)[at];
}

/* The library reads a scale of 0 as "not given" (1.0); a caller who passes 0 (a calibration that
 * went wrong) is refused instead, as is any other scale that is not positive and finite. */
static int explicit_scale(const char *name, double value)
{
    if (isfinite(value) && value > 0.0)
        return 0;
    char text[32]; /* PyUnicode_FromFormat has no %g */
    snprintf(text, sizeof text, "%g", value);
    return rpy_refuse("%s must be a positive finite number (default 1.0), got %s", name, text);
}

PyObject *rpy_shape_tuple(const rp_tensor *t)
{
    PyObject *shape = PyTuple_New(t->ndim);
    for (int d = 0; shape != NULL && d < t->ndim; d++) {
        PyObject *extent = PyLong_FromLongLong((long long)t->shape[d]);
        if (extent == NULL)
            Py_CLEAR(shape);
        else
            PyTuple_SET_ITEM(shape, d, extent);
    }
    return shape;
}

int rpy_scale(PyObject *obj, const char *name, rp_device device, double *value, const float **ptr)
{
    *value = 1.0;
    *ptr = NULL;
    if (obj == NULL)
        return 0;
    rp_tensor t;
    const int is_array = describe_array(obj, name, &t);
    if (is_array < 0)
        return -1;
    if (!is_array) {
        if (rpy_float(obj, name, value) < 0)
            return -1;
        return explicit_scale(name, *value);
    }
    if (!has_data(&t, name))
        return -1;
    const int host = t.device.type == RP_DEVICE_CPU;
    if (element_count(&t) != 1 || (t.dtype != RP_F32 && (t.dtype != RP_F64 || !host))) {
        /* a dtype the library cannot name (complex, ...): the framework's own name for it */
        PyObject *dtype = t.dtype == RP_DTYPE_OTHER ? PyObject_GetAttrString(obj, "dtype") : NULL;
        PyErr_Clear(); /* no dtype attribute: the library's name ("an unsupported type") will do */
        PyObject *text = dtype != NULL ? PyObject_Str(dtype)
                                       : PyUnicode_FromString(rp_dtype_name((rp_dtype)t.dtype));
        Py_XDECREF(dtype);
        if (text != NULL)
            rpy_refuse("%s must be a number or a one-element float32 array (float64 on the host), got %lld "
                       "element%s of %U", name, (long long)element_count(&t), element_count(&t) == 1 ? "" : "s",
                       text);
        Py_XDECREF(text);
        return -1;
    }
    if (host) {
        *value = host_element(&t, 0); /* read now: the call uses the value it has at this moment */
        return explicit_scale(name, *value);
    }
    if (device.type != RP_DEVICE_CUDA)
        return rpy_refuse("%s is on cuda:%d but the call runs on the CPU: pass a number or a CPU array",
                          name, (int)t.device.index);
    if (t.device.index != device.index)
        return rpy_refuse("%s is on cuda:%d but q is on cuda:%d", name, (int)t.device.index, (int)device.index);
    *value = 0.0; /* the library takes one of the two */
    *ptr = (const float *)t.data; /* read by the kernel: a captured CUDA graph sees new values */
    return 0;
}

/* obj as a host array: itself, its .cpu() copy (a device tensor), or numpy.asarray(obj). */
static PyObject *host_array(PyObject *obj, rp_tensor *t)
{
    const int is_array = describe_array(obj, "inv_freq", t);
    if (is_array < 0)
        return NULL;
    if (is_array && t->device.type == RP_DEVICE_CPU) {
        Py_INCREF(obj);
        return obj;
    }
    PyObject *host;
    if (is_array) {
        host = PyObject_CallMethod(obj, "cpu", NULL);
    } else {
        PyObject *numpy = PyImport_ImportModule("numpy");
        host = numpy ? PyObject_CallMethod(numpy, "asarray", "(O)", obj) : NULL;
        Py_XDECREF(numpy);
        if (host == NULL && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
            PyErr_Clear();
            rpy_refuse("inv_freq must be a 1-D float32 or float64 array-like, got %.200s", Py_TYPE(obj)->tp_name);
            return NULL;
        }
    }
    if (host != NULL && describe_array(host, "inv_freq", t) != 1)
        Py_CLEAR(host);
    return host;
}

int rpy_inv_freq(PyObject *obj, int64_t count, double *out)
{
    rp_tensor t;
    PyObject *host = host_array(obj, &t);
    if (host == NULL)
        return -1;
    int result = 0;
    if (t.dtype != RP_F32 && t.dtype != RP_F64) {
        /* the library's name where it has one ("int32", not torch's "torch.int32": the same words
         * on every surface), else the framework's */
        PyObject *dtype = t.dtype == RP_DTYPE_OTHER ? PyObject_GetAttrString(host, "dtype")
                                                    : PyUnicode_FromString(rp_dtype_name((rp_dtype)t.dtype));
        if (dtype != NULL)
            rpy_refuse("inv_freq must hold float32 or float64 values, got dtype %S", dtype);
        Py_XDECREF(dtype);
        result = -1;
    } else if (!has_data(&t, "inv_freq")) {
        result = -1;
    } else if (t.ndim != 1 || t.shape[0] != count) {
        PyObject *shape = rpy_shape_tuple(&t);
        if (shape != NULL)
            rpy_refuse("inv_freq must be 1-D with rotary_dim/2 = %lld entries, got shape %R", (long long)count, shape);
        Py_XDECREF(shape);
        result = -1;
    } else {
        for (int64_t i = 0; i < count; i++)
            out[i] = host_element(&t, i);
    }
    Py_DECREF(host); /* after the copy: host may be the only reference to the memory read */
    return result;
}

int rpy_array_memory(PyObject *obj, rp_tensor *t)
{
    memset(t, 0, sizeof *t);
    const int is_array = obj == NULL ? 0 : describe_array(obj, "", t);
    if (is_array <= 0)
        t->data = NULL;
    return is_array < 0 ? -1 : 0;
}

int rpy_env_integer(const char *name, long long lo, long long hi, long long fallback, long long *out)
{
    const char *text = getenv(name);
    *out = fallback;
    if (text == NULL || *text == '\0')
        return 0;
    char *end;
    errno = 0;
    const long long value = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < lo || value > hi)
        return -1;
    *out = value;
    return 0;
}
