/* The seed network's pair kernel for one real type; included twice by seed.c with
 * REAL (float, double), SFX (f32, f64), EXACT (0, 1), SQRT, FABS and ATAN_RATIO
 * (atan(small / big) for 0 <= small <= big, big > 0) defined. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* Per image: x as (C, H, W) (channel-major, so the Gram's rows are unit stride), and
 * the ReLU's variances v (Ho, Wo): the same conv of the image's own diagonal, in
 * kernelcli's order (channel sum / C; h taps summed, * (1/k); w taps, * (1/k);
 * w2 * mean + b2). Float64 also keeps sqrt(v) per position (kernelcli's float64
 * forms s as the outer product of per-position square roots on a full covariance). */
static void CAT(prep, SFX)(const REAL *x, int H, int W, int C, int k, int lo, int Ho,
                           int Wo, REAL w2, REAL b2, REAL *xt, REAL *v, REAL *rv) {
    REAL inv_k = (REAL)(1.0 / k);
    REAL d[H * W], m[Ho * W];
    for (int c = 0; c < C; c++)
        for (int p = 0; p < H * W; p++) xt[c * H * W + p] = x[p * C + c];
    for (int p = 0; p < H * W; p++) {
        REAL s = x[p * C] * x[p * C];
        for (int c = 1; c < C; c++) s += x[p * C + c] * x[p * C + c];
        d[p] = s / (REAL)C;
    }
    for (int o = 0; o < Ho; o++)
        for (int w = 0; w < W; w++) {
            REAL s = 0; int first = 1;
            for (int t = 0; t < k; t++) {
                int h = o - lo + t;
                REAL e = (h >= 0 && h < H) ? d[h * W + w] : 0;
                s = first ? e : s + e; first = 0;
            }
            m[o * W + w] = s * inv_k;
        }
    for (int o = 0; o < Ho; o++)
        for (int q = 0; q < Wo; q++) {
            REAL s = 0; int first = 1;
            for (int t = 0; t < k; t++) {
                int w = q - lo + t;
                REAL e = (w >= 0 && w < W) ? m[o * W + w] : 0;
                s = first ? e : s + e; first = 0;
            }
            REAL val = w2 * (s * inv_k) + b2;
            v[o * Wo + q] = val;
            rv[o * Wo + q] = SQRT(val > 0 ? val : 0);
        }
}

/* One row of the ReLU's map and the pool's sums: conv means m[Wo] of output row
 * (ho, Ho, wo, :) -> acc_n[Wo] += NNGP', acc_t[Wo] += NTK' (the first layer's NTK is
 * its NNGP). p1 = v1[ho, wo], p2 = v2[Ho, :] (float64: r1, r2 their square roots).
 * kernelcli/kernels/_nonlinear.abrelu with a = 0, b = 1 and _angle.atan2_nonneg. */
static inline void CAT(relu_row, SFX)(int n, const REAL *restrict m, REAL w2, REAL b2,
                                      REAL p1, const REAL *restrict p2, REAL r1,
                                      const REAL *restrict r2, REAL *restrict acc_n,
                                      REAL *restrict acc_t) {
    const REAL factor = (REAL)(1.0 / (2.0 * M_PI));
    const REAL half_pi = (REAL)(M_PI / 2), pi = (REAL)M_PI;
    const REAL snap = EXACT ? (REAL)0x1p-50 : (REAL)0x1p-21;
    for (int q = 0; q < n; q++) {
        REAL c = w2 * m[q] + b2;
        REAL ac = FABS(c);
#if EXACT
        REAL s = r1 * r2[q];
        (void)p1; (void)p2;
#else
        REAL s = SQRT(p1 * p2[q]);
        (void)r1; (void)r2;
#endif
        s = (s - ac <= s * snap) ? ac : s;
        REAL d = (s - ac) * (s + ac);
        REAL sq = SQRT(d > 0 ? d : 0);
        REAL big = ac > sq ? ac : sq, small = ac < sq ? ac : sq;
        big = big > 0 ? big : 1;
        REAL a = ATAN_RATIO(small, big);
        a = sq > ac ? half_pi - a : a;
        a = c < 0 ? pi - a : a;
        REAL kdot = (REAL)0.5 - factor * a;
        acc_n[q] += factor * sq + kdot * c;
        acc_t[q] += c * kdot;
    }
}

/* NNGP and NTK of the pairs (pi[p], pj[p]) of the n images x (n, H, W, C), SAME
 * (same = 1) or VALID k x k conv at stride 1, ReLU, global average pool, dense.
 * cw2, cb2: the conv's W_std^2, b_std^2; dw2, db2: the dense layer's. Returns 0, or
 * -1 when memory runs out. */
