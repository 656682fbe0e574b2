/*
 * native.cpp — ropepool._ropepool_torch: the functions of native.h on the C++ tensor a
 * torch.Tensor wraps. Built against one torch (python/CMakeLists.txt); its module init refuses to
 * load under any other, since it uses that torch's C++ ABI.
 */
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>

#include <cstring>

extern "C" {
#include "native.h"
}

#ifndef RPY_TORCH_VERSION
#error "RPY_TORCH_VERSION (the torch.__version__ built against) must be defined"
#endif

namespace {

/* ropepool's name for a dtype, or RP_DTYPE_OTHER: the ones the exchange API describes too. */
rp_dtype dtype_of(c10::ScalarType type)
{
    switch (type) {
    case c10::ScalarType::Float: return RP_F32;
    case c10::ScalarType::Half: return RP_F16;
    case c10::ScalarType::BFloat16: return RP_BF16;
    case c10::ScalarType::Double: return RP_F64;
    case c10::ScalarType::Int: return RP_I32;
    case c10::ScalarType::Long: return RP_I64;
    case c10::ScalarType::Char: return RP_I8;
    case c10::ScalarType::Short: return RP_I16;
    case c10::ScalarType::Byte: return RP_U8;
    case c10::ScalarType::UInt16: return RP_U16;
    case c10::ScalarType::UInt32: return RP_U32;
    case c10::ScalarType::UInt64: return RP_U64;
    case c10::ScalarType::Bool: return RP_BOOL;
    case c10::ScalarType::Float8_e4m3fn: return RP_F8_E4M3;
    case c10::ScalarType::Float8_e5m2: return RP_F8_E5M2;
    default: return RP_DTYPE_OTHER;
    }
}

int describe_tensor(const at::Tensor &t, rp_tensor *out, int *negative)
{
    try {
        if (!t.defined())
            return 0;
        *negative = t.is_neg();
        const rp_dtype dtype = dtype_of(t.scalar_type());
        const c10::Device device = t.device();
        /* CUDA tensors stay with the exchange API until this path has run on a GPU */
        if (t.layout() != c10::kStrided || !t.has_storage() || dtype == RP_DTYPE_OTHER ||
            device.type() != c10::DeviceType::CPU)
            return 0;
        std::memset(out, 0, sizeof *out);
        out->data = t.data_ptr(); /* the mutable pointer: a copy-on-write tensor is materialised */
        out->ndim = (int32_t)t.dim();
        out->dtype = (int32_t)dtype;
        out->device.type = RP_DEVICE_CPU;
        const auto sizes = t.sizes();
        const auto strides = t.strides();
        for (int64_t d = 0; d < t.dim() && d < RP_MAX_DIMS; d++) {
            out->shape[d] = sizes[d];
            out->strides[d] = strides[d];
        }
        return 1;
    } catch (...) {
        return 0; /* the exchange API's path describes it, or says why it cannot */
    }
}

int describe(PyObject *obj, rp_tensor *out, int *negative)
{
    *negative = 0;
    return describe_tensor(THPVariable_Unpack(obj), out, negative);
}

PyObject *empty_like(PyObject *like, rp_tensor *out)
{
    try {
        const at::Tensor &t = THPVariable_Unpack(like);
        at::Tensor fresh = at::empty(t.sizes(), t.options().memory_format(c10::MemoryFormat::Contiguous));
        int negative = 0;
        if (!describe_tensor(fresh, out, &negative)) {
            PyErr_SetString(PyExc_RuntimeError, "allocating an output tensor: torch made one ropepool cannot describe");
            return nullptr;
        }
        return THPVariable_Wrap(std::move(fresh));
    } catch (const c10::Error &e) {
        PyErr_Format(PyExc_RuntimeError, "allocating an output tensor: %s", e.what_without_backtrace());
    } catch (const std::exception &e) {
        PyErr_Format(PyExc_RuntimeError, "allocating an output tensor: %s", e.what());
    }
    return nullptr;
}

int inference_locked(PyObject *obj)
{
    return THPVariable_Unpack(obj).is_inference() && !c10::InferenceMode::is_enabled();
}

int grad_enabled(void)
{
    return at::GradMode::is_enabled();
}

int requires_grad(PyObject *obj, int *is_leaf)
{
    const at::Tensor &t = THPVariable_Unpack(obj);
    *is_leaf = t.is_leaf();
    return t.requires_grad();
}

int bump_versions(PyObject *const *objs, int num)
{
    try {
        for (int i = 0; i < num; i++)
            torch::autograd::impl::bump_version(THPVariable_Unpack(objs[i]));
        return 0;
    } catch (const c10::Error &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
        return -1;
    } catch (const std::exception &e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return -1;
    }
}

const rpy_torch_native api = {RPY_TORCH_NATIVE_ABI, describe,       empty_like,   inference_locked,
                              grad_enabled,         requires_grad, bump_versions};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_ropepool_torch",
                          "ropepool's tensor access on torch's C++ API (see native.h)", -1,
                          nullptr, nullptr, nullptr, nullptr, nullptr};

} /* namespace */

PyMODINIT_FUNC PyInit__ropepool_torch(void)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *version = torch ? PyObject_GetAttrString(torch, "__version__") : NULL;
    Py_XDECREF(torch);
    if (version == NULL)
        return NULL;
    const char *running = PyUnicode_AsUTF8(version);
    if (running == NULL || std::strcmp(running, RPY_TORCH_VERSION) != 0) {
        if (running != NULL)
            PyErr_Format(PyExc_ImportError, "ropepool._ropepool_torch was built against torch %s, not %s",
                         RPY_TORCH_VERSION, running);
        Py_DECREF(version);
        return NULL;
    }
    Py_DECREF(version);
    PyObject *module = PyModule_Create(&module_def);
    PyObject *capsule = module ? PyCapsule_New((void *)&api, RPY_TORCH_NATIVE_CAPSULE, NULL) : NULL;
    if (capsule == NULL || PyModule_AddObject(module, "api", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_XDECREF(module);
        return NULL;
    }
    PyObject *built = PyUnicode_FromString(RPY_TORCH_VERSION);
    if (built == NULL || PyModule_AddObject(module, "torch_version", built) < 0) {
        Py_XDECREF(built);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
