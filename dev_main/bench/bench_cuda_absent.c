/*
 * bench_cuda_absent.c — the CUDA side of a benchmark built without nvcc: it says so.
 */
#include "bench.h"

#include <stdio.h>

int bench_cuda_available(char *msg, size_t msg_size)
{
    snprintf(msg, msg_size, "this ropepool-bench was built without CUDA (nvcc was not found at build time)");
    return 0;
}

int bench_cuda_runs(const bench_options *o, rp_dtype dtype, bench_report *rep, char *msg, size_t msg_size)
{
    (void)o;
    (void)dtype;
    (void)rep;
    return bench_cuda_available(msg, msg_size) - 1;
}
