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

#include "python_words.h"
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
    /* Autograd, for a framework that has it (NULL otherwise): refuses, before anything is
     * written, a call that autograd could not follow — an input that requires grad (the call has
     * no backward) or a written tensor that requires grad, as the framework's own in-place ops
     * do. objs[0, num_read) are read, objs[num_read, num) written. 0, or -1 with an exception. */
    int (*check_autograd)(PyObject *const *objs, const char *const *names, int num_read, int num);
    /* After a successful call: tells the framework that objs[0, num) were written in place (torch
     * bumps their version counters, as its in-place ops do). NULL where there is nothing to do. */
    int (*mark_written)(PyObject *const *objs, int num);
} rpy_framework;

extern const rpy_framework rpy_numpy;
extern const rpy_framework rpy_torch;

/* Imports NumPy's C API; called once from the module's init. Returns 0 or -1 with an exception. */
int rpy_numpy_import(void);
/* 1 if obj is a NumPy complex scalar (complex64, complex128, clongdouble), else 0. */
int rpy_numpy_is_complex_scalar(PyObject *obj);

/* The cudaStream_t that torch's current stream on CUDA device `device` wraps. 0 or -1. */
int rpy_torch_current_stream(int device, void **stream);
/* 1 if torch is capturing a CUDA graph on its current stream, 0 if not, -1 on error. */
int rpy_torch_is_capturing(void);
/* The index of torch's current CUDA device, or -1 with an exception. */
int rpy_torch_current_device(void);

/* Reads ROPEPOOL_TORCH_EXCHANGE and ROPEPOOL_TORCH_NATIVE (at import): 0, or -1 with an ImportError
 * naming a value that is neither 0 nor 1. */
int rpy_torch_read_switches(void);
/* How torch tensors are read: "native", "exchange" or "surface"; NULL while torch is not imported. */
const char *rpy_torch_reader(void);
/* 1 if obj is an instance of a subclass of torch.Tensor other than Parameter (FakeTensor,
 * FunctionalTensor: what tracers pass; or a caller's own), else 0. Plain tensors answer at once. */
int rpy_torch_subclass(PyObject *obj);
/* 1 if obj is a torch tensor and a TorchDispatchMode is active on this thread (make_fx, FlopCounterMode,
 * a caller's own mode: what the dispatcher shows each operator to), else 0. Never raises. */
int rpy_torch_dispatch_mode(PyObject *obj);
/* -1 with a RopePoolError if obj is a torch tensor given for a number that requires grad (grad
 * mode on: the call has no backward through the value it reads), else 0. */
int rpy_torch_check_number(PyObject *obj, const char *name);

/* ---- contexts --------------------------------------------------------------------------------- */

/* The module's CPU context, created on first use with ROPEPOOL_NUM_THREADS threads (default: one
 * per online CPU). NULL with an exception on error. Call with the GIL held. */
rp_context *rpy_cpu_context(void);
/* The module's context for CUDA device `device`, created on first use (which must not happen
 * while the device's current stream is being captured into a CUDA graph). NULL with an exception
 * on error. With create == 0, returns NULL without an exception when none exists yet. */
rp_context *rpy_cuda_context(int device, int create);
/* Whether any CUDA context exists in this process (a CUDA call has run). */
int rpy_any_cuda_context(void);
/* Installs the fork handler that forgets contexts whose threads a child process does not have. */
int rpy_contexts_init(void);

/* ---- errors ----------------------------------------------------------------------------------- */

/* ropepool.RopePoolError (a ValueError subclass), created by the module's init. */
extern PyObject *rpy_error_type;
/* Raises RopePoolError(message) with .status = rp_status_name(status); returns NULL. */
PyObject *rpy_raise(rp_status status, const char *message);
/* Raises RopePoolError (RP_ERR_INVALID_ARGUMENT) with a PyUnicode_FromFormat message; returns -1.
 * For the binding's own refusals of argument values, which name the argument and the value. */
int rpy_refuse(const char *format, ...);

/* ---- keyword arguments (keywords.c) --------------------------------------------------------- */

/* An integer (int, NumPy integer, anything with __index__) within [lo, hi]; TypeError or
 * RopePoolError naming `name` otherwise. 0 or -1. */
int rpy_integer(PyObject *obj, const char *name, long long lo, long long hi, long long *out);
/* The environment variable `name` as a decimal integer within [lo, hi] into *out; unset or empty:
 * fallback. -1 (never raises: callers name the variable in their own message, or cannot raise)
 * when it is anything else, with *out = fallback. Any thread. */
int rpy_env_integer(const char *name, long long lo, long long hi, long long fallback, long long *out);
/* A real number; a value too large for a double is refused naming `name`. 0 or -1. */
int rpy_float(PyObject *obj, const char *name, double *out);
/* A bool or numpy.bool_ into *truth (0/1); anything else (a truthy string or list is a mistake,
 * not a choice) is refused: "<name> must be <meaning>, got <repr>". 0, or -1. */
