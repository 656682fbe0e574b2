/*
 * rope_pool_avx2.c — placeholder until the avx2 kernel lands: fills nothing, so the table keeps
 * the portable kernel and reports "portable".
 */
#include "kernels.h"

void rp_cpu_fill_avx2(rp_cpu_kernels *table)
{
    (void)table;
}
