/*
 * dtype.h — exact conversions between the storage types and float64, in portable C.
 *
 * Widening (f16/bf16/f32 -> double) is exact. Narrowing rounds ONCE, to nearest-even, straight
 * from the double: going through float first would round twice and could miss by one ulp, and the
 * reference kernel must be the correctly rounded float64 formula.
 */
#ifndef RP_DTYPE_H
#define RP_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline double rp_f16_bits_to_double(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double mag;
    if (exp == 0)
        mag = ldexp((double)mant, -24); /* zero or subnormal */
    else if (exp == 31)
        mag = mant ? NAN : INFINITY;
    else
        mag = ldexp((double)(mant | 0x400), exp - 25);
    return sign ? -mag : mag;
}

static inline float rp_bf16_bits_to_float(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds d to nearest-even in a binary format with `exp_bits` exponent bits and `mant_bits`
 * stored mantissa bits (f16: 5/10, bf16: 8/7), with subnormals, overflow to infinity and NaN.
 * Returns the format's bit pattern. */
static inline uint32_t rp_round_double_to_bits(double d, int exp_bits, int mant_bits)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    const uint32_t sign = (uint32_t)(u >> 63) << (exp_bits + mant_bits);
    const uint64_t mag = u & 0x7fffffffffffffffull;
    const uint32_t exp_max = (1u << exp_bits) - 1;
    const uint32_t inf = exp_max << mant_bits;
    if (mag >= 0x7ff0000000000000ull) /* inf or NaN (NaN stays a quiet NaN) */
        return sign | inf | (mag > 0x7ff0000000000000ull ? 1u << (mant_bits - 1) : 0u);
    if ((mag >> 52) == 0)
        return sign; /* double subnormals are far below the smallest target subnormal */

    const int bias = (1 << (exp_bits - 1)) - 1;
    const int e = (int)(mag >> 52) - 1023;                      /* value in [2^e, 2^(e+1)) */
    const uint64_t sig = (mag & 0xfffffffffffffull) | (1ull << 52); /* value = sig * 2^(e-52) */
    if (e + bias >= (int)exp_max)
        return sign | inf;
    /* Exponent of the target ulp: normal numbers keep mant_bits fraction bits; subnormals share
     * the quantum of the smallest normal. */
    const int ulp_exp = e >= 1 - bias ? e - mant_bits : 1 - bias - mant_bits;
    const int drop = ulp_exp - (e - 52); /* low bits of sig below the target ulp, >= 52-mant_bits */
    if (drop > 54)
        return sign; /* below half the smallest subnormal */
    uint64_t kept = sig >> drop;
    const uint64_t rest = sig & ((1ull << drop) - 1), half = 1ull << (drop - 1);
    if (rest > half || (rest == half && (kept & 1)))
        kept++;
    /* Normal: kept holds the implicit bit at 2^mant_bits, so adding (biased_exp - 1) << mant_bits
     * encodes it, and a carry out of the mantissa bumps the exponent (up to infinity) by itself.
     * Subnormal: kept is the stored mantissa; a carry makes it the smallest normal, also right. */
    if (e >= 1 - bias)
        return sign | (uint32_t)(((uint64_t)(e + bias - 1) << mant_bits) + kept);
    return sign | (uint32_t)kept;
}

static inline uint16_t rp_double_to_f16_bits(double d)
{
    return (uint16_t)rp_round_double_to_bits(d, 5, 10);
}

static inline uint16_t rp_double_to_bf16_bits(double d)
{
    return (uint16_t)rp_round_double_to_bits(d, 8, 7);
}

