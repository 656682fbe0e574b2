/*
 * kernels.h — the CPU kernel levels. Each fills the entries of the table it can run; dispatch.c
 * fills the reference first, then the best level this CPU supports.
 */
#ifndef RP_CPU_KERNELS_H
#define RP_CPU_KERNELS_H

#include "../internal.h"

void rp_cpu_fill_portable(rp_cpu_kernels *table);

#if defined(__x86_64__) || defined(_M_X64)
#  define RP_HAVE_X86_KERNELS 1
void rp_cpu_fill_avx2(rp_cpu_kernels *table);
void rp_cpu_fill_avx512(rp_cpu_kernels *table);
#endif

/* 1 if this CPU can run the kernel level named "avx512", "avx2", "portable" or "reference" (what
 * dispatch.c checks before it fills the table; the tests use it to pick the levels to run). */
int rp_cpu_level_supported(const char *level);

/* Bytes a whole call moves through memory: q and q_rot; k, k_rot and k_pool; v and v_pool, with
 * the pools' element size (fp8: 1) and v's head width. The threading and streaming-store
 * thresholds are stated in these bytes. */
static inline int64_t rp_cpu_bytes_moved(const rp_problem *p)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype), pool_elem = (int64_t)rp_dtype_size(p->pool_dtype);
    const int64_t per_token = p->head_dim * (elem * (2 * p->num_qo_heads + 2 * p->num_kv_heads) +
                                             pool_elem * p->num_kv_heads) +
                              p->v_head_dim * p->num_kv_heads * (elem + pool_elem);
    return p->num_tokens * per_token;
}

/* Calls that move at least this many bytes (rp_cpu_bytes_moved) write q_rot and k_rot with
 * streaming stores, which skip each output line's read-for-ownership: a third less traffic once
 * the outputs cannot stay in the cache anyway. Smaller calls keep them in the cache, where the
 * attention that follows reads them. Measured on Zen 4 (32 MiB L3, Llama-3-8B shapes, 2 threads):
 * ordinary stores win 1.8x at 13.6 MB, streaming wins 1.8x at 27 MB. */
#define RP_STREAM_MIN_BYTES ((int64_t)16 << 20)

#endif /* RP_CPU_KERNELS_H */
