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
 *  - Where the extension ropepool._ropepool_torch was built against the running torch
 *    (torch/native.cpp), its C++ functions read plain tensors and parameters instead: describing a
 *    tensor, its negative bit, requires_grad, the version bump and fresh outputs, without Python
 *    calls. The exchange API still names the stream and wraps outputs on fresh_memory.c's
 *    blocks; ROPEPOOL_TORCH_NATIVE=0 turns the extension off.
 *  - The tensor's Python surface (torch_surface.c); outputs from torch.empty_like. Used for other
 *    Tensor subclasses (so that their __torch_function__ is honoured), and for every tensor when
 *    torch lacks the exchange API or ROPEPOOL_TORCH_EXCHANGE=0 is set.
 * Both give element [0, 0, ...] (storage offset included) and strides in elements.
 */
#include "dlpack.h"
#include "torch.h"
#include "torch/native.h"

#include <stdlib.h>
#include <string.h>

static PyObject *torch_module;
static PyTypeObject *tensor_type;             /* torch.Tensor */
static PyTypeObject *parameter_type;          /* torch.nn.Parameter, or NULL */
static const rpy_DLPackExchangeAPI *exchange; /* NULL: every tensor goes through its Python surface */
static const rpy_torch_native *native;        /* NULL: the extension is not built for this torch, or off */
static PyObject *empty_like_fn;               /* torch.empty_like */
static PyObject *contiguous_format;           /* torch.contiguous_format */
static PyObject *memory_format_kw;            /* ("memory_format",) */
static PyObject *is_neg_fn;                   /* torch.Tensor.is_neg (a method descriptor) */
static PyObject *is_grad_enabled_fn;          /* torch._C.is_grad_enabled */
static PyObject *is_inference_fn;             /* torch.Tensor.is_inference (a method descriptor) */
static PyObject *inference_mode_fn;           /* torch._C.is_inference_mode_enabled */
static PyObject *increment_version_fn;        /* torch._C._increment_version (takes a tuple) */
static PyObject *requires_grad_attr, *is_leaf_attr; /* the getset descriptors, or NULL */
static PyObject *forward_ad_module;           /* torch.autograd.forward_ad */
static PyObject *unpack_dual_fn;              /* torch._VF._unpack_dual(tensor, level) */
static PyObject *dispatch_modes_fn;           /* torch._C._len_torch_dispatch_stack */

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

/* The readers' switches, read when the module is imported (rpy_torch_read_switches): 1 = on. */
static int exchange_allowed = 1, native_allowed = 1;

/* An on/off variable: unset or empty leaves *on as it is, "0" and "1" set it; anything else (say
 * "false", meant as off) is refused rather than read as either. */
static int read_switch(const char *variable, const char *what, int *on)
{
    const char *setting = getenv(variable);
    if (setting == NULL || *setting == '\0')
        return 0;
    if (strcmp(setting, "0") == 0 || strcmp(setting, "1") == 0) {
        *on = setting[0] == '1';
        return 0;
    }
    PyErr_Format(PyExc_ImportError, "ropepool: %s=%s is neither 0 nor 1 (0 %s); set it to 0 or 1, or unset it",
                 variable, setting, what);
    return -1;
}

int rpy_torch_read_switches(void)
{
    return read_switch("ROPEPOOL_TORCH_EXCHANGE", "reads torch tensors through their Python surface",
                       &exchange_allowed) < 0 ||
                   read_switch("ROPEPOOL_TORCH_NATIVE", "turns the ropepool._ropepool_torch extension off",
                               &native_allowed) < 0
               ? -1
               : 0;
}

