/*
 * python_words.h — library messages a Python caller reads in other words, shared by the NumPy and
 * torch binding (call.c) and the MLX extension (mlx/rope_pool_mlx.cpp): plain C, no Python header.
 */
#ifndef RPY_PYTHON_WORDS_H
#define RPY_PYTHON_WORDS_H

/* uint8 pools without a format: the library's message, and the same in Python's words (the
 * keyword, not the C field). */
#define RPY_UINT8_POOLS_C "k_pool and v_pool are uint8: set pool_dtype"
#define RPY_UINT8_POOLS_PYTHON \
    "k_pool is uint8: say which fp8 format it stores with kv_cache_dtype='fp8_e4m3' (or 'fp8') or 'fp8_e5m2'"

/* An array whose dtype has no rp_dtype (the library could only print its number): the binding
 * names the argument and its dtype, then this. */
#define RPY_DTYPE_NOT_TAKEN \
    ", which ropepool does not take (data and pools: float32, float16, bfloat16, fp8 pools; positions and slots: " \
    "int32, int64)"

#endif /* RPY_PYTHON_WORDS_H */
