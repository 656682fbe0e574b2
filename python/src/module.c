/*
 * module.c — the extension module ropepool._ropepool: its error type, its small functions, and
 * its initialisation. The call itself is in call.c.
 */
#include "binding.h"

#include <stdarg.h>

enum { MESSAGE_SIZE = 512 };

PyObject *rpy_error_type;

PyObject *rpy_raise(rp_status status, const char *message)
{
    PyObject *exc = PyObject_CallFunction(rpy_error_type, "s", message);
    PyObject *name = exc ? PyUnicode_FromString(rp_status_name(status)) : NULL;
    if (name != NULL && PyObject_SetAttrString(exc, "status", name) == 0)
        PyErr_SetObject(rpy_error_type, exc);
    Py_XDECREF(name);
    Py_XDECREF(exc);
    return NULL;
}

int rpy_refuse(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *text = PyUnicode_FromFormatV(format, args);
    va_end(args);
    const char *message = text ? PyUnicode_AsUTF8(text) : NULL;
    if (message != NULL)
        rpy_raise(RP_ERR_INVALID_ARGUMENT, message);
    Py_XDECREF(text);
    return -1;
}

static PyObject *version(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyUnicode_FromString(rp_version_string());
}

static PyObject *cpu_kernel(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyUnicode_FromString(rp_cpu_kernel_name());
}

static PyObject *has_cuda(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(rp_has_cuda());
}

static PyObject *num_threads(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    rp_context *ctx = rpy_cpu_context();
    return ctx ? PyLong_FromLong(rp_context_num_threads(ctx)) : NULL;
}

/* device: None (torch's current CUDA device), an int, or anything torch.device() accepts. */
static int cuda_device_index(PyObject *device)
{
    if (device == Py_None)
        return rpy_torch_current_device();
    if (PyLong_Check(device)) {
        const long index = PyLong_AsLong(device);
        return index == -1 && PyErr_Occurred() ? -1 : (int)index;
    }
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *dev = torch ? PyObject_CallMethod(torch, "device", "(O)", device) : NULL;
    PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
    PyObject *index = type ? PyObject_GetAttrString(dev, "index") : NULL;
    int result = -1;
    if (index != NULL) {
        if (PyUnicode_CompareWithASCIIString(type, "cuda") != 0)
            PyErr_Format(PyExc_ValueError, "check_cuda: device must be a CUDA device, got %R", dev);
        else if (index == Py_None)
            result = rpy_torch_current_device();
        else
            result = (int)PyLong_AsLong(index);
    }
    Py_XDECREF(torch);
    Py_XDECREF(dev);
    Py_XDECREF(type);
    Py_XDECREF(index);
    return result == -1 && PyErr_Occurred() ? -1 : result;
}

static PyObject *check_cuda(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"device", NULL};
    PyObject *device = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:check_cuda", keywords, &device))
        return NULL;
    if (!rp_has_cuda())
        return rpy_raise(RP_ERR_UNSUPPORTED, "check_cuda: this build of ropepool has no CUDA backend "
                                             "(ropepool.has_cuda() is False), so no CUDA call ran to check");
    if (device == Py_None && !rpy_any_cuda_context())
        Py_RETURN_NONE; /* no CUDA call has run in this process: nothing recorded, no device to ask torch for */
    const int index = cuda_device_index(device);
    if (index < 0)
        return NULL;
    rp_context *ctx = rpy_cuda_context(index, 0);
    if (ctx == NULL) /* no call has run on this device: nothing can have been recorded */
        Py_RETURN_NONE;
    void *stream;
    if (rpy_torch_current_stream(index, &stream) < 0)
        return NULL;
    char message[MESSAGE_SIZE];
    rp_status st;
    Py_BEGIN_ALLOW_THREADS
    st = rp_context_check(ctx, stream, message, sizeof message);
    Py_END_ALLOW_THREADS
    if (st != RP_OK)
        return rpy_raise(st, message);
    Py_RETURN_NONE;
}

