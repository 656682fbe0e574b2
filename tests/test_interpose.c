/*
 * Two copies of ropepool in one process: an engine's own (linked in, in the global scope) and a
 * plugin's, loaded with dlopen(RTLD_LOCAL). Each copy's calls to its own public functions must
 * stay inside it: when they went through the PLT, a CUDA build loaded beside a CPU build asked
 * the CPU build's rp_has_cuda() and refused CUDA tensors as "built without its CUDA backend".
 *
 * This program stands in for the other copy: it defines rp_dtype_size itself (exported, as an
 * engine that linked ropepool statically with -rdynamic exports it) and links libropepool.so. The
 * library's validator sizes every tensor through rp_dtype_size; a valid call must use the
 * library's own, never this one.
 */
#include "test_util.h"

static int foreign_calls;

size_t rp_dtype_size(rp_dtype dtype)
{
    foreign_calls++;
    return dtype == RP_F32 || dtype == RP_I32 ? 4 : 0; /* right for this call: only the count tells */
}

static void test_library_calls_its_own_functions(void)
{
    test_rng rng = {42};
    fixture f;
    fixture_init(&f, &rng, 4, 4, 2, 64, 16, RP_F32, RP_I32, 4096, 0);
    foreign_calls = 0; /* fixture_init sized its buffers through this program's function */
    call_ok_on(NULL, &f.args, "a valid call");
    CHECK(foreign_calls == 0, "%d of the library's calls reached this program's rp_dtype_size",
          foreign_calls);
    fixture_free(&f);
}

int main(void)
{
    RUN(test_library_calls_its_own_functions);
    return test_summary("interpose");
}
