/*
 * binding.h — what the parts of the extension module ropepool._ropepool share.
 *
 * The extension turns the caller's arrays into rp_tensors without copying and calls the C library.
 * It checks only what the library cannot know (is this an array at all, of which framework, is its
 * memory addressable in elements); every other check, and every message, is the library's.
 */
#ifndef RPY_BINDING_H
#define RPY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ropepool.h"

/* ---- array frameworks ------------------------------------------------------------------------- */

/* One array library the binding understands. Every array argument of a call must be of the same
 * framework as q; its outputs are allocated by that framework on q's device. */
typedef struct rpy_framework {
    const char *type_name; /* "numpy.ndarray", "torch.Tensor": for error messages */
    /* 1 if obj is an array of this framework, 0 if not (never raises). */
    int (*is_array)(PyObject *obj);
    /* Describes obj (an array of this framework) as an rp_tensor without copying. Returns 0, or
     * -1 with a Python exception naming `name`. */
    int (*to_tensor)(PyObject *obj, const char *name, rp_tensor *out);
    /* A new, uninitialised, C-contiguous array with the shape, dtype and device of `like`, whose
     * rp_tensor (already read) is `like_tensor`; *out receives its description. NULL on error. */
    PyObject *(*empty_like)(PyObject *like, const rp_tensor *like_tensor, rp_tensor *out);
} rpy_framework;

extern const rpy_framework rpy_numpy;
extern const rpy_framework rpy_torch;

/* Imports NumPy's C API; called once from the module's init. Returns 0 or -1 with an exception. */
int rpy_numpy_import(void);

/* The cudaStream_t that torch's current stream on CUDA device `device` wraps. 0 or -1. */
int rpy_torch_current_stream(int device, void **stream);
/* 1 if torch is capturing a CUDA graph on its current stream, 0 if not, -1 on error. */
int rpy_torch_is_capturing(void);
/* The index of torch's current CUDA device, or -1 with an exception. */
int rpy_torch_current_device(void);

/* ---- contexts --------------------------------------------------------------------------------- */

/* The module's CPU context, created on first use with ROPEPOOL_NUM_THREADS threads (default: one
 * per online CPU). NULL with an exception on error. Call with the GIL held. */
rp_context *rpy_cpu_context(void);
/* The module's context for CUDA device `device`, created on first use (which must not happen
 * while the device's current stream is being captured into a CUDA graph). NULL with an exception
 * on error. With create == 0, returns NULL without an exception when none exists yet. */
rp_context *rpy_cuda_context(int device, int create);
/* Installs the fork handler that forgets contexts whose threads a child process does not have. */
int rpy_contexts_init(void);

/* ---- errors ----------------------------------------------------------------------------------- */

/* ropepool.RopePoolError (a ValueError subclass), created by the module's init. */
extern PyObject *rpy_error_type;
/* Raises RopePoolError(message) with .status = rp_status_name(status); returns NULL. */
PyObject *rpy_raise(rp_status status, const char *message);

/* ---- module functions ------------------------------------------------------------------------- */

PyObject *rpy_rope_pool_fused(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames);
extern const char rpy_rope_pool_fused_doc[];
/* hf_rope.c: rp_hf_rope_frequencies on parsed config fields -> ([inv_freq], attention_scaling),
 * and rp_hf_rope_style(model_type, rope_interleave) -> is_neox. ropepool/_hf.py reads configs. */
PyObject *rpy_hf_rope_frequencies(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *rpy_hf_rope_style(PyObject *module, PyObject *args);
/* Interns the call's parameter names; called once from the module's init. 0 or -1. */
int rpy_call_init(void);

#endif /* RPY_BINDING_H */
