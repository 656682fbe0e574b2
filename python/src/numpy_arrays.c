/*
 * numpy_arrays.c — NumPy arrays as rp_tensors, read through NumPy's C API: no copy and no Python
 * attribute lookup, a few tens of nanoseconds per array.
 *
 * bfloat16 and float8 arrays come from ml_dtypes, which registers them as user-defined dtypes.
 * They are recognised by their scalar type, looked up in sys.modules (an array of such a dtype
 * cannot exist before ml_dtypes is imported), so NumPy stays the only hard dependency.
 */
#include "binding.h"

#include <stdint.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

int rpy_numpy_import(void)
{
    import_array1(-1);
    return 0;
}

int rpy_numpy_is_complex_scalar(PyObject *obj)
{
    return PyArray_IsScalar(obj, ComplexFloating);
}

static const struct {
    const char *name;
    rp_dtype dtype;
} ml_dtype_names[] = {{"bfloat16", RP_BF16}, {"float8_e4m3fn", RP_F8_E4M3}, {"float8_e5m2", RP_F8_E5M2}};
enum { NUM_ML_DTYPES = sizeof ml_dtype_names / sizeof ml_dtype_names[0] };

/* ml_dtypes' scalar types (strong references), once ml_dtypes has been seen in sys.modules. */
static PyObject *ml_dtype_types[NUM_ML_DTYPES];

static void find_ml_dtypes(void)
{
    PyObject *name = PyUnicode_FromString("ml_dtypes");
    PyObject *mod = name ? PyImport_GetModule(name) : NULL;
    Py_XDECREF(name);
    for (int i = 0; mod && i < NUM_ML_DTYPES; i++)
        ml_dtype_types[i] = PyObject_GetAttrString(mod, ml_dtype_names[i].name);
    Py_XDECREF(mod);
    PyErr_Clear(); /* a missing module or attribute only means: not one of these dtypes */
}

static rp_dtype integer_dtype(int is_signed, npy_intp size)
{
    switch (size) {
    case 1: return is_signed ? RP_I8 : RP_U8;
    case 2: return is_signed ? RP_I16 : RP_U16;
    case 4: return is_signed ? RP_I32 : RP_U32;
    case 8: return is_signed ? RP_I64 : RP_U64;
    default: return RP_DTYPE_OTHER;
    }
}

/* The rp_dtype of an array: every dtype the library can name, so that even an unsupported one
 * (float64, int8, ...) gets the library's own message. */
static rp_dtype numpy_dtype(PyArrayObject *a)
{
    const int type = PyArray_TYPE(a);
    switch (type) {
    case NPY_BOOL: return RP_BOOL;
    case NPY_HALF: return RP_F16;
    case NPY_FLOAT: return RP_F32;
    case NPY_DOUBLE: return RP_F64;
    default: break;
    }
    if (PyTypeNum_ISINTEGER(type))
        return integer_dtype(PyTypeNum_ISSIGNED(type), PyArray_ITEMSIZE(a));
    if (type >= NPY_USERDEF) {
        if (ml_dtype_types[0] == NULL)
            find_ml_dtypes();
        const PyObject *scalar_type = (const PyObject *)PyArray_DESCR(a)->typeobj;
        for (int i = 0; i < NUM_ML_DTYPES; i++)
            if (ml_dtype_types[i] != NULL && scalar_type == ml_dtype_types[i])
                return ml_dtype_names[i].dtype;
    }
    return RP_DTYPE_OTHER;
}

static int numpy_is_array(PyObject *obj)
{
    return PyArray_Check(obj);
}

/* Whether obj is a numpy.ma.MaskedArray (asked of ndarray subclasses only: np.memmap's calls
 * too, so the type is looked up once). 1, 0, or -1 with an exception. */
static int is_masked(PyObject *obj)
{
    static PyObject *masked_type;
    if (masked_type == NULL) {
        PyObject *ma = PyImport_ImportModule("numpy.ma");
        masked_type = ma ? PyObject_GetAttrString(ma, "MaskedArray") : NULL;
        Py_XDECREF(ma);
        if (masked_type == NULL)
            return -1;
    }
    return PyObject_IsInstance(obj, masked_type);
}

