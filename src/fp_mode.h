/*
 * fp_mode.h — the default floating-point mode, entered for the library's own arithmetic and left
 * as the caller had it.
 *
 * ropepool's numerics assume IEEE arithmetic: subnormals kept, round to nearest, no traps. A
 * caller that turned on flush-to-zero or denormals-are-zero (torch.set_flush_denormal, a
 * -ffast-math program), another rounding mode or unmasked exceptions would otherwise get other
 * bits: in the host-side values (rope_base's frequency table from pow(), which a context caches
 * for later callers; 1 / scale of fp8 pools; transformers' tables) and on the caller's own slice
 * of a CPU call but not on the workers' (threads inherit the mode of the thread that made them,
 * not of the caller). The public calls and each CPU slice run in the default mode and put the
 * thread's back; the status flags are kept.
 */
#ifndef RP_FP_MODE_H
#define RP_FP_MODE_H

#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#  include <xmmintrin.h> /* _mm_getcsr, _mm_setcsr */
#endif

#if defined(__x86_64__) || defined(__i386__)
enum { RP_MXCSR_DEFAULT = 0x1F80, RP_MXCSR_FLAGS = 0x3F }; /* all masked, nearest, no FTZ/DAZ; status flags */
typedef unsigned rp_fp_mode;
static inline rp_fp_mode rp_fp_mode_enter(void)
{
    const unsigned mode = _mm_getcsr();
    if ((mode & ~(unsigned)RP_MXCSR_FLAGS) != RP_MXCSR_DEFAULT)
        _mm_setcsr(RP_MXCSR_DEFAULT | (mode & RP_MXCSR_FLAGS));
    return mode;
}
static inline void rp_fp_mode_leave(rp_fp_mode mode)
{
    if ((mode & ~(unsigned)RP_MXCSR_FLAGS) != RP_MXCSR_DEFAULT)
        _mm_setcsr(mode);
}
#elif defined(__aarch64__)
typedef uint64_t rp_fp_mode; /* FPCR: 0 is round to nearest, no flush to zero, no default NaN, no traps */
static inline rp_fp_mode rp_fp_mode_enter(void)
{
    uint64_t mode;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(mode));
    if (mode != 0)
        __asm__ __volatile__("msr fpcr, %0" : : "r"((uint64_t)0));
    return mode;
}
static inline void rp_fp_mode_leave(rp_fp_mode mode)
{
    if (mode != 0)
        __asm__ __volatile__("msr fpcr, %0" : : "r"(mode));
}
#else
typedef int rp_fp_mode;
static inline rp_fp_mode rp_fp_mode_enter(void) { return 0; }
static inline void rp_fp_mode_leave(rp_fp_mode mode) { (void)mode; }
#endif

#endif /* RP_FP_MODE_H */