/* The extension's table, or NULL (not built, built against another torch, or turned off). */
static const rpy_torch_native *load_native(void)
{
    PyObject *module = PyImport_ImportModule("ropepool._ropepool_torch");
    PyObject *capsule = module ? PyObject_GetAttrString(module, "api") : NULL;
    const rpy_torch_native *table = NULL;
    if (capsule != NULL && PyCapsule_IsValid(capsule, RPY_TORCH_NATIVE_CAPSULE))
        table = PyCapsule_GetPointer(capsule, RPY_TORCH_NATIVE_CAPSULE);
    Py_XDECREF(capsule);
    Py_XDECREF(module); /* sys.modules keeps it, and the table with it */
    PyErr_Clear();
    return table != NULL && table->abi == RPY_TORCH_NATIVE_ABI ? table : NULL;
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
    exchange = exchange_allowed ? rpy_dlpack_exchange_api(tensor) : NULL;
    /* Autograd and the negative bit, looked up once; a torch without one of them skips its check. */
    is_neg_fn = PyObject_GetAttrString(tensor, "is_neg");
    is_grad_enabled_fn = attr_path(torch, "_C.is_grad_enabled");
    is_inference_fn = PyObject_GetAttrString(tensor, "is_inference");
    inference_mode_fn = attr_path(torch, "_C.is_inference_mode_enabled");
    increment_version_fn = attr_path(torch, "_C._increment_version");
    requires_grad_attr = PyObject_GetAttrString(tensor, "requires_grad");
    is_leaf_attr = PyObject_GetAttrString(tensor, "is_leaf");
    forward_ad_module = PyImport_ImportModule("torch.autograd.forward_ad");
    unpack_dual_fn = attr_path(torch, "_VF._unpack_dual");
    dispatch_modes_fn = attr_path(torch, "_C._len_torch_dispatch_stack");
    PyErr_Clear();
    native = exchange != NULL && native_allowed ? load_native() : NULL;
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

static int native_reads(PyObject *obj)
{
    return native != NULL && exchange_reads(obj);
}

const char *rpy_torch_reader(void)
{
    return !find_torch() ? NULL : native ? "native" : exchange ? "exchange" : "surface";
}

int rpy_torch_subclass(PyObject *obj)
{
    PyTypeObject *type = Py_TYPE(obj);
    if (type == tensor_type || type == parameter_type)
        return 0; /* the usual case, once torch is found */
    return torch_is_array(obj) && type != tensor_type && type != parameter_type; /* it may find it now */
}

int rpy_torch_dispatch_mode(PyObject *obj)
{
    if (!torch_is_array(obj))
        return 0;
    if (native != NULL)
        return native->dispatch_modes();
    if (dispatch_modes_fn == NULL)
        return 0;
    PyObject *modes = PyObject_CallNoArgs(dispatch_modes_fn); /* about 20 ns */
    const long count = modes != NULL ? PyLong_AsLong(modes) : -1;
    Py_XDECREF(modes);
    if (count < 0)
        PyErr_Clear(); /* a torch that cannot say: the call runs directly, as before it asked */
    return count > 0;
}

/* ---- the framework ------------------------------------------------------------------------------- */

/* 1 if fn(obj) is True, 0 if False or fn is NULL, -1 on error. fn is a method descriptor or a
 * getset descriptor of torch.Tensor: calling it directly skips the bound-method object, and is
 * only safe on a tensor: for any other object (a caller's q_out of the wrong type, which the
 * output checks refuse later, naming it) the flag is 0. */
static int tensor_flag(PyObject *fn, PyObject *obj)
{
    if (fn == NULL || !PyObject_TypeCheck(obj, tensor_type))
        return 0;
    PyObject *result;
    if (Py_IS_TYPE(fn, &PyGetSetDescr_Type)) {
        PyGetSetDef *def = ((PyGetSetDescrObject *)fn)->d_getset;
        result = def->get(obj, def->closure);
    } else if (Py_IS_TYPE(fn, &PyMethodDescr_Type) && ((PyMethodDescrObject *)fn)->d_method->ml_flags == METH_NOARGS) {
        result = ((PyMethodDescrObject *)fn)->d_method->ml_meth(obj, NULL); /* what the descriptor would call */
    } else {
        result = PyObject_Vectorcall(fn, &obj, 1, NULL);
    }
    if (result == NULL)
        return -1;
    const int flag = PyObject_IsTrue(result);
    Py_DECREF(result);
    return flag;
}

static int torch_to_tensor(PyObject *obj, const char *name, rp_tensor *t)
{
    /* A tensor with the negative bit (x.conj().imag, torch._neg_view) holds -x in its memory
     * and the sign in its metadata: read or written as raw memory it would be wrong. */
    int negative = 0, described = 0;
    if (native_reads(obj))
        described = native->describe(obj, t, &negative);
    else
        negative = tensor_flag(is_neg_fn, obj);
    if (negative != 0) {
        if (negative > 0)
            rpy_refuse("%s has its negative bit set (a lazy view such as x.conj().imag), which ropepool "
                       "cannot read or write as memory: pass %s.resolve_neg()", name, name);
        return -1;
    }
    if (!described) {
        if (!exchange_reads(obj)) {
            if (rpy_torch_read_surface(obj, name, t) < 0)
                return -1;
        } else if (rpy_dlpack_to_tensor(exchange, obj, t) < 0) {
            return rpy_torch_explain_refusal(obj, name);
        } else if (t->device.type != RP_DEVICE_CPU && t->device.type != RP_DEVICE_CUDA) {
            return rpy_torch_read_device(obj, name, t); /* raises, naming the device */
        }
    }
    /* no data behind elements: a zero tensor (refused by the call), or a transform's wrapper */
    return t->data == NULL && t->ndim > 0 ? rpy_torch_refuse_transform_tensor(obj, name) : 0;
}

/* 1 if torch's no-argument function fn (a mode: grad, inference) returns True, 0 if not, -1 on
 * error. */
static int torch_mode(PyObject *fn)
{
    PyObject *enabled = PyObject_Vectorcall(fn, NULL, 0, NULL);
    if (enabled == NULL)
        return -1;
    Py_DECREF(enabled);
    return enabled == Py_True;
}

/* 1 if obj is an inference tensor and inference mode is off, 0 if not, -1 on error. */
static int inference_locked(PyObject *obj)
{
    if (native_reads(obj))
        return native->inference_locked(obj);
    const int inference = tensor_flag(is_inference_fn, obj);
    if (inference <= 0 || inference_mode_fn == NULL)
        return inference;
    const int mode = torch_mode(inference_mode_fn);
    return mode < 0 ? -1 : !mode;
}

/* torch.autograd.forward_ad's current dual level for the readers without the native table: -1
 * where there is none (no dual tensor exists outside one: a level's tangents are cleared when it
 * ends) or inference mode is on (it turns forward AD off, as it does autograd); -2 with an
 * exception. */
static long dual_level(void)
{
    if (forward_ad_module == NULL || unpack_dual_fn == NULL)
        return -1;
    PyObject *level = PyObject_GetAttrString(forward_ad_module, "_current_level");
    const long current = level != NULL && PyLong_Check(level) ? PyLong_AsLong(level) : -1;
    Py_XDECREF(level);
    PyErr_Clear(); /* a torch without it: nothing to see */
    const int inference = current < 0 || inference_mode_fn == NULL ? 0 : torch_mode(inference_mode_fn);
    return inference < 0 ? -2 : inference ? -1 : current;
}

/* Whether obj carries a forward-mode AD tangent outside inference mode; -1 with an exception.
 * *level: dual_level(), read at the first tensor the native table does not read (NO_LEVEL before);
 * those tensors' tangents are seen at that innermost level only. */
enum { NO_LEVEL = -3 };
static int forward_tangent(PyObject *obj, long *level)
{
    if (native_reads(obj))
        return native->forward_tangent(obj);
    if (*level == NO_LEVEL)
        *level = dual_level();
    if (*level < 0)
        return *level == -2 ? -1 : 0;
    PyObject *unpacked = PyObject_CallFunction(unpack_dual_fn, "Ol", obj, *level);
    if (unpacked == NULL)
        return -1;
    PyObject *tangent = PyTuple_Check(unpacked) && PyTuple_GET_SIZE(unpacked) == 2 ? PyTuple_GET_ITEM(unpacked, 1)
                                                                                     : Py_None;
    const int has = tangent != Py_None;
    Py_DECREF(unpacked);
    return has;
}

/* As torch's own ops: with grad mode on, an input that requires grad would get outputs without a
 * grad link (the call has no backward), and a tensor written in place that requires grad is
 * refused as torch refuses a leaf in an in-place op. Under torch.no_grad() / inference_mode()
 * both are fine, as they are for torch's ops. */
static int torch_check_autograd(PyObject *const *objs, const char *const *names, int num_read, int num)
{
    /* torch refuses an in-place update of an inference tensor outside inference mode (it has no
     * version counter): so does this call, before anything is written */
    for (int i = num_read; i < num; i++) {
        const int locked = inference_locked(objs[i]);
        if (locked < 0)
            return -1;
        if (locked)
            return rpy_refuse("%s is an inference tensor (made under torch.inference_mode()), which torch does not "
                              "let an in-place operation update outside inference mode: call rope_pool_fused under "
                              "torch.inference_mode() as well", names[i]);
    }
    /* Forward-mode AD propagates tangents whatever grad mode says (torch.no_grad() included) and
     * only inference mode turns it off: a tangent this call has no derivative for would be dropped
     * from its outputs, and a written tensor's tangent left stale. */
    long level = NO_LEVEL;
    for (int i = 0; i < num; i++) {
        const int tangent = forward_tangent(objs[i], &level);
        if (tangent < 0)
            return -1;
        if (tangent)
            return rpy_refuse("%s carries a forward-mode AD tangent (torch.autograd.forward_ad), "
                              "but rope_pool_fused has no forward derivative: its outputs would hold no tangent; "
                              "pass the primal (torch.autograd.forward_ad.unpack_dual(%s).primal)", names[i],
                              names[i]);
    }
    if (native == NULL && (is_grad_enabled_fn == NULL || requires_grad_attr == NULL))
        return 0;
    const int grad_mode = native != NULL ? native->grad_enabled() : torch_mode(is_grad_enabled_fn);
    if (grad_mode <= 0)
        return grad_mode;
    for (int i = 0; i < num; i++) {
        int native_leaf = 0;
        const int requires_grad = native_reads(objs[i]) ? native->requires_grad(objs[i], &native_leaf)
                                                        : tensor_flag(requires_grad_attr, objs[i]);
        if (requires_grad <= 0) {
            if (requires_grad < 0)
                return -1;
            continue;
        }
        if (i < num_read)
            return rpy_refuse("%s requires grad, but rope_pool_fused has no backward (its outputs would not be "
                              "connected to %s's graph): call it under torch.no_grad() or torch.inference_mode(), "
                              "or pass %s.detach()", names[i], names[i], names[i]);
        const int leaf = native_reads(objs[i]) ? native_leaf : tensor_flag(is_leaf_attr, objs[i]);
        if (leaf < 0)
            return -1;
        if (leaf)
            return rpy_refuse("a leaf Variable that requires grad is being used in an in-place operation: "
                              "rope_pool_fused writes %s in place; call it under torch.no_grad() or "
                              "torch.inference_mode()", names[i]);
        return rpy_refuse("%s requires grad, but rope_pool_fused writes it in place and has no backward: call it "
                          "under torch.no_grad() or torch.inference_mode()", names[i]);
    }
    return 0;
}

/* A torch tensor given for a number (rope_base=torch.tensor(1e4)) is read as its value: refused,
 * as a tensor input is, when autograd would expect a gradient through it. */
int rpy_torch_check_number(PyObject *obj, const char *name)
{
    return torch_is_array(obj) ? torch_check_autograd(&obj, &name, 1, 1) : 0;
}

/* Written in place: bump the version counters, so that autograd sees the write as it sees torch's
 * own in-place ops (a tensor saved for backward and overwritten then raises at backward). */
static int torch_mark_written(PyObject *const *objs, int num)
{
    int all_native = native != NULL;
    for (int i = 0; i < num && all_native; i++)
        all_native = native_reads(objs[i]);
    if (all_native)
        return native->bump_versions(objs, num);
    if (increment_version_fn == NULL)
        return 0;
    PyObject *tensors = PyTuple_New(num);
    if (tensors == NULL)
        return -1;
    for (int i = 0; i < num; i++) {
        Py_INCREF(objs[i]);
        PyTuple_SET_ITEM(tensors, i, objs[i]);
    }
    PyObject *result = PyObject_Vectorcall(increment_version_fn, &tensors, 1, NULL);
    Py_DECREF(tensors);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

static PyObject *torch_empty_like(PyObject *like, const rp_tensor *like_tensor, rp_tensor *out)
{
    PyObject *arr;
    size_t bytes;
    void *block = NULL;
    if (exchange_reads(like) && like_tensor->ndim <= RP_MAX_DIMS && like_tensor->device.type == RP_DEVICE_CPU)
        block = rpy_output_block_take(like_tensor, &bytes);
    if (block == NULL && PyErr_Occurred())
        return NULL;
    if (block != NULL) {
        return rpy_dlpack_on_block(exchange, like_tensor, block, bytes, out);
    } else if (native_reads(like)) {
        arr = native->empty_like(like, out); /* on CUDA: the caching allocator, current stream */
    } else if (exchange_reads(like) && like_tensor->ndim <= RP_MAX_DIMS) {
        arr = rpy_dlpack_empty_like(exchange, like, like_tensor, out);
    } else {
        /* torch.empty_like(like, memory_format=torch.contiguous_format): like's dtype and device,
         * and on CUDA memory from the caching allocator on the current stream (graph-capture
         * safe). */
        PyObject *stack[2] = {like, contiguous_format};
        arr = PyObject_Vectorcall(empty_like_fn, stack, 1, memory_format_kw);
        if (arr != NULL && rpy_torch_read_surface(arr, "output", out) < 0)
            Py_CLEAR(arr);
    }
    if (arr != NULL && out->device.type == RP_DEVICE_CPU)
        rpy_advise_fresh_output(out);
    return arr;
}

const rpy_framework rpy_torch = {"torch.Tensor", torch_is_array,       torch_to_tensor,
                                  torch_empty_like, torch_check_autograd, torch_mark_written};

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
