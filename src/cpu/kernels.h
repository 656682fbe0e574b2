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

#endif /* RP_CPU_KERNELS_H */
