/*
 * torch_surface.c — a torch tensor read through its Python surface: is_cpu / is_cuda
 * (+ get_device()), dtype (compared by identity with torch's dtype objects), shape, stride() and
 * data_ptr(), with interned names. The path for Tensor subclasses (their __torch_function__ is
 * honoured) and for a torch without DLPack's C exchange API; and the one place that turns torch's
 * refusal to describe a tensor into an error naming the argument.
 */
#include "torch.h"

#include <string.h>

static PyObject *strided_layout; /* torch.strided */

static struct {
    const char *name;
    rp_dtype dtype;
    PyObject *obj; /* torch.<name>, or NULL where this torch lacks it */
} torch_dtypes[] = {
    {"float32", RP_F32, NULL},      {"float16", RP_F16, NULL},  {"bfloat16", RP_BF16, NULL},
    {"int32", RP_I32, NULL},        {"int64", RP_I64, NULL},    {"float64", RP_F64, NULL},
    {"int8", RP_I8, NULL},          {"uint8", RP_U8, NULL},     {"int16", RP_I16, NULL},
    {"uint16", RP_U16, NULL},       {"uint32", RP_U32, NULL},   {"uint64", RP_U64, NULL},
    {"bool", RP_BOOL, NULL},        {"float8_e4m3fn", RP_F8_E4M3, NULL},
    {"float8_e5m2", RP_F8_E5M2, NULL},
};
enum { NUM_TORCH_DTYPES = sizeof torch_dtypes / sizeof torch_dtypes[0] };

static PyObject *s_is_cpu, *s_is_cuda, *s_get_device, *s_device, *s_dtype, *s_shape, *s_stride,
    *s_data_ptr, *s_layout;