static int numpy_to_tensor(PyObject *obj, const char *name, rp_tensor *t)
{
    PyArrayObject *a = (PyArrayObject *)obj;
    memset(t, 0, sizeof *t);
    if (!PyArray_CheckExact(obj)) {
        const int masked = is_masked(obj);
        if (masked != 0) /* the call reads and writes every element: a mask would be ignored */
            return masked < 0 ? -1 : rpy_refuse("%s is a numpy.ma.MaskedArray, whose mask ropepool cannot honour: pass "
                                                "%s.data (or %s.filled(value))", name, name, name);
    }
    if (PyArray_ISBYTESWAPPED(a)) {
        return rpy_refuse("%s has non-native byte order (dtype %R): convert it with "
                          "%s.astype(%s.dtype.newbyteorder('='))", name, (PyObject *)PyArray_DESCR(a), name, name);
    }
    const int ndim = PyArray_NDIM(a);
    const npy_intp item = PyArray_ITEMSIZE(a);
    t->ndim = ndim;
    t->dtype = (int32_t)numpy_dtype(a);
    t->data = PyArray_DATA(a);
    t->device.type = RP_DEVICE_CPU;
    if (!PyArray_ISWRITEABLE(a))
        t->flags = RP_TENSOR_READ_ONLY;
    for (int d = 0; d < ndim && d < RP_MAX_DIMS; d++) {
        const npy_intp extent = PyArray_DIM(a, d), bytes = PyArray_STRIDE(a, d);
        t->shape[d] = extent;
        if (item > 0 && bytes % item == 0)
            t->strides[d] = bytes / item;
        else if (extent > 1 && item > 0) { /* a size-1 axis is never stepped: its stride is moot */
            return rpy_refuse("%s has a stride of %zd bytes on axis %d, not a multiple of its %zd-byte elements: "
                              "pass a copy (np.ascontiguousarray(%s))", name, (Py_ssize_t)bytes, d, (Py_ssize_t)item,
                              name);
        }
    }
    return 0;
}

static const char block_capsule_name[] = "ropepool.output_block";

static void give_block_back(PyObject *capsule)
{
    rpy_output_block_give(PyCapsule_GetPointer(capsule, block_capsule_name),
                          (size_t)(uintptr_t)PyCapsule_GetContext(capsule));
}

/* A C-contiguous array over a block of fresh_memory.c's cache, which gets the block back when
 * the array and every view of it are gone (the capsule is their base). NULL with an exception. */
static PyObject *array_on_block(PyArrayObject *like, void *block, size_t bytes)
{
    PyObject *capsule = PyCapsule_New(block, block_capsule_name, NULL);
    if (capsule == NULL || PyCapsule_SetContext(capsule, (void *)(uintptr_t)bytes) < 0 ||
        PyCapsule_SetDestructor(capsule, give_block_back) < 0) {
        Py_XDECREF(capsule); /* no destructor yet */
        rpy_output_block_give(block, bytes);
        return NULL;
    }
    PyArray_Descr *descr = PyArray_DESCR(like);
    Py_INCREF(descr); /* PyArray_NewFromDescr steals it */
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(like), PyArray_DIMS(like), NULL,
                                         block, NPY_ARRAY_CARRAY, NULL);
    if (arr == NULL) {
        Py_DECREF(capsule); /* its destructor gives the block back */
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, capsule) < 0) { /* steals capsule, even then */
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static PyObject *numpy_empty_like(PyObject *like, const rp_tensor *like_tensor, rp_tensor *out)
{
    PyArrayObject *a = (PyArrayObject *)like;
    size_t bytes;
    void *block = rpy_output_block_take(like_tensor, &bytes);
    if (block == NULL && PyErr_Occurred())
        return NULL;
    PyObject *arr;
    if (block != NULL) {
        arr = array_on_block(a, block, bytes);
    } else {
        PyArray_Descr *descr = PyArray_DESCR(a);
        Py_INCREF(descr); /* PyArray_Empty steals it */
        arr = PyArray_Empty(PyArray_NDIM(a), PyArray_DIMS(a), descr, 0);
    }
    if (arr != NULL && numpy_to_tensor(arr, "output", out) < 0)
        Py_CLEAR(arr);
    if (arr != NULL && block == NULL)
        rpy_advise_fresh_output(out);
    return arr;
}

const rpy_framework rpy_numpy = {"numpy.ndarray", numpy_is_array, numpy_to_tensor, numpy_empty_like, NULL, NULL};
