/*
 * common.c — version, status and dtype names, and error-message formatting.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define RP_STR2(x) #x
#define RP_STR(x) RP_STR2(x)

unsigned rp_version_number(void)
{
    return RP_VERSION_NUMBER;
}

const char *rp_version_string(void)
{
    return RP_STR(RP_VERSION_MAJOR) "." RP_STR(RP_VERSION_MINOR) "." RP_STR(RP_VERSION_PATCH);
}

const char *rp_status_name(rp_status status)
{
    switch (status) {
    case RP_OK: return "RP_OK";
    case RP_ERR_INVALID_ARGUMENT: return "RP_ERR_INVALID_ARGUMENT";
    case RP_ERR_SLOT_OUT_OF_RANGE: return "RP_ERR_SLOT_OUT_OF_RANGE";
    case RP_ERR_DUPLICATE_SLOT: return "RP_ERR_DUPLICATE_SLOT";
    case RP_ERR_OVERLAP: return "RP_ERR_OVERLAP";
    case RP_ERR_UNSUPPORTED: return "RP_ERR_UNSUPPORTED";
    case RP_ERR_OUT_OF_MEMORY: return "RP_ERR_OUT_OF_MEMORY";
    case RP_ERR_CUDA: return "RP_ERR_CUDA";
    }
    return "RP_ERR_UNKNOWN";
}

const char *rp_status_string(rp_status status)
{
    switch (status) {
    case RP_OK: return "success";
    case RP_ERR_INVALID_ARGUMENT: return "invalid argument";
    case RP_ERR_SLOT_OUT_OF_RANGE: return "slot out of range";
    case RP_ERR_DUPLICATE_SLOT: return "duplicate slot";
    case RP_ERR_OVERLAP: return "output overlaps another tensor";
    case RP_ERR_UNSUPPORTED: return "not supported by this build";
    case RP_ERR_OUT_OF_MEMORY: return "out of memory";
    case RP_ERR_CUDA: return "CUDA error";
    }
    return "unknown status";
}

const char *rp_dtype_name(rp_dtype dtype)
{
    switch (dtype) {
    case RP_DTYPE_UNSET: return "unset";
    case RP_F32: return "float32";
    case RP_F16: return "float16";
    case RP_BF16: return "bfloat16";
    case RP_I32: return "int32";
    case RP_I64: return "int64";
    case RP_F64: return "float64";
    case RP_I8: return "int8";
    case RP_U8: return "uint8";
    case RP_I16: return "int16";
    case RP_U16: return "uint16";
    case RP_U32: return "uint32";
    case RP_U64: return "uint64";
    case RP_BOOL: return "bool";
    case RP_F8_E4M3: return "float8_e4m3fn";
    case RP_F8_E5M2: return "float8_e5m2";
    case RP_DTYPE_OTHER: break;
    }
    return "an unsupported type";
}

size_t rp_dtype_size(rp_dtype dtype)
{
    switch (dtype) {
    case RP_F64: case RP_I64: case RP_U64: return 8;
    case RP_F32: case RP_I32: case RP_U32: return 4;
    case RP_F16: case RP_BF16: case RP_I16: case RP_U16: return 2;
    case RP_I8: case RP_U8: case RP_BOOL: case RP_F8_E4M3: case RP_F8_E5M2: return 1;
    case RP_DTYPE_UNSET: case RP_DTYPE_OTHER: break;
    }
    return 0;
}

rp_status rp_fail(rp_err *err, rp_status status, const char *fmt, ...)
{
    if (err && err->buf && err->size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->buf, err->size, fmt, ap);
        va_end(ap);
    }
    return status;
}

void rp_format_past(char *value_text, char *bound_text, double value, double bound, int digits)
{
    /* 17 digits tell any two doubles apart */
    for (int d = digits; d <= 17; d++) {
        snprintf(value_text, RP_NUMBER_TEXT, "%.*g", d, value);
        snprintf(bound_text, RP_NUMBER_TEXT, "%.*g", d, bound);
        if (value == bound || strcmp(value_text, bound_text) != 0)
            break;
    }
}

void rp_format_outside(char *value_text, char *min_text, char *max_text, double value, double min, double max,
                       int digits)
{
    const int below = value < min; /* else above max, or NaN: reported against max */
    snprintf(below ? max_text : min_text, RP_NUMBER_TEXT, "%.*g", digits, below ? max : min);
    rp_format_past(value_text, below ? min_text : max_text, value, below ? min : max, digits);
}

char *rp_format_shape(char *buf, size_t size, const rp_tensor *t)
{
    size_t used = 0;
    int ndim = t->ndim < RP_MAX_DIMS ? t->ndim : RP_MAX_DIMS;
    used += (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld",
                                 (long long)t->shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, ndim == 1 ? ",)" : ")");
    return buf;
}