static PyObject *torch_reader(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    const char *reader = rpy_torch_reader();
    if (reader == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(reader);
}

/* The call's autograd refusal on its own (torch_op's fake kernel: under torch.compile the compiled
 * graph runs the kernel with grad mode off, so the trace refuses what the eager call would). */
static PyObject *check_autograd(PyObject *self, PyObject *args)
{
    enum { MOST = 16 };
    PyObject *read, *written, *objs[MOST];
    const char *names[MOST];
    int n = 0, num_read = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!:_check_autograd", &PyDict_Type, &read, &PyDict_Type, &written))
        return NULL;
    for (int w = 0; w < 2; w++) {
        PyObject *key, *value;
        for (Py_ssize_t pos = 0; PyDict_Next(w ? written : read, &pos, &key, &value) && n < MOST;) {
            if (!rpy_torch.is_array(value))
                continue; /* None, numbers, NumPy arrays: nothing autograd follows */
            if ((names[n] = PyUnicode_AsUTF8(key)) == NULL)
                return NULL;
            objs[n++] = value;
            num_read += !w;
        }
    }
    if (rpy_torch.check_autograd(objs, names, num_read, n) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"rope_pool_fused", (PyCFunction)(void (*)(void))rpy_rope_pool_fused, METH_FASTCALL | METH_KEYWORDS,
     rpy_rope_pool_fused_doc},
    {"check_cuda", (PyCFunction)(void (*)(void))check_cuda, METH_VARARGS | METH_KEYWORDS,
     "check_cuda($module, /, device=None)\n--\n\n"
     "Wait for the current stream of a CUDA device (None: torch's current device) and raise\n"
     "RopePoolError, with the message a CPU call would have given, if a rope_pool_fused call on\n"
     "it met an out-of-range slot since the last check. Such a slot was never written. Before any\n"
     "CUDA call in this process there is nothing to report: None at once. A build without CUDA\n"
     "(has_cuda() False) raises RopePoolError saying so."},
    {"_time_calls", (PyCFunction)(void (*)(void))rpy_time_calls, METH_FASTCALL | METH_KEYWORDS,
     "_time_calls($module, calls, /, *args, **kwargs)\n--\n\n"
     "Developer's tool (python -m ropepool.bench): rope_pool_fused's arguments converted once, then\n"
     "the C call made `calls` times back to back; returns the mean ns per call."},
    {"_keyword_fields", (PyCFunction)(void (*)(void))rpy_keyword_fields, METH_FASTCALL | METH_KEYWORDS,
     "_keyword_fields($module, q_shape, k_pool_dtype, /, **keywords)\n--\n\n"
     "rope_pool_fused's keywords converted and refused as the call does (its messages), as a dict\n"
     "of rp_rope_pool_args fields: for ropepool.mlx, whose arrays this module cannot describe."},
    {"_verify", (PyCFunction)(void (*)(void))rpy_verify, METH_FASTCALL | METH_KEYWORDS,
     "_verify($module, /, *args, **kwargs)\n--\n\n"
     "Developer's tool (python -m ropepool.bench): rope_pool_fused's arguments, with q_out and k_out\n"
     "holding a finished call's outputs (host memory), checked against the float64 reference as\n"
     "ropepool-bench checks its calls; returns (checked, failures, worst error over bound, first failure)."},
    {"_profile", rpy_profile, METH_O,
     "_profile($module, enable, /)\n--\n\n"
     "Developer's tool (python -m ropepool.bench --profile): the mean ns per stage of the\n"
     "rope_pool_fused calls made since the last _profile() call while profiling was on, as a dict;\n"
     "then resets and turns profiling on (enable true) or off."},
    {"_check_autograd", check_autograd, METH_VARARGS,
     "_check_autograd($module, read, written, /)\n--\n\n"
     "The call's autograd refusal alone: read and written map argument names to tensors (others\n"
     "are skipped); raises RopePoolError as rope_pool_fused would. For torch_op's fake kernel."},
    {"_torch_reader", torch_reader, METH_NOARGS,
     "_torch_reader($module, /)\n--\n\n"
     "How the binding reads torch tensors: \"native\" (ropepool._ropepool_torch, built against the\n"
     "running torch), \"exchange\" (DLPack's C exchange API), \"surface\" (the tensor's Python\n"
     "attributes), or None while torch is not imported."},
    {"version", version, METH_NOARGS,
     "version($module, /)\n--\n\nThe version of the loaded libropepool, \"MAJOR.MINOR.PATCH\"."},
    {"cpu_kernel", cpu_kernel, METH_NOARGS,
     "cpu_kernel($module, /)\n--\n\n"
     "The CPU kernel level the library chose: \"avx512\", \"avx2\", \"neon\", \"portable\" or\n"
     "\"reference\" (the environment variable ROPEPOOL_CPU forces a lower one); \"none\" when\n"
     "ROPEPOOL_CPU names a level this process cannot run, which every CPU call then refuses."},
    {"has_cuda", has_cuda, METH_NOARGS,
     "has_cuda($module, /)\n--\n\nWhether this build of the library has its CUDA backend."},
    {"num_threads", num_threads, METH_NOARGS,
     "num_threads($module, /)\n--\n\n"
     "The threads a CPU call may use: ROPEPOOL_NUM_THREADS when the first call was made, or one\n"
     "per online CPU."},
    {"_hf_rope_frequencies", (PyCFunction)(void (*)(void))rpy_hf_rope_frequencies,
     METH_VARARGS | METH_KEYWORDS,
     "_hf_rope_frequencies(rope_type, rotary_dim, rope_theta, **fields) -> (list, float)\n--\n\n"
     "rp_hf_rope_frequencies on parsed config fields; use ropepool.hf_rope_parameters."},
    {"_hf_rope_style", rpy_hf_rope_style, METH_VARARGS,
     "_hf_rope_style(model_type, rope_interleave) -> bool\n--\n\n"
     "rp_hf_rope_style: is_neox for a model type; use ropepool.hf_rope_kwargs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ropepool._ropepool",
    "The C extension behind the ropepool package: libropepool's rope_pool_fused on NumPy arrays "
    "and PyTorch tensors.",
    -1, methods, NULL, NULL, NULL, NULL,
};

/* _FLAG_MEANINGS: {flag: meaning}, the words of a flag's refusal for the Python layers. */
static int add_flag_meanings(PyObject *m)
{
    PyObject *meanings = PyDict_New();
    for (int i = 0; meanings != NULL && i < RPY_NUM_FLAGS; i++) {
        PyObject *text = PyUnicode_FromString(rpy_flag_meanings[i][1]);
        if (text == NULL || PyDict_SetItemString(meanings, rpy_flag_meanings[i][0], text) < 0)
            Py_CLEAR(meanings);
        Py_XDECREF(text);
    }
    if (meanings == NULL)
        return -1;
    const int result = PyModule_AddObjectRef(m, "_FLAG_MEANINGS", meanings);
    Py_DECREF(meanings);
    return result;
}

PyMODINIT_FUNC PyInit__ropepool(void)
{
    if (rp_version_number() != RP_VERSION_NUMBER) {
        PyErr_Format(PyExc_ImportError, "ropepool: built against libropepool %d.%d.%d but loaded %s",
                     RP_VERSION_MAJOR, RP_VERSION_MINOR, RP_VERSION_PATCH, rp_version_string());
        return NULL;
    }
    if (rpy_numpy_import() < 0 || rpy_torch_read_switches() < 0 || rpy_call_init() < 0 ||
        rpy_contexts_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    rpy_error_type = PyErr_NewExceptionWithDoc(
        "ropepool.RopePoolError",
        "A call the library refused. A ValueError whose message is libropepool's, verbatim; .status\n"
        "is the rp_status name (\"RP_ERR_INVALID_ARGUMENT\", \"RP_ERR_SLOT_OUT_OF_RANGE\", ...).",
        PyExc_ValueError, NULL);
    if (rpy_error_type == NULL || PyModule_AddObjectRef(m, "RopePoolError", rpy_error_type) < 0 ||
        PyModule_AddIntConstant(m, "VERSION_NUMBER", RP_VERSION_NUMBER) < 0 || add_flag_meanings(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
