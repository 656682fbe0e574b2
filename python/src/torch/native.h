/*
 * native.h — the table of C functions that ropepool._ropepool_torch (native.cpp, C++) hands the
 * binding (torch_tensors.c, C) in a capsule: what the binding otherwise asks of torch through its
 * Python API, one tensor and one Python call at a time (about 0.2 µs a tensor, most of a T = 1
 * call's overhead: bench/results/python-call-cpu.md), done on the C++ tensor itself.
 *
 * The module also holds the torch operator's C++ kernel (native.cpp, register_kernels), which
 * ropepool/torch_op.py registers when the module loads.
 *
 * The extension is compiled against one torch's headers and C++ ABI, and loads only under that
 * version (its module init refuses any other); the binding then falls back to DLPack's exchange
 * API. Every function here is called with the GIL held.
 */
#ifndef RPY_TORCH_NATIVE_H
#define RPY_TORCH_NATIVE_H

#include <Python.h>

#include "ropepool.h"

#define RPY_TORCH_NATIVE_CAPSULE "ropepool._ropepool_torch.api"
#define RPY_TORCH_NATIVE_ABI 3

typedef struct rpy_torch_native {
    int abi; /* RPY_TORCH_NATIVE_ABI */
    /* Describes a torch.Tensor (obj, any subclass: the C++ tensor it wraps) as DLPack's exchange
     * API would: element 0 (storage offset included), shape, strides in elements, dtype, device.
     * Returns 1 when described, 0 when obj is a tensor this table leaves to the exchange API (a
     * layout other than strided, a device other than the CPU or CUDA, a dtype ropepool has no name for,
     * no storage): the caller's slower path then describes it or explains the refusal.
     * *negative: the tensor's negative bit (set whatever the return value). Never raises. */
    int (*describe)(PyObject *obj, rp_tensor *t, int *negative);
    /* A new, uninitialised, C-contiguous tensor with like's shape, dtype and device, described
     * into *out: torch.empty_like(like, memory_format=torch.contiguous_format). NULL with an
     * exception on error. like: a tensor describe() described. */
    PyObject *(*empty_like)(PyObject *like, rp_tensor *out);
    /* Whether obj is an inference tensor while inference mode is off: torch refuses to update it
     * in place (it has no version counter to bump). */
    int (*inference_locked)(PyObject *obj);
    /* torch.is_grad_enabled(). */
    int (*grad_enabled)(void);
    /* obj.requires_grad; *is_leaf: obj.is_leaf. */
    int (*requires_grad)(PyObject *obj, int *is_leaf);
    /* Whether obj carries a forward-mode AD tangent at any level (torch.autograd.forward_ad), outside
     * inference mode (which turns forward AD off). */
    int (*forward_tangent)(PyObject *obj);
    /* Bumps the version counter of each of objs[0, num), as torch's in-place ops do. 0, or -1
     * with torch's exception (an inference tensor outside inference mode). */
    int (*bump_versions)(PyObject *const *objs, int num);
    /* Whether a TorchDispatchMode is active on this thread (torch._C._len_torch_dispatch_stack() > 0). */
    int (*dispatch_modes)(void);
} rpy_torch_native;

#endif /* RPY_TORCH_NATIVE_H */
