/* The seed network (bench/configs/cnn1_gap.yaml: k x k conv at stride 1, ReLU, global
 * average pool, dense) as one hand-fused loop per pair, float32 and float64, for
 * bench/fused_c.py: the same math as kernelcli's route, to measure how far XLA's
 * code for it is from a loop that keeps everything in L1/L2 (BENCHMARKS.md, issue 26
 * point 2). Not part of kernelcli.
 *
 * Per pair, per diagonal dd of the input rows (h, h + dd): the Gram planes
 * sum_c x1[h, w, c] x2[h + dd, W, c] / C (W x W each, with a zero border for SAME);
 * per output row pair (ho, ho + dd): the mean of its k planes, then per output
 * column wo the w window's mean along (wo, Wo) jointly, the conv's affine map, the
 * ReLU's arc-cosine map and the pool's sums, without writing any covariance.
 *
 * Build: gcc -O3 -march=native -mprefer-vector-width=512 -fno-math-errno -shared
 * -fPIC (no -ffast-math: -fno-math-errno only lets sqrt vectorise; the argument is
 * never negative). */

#include <math.h>
#include <stdlib.h>

/* Liberties that change the rounding (off by default, for what-if timings only):
 * SEED_ONE_SQRT: float32 forms sqrt(v1 v2) as the product of per-position roots (as
 * float64 does), one square root per entry fewer; SEED_RECIP_C: the Gram's / C as a
 * multiplication by 1 / C; SEED_LINEAR_ONLY (a wrong result: the profile's split) the
 * ReLU's map left out, the conv's output summed as it is. */
#ifndef SEED_LINEAR_ONLY
#define SEED_LINEAR_ONLY 0
#endif
#ifndef SEED_ONE_SQRT
#define SEED_ONE_SQRT 0
#endif
#ifndef SEED_RECIP_C
#define SEED_RECIP_C 0
#endif

/* kernelcli/kernels/_angle.py, float32: atan(t) ~= t P(t^2) on [0, 1]. */
static inline float atan_ratio_f32(float small, float big) {
    float t = small / big, u = t * t;
    float p = 0.00665807f;
    p = p * u + -0.03310461f;
    p = p * u + 0.0789991f;
    p = p * u + -0.13195862f;
    p = p * u + 0.19796881f;
    p = p * u + -0.33316001f;
    p = p * u + 0.99999562f;
    return t * p;
}

/* kernelcli/kernels/_angle.py, float64: fdlibm's atan with its breakpoints 7/16 and
 * 11/16, one division. */
static inline double atan_ratio_f64(double small, double big) {
    static const double at[11] = {
        3.33333333333329318027e-01, -1.99999999998764832476e-01,
        1.42857142725034663711e-01, -1.11111104054623557880e-01,
        9.09088713343650656196e-02, -7.69187620504482999495e-02,
        6.66107313738753120669e-02, -5.83357013379057348645e-02,
        4.97687799461593236017e-02, -3.65315727442169155270e-02,
        1.62858201153657823623e-02};
    int mid = small >= 0.4375 * big, upper = small >= 0.6875 * big;
    double num = upper ? small - big : (mid ? 2 * small - big : small);
    double den = upper ? small + big : (mid ? 2 * big + small : big);
    double r = num / den, z = r * r;
    double p = at[10];
    for (int i = 9; i >= 0; i--) p = p * z + at[i];
    double a = r - r * (z * p);
    double hi = upper ? 7.85398163397448278999e-01 : (mid ? 4.63647609000806093515e-01 : 0.0);
    double lo = upper ? 3.06161699786838301793e-17 : (mid ? 2.26987774529616870924e-17 : 0.0);
    return hi + (a + lo);
}

#define REAL float
#define SFX f32
#define EXACT 0
#define SQRT sqrtf
#define FABS fabsf
#define ATAN_RATIO atan_ratio_f32
#include "seed_impl.h"
#undef REAL
#undef SFX
#undef EXACT
#undef SQRT
#undef FABS
#undef ATAN_RATIO

#define REAL double
#define SFX f64
#define EXACT 1
#define SQRT sqrt
#define FABS fabs
#define ATAN_RATIO atan_ratio_f64
#include "seed_impl.h"
