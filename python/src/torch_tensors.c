/*
 * torch_tensors.c — PyTorch tensors as rp_tensors, without linking against libtorch.
 *
 * torch is optional: nothing here imports it. torch.Tensor and the objects the binding needs are
 * taken from sys.modules the first time an argument is not a NumPy array (a tensor cannot exist
 * before torch is imported).
 *
 * Two ways to read a tensor, both without copying:
 *  - DLPack's C exchange API, which recent torch publishes as
 *    torch.Tensor.__dlpack_c_exchange_api__: C calls that describe a tensor, allocate a new one and
 *    name the current CUDA stream, with no Python object in between (torch_dlpack.c). Used for
 *    torch.Tensor and nn.Parameter objects.
 *  - The tensor's Python surface (torch_surface.c); outputs from torch.empty_like. Used for other
 *    Tensor subclasses (so that their __torch_function__ is honoured), and for every tensor when
 *    torch lacks the exchange API or ROPEPOOL_TORCH_EXCHANGE=0 is set.
 * Both give element [0, 0, ...] (storage offset included) and strides in elements.
 */
#include "dlpack.h"
#include "torch.h"

#include <stdlib.h>
#include <string.h>

static PyObject *torch_module;
static PyTypeObject *tensor_type;             /* torch.Tensor */
static PyTypeObject *parameter_type;          /* torch.nn.Parameter, or NULL */
static const rpy_DLPackExchangeAPI *exchange; /* NULL: every tensor goes through its Python surface */
static PyObject *empty_like_fn;               /* torch.empty_like */
static PyObject *contiguous_format;           /* torch.contiguous_format */
static PyObject *memory_format_kw;            /* ("memory_format",) */

static PyObject *attr_path(PyObject *obj, const char *dotted)
{
    char part[64];
    Py_INCREF(obj);
    for (const char *p = dotted; *p && obj;) {
        size_t len = strcspn(p, ".");
        if (len >= sizeof part)
            len = sizeof part - 1;
        memcpy(part, p, len);
        part[len] = '\0';
        PyObject *next = PyObject_GetAttrString(obj, part);
        Py_DECREF(obj);
        obj = next;
        p += len + (p[len] == '.');
    }
    return obj;
}

static int exchange_allowed(void)
{
    const char *setting = getenv("ROPEPOOL_TORCH_EXCHANGE");
    return setting == NULL || strcmp(setting, "0") != 0;
}

/* 1 once torch is imported and its objects are cached; 0 while it is not (never raises). */
static int find_torch(void)
{
    if (tensor_type != NULL)
        return 1;
    PyObject *name = PyUnicode_FromString("torch");
    PyObject *torch = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    PyObject *tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    PyObject *empty_like = torch ? PyObject_GetAttrString(torch, "empty_like") : NULL;
    PyObject *contiguous = torch ? PyObject_GetAttrString(torch, "contiguous_format") : NULL;
    PyObject *kw = Py_BuildValue("(s)", "memory_format");
    if (tensor == NULL || !PyType_Check(tensor) || empty_like == NULL || contiguous == NULL ||
        kw == NULL || rpy_torch_surface_init(torch) < 0) {
        Py_XDECREF(torch);
        Py_XDECREF(tensor);
        Py_XDECREF(empty_like);
        Py_XDECREF(contiguous);
        Py_XDECREF(kw);
        PyErr_Clear(); /* torch not imported (or not usable): then no argument is a tensor */
        return 0;
    }
    PyObject *parameter = attr_path(torch, "nn.Parameter");
    parameter_type = parameter && PyType_Check(parameter) ? (PyTypeObject *)parameter : NULL;
    if (parameter_type == NULL)
        Py_XDECREF(parameter);
    PyErr_Clear(); /* a torch without nn.Parameter: every subclass takes the Python surface */
    exchange = exchange_allowed() ? rpy_dlpack_exchange_api(tensor) : NULL;
    torch_module = torch;
    empty_like_fn = empty_like;
    contiguous_format = contiguous;
    memory_format_kw = kw;
    tensor_type = (PyTypeObject *)tensor;
    return 1;
}

static int torch_is_array(PyObject *obj)
{
    return find_torch() && PyObject_TypeCheck(obj, tensor_type);
}

