/*
 * The public header alone, as an engine's own C or C++ file includes it: compiled (not run) as C99
 * and C11 and as C++11 and C++17 with strict warnings as errors (tests/CMakeLists.txt), so that a
 * warning the header's inline helpers or macros raise in every including file is caught here.
 */
#include <ropepool.h>

int main(void)
{
    float data[8] = {0};
    rp_rope_pool_args args = RP_ZERO_INIT;
    args.q = rp_tensor_3d(data, RP_F32, 1, 2, 4);
    args.positions = rp_tensor_1d(data, RP_I32, 1);
    return args.q.dtype == RP_F32 && args.positions.dtype == RP_I32 && args.head_dim == 0 ? 0 : 1;
}
