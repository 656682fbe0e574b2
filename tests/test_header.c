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

/* The header's compatibility promise for this soname (libropepool.so.0.2): the public structs keep
 * their size and their fields' offsets (here on LP64, where they were first published). A change
 * that breaks this needs a new minor version, and these numbers with it. */
#include <stddef.h>
#if RP_VERSION_MAJOR == 0 && RP_VERSION_MINOR == 2
#define RP_LAYOUT(expr) (sizeof(void *) != 8 || (expr) ? 1 : -1)
typedef char rp_layout_tensor[RP_LAYOUT(sizeof(rp_tensor) == 160)];
typedef char rp_layout_context_options[RP_LAYOUT(sizeof(rp_context_options) == 32)];
typedef char rp_layout_args[RP_LAYOUT(sizeof(rp_rope_pool_args) == 1696 &&
                                      offsetof(rp_rope_pool_args, head_dim) == 1440 &&
                                      offsetof(rp_rope_pool_args, style) == 1472 &&
                                      offsetof(rp_rope_pool_args, mrope_section) == 1568 &&
                                      offsetof(rp_rope_pool_args, q_norm_weight) == 1656)];
typedef char rp_layout_hf_params[RP_LAYOUT(sizeof(rp_hf_rope_params) == 160 &&
                                           offsetof(rp_hf_rope_params, reserved) == 136)];
#endif
