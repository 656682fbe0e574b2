/*
 * dlpack.h — the part of DLPack (https://github.com/dmlc/dlpack, v1.3) that the binding uses:
 * DLTensor, DLManagedTensorVersioned and the C exchange API that a framework publishes as the
 * capsule `type(tensor).__dlpack_c_exchange_api__`. Declared here from the specification so
 * that building the binding needs no framework headers. Layouts are fixed by the standard within a
 * major version, which the binding checks (header.version.major == 1) before use.
 */
#ifndef RPY_DLPACK_H
#define RPY_DLPACK_H

#include "binding.h"

enum { RPY_DLPACK_MAJOR = 1 };

/* DLDeviceType values the binding reads. */
enum { RPY_DL_CPU = 1, RPY_DL_CUDA = 2 };

/* DLDataTypeCode values the binding maps to rp_dtype. */
enum {
    RPY_DL_INT = 0,
    RPY_DL_UINT = 1,
    RPY_DL_FLOAT = 2,
    RPY_DL_BFLOAT = 4,
    RPY_DL_BOOL = 6,
    RPY_DL_FLOAT8_E4M3FN = 10,
    RPY_DL_FLOAT8_E5M2 = 12
};

typedef struct {
    uint32_t major;
    uint32_t minor;
} rpy_DLPackVersion;

typedef struct {
    int32_t device_type; /* DLDeviceType */
    int32_t device_id;
} rpy_DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} rpy_DLDataType;

typedef struct {
    void *data;
    rpy_DLDevice device;
    int32_t ndim;
    rpy_DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; never NULL for ndim > 0 since DLPack 1.2 */
    uint64_t byte_offset;
} rpy_DLTensor;

typedef struct rpy_DLManagedTensorVersioned {
    rpy_DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct rpy_DLManagedTensorVersioned *self);
    uint64_t flags;
    rpy_DLTensor dl_tensor;
} rpy_DLManagedTensorVersioned;

typedef struct rpy_DLPackExchangeAPIHeader {
    rpy_DLPackVersion version;
    struct rpy_DLPackExchangeAPIHeader *prev_api;
} rpy_DLPackExchangeAPIHeader;

typedef struct {
    rpy_DLPackExchangeAPIHeader header;
    /* A new tensor of prototype's dtype, ndim, shape and device, owned by the framework. */
    int (*managed_tensor_allocator)(rpy_DLTensor *prototype, rpy_DLManagedTensorVersioned **out,
                                    void *error_ctx,
                                    void (*set_error)(void *error_ctx, const char *kind,
                                                      const char *message));
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, rpy_DLManagedTensorVersioned **out);
    /* Steals `tensor` and returns the framework's Python object for it. */
    int (*managed_tensor_to_py_object_no_sync)(rpy_DLManagedTensorVersioned *tensor, void **out_py_object);
    /* Describes py_object in *out without copying or allocating; may be NULL. */
    int (*dltensor_from_py_object_no_sync)(void *py_object, rpy_DLTensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_current_stream);
} rpy_DLPackExchangeAPI;

/* ---- the binding's use of it (torch_dlpack.c) ----------------------------------------------- */

/* The exchange API that `type` publishes, or NULL (never raises) when it publishes none, or one
 * of another major version, or one without dltensor_from_py_object_no_sync. */
const rpy_DLPackExchangeAPI *rpy_dlpack_exchange_api(PyObject *type);
/* Describes obj as an rp_tensor. 0, or -1 with the framework's exception. */
int rpy_dlpack_to_tensor(const rpy_DLPackExchangeAPI *api, PyObject *obj, rp_tensor *t);
/* A new C-contiguous tensor of like's dtype, shape and device (like_tensor: like, already read),
 * allocated by the framework, and its description in *out. NULL with an exception on failure. */
PyObject *rpy_dlpack_empty_like(const rpy_DLPackExchangeAPI *api, PyObject *like, const rp_tensor *like_tensor,
                                rp_tensor *out);

/* A new C-contiguous CPU tensor of like's dtype and shape on `block` (bytes long, from
 * rpy_output_block_take), which goes back to the cache when torch frees the tensor; its
 * description in *out. NULL with an exception on failure (the block is given back). */
PyObject *rpy_dlpack_on_block(const rpy_DLPackExchangeAPI *api, const rp_tensor *like_tensor, void *block,
                              size_t bytes, rp_tensor *out);

#endif /* RPY_DLPACK_H */
