/*
 * native.cpp — ropepool._ropepool_torch: the functions of native.h on the C++ tensor a
 * torch.Tensor wraps, and the C++ kernel of the torch operator (register_kernels). Built against
 * one torch (python/CMakeLists.txt); its module init refuses to load under any other, since it
 * uses that torch's C++ ABI.
 */
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h> /* not pulled in by the headers below in every torch (2.11) */
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/forward_grad.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <vector>

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
        if (t.layout() != c10::kStrided || !t.has_storage() || dtype == RP_DTYPE_OTHER ||
            (device.type() != c10::DeviceType::CPU && device.type() != c10::DeviceType::CUDA))
            return 0;
        std::memset(out, 0, sizeof *out);
        out->data = t.data_ptr(); /* the mutable pointer: a copy-on-write tensor is materialised */
        out->ndim = (int32_t)t.dim();
        out->dtype = (int32_t)dtype;
        out->device.type = device.is_cuda() ? RP_DEVICE_CUDA : RP_DEVICE_CPU;
        out->device.index = device.is_cuda() ? device.index() : 0;
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

/* at::empty(like.sizes(), like's dtype and device), made as at::empty makes it (a storage from
 * the device's allocator, a tensor of the device's dispatch key around it: ATen's empty_generic)
 * without the trip through the dispatcher: 0.7 µs less per CUDA output on an H100's host (stop
 * 42, bench/results/python-call-cuda.md). The allocator is the one at::empty would take. The
 * CPU's is asked each time, as at::empty asks. CUDA's is learnt from the first CUDA output, made
 * by at::empty: torch refuses to swap the CUDA allocator once CUDA is initialised, so a pluggable
 * allocator installed before that is the one learnt, and memory pools and graph capture are the
 * allocator's own business, as under at::empty. */
at::Tensor empty_contiguous(const at::Tensor &like)
{
    static std::atomic<c10::Allocator *> cuda_allocator{nullptr};
    const c10::Device device = like.device();
    c10::Allocator *allocator = device.is_cpu() ? c10::GetCPUAllocator() : cuda_allocator.load();
    if (allocator == nullptr) {
        at::Tensor t = at::empty(like.sizes(), like.options().memory_format(c10::MemoryFormat::Contiguous));
        if (device.is_cuda())
            cuda_allocator.store(t.storage().allocator());
        return t;
    }
    const c10::DeviceGuard guard(device);
    const int64_t bytes = like.numel() * (int64_t)like.element_size();
    c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), bytes, allocator,
                                                               /*resizable=*/true));
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::computeDispatchKey(like.scalar_type(), c10::kStrided, device)),
        like.dtype());
    t.unsafeGetTensorImpl()->set_sizes_contiguous(like.sizes());
    return t;
}

