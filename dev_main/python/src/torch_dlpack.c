/*
 * torch_dlpack.c — tensors through DLPack's C exchange API: a framework's C functions that
 * describe one of its tensors in place, allocate a new one, and name the current stream, with no
 * Python call in between. It is the fast path for torch tensors (torch_tensors.c decides when).
 */
#include "dlpack.h"

#include <string.h>

const rpy_DLPackExchangeAPI *rpy_dlpack_exchange_api(PyObject *type)
{
    PyObject *capsule = PyObject_GetAttrString(type, "__dlpack_c_exchange_api__");
    const rpy_DLPackExchangeAPI *api = NULL;
    if (capsule != NULL && PyCapsule_IsValid(capsule, "dlpack_exchange_api"))
        api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_XDECREF(capsule); /* the table itself lives as long as the process */
    PyErr_Clear();
    if (api == NULL || api->header.version.major != RPY_DLPACK_MAJOR ||
        api->dltensor_from_py_object_no_sync == NULL || api->managed_tensor_allocator == NULL ||
        api->managed_tensor_to_py_object_no_sync == NULL || api->current_work_stream == NULL)
        return NULL;
    return api;
}

static rp_dtype dtype_of(rpy_DLDataType dt)
{
    if (dt.lanes != 1)
        return RP_DTYPE_OTHER;
    switch (dt.code) {
    case RPY_DL_FLOAT:
        return dt.bits == 32 ? RP_F32 : dt.bits == 16 ? RP_F16 : dt.bits == 64 ? RP_F64 : RP_DTYPE_OTHER;
    case RPY_DL_BFLOAT: return dt.bits == 16 ? RP_BF16 : RP_DTYPE_OTHER;
    case RPY_DL_BOOL: return RP_BOOL;
    case RPY_DL_FLOAT8_E4M3FN: return RP_F8_E4M3;
    case RPY_DL_FLOAT8_E5M2: return RP_F8_E5M2;
    case RPY_DL_INT:
    case RPY_DL_UINT: {
        static const rp_dtype ints[2][4] = {{RP_I8, RP_I16, RP_I32, RP_I64}, {RP_U8, RP_U16, RP_U32, RP_U64}};
        const int row = dt.code == RPY_DL_UINT;
        switch (dt.bits) {
        case 8: return ints[row][0];
        case 16: return ints[row][1];
        case 32: return ints[row][2];
        case 64: return ints[row][3];
        default: return RP_DTYPE_OTHER;
        }
    }
    default: return RP_DTYPE_OTHER;
    }
}

static void describe(const rpy_DLTensor *dl, rp_tensor *t)
{
    memset(t, 0, sizeof *t);
    t->data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;
    t->ndim = dl->ndim;
    t->dtype = (int32_t)dtype_of(dl->dtype);
    /* Other device types pass through: the caller names them. */
    t->device.type = dl->device.device_type;
    t->device.index = dl->device.device_type == RPY_DL_CUDA ? dl->device.device_id : 0;
    for (int d = 0; d < dl->ndim && d < RP_MAX_DIMS; d++) {
        t->shape[d] = dl->shape[d];
        t->strides[d] = dl->strides[d];
    }
}

int rpy_dlpack_to_tensor(const rpy_DLPackExchangeAPI *api, PyObject *obj, rp_tensor *t)
{
    rpy_DLTensor dl;
    if (api->dltensor_from_py_object_no_sync(obj, &dl) != 0)
        return -1;
    describe(&dl, t);
    return 0;
}

static void set_error(void *error_ctx, const char *kind, const char *message)
{
    (void)error_ctx;
    PyErr_Format(strcmp(kind, "MemoryError") == 0 ? PyExc_MemoryError : PyExc_RuntimeError,
                 "allocating an output tensor: %s: %s", kind, message);
}

/* The allocator's prototype (dtype, ndim, shape, device: all it reads) from like's rp_tensor, for
 * the data dtypes; 0 where like must be described again by torch. */