int rpy_strict_bool(PyObject *obj, const char *name, const char *meaning, int *truth);
/* The flags' names and meanings (rpy_strict_bool's <meaning>), indexed by RPY_FLAG_*. */
enum { RPY_FLAG_IS_NEOX, RPY_FLAG_CHECKED, RPY_FLAG_MROPE_INTERLEAVED, RPY_NUM_FLAGS };
extern const char *const rpy_flag_meanings[RPY_NUM_FLAGS][2];
/* is_neox: True (RP_ROPE_NEOX) or False (RP_ROPE_GPTJ). */
int rpy_is_neox(PyObject *obj, int32_t *style);
/* kv_layout: "flat", "NHD" or "HND" -> rp_kv_layout. */
int rpy_kv_layout(PyObject *obj, int32_t *layout);
/* mrope_section (NULL, or a sequence of three ints) and mrope_interleaved (NULL, or a bool) into
 * the args' fields; the library checks their values. */
int rpy_mrope(PyObject *section, PyObject *interleaved, int32_t out[3], uint32_t *interleaved_out);
/* kv_cache_dtype: "auto" (0), "fp8_e4m3" or "fp8" (RP_F8_E4M3), "fp8_e5m2" (RP_F8_E5M2). */
int rpy_kv_cache_dtype(PyObject *obj, int32_t *format);
/* The pools' storage format from kv_cache_dtype and the pools' dtype: pool_dtype for uint8 pools,
 * 0 for pools whose dtype says it; a mismatch is refused naming both. 0 or -1. */
int rpy_pool_format(PyObject *kv_cache_dtype_obj, int32_t kv_cache_dtype, const rp_tensor *k_pool,
                    int32_t *pool_dtype);
/* k_scale / v_scale: a number, or a one-element float array. A CUDA float32 tensor on `device`
 * is passed by address (*ptr, read when the kernel runs: CUDA graphs see updates); anything else
 * is read now into *value. 0 or -1. */
int rpy_scale(PyObject *obj, const char *name, rp_device device, double *value, const float **ptr);
/* t's shape as a tuple of ints (its repr is NumPy's shape in every framework); NULL with an
 * exception. */
PyObject *rpy_shape_tuple(const rp_tensor *t);
/* inv_freq: a 1-D float32/float64 array-like of `count` entries on any device, converted exactly
 * to float64 into out[0, count). 0 or -1. */
int rpy_inv_freq(PyObject *obj, int64_t count, double *out);
/* The caller's memory behind obj when it is an array of a framework (inv_freq, a scale), into *t;
 * t->data NULL when obj is none. 0, or -1 with an exception. */
int rpy_array_memory(PyObject *obj, rp_tensor *t);

/* Advice for the pages of a new CPU output before the kernel's threads first write it (see
 * fresh_memory.c); never fails. */
void rpy_advise_fresh_output(const rp_tensor *t);
/* The memory of a new CPU output shaped like `like` from fresh_memory.c's cache of blocks (*block_bytes
 * receives the block's size, for rpy_output_block_give), or NULL where the output is small, the
 * cache is off or out of memory: allocate it as usual then. NULL with a RopePoolError when
 * ROPEPOOL_OUTPUT_CACHE_MB or ROPEPOOL_FRESH_OUTPUTS is a value it cannot honour. With the GIL held. */
void *rpy_output_block_take(const rp_tensor *like, size_t *block_bytes);
/* Hands a block back when the output that held it is freed; any thread, GIL or not. */
void rpy_output_block_give(void *block, size_t bytes);

/* The framework of an array argument, or NULL (never raises). */
const rpy_framework *rpy_framework_of(PyObject *obj);

/* ---- module functions ------------------------------------------------------------------------- */

PyObject *rpy_rope_pool_fused(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames);
extern const char rpy_rope_pool_fused_doc[];
/* _profile(enable): the mean time of each stage of the calls since the last _profile() (a dict of
 * ns; "calls" is their number), then resets and switches stamping on or off. */
PyObject *rpy_profile(PyObject *module, PyObject *enable);
/* _keyword_fields(q_shape, k_pool_dtype, **keywords): the call's keywords converted and refused as the
 * call does, as a dict of rp_rope_pool_args fields (for ropepool.mlx). */
PyObject *rpy_keyword_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* _time_calls(calls, q, k, ..., **keywords): mean ns of `calls` C calls on arguments converted once. */
PyObject *rpy_time_calls(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* _verify(q, k, ..., q_out=, k_out=, **keywords): a finished call's outputs against the float64
 * reference: (checked, failures, worst error over bound, first failure). */
PyObject *rpy_verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* hf_rope.c: rp_hf_rope_frequencies on parsed config fields -> ([inv_freq], attention_scaling),
 * and rp_hf_rope_style(model_type, rope_interleave) -> is_neox. ropepool/_hf.py reads configs. */
PyObject *rpy_hf_rope_frequencies(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *rpy_hf_rope_style(PyObject *module, PyObject *args);
/* Interns the call's parameter names; called once from the module's init. 0 or -1. */
int rpy_call_init(void);

#endif /* RPY_BINDING_H */