PyObject *empty_like(PyObject *like, rp_tensor *out)
{
    try {
        at::Tensor fresh = empty_contiguous(THPVariable_Unpack(like));
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

int dispatch_modes(void)
{
    return c10::impl::TorchDispatchModeTLS::stack_len() > 0;
}

int requires_grad(PyObject *obj, int *is_leaf)
{
    const at::Tensor &t = THPVariable_Unpack(obj);
    *is_leaf = t.is_leaf();
    return t.requires_grad();
}

int forward_tangent(PyObject *obj)
{
    const torch::autograd::AutogradMeta *meta = torch::autograd::impl::get_autograd_meta(THPVariable_Unpack(obj));
    return meta != nullptr && meta->fw_grad_ && !meta->fw_grad_->empty() && !c10::InferenceMode::is_enabled();
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

/* ---- the operator's kernel -------------------------------------------------------------------
 *
 * torch.ops.ropepool.rope_pool_fused (defined in ropepool/torch_op.py) with a Python kernel costs
 * torch's boxing of its 31 arguments back into Python objects and a Python call: +110 µs per call
 * over the direct binding on the development CPU, +30 µs on the H200's host
 * (bench/results/torch-op-cpu.md). This boxed C++ kernel makes the same call of the binding
 * (ropepool._ropepool.rope_pool_fused, so every check and message stays the library's) straight
 * from the dispatcher's stack: the arguments as Python objects, the keyword-only ones only where
 * they differ from the schema's default (what the Python kernel passed, too). */

PyObject *binding_call; /* ropepool._ropepool.rope_pool_fused, set by register_kernels */

/* The GIL for the kernel's duration: torch may call it with the GIL released. */
struct gil_held {
    PyGILState_STATE state = PyGILState_Ensure();
    gil_held() = default;
    gil_held(const gil_held &) = delete;
    gil_held &operator=(const gil_held &) = delete;
    ~gil_held() { PyGILState_Release(state); }
};

/* Whether a keyword-only argument is at its schema default: None for None, equal values of the
 * same type otherwise (a NaN never is, so the binding refuses it). */
bool at_default(const c10::Argument &argument, const c10::IValue &value)
{
    if (!argument.kwarg_only() || !argument.default_value())
        return false;
    const c10::IValue &fallback = *argument.default_value();
    if (value.isNone() || fallback.isNone())
        return value.isNone() && fallback.isNone();
    if (value.isBool() && fallback.isBool())
        return value.toBool() == fallback.toBool();
    if (value.isInt() && fallback.isInt())
        return value.toInt() == fallback.toInt();
    if (value.isDouble() && fallback.isDouble())
        return value.toDouble() == fallback.toDouble();
    if (value.isString() && fallback.isString())
        return value.toStringRef() == fallback.toStringRef();
    return false;
}

/* A new reference to the Python object for an argument of the schema's types; NULL with an
 * exception for any other (the schema has none). */
PyObject *python_value(const c10::IValue &value)
{
    if (value.isTensor())
        return THPVariable_Wrap(value.toTensor());
    if (value.isNone())
        Py_RETURN_NONE;
    if (value.isBool())
        return PyBool_FromLong(value.toBool());
    if (value.isInt())
        return PyLong_FromLongLong(value.toInt());
    if (value.isDouble())
        return PyFloat_FromDouble(value.toDouble());
    if (value.isString()) {
        const std::string &text = value.toStringRef();
        return PyUnicode_FromStringAndSize(text.data(), (Py_ssize_t)text.size());
    }
    if (value.isIntList()) {
        const c10::List<int64_t> items = value.toIntList();
        PyObject *list = PyList_New((Py_ssize_t)items.size());
        for (size_t i = 0; list != nullptr && i < items.size(); i++) {
            PyObject *item = PyLong_FromLongLong(items.get(i));
            if (item == nullptr)
                Py_CLEAR(list);
            else
                PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    PyErr_Format(PyExc_TypeError, "ropepool's operator kernel has no Python value for an argument of type %s",
                 value.tagKind().c_str());
    return nullptr;
}

/* The binding's result for the schema: the default overload returns (q_rot, k_rot), the out
 * overload nothing (the binding returns (q_rot, k_rot, k_pool, v_pool)). */
void push_results(const c10::FunctionSchema &schema, PyObject *result, torch::jit::Stack *stack)
{
    for (size_t i = 0; i < schema.returns().size(); i++)
        stack->emplace_back(THPVariable_Unpack(PyTuple_GET_ITEM(result, (Py_ssize_t)i)));
}

/* The schema's argument names as interned Python strings, made once per overload (the GIL held):
 * interning them on every call, with two vectors' allocations, cost some 0.5 µs of the operator's
 * 10 (bench/results/torch-op-cpu.md). A reference is kept for the life of the process, as the
 * operator's is. NULL with an exception. */
PyObject *const *argument_names(const c10::FunctionSchema &schema)
{
    static std::vector<std::pair<const c10::FunctionSchema *, std::vector<PyObject *>>> made;
    for (const auto &entry : made)
        if (entry.first == &schema)
            return entry.second.data();
    std::vector<PyObject *> names;
    for (const c10::Argument &argument : schema.arguments()) {
        PyObject *name = PyUnicode_InternFromString(argument.name().c_str());
        if (name == nullptr) {
            for (PyObject *made_name : names)
                Py_DECREF(made_name);
            return nullptr;
        }
        names.push_back(name);
    }
    made.emplace_back(&schema, std::move(names));
    return made.back().second.data();
}

/* callable(*arguments) for the operator's arguments on the stack (left there): the keyword-only
 * ones only where they differ from the schema's default. A new reference, or NULL with an
 * exception; the GIL held. */
PyObject *call_with_arguments(PyObject *callable, const c10::OperatorHandle &op, const torch::jit::Stack &stack)
{
    const c10::FunctionSchema &schema = op.schema();
    const std::vector<c10::Argument> &arguments = schema.arguments();
    const size_t num = arguments.size();
    PyObject *const *argument_name = argument_names(schema);
    /* argv: the positional arguments, then the values of the keywords named in kwnames */
    c10::SmallVector<PyObject *, 40> argv, names; /* 33 arguments at most: no allocation */
    PyObject *kwnames = nullptr, *result = nullptr;
    size_t positional = 0;
    bool ok = argument_name != nullptr;
    for (size_t i = 0; ok && i < num; i++) {
        const c10::IValue &value = torch::jit::peek(stack, i, num);
        const bool keyword = arguments[i].kwarg_only();
        if (keyword && at_default(arguments[i], value))
            continue;
        PyObject *item = python_value(value);
        ok = item != nullptr;
        if (item != nullptr)
            argv.push_back(item);
        if (item != nullptr && keyword)
            names.push_back(argument_name[i]);
        positional += !keyword;
    }
    kwnames = ok ? PyTuple_New((Py_ssize_t)names.size()) : nullptr;
    for (size_t i = 0; kwnames != nullptr && i < names.size(); i++) {
        Py_INCREF(names[i]);
        PyTuple_SET_ITEM(kwnames, (Py_ssize_t)i, names[i]);
    }
    if (kwnames != nullptr)
        result = PyObject_Vectorcall(callable, argv.data(), positional, kwnames);
    for (PyObject *item : argv)
        Py_DECREF(item);
    Py_XDECREF(kwnames);
    return result;
}

[[noreturn]] void raise_python_error()
{
    python_error error; /* torch raises the binding's own exception (RopePoolError, ...) */
    error.persist();
    throw error;
}

void kernel(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    gil_held gil;
    PyObject *result = call_with_arguments(binding_call, op, *stack);
    if (result == nullptr)
        raise_python_error();
    torch::jit::drop(*stack, op.schema().arguments().size());
    push_results(op.schema(), result, stack);
    Py_DECREF(result);
}

PyObject *autograd_check; /* ropepool.torch_op._check_autograd, set by register_kernels */

/* The operator's Autograd kernel. The binding refuses a tensor that requires grad while grad mode
 * is on (the call has no backward), but under torch.func.grad / vjp / jacrev the device kernel
 * sees the transform's unwrapped tensors, which do not: without this kernel the operator ran
 * and its gradient came back as zeros (torch's autograd fallback only warns). Here the tensors
 * are still the ones autograd tracks, so the binding's own check runs on them; then the call goes
 * on below autograd. Under no_grad nothing is asked (a flag read); inference mode skips the key. */
void autograd_kernel(const c10::OperatorHandle &op, c10::DispatchKeySet keys, torch::jit::Stack *stack)
{
    const size_t num = op.schema().arguments().size();
    bool requires_grad = false;
    for (size_t i = 0; at::GradMode::is_enabled() && !requires_grad && i < num; i++) {
        const c10::IValue &value = torch::jit::peek(*stack, i, num);
        requires_grad = value.isTensor() && value.toTensor().requires_grad();
    }
    if (requires_grad) {
        gil_held gil;
        PyObject *result = call_with_arguments(autograd_check, op, *stack);
        if (result == nullptr)
            raise_python_error();
        Py_DECREF(result);
    }
    op.redispatchBoxed(keys & c10::after_autograd_keyset, stack);
}

/* register_kernels(binding, check, names, keys): the kernel above for each operator
 * (ropepool::<name>) under each dispatch key (torch's names), and autograd_kernel, which calls
 * check, under Autograd; once per process; the operators must be defined already. */
PyObject *register_kernels(PyObject *, PyObject *args)
{
    PyObject *binding = nullptr, *check = nullptr, *names = nullptr, *keys = nullptr;
    if (!PyArg_ParseTuple(args, "OOO!O!:register_kernels", &binding, &check, &PyTuple_Type, &names, &PyTuple_Type,
                          &keys))
        return nullptr;
    if (binding_call != nullptr) {
        PyErr_SetString(PyExc_RuntimeError, "ropepool's operator kernels are registered already");
        return nullptr;
    }
    try {
        /* Registrations last as long as their Library: these stay for the process's life. */
        for (Py_ssize_t k = 0; k <= PyTuple_GET_SIZE(keys); k++) {
            const bool autograd = k == PyTuple_GET_SIZE(keys);
            const char *key = autograd ? "Autograd" : PyUnicode_AsUTF8(PyTuple_GET_ITEM(keys, k));
            if (key == nullptr)
                return nullptr;
            auto *library = new torch::Library(torch::Library::IMPL, "ropepool", c10::parseDispatchKey(key),
                                               __FILE__, __LINE__);
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
                const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
                if (name == nullptr)
                    return nullptr;
                if (autograd)
                    library->impl(name, torch::CppFunction::makeFromBoxedFunction<&autograd_kernel>());
                else
                    library->impl(name, torch::CppFunction::makeFromBoxedFunction<&kernel>());
            }
        }
    } catch (const c10::Error &e) {
        PyErr_Format(PyExc_RuntimeError, "registering ropepool's operator kernels: %s", e.what_without_backtrace());
        return nullptr;
    }
    Py_INCREF(binding);
    binding_call = binding;
    Py_INCREF(check);
    autograd_check = check;
    Py_RETURN_NONE;
}

PyMethodDef module_methods[] = {
    {"register_kernels", register_kernels, METH_VARARGS,
     "register_kernels(binding, check, names, keys): ropepool::<name> under each dispatch key calls binding "
     "from C++, and under Autograd calls check where a tensor requires grad"},
    {nullptr, nullptr, 0, nullptr}};

const rpy_torch_native api = {RPY_TORCH_NATIVE_ABI, describe,      empty_like,      inference_locked,
                              grad_enabled,         requires_grad, forward_tangent, bump_versions,
                              dispatch_modes};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_ropepool_torch",
                          "ropepool's tensor access on torch's C++ API (see native.h)", -1,
                          module_methods, nullptr, nullptr, nullptr, nullptr};

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
