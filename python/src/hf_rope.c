/*
 * hf_rope.c — the extension's door to rp_hf_rope_frequencies and rp_hf_rope_style. The config is
 * read in Python (ropepool/_hf.py); the formulas and the style table live once, in the library.
 */
#include "binding.h"

#include <stdlib.h>

enum { MESSAGE_SIZE = 512 };

/* A sequence of numbers, or None, as a malloc'ed double array of exactly `count` entries; a
 * length mismatch is reported by name. Returns 0 (with *out NULL for None) or -1 with an error. */
static int factor_list(PyObject *obj, const char *name, Py_ssize_t count, double **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(obj, "must be a sequence of numbers");
    if (seq == NULL)
        return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != count) {
        Py_DECREF(seq);
        PyErr_Format(rpy_error_type, "rope_parameters['%s'] must have rotary_dim/2 = %zd entries, got %zd",
                     name, count, n);
        return -1;
    }
    double *values = malloc((size_t)(n ? n : 1) * sizeof *values);
    if (values == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        values[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (values[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            free(values);
            return -1;
        }
    }
    Py_DECREF(seq);
    *out = values;
    return 0;
}

PyObject *rpy_hf_rope_frequencies(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    static char *keywords[] = {"rope_type", "rotary_dim", "rope_theta", "factor", "attention_factor",
                               "seq_len", "max_position_embeddings",
                               "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                               "mscale_all_dim", "low_freq_factor", "high_freq_factor", "short_factor",
                               "long_factor", "truncate", "partial_rotary_factor", NULL};
    rp_hf_rope_params p = {0};
    PyObject *short_obj = Py_None, *long_obj = Py_None;
    int truncate = 1;
    long long rotary_dim = 0, seq_len = 0, max_pos = 0, orig = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iLd|ddLLLddddddOOpd", keywords, &p.rope_type,
                                     &rotary_dim, &p.rope_theta, &p.factor, &p.attention_factor,
                                     &seq_len, &max_pos, &orig, &p.beta_fast, &p.beta_slow, &p.mscale,
                                     &p.mscale_all_dim, &p.low_freq_factor, &p.high_freq_factor,
                                     &short_obj, &long_obj, &truncate, &p.partial_rotary_factor))
        return NULL;
    p.rotary_dim = rotary_dim;
    p.seq_len = seq_len;
    p.max_position_embeddings = max_pos;
    p.original_max_position_embeddings = orig;
    p.flags = truncate ? 0u : RP_HF_YARN_NO_TRUNCATE;
    const Py_ssize_t half = rotary_dim > 0 ? (Py_ssize_t)(rotary_dim / 2) : 0;
    double *short_factor = NULL, *long_factor = NULL, *table = NULL;
    PyObject *result = NULL;
    if (factor_list(short_obj, "short_factor", half, &short_factor) < 0 ||
        factor_list(long_obj, "long_factor", half, &long_factor) < 0)
        goto done;
    p.short_factor = short_factor;
    p.long_factor = long_factor;
    table = malloc((size_t)(half ? half : 1) * sizeof *table);
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    char message[MESSAGE_SIZE];
    double scaling = 0.0;
    const rp_status st = rp_hf_rope_frequencies(&p, table, &scaling, message, sizeof message);
    if (st != RP_OK) {
        rpy_raise(st, message);
        goto done;
    }
    PyObject *list = PyList_New(half);
    for (Py_ssize_t j = 0; list != NULL && j < half; j++) {
        PyObject *value = PyFloat_FromDouble(table[j]);
        if (value == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, j, value);
    }
    if (list != NULL)
        result = Py_BuildValue("Nd", list, scaling);
done:
    free(short_factor);
    free(long_factor);
    free(table);
    return result;
}

PyObject *rpy_hf_rope_style(PyObject *module, PyObject *args)
{
    (void)module;
    const char *model_type;
    int rope_interleave;
    if (!PyArg_ParseTuple(args, "si", &model_type, &rope_interleave))
        return NULL;
    char message[MESSAGE_SIZE];
    int32_t style = 0;
    const rp_status st = rp_hf_rope_style(model_type, rope_interleave, &style, message, sizeof message);
    if (st != RP_OK)
        return rpy_raise(st, message);
    return PyBool_FromLong(style == RP_ROPE_NEOX);
}