static int prototype_of(const rp_tensor *like, rpy_DLTensor *dl)
{
    memset(dl, 0, sizeof *dl);
    switch (like->dtype) {
    case RP_F32: dl->dtype = (rpy_DLDataType){RPY_DL_FLOAT, 32, 1}; break;
    case RP_F16: dl->dtype = (rpy_DLDataType){RPY_DL_FLOAT, 16, 1}; break;
    case RP_BF16: dl->dtype = (rpy_DLDataType){RPY_DL_BFLOAT, 16, 1}; break;
    default: return 0;
    }
    dl->ndim = like->ndim;
    dl->shape = (int64_t *)like->shape; /* read, never written, by the allocator */
    dl->device.device_type = like->device.type;
    dl->device.device_id = like->device.index;
    return 1;
}

PyObject *rpy_dlpack_empty_like(const rpy_DLPackExchangeAPI *api, PyObject *like, const rp_tensor *like_tensor,
                                rp_tensor *out)
{
    rpy_DLTensor prototype;
    rpy_DLManagedTensorVersioned *managed = NULL;
    void *obj = NULL;
    if (!prototype_of(like_tensor, &prototype) && api->dltensor_from_py_object_no_sync(like, &prototype) != 0)
        return NULL;
    if (api->managed_tensor_allocator(&prototype, &managed, NULL, set_error) != 0 || managed == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "allocating an output tensor failed");
        return NULL;
    }
    describe(&managed->dl_tensor, out); /* before the hand-over below, which steals it */
    if (api->managed_tensor_to_py_object_no_sync(managed, &obj) != 0 || obj == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "wrapping an output tensor failed");
        return NULL;
    }
    return (PyObject *)obj;
}

/* ---- outputs on fresh_memory.c's blocks ------------------------------------------------------ */

typedef struct {
    rpy_DLManagedTensorVersioned managed;
    int64_t shape[RP_MAX_DIMS], strides[RP_MAX_DIMS];
    size_t bytes;
} block_tensor;

/* Called by torch when the tensor's storage is freed, from any thread. */
static void block_tensor_deleter(rpy_DLManagedTensorVersioned *self)
{
    block_tensor *b = (block_tensor *)self->manager_ctx;
    rpy_output_block_give(b->managed.dl_tensor.data, b->bytes);
    free(b);
}

PyObject *rpy_dlpack_on_block(const rpy_DLPackExchangeAPI *api, const rp_tensor *like_tensor, void *block,
                              size_t bytes, rp_tensor *out)
{
    block_tensor *b = calloc(1, sizeof *b);
    rpy_DLTensor *dl = b ? &b->managed.dl_tensor : NULL;
    if (b == NULL || !prototype_of(like_tensor, dl)) { /* outputs are float tensors: only memory fails */
        free(b);
        rpy_output_block_give(block, bytes);
        return PyErr_NoMemory();
    }
    int64_t step = 1;
    for (int d = like_tensor->ndim - 1; d >= 0; d--) { /* C-contiguous */
        b->shape[d] = like_tensor->shape[d];
        b->strides[d] = step;
        step *= like_tensor->shape[d];
    }
    dl->data = block;
    dl->shape = b->shape;
    dl->strides = b->strides;
    dl->device.device_type = RPY_DL_CPU;
    b->bytes = bytes;
    b->managed.version = (rpy_DLPackVersion){RPY_DLPACK_MAJOR, 0};
    b->managed.manager_ctx = b;
    b->managed.deleter = block_tensor_deleter;
    describe(dl, out);
    void *obj = NULL;
    if (api->managed_tensor_to_py_object_no_sync(&b->managed, &obj) != 0 || obj == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "wrapping an output tensor failed");
        return NULL; /* the tensor was stolen: torch called its deleter */
    }
    return (PyObject *)obj;
}