/* f16 -> float, exact, without float16 hardware (Giesen's renormalisation trick). */
static inline float rp_f16_bits_to_float(uint16_t h)
{
    const uint32_t exp_mask = 0x7c00u << 13;
    uint32_t u = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t exp = u & exp_mask;
    float f;
    u += (127u - 15u) << 23;
    if (exp == exp_mask) { /* inf or NaN */
        u += (128u - 16u) << 23;
    } else if (exp == 0) { /* zero or subnormal: let the FPU normalise it exactly */
        const uint32_t magic_bits = 113u << 23;
        float magic;
        memcpy(&magic, &magic_bits, sizeof magic);
        u += 1u << 23;
        memcpy(&f, &u, sizeof f);
        f -= magic;
        memcpy(&u, &f, sizeof u);
    }
    u |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float -> bf16, round to nearest-even, NaN kept quiet. Exact on subnormals (unlike some
 * hardware converters that flush them). Used by the portable kernel. */
static inline uint16_t rp_float_to_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ---- fp8 (OCP float8: e4m3fn and e5m2) ---------------------------------------------------------- */

/* The two pool formats: mantissa bits, exponent bias, largest finite value and its code, and the
 * NaN code written for a NaN input (e4m3fn has no infinities; e5m2's are never produced). */
typedef struct rp_fp8_format {
    int mant_bits, bias;
    double max;
    uint8_t max_code, nan_code;
} rp_fp8_format;

static inline rp_fp8_format rp_fp8_format_of(int e5m2)
{
    const rp_fp8_format e4m3 = {3, 7, 448.0, 0x7e, 0x7f}, e5 = {2, 15, 57344.0, 0x7b, 0x7e};
    return e5m2 ? e5 : e4m3;
}

/* d rounded ONCE to the fp8 format (e5m2 when nonzero, else e4m3fn): round to nearest-even,
 * saturating to +-max (infinities included), NaN to NaN, signed zeros kept. The one converter the
 * reference kernel and the verifier use; fast kernels that convert a float32 give the same code as
 * this function on (double)that float. */
static inline uint8_t rp_double_to_fp8_bits(double d, int e5m2)
{
    const rp_fp8_format f = rp_fp8_format_of(e5m2);
    const uint8_t sign = signbit(d) ? 0x80 : 0x00;
    if (isnan(d))
        return (uint8_t)(sign | f.nan_code);
    const double a = fabs(d);
    if (a >= f.max)
        return (uint8_t)(sign | f.max_code); /* rounds to max or beyond: saturate */
    if (a == 0.0)
        return sign;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    e -= 1;
    if (e < 1 - f.bias)
        e = 1 - f.bias; /* subnormals share the smallest normal's quantum */
    const double n = ldexp(a, f.mant_bits - e); /* a / quantum: exact, < 2^(mant_bits + 1) */
    double kept = floor(n);
    const double rest = n - kept;
    if (rest > 0.5 || (rest == 0.5 && fmod(kept, 2.0) != 0.0))
        kept += 1.0;
    /* With the implicit bit in kept, adding (biased exponent - 1) << mant_bits encodes a normal
     * number and carries a mantissa overflow into the exponent; in the subnormal binade the biased
     * exponent term is 0 and kept is the code itself (2^mant_bits: the smallest normal). Rounding
     * up never passes max: a < max and max is the top of its binade's codes. */
    return (uint8_t)(sign | (((e + f.bias - 1) << f.mant_bits) + (int)kept));
}

/* The value of an fp8 code (exact). */
static inline double rp_fp8_bits_to_double(uint8_t c, int e5m2)
{
    const rp_fp8_format f = rp_fp8_format_of(e5m2);
    const int exp = (c & 0x7f) >> f.mant_bits, mant = c & ((1 << f.mant_bits) - 1);
    double mag;
    if (e5m2 && exp == 31)
        mag = mant ? NAN : INFINITY;
    else if (!e5m2 && (c & 0x7f) == 0x7f)
        mag = NAN;
    else if (exp == 0)
        mag = ldexp((double)mant, 1 - f.bias - f.mant_bits);
    else
        mag = ldexp((double)(mant | (1 << f.mant_bits)), exp - f.bias - f.mant_bits);
    return (c & 0x80) ? -mag : mag;
}

#endif /* RP_DTYPE_H */