/* Plain tensors and parameters have no __torch_function__ of their own to honour. */
static int exchange_reads(PyObject *obj)
{
    return exchange != NULL && (Py_TYPE(obj) == tensor_type || Py_TYPE(obj) == parameter_type);
}

/* ---- the framework ------------------------------------------------------------------------------- */

static int torch_to_tensor(PyObject *obj, const char *name, rp_tensor *t)
{
    if (!exchange_reads(obj))
        return rpy_torch_read_surface(obj, name, t);
    if (rpy_dlpack_to_tensor(exchange, obj, t) < 0)
        return rpy_torch_explain_refusal(obj, name);
    if (t->device.type != RP_DEVICE_CPU && t->device.type != RP_DEVICE_CUDA)
        return rpy_torch_read_device(obj, name, t); /* raises, naming the device */
    return 0;
}

static PyObject *torch_empty_like(PyObject *like, const rp_tensor *like_tensor, rp_tensor *out)
{
    if (exchange_reads(like) && like_tensor->ndim <= RP_MAX_DIMS)
        return rpy_dlpack_empty_like(exchange, like, out);
    /* torch.empty_like(like, memory_format=torch.contiguous_format): like's dtype and device, and
     * on CUDA memory from the caching allocator on the current stream (graph-capture safe). */
    PyObject *stack[2] = {like, contiguous_format};
    PyObject *arr = PyObject_Vectorcall(empty_like_fn, stack, 1, memory_format_kw);
    if (arr == NULL)
        return NULL;
    if (rpy_torch_read_surface(arr, "output", out) < 0)
        Py_CLEAR(arr);
    return arr;
}

const rpy_framework rpy_torch = {"torch.Tensor", torch_is_array, torch_to_tensor, torch_empty_like};

/* ---- CUDA streams and graph capture --------------------------------------------------------- */

static PyObject *torch_attr(const char *dotted)
{
    if (!find_torch()) {
        PyErr_SetString(PyExc_ValueError, "CUDA tensors need torch, which is not imported");
        return NULL;
    }
    return attr_path(torch_module, dotted);
}

int rpy_torch_current_stream(int device, void **stream)
{
    if (exchange != NULL)
        return exchange->current_work_stream(RPY_DL_CUDA, device, stream) == 0 ? 0 : -1;
    /* torch._C._cuda_getCurrentRawStream(index) is what torch's compiled code calls: one C call.
     * Where it is missing: torch.cuda.current_stream(index).cuda_stream. */
    static PyObject *raw_stream_fn;
    static int looked_up;
    if (!looked_up) {
        raw_stream_fn = torch_attr("_C._cuda_getCurrentRawStream");
        PyErr_Clear();
        looked_up = 1;
    }
    PyObject *value;
    if (raw_stream_fn != NULL) {
        value = PyObject_CallFunction(raw_stream_fn, "i", device);
    } else {
        PyObject *current_stream = torch_attr("cuda.current_stream");
        PyObject *s = current_stream ? PyObject_CallFunction(current_stream, "i", device) : NULL;
        Py_XDECREF(current_stream);
        value = s ? PyObject_GetAttrString(s, "cuda_stream") : NULL;
        Py_XDECREF(s);
    }
    if (value == NULL)
        return -1;
    *stream = PyLong_AsVoidPtr(value);
    Py_DECREF(value);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *call_torch(const char *dotted)
{
    PyObject *fn = torch_attr(dotted);
    PyObject *result = fn ? PyObject_CallNoArgs(fn) : NULL;
    Py_XDECREF(fn);
    return result;
}

int rpy_torch_is_capturing(void)
{
    PyObject *result = call_torch("cuda.is_current_stream_capturing");
    if (result == NULL)
        return -1;
    const int capturing = PyObject_IsTrue(result);
    Py_DECREF(result);
    return capturing;
}

int rpy_torch_current_device(void)
{
    PyObject *result = call_torch("cuda.current_device");
    if (result == NULL)
        return -1;
    const long index = PyLong_AsLong(result);
    Py_DECREF(result);
    return index == -1 && PyErr_Occurred() ? -1 : (int)index;
}
