/*
 * rope_pool_avx512.c — placeholder until the avx512 kernel lands: fills nothing, so the table keeps
 * the portable kernel and reports "portable".
 */
#include "kernels.h"

void rp_cpu_fill_avx512(rp_cpu_kernels *table)
{
    (void)table;
}