static int intern_names(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {{&s_is_cpu, "is_cpu"}, {&s_is_cuda, "is_cuda"}, {&s_get_device, "get_device"},
                 {&s_device, "device"}, {&s_dtype, "dtype"},     {&s_shape, "shape"},
                 {&s_stride, "stride"}, {&s_data_ptr, "data_ptr"}, {&s_layout, "layout"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    return 0;
}

int rpy_torch_surface_init(PyObject *torch)
{
    if (intern_names() < 0 || (strided_layout = PyObject_GetAttrString(torch, "strided")) == NULL)
        return -1;
    for (int i = 0; i < NUM_TORCH_DTYPES; i++)
        torch_dtypes[i].obj = PyObject_GetAttrString(torch, torch_dtypes[i].name);
    PyErr_Clear(); /* an older torch lacks some dtypes: those stay NULL */
    return 0;
}

static rp_dtype dtype_of(PyObject *dtype)
{
    for (int i = 0; i < NUM_TORCH_DTYPES; i++)
        if (dtype == torch_dtypes[i].obj)
            return torch_dtypes[i].dtype;
    return RP_DTYPE_OTHER;
}

/* Sets t->device: cpu, or cuda with its index; any other device is refused here, naming it. */
int rpy_torch_read_device(PyObject *obj, const char *name, rp_tensor *t)
{
    PyObject *flag = PyObject_GetAttr(obj, s_is_cpu);
    if (flag == NULL)
        return -1;
    const int is_cpu = flag == Py_True;
    Py_DECREF(flag);
    if (is_cpu) {
        t->device.type = RP_DEVICE_CPU;
        return 0;
    }
    if ((flag = PyObject_GetAttr(obj, s_is_cuda)) == NULL)
        return -1;
    const int is_cuda = flag == Py_True;
    Py_DECREF(flag);
    if (is_cuda) {
        PyObject *index = PyObject_CallMethodNoArgs(obj, s_get_device);
        if (index == NULL)
            return -1;
        t->device.type = RP_DEVICE_CUDA;
        t->device.index = (int32_t)PyLong_AsLong(index);
        Py_DECREF(index);
        return PyErr_Occurred() ? -1 : 0;
    }
    PyObject *device = PyObject_GetAttr(obj, s_device);
    if (device != NULL)
        rpy_refuse("%s is on device '%S': ropepool takes cpu and cuda tensors", name, device);
    Py_XDECREF(device);
    return -1;
}

/* Copies up to RP_MAX_DIMS entries of a tuple of ints into dst; returns the tuple's length. */
static Py_ssize_t read_ints(PyObject *tuple, int64_t *dst)
{
    const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    for (Py_ssize_t d = 0; d < n && d < RP_MAX_DIMS; d++) {
        dst[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, d));
        if (dst[d] == -1 && PyErr_Occurred())
            return -1;
    }
    return n;
}

/* The pending exception, normalised and carrying its traceback (NULL if none). */
static PyObject *take_exception(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL)
        PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

/* The first line of an exception's text (torch appends C++ stack traces to some). */
static PyObject *first_line(PyObject *exc)
{
    PyObject *text = exc ? PyObject_Str(exc) : PyUnicode_FromString("unknown error");
    if (text == NULL)
        return NULL;
    const Py_ssize_t end = PyUnicode_FindChar(text, '\n', 0, PyUnicode_GET_LENGTH(text), 1);
    if (end < 0)
        return text;
    PyObject *line = PyUnicode_Substring(text, 0, end);
    Py_DECREF(text);
    return line;
}

int rpy_torch_refuse_transform_tensor(PyObject *obj, const char *name)
{
    static PyObject *is_wrapped; /* torch._C._functorch.is_functorch_wrapped_tensor */
    if (is_wrapped == NULL) {
        PyObject *functorch = PyImport_ImportModule("torch._C._functorch");
        is_wrapped = functorch ? PyObject_GetAttrString(functorch, "is_functorch_wrapped_tensor") : NULL;
        Py_XDECREF(functorch);
    }
    PyObject *type, *value, *traceback; /* the caller's pending refusal, if any: kept unless replaced */
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *answer = is_wrapped ? PyObject_CallOneArg(is_wrapped, obj) : NULL;
    const int wrapped = answer != NULL && PyObject_IsTrue(answer) == 1;
    Py_XDECREF(answer);
    PyErr_Clear();
    if (!wrapped) {
        PyErr_Restore(type, value, traceback);
        return 0;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return rpy_refuse("%s is a tensor of a torch.func transform (grad, vjp, jvp, vmap, functionalize), which "
                      "rope_pool_fused does not run under: it has no derivative and no batching rule, and writes "
                      "the pools in place; call it outside the transform", name);
}

/* torch refused to describe obj: raise an error that names the argument instead. A device other
 * than cpu/cuda and a layout other than strided are named; anything else keeps torch's message
 * (its first line) as a RopePoolError caused by torch's exception. */
int rpy_torch_explain_refusal(PyObject *obj, const char *name)
{
    if (rpy_torch_refuse_transform_tensor(obj, name) < 0)
        return -1;
    PyObject *cause = take_exception();
    rp_tensor ignored;
    memset(&ignored, 0, sizeof ignored);
    PyObject *layout = rpy_torch_read_device(obj, name, &ignored) < 0 ? NULL : PyObject_GetAttr(obj, s_layout);
    if (layout != NULL && layout != strided_layout) {
        PyErr_Format(PyExc_TypeError, "%s must be a dense (strided) tensor, got %S", name, layout);
    } else if (layout != NULL) {
        PyObject *line = first_line(cause);
        if (line != NULL)
            rpy_refuse("%s cannot be passed to ropepool: %U", name, line);
        Py_XDECREF(line);
        PyObject *error = take_exception();
        if (error != NULL && cause != NULL)
            PyException_SetCause(error, cause); /* steals cause */
        else
            Py_XDECREF(cause);
        cause = NULL;
        if (error != NULL)
            PyErr_SetObject((PyObject *)Py_TYPE(error), error);
        Py_XDECREF(error);
    }
    Py_XDECREF(layout);
    Py_XDECREF(cause);
    return -1;
}

int rpy_torch_read_surface(PyObject *obj, const char *name, rp_tensor *t)
{
    memset(t, 0, sizeof *t);
    if (rpy_torch_read_device(obj, name, t) < 0)
        return -1;

    PyObject *dtype = PyObject_GetAttr(obj, s_dtype);
    if (dtype == NULL)
        return -1;
    t->dtype = (int32_t)dtype_of(dtype);
    Py_DECREF(dtype);

    PyObject *shape = PyObject_GetAttr(obj, s_shape); /* torch.Size, a tuple */
    if (shape == NULL)
        return -1;
    const Py_ssize_t ndim = PyTuple_Check(shape) ? read_ints(shape, t->shape) : -1;
    Py_DECREF(shape);
    if (ndim < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s.shape is not a tuple", name);
        return -1;
    }
    t->ndim = (int32_t)ndim;

    PyObject *strides = PyObject_CallMethodNoArgs(obj, s_stride);
    if (strides == NULL || !PyTuple_Check(strides)) {
        Py_XDECREF(strides);
        return rpy_torch_explain_refusal(obj, name); /* sparse and other layouts without strides */
    }
    const Py_ssize_t nstrides = read_ints(strides, t->strides);
    Py_DECREF(strides);
    if (nstrides < 0)
        return -1;

    PyObject *ptr = PyObject_CallMethodNoArgs(obj, s_data_ptr);
    if (ptr == NULL)
        return rpy_torch_explain_refusal(obj, name);
    t->data = PyLong_AsVoidPtr(ptr);
    Py_DECREF(ptr);
    return PyErr_Occurred() ? -1 : 0;
}