int CAT(seed_pairs, SFX)(const REAL *x, int n, int H, int W, int C, int k, int same,
                         const int *pi_, const int *pj_, int npairs, double cw2_,
                         double cb2_, double dw2_, double db2_, REAL *out_nngp,
                         REAL *out_ntk) {
    const REAL cw2 = (REAL)cw2_, cb2 = (REAL)cb2_, dw2 = (REAL)dw2_, db2 = (REAL)db2_;
    const int lo = same ? (k - 1) / 2 : 0;
    const int Ho = same ? H : H - k + 1, Wo = same ? W : W - k + 1;
    const int Wp = W + 2 * lo;                 /* a Gram plane with its zero border */
    const REAL inv_k = (REAL)(1.0 / k);
    size_t plane = (size_t)Wp * Wp;
    REAL *xt = malloc(sizeof(REAL) * (size_t)n * C * H * W);
    REAL *v = malloc(sizeof(REAL) * (size_t)n * Ho * Wo);
    REAL *rv = malloc(sizeof(REAL) * (size_t)n * Ho * Wo);
    REAL *g = calloc(plane * H, sizeof(REAL)); /* one diagonal's Gram planes */
    REAL *a = calloc(plane, sizeof(REAL));     /* their h-window mean */
    REAL *m = malloc(sizeof(REAL) * Wo);
    REAL *acc_n = malloc(sizeof(REAL) * Wo), *acc_t = malloc(sizeof(REAL) * Wo);
    if (!xt || !v || !rv || !g || !a || !m || !acc_n || !acc_t) {
        free(xt); free(v); free(rv); free(g); free(a); free(m); free(acc_n); free(acc_t);
        return -1;
    }
    for (int i = 0; i < n; i++)
        CAT(prep, SFX)(x + (size_t)i * H * W * C, H, W, C, k, lo, Ho, Wo, cw2, cb2,
                       xt + (size_t)i * C * H * W, v + (size_t)i * Ho * Wo,
                       rv + (size_t)i * Ho * Wo);
    for (int p = 0; p < npairs; p++) {
        const REAL *x1 = xt + (size_t)pi_[p] * C * H * W, *x2 = xt + (size_t)pj_[p] * C * H * W;
        const REAL *v1 = v + (size_t)pi_[p] * Ho * Wo, *v2 = v + (size_t)pj_[p] * Ho * Wo;
        const REAL *r1 = rv + (size_t)pi_[p] * Ho * Wo, *r2 = rv + (size_t)pj_[p] * Ho * Wo;
        double tot_n = 0, tot_t = 0;
        for (int q = 0; q < Wo; q++) acc_n[q] = acc_t[q] = 0;
        for (int dd = -(H - 1); dd <= H - 1; dd++) {  /* input rows (h, h + dd) */
            int h0 = dd < 0 ? -dd : 0, h1 = dd > 0 ? H - dd : H;
            /* the Gram planes along this diagonal: sum_c x1[c,h,w] x2[c,h+dd,W] / C */
            for (int h = h0; h < h1; h++) {
                REAL *gp = g + (size_t)h * plane;
                for (int w = 0; w < W; w++) {
                    REAL *row = gp + (size_t)(w + lo) * Wp + lo;
                    const REAL *y0 = x2 + (size_t)(h + dd) * W;
                    REAL a0 = x1[h * W + w];
                    for (int q = 0; q < W; q++) row[q] = a0 * y0[q];
                    for (int c = 1; c < C; c++) {
                        REAL ac = x1[(size_t)c * H * W + h * W + w];
                        const REAL *yc = y0 + (size_t)c * H * W;
                        for (int q = 0; q < W; q++) row[q] += ac * yc[q];
                    }
                    for (int q = 0; q < W; q++) row[q] = row[q] / (REAL)C;
                }
            }
            /* output rows (ho, ho + dd): the mean of the k planes (ho - lo + t) */
            int o0 = dd < 0 ? -dd : 0, o1 = dd > 0 ? Ho - dd : Ho;
            for (int ho = o0; ho < o1; ho++) {
                int first = 1;
                for (int t = 0; t < k; t++) {
                    int h = ho - lo + t;
                    if (h < h0 || h >= h1) continue;   /* a zero tap */
                    const REAL *gp = g + (size_t)h * plane;
                    if (first) for (size_t e = 0; e < plane; e++) a[e] = gp[e];
                    else for (size_t e = 0; e < plane; e++) a[e] += gp[e];
                    first = 0;
                }
                if (first) for (size_t e = 0; e < plane; e++) a[e] = 0;
                for (size_t e = 0; e < plane; e++) a[e] *= inv_k;
                const REAL *p2 = v2 + (size_t)(ho + dd) * Wo, *q2 = r2 + (size_t)(ho + dd) * Wo;
                for (int wo = 0; wo < Wo; wo++) {
                    /* the w window: m[Wo] = mean_t a[wo + t, Wo + t] (zero border) */
                    const REAL *ar = a + (size_t)wo * Wp;
                    for (int q = 0; q < Wo; q++) m[q] = ar[q];
                    for (int t = 1; t < k; t++) {
                        const REAL *at = ar + (size_t)t * Wp + t;
                        for (int q = 0; q < Wo; q++) m[q] += at[q];
                    }
                    for (int q = 0; q < Wo; q++) m[q] *= inv_k;
                    CAT(relu_row, SFX)(Wo, m, cw2, cb2, v1[ho * Wo + wo], p2,
                                       r1[ho * Wo + wo], q2, acc_n, acc_t);
                }
            }
        }
        for (int q = 0; q < Wo; q++) { tot_n += acc_n[q]; tot_t += acc_t[q]; }
        double count = (double)Ho * Ho * Wo * Wo;
        REAL pool_n = (REAL)(tot_n / count), pool_t = (REAL)(tot_t / count);
        REAL nngp = dw2 * pool_n + db2;
        out_nngp[p] = nngp;
        out_ntk[p] = dw2 * pool_t + nngp;
    }
    free(xt); free(v); free(rv); free(g); free(a); free(m); free(acc_n); free(acc_t);
    return 0;
}

#undef CAT
#undef CAT_
