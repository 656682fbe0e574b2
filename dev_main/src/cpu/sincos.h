/*
 * sincos.h — sin and cos of one RoPE angle, accurate to a few float64 ulps, for the fast kernels.
 *
 * angle = position * inv_freq is a float64 product, exactly as in the reference. It is reduced by
 * k = round(angle * 2/pi): with PIO2_HI the float64 nearest pi/2, fma(-k, PIO2_HI, angle) is exact
 * for |k| < 2^31 (the difference is a multiple of 2^-53 below 1 in magnitude), and PIO2_LO
 * carries the next 53 bits, so the reduced argument is off by ~1e-24 rad even at position 2^31:
 * peers that form the angle in float32 are off by ~0.03 rad at position 10^6. The polynomials are
 * fdlibm's minimax kernels on [-pi/4, pi/4]. Angles beyond RP_SINCOS_FAST_LIMIT (only int64
 * positions reach them) and NaN go to libm, which reduces exactly at any size.
 *
 * The vector kernels implement this same algorithm with the same constants lane by lane.
 */
#ifndef RP_CPU_SINCOS_H
#define RP_CPU_SINCOS_H

#include <math.h>
#include <stdint.h>

#define RP_TWO_OVER_PI 0x1.45f306dc9c883p-1
#define RP_PIO2_HI 0x1.921fb54442d18p+0     /* float64 nearest pi/2 */
#define RP_PIO2_LO 0x1.1a62633145c07p-54    /* pi/2 - RP_PIO2_HI */
#define RP_SINCOS_FAST_LIMIT 0x1p+31        /* |angle| below this keeps |k| < 2^31 */

#define RP_SIN_C1 -1.66666666666666324348e-01
#define RP_SIN_C2 8.33333333332248946124e-03
#define RP_SIN_C3 -1.98412698298579493134e-04
#define RP_SIN_C4 2.75573137070700676789e-06
#define RP_SIN_C5 -2.50507602534068634195e-08
#define RP_SIN_C6 1.58969099521155010221e-10

#define RP_COS_C1 4.16666666666666019037e-02
#define RP_COS_C2 -1.38888888888741095749e-03
#define RP_COS_C3 2.48015872894767294178e-05
#define RP_COS_C4 -2.75573143513906633035e-07
#define RP_COS_C5 2.08757232129817482790e-09
#define RP_COS_C6 -1.13596475577881948265e-11

static inline void rp_sincos(double angle, double *s, double *c)
{
    if (!(fabs(angle) < RP_SINCOS_FAST_LIMIT)) {
        *s = sin(angle);
        *c = cos(angle);
        return;
    }
    const double k = nearbyint(angle * RP_TWO_OVER_PI);
    const double r = fma(-k, RP_PIO2_LO, fma(-k, RP_PIO2_HI, angle));
    const double z = r * r;
    const double sr = r + r * z * (RP_SIN_C1 + z * (RP_SIN_C2 + z * (RP_SIN_C3 + z * (RP_SIN_C4 + z * (RP_SIN_C5 + z * RP_SIN_C6)))));
    const double cr = 1.0 - 0.5 * z + z * z * (RP_COS_C1 + z * (RP_COS_C2 + z * (RP_COS_C3 + z * (RP_COS_C4 + z * (RP_COS_C5 + z * RP_COS_C6)))));
    switch ((int64_t)k & 3) {
    case 0: *s = sr; *c = cr; break;
    case 1: *s = cr; *c = -sr; break;
    case 2: *s = -sr; *c = -cr; break;
    default: *s = -cr; *c = sr; break;
    }
}

#endif /* RP_CPU_SINCOS_H */
