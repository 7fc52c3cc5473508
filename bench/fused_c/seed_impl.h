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

/* One output row (ho, Ho, wo, :) of the conv and the ReLU, and the pool's sums: the
 * w window's mean m = mean_t a[t, q + t] (a: the h-window mean's row wo, zero border,
 * row stride wp), the conv's affine map, then the ReLU's map: acc_n[q] += NNGP',
 * acc_t[q] += NTK' (the first layer's NTK is its NNGP). p1 = v1[ho, wo], p2 = v2[Ho, :]
 * (float64: r1, r2 their square roots). kernelcli/kernels/_nonlinear.abrelu with
 * a = 0, b = 1 and _angle.atan2_nonneg. Inlined with k a constant (see seed_pairs). */
static inline __attribute__((always_inline)) void CAT(relu_row, SFX)(
        int n, int k, int wp, const REAL *restrict ar, REAL w2, REAL b2, REAL p1,
        const REAL *restrict p2, REAL r1, const REAL *restrict r2, REAL *restrict acc_n,
        REAL *restrict acc_t) {
    const REAL factor = (REAL)(1.0 / (2.0 * M_PI));
    const REAL half_pi = (REAL)(M_PI / 2), pi = (REAL)M_PI;
    const REAL snap = EXACT ? (REAL)0x1p-50 : (REAL)0x1p-21;
    const REAL inv_k = (REAL)(1.0 / k);
    for (int q = 0; q < n; q++) {
        REAL m = ar[q];
        for (int t = 1; t < k; t++) m += ar[t * wp + t + q];
        REAL c = w2 * (m * inv_k) + b2;
#if SEED_LINEAR_ONLY
        acc_n[q] += c; acc_t[q] += c; (void)p1; (void)p2; (void)r1; (void)r2;
        (void)factor; (void)half_pi; (void)pi; (void)snap;
        continue;
#endif
        REAL ac = FABS(c);
#if EXACT || SEED_ONE_SQRT
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

/* The h window's mean of nt (<= k) Gram planes: one pass. */
static inline __attribute__((always_inline)) void CAT(h_mean, SFX)(
        size_t len, int nt, const REAL *const *gp, REAL inv_k, REAL *restrict a) {
    for (size_t e = 0; e < len; e++) {
        REAL s = gp[0][e];
        for (int t = 1; t < nt; t++) s += gp[t][e];
        a[e] = s * inv_k;
    }
}

/* The output rows (ho, ho + dd) of one diagonal, k inlined as a constant. */
static inline __attribute__((always_inline)) void CAT(diagonal_rows, SFX)(
        int k, int lo, int h0, int h1, int o0, int o1, int dd, int Wo, int Wp,
        const REAL *g, REAL *a, REAL cw2, REAL cb2, const REAL *v1, const REAL *v2,
        const REAL *r1, const REAL *r2, REAL *acc_n, REAL *acc_t) {
    const REAL inv_k = (REAL)(1.0 / k);
    const size_t plane = (size_t)Wp * Wp;
    for (int ho = o0; ho < o1; ho++) {
        const REAL *gp[k];
        int nt = 0;
        for (int t = 0; t < k; t++) {
            int h = ho - lo + t;
            if (h >= h0 && h < h1) gp[nt++] = g + (size_t)h * plane; /* else a zero tap */
        }
        if (nt == k) CAT(h_mean, SFX)(plane, k, gp, inv_k, a);
        else if (nt > 0) CAT(h_mean, SFX)(plane, nt, gp, inv_k, a);
        else for (size_t e = 0; e < plane; e++) a[e] = 0;
        const REAL *p2 = v2 + (size_t)(ho + dd) * Wo, *q2 = r2 + (size_t)(ho + dd) * Wo;
        for (int wo = 0; wo < Wo; wo++)
            CAT(relu_row, SFX)(Wo, k, Wp, a + (size_t)wo * Wp, cw2, cb2, v1[ho * Wo + wo],
                               p2, r1[ho * Wo + wo], q2, acc_n, acc_t);
    }
}

/* The Gram planes (h, h + dd), h0 <= h < h1, of one diagonal: row w of plane h is
 * sum_c x1[c, h, w] x2[c, h + dd, :] / C (channels in order), at (w + lo, lo) of a
 * (W + 2 lo)^2 plane whose border stays zero. Inlined with C a constant. */
static inline __attribute__((always_inline)) void CAT(gram_planes, SFX)(
        int C, int H, int W, int lo, int Wp, int h0, int h1, int dd,
        const REAL *restrict x1, const REAL *restrict x2, REAL *restrict g) {
    const size_t plane = (size_t)Wp * Wp, hw = (size_t)H * W;
    const REAL inv_c = (REAL)(1.0 / C);
    (void)inv_c;
    for (int h = h0; h < h1; h++) {
        const REAL *y = x2 + (size_t)(h + dd) * W;
        for (int w = 0; w < W; w++) {
            REAL *restrict row = g + (size_t)h * plane + (size_t)(w + lo) * Wp + lo;
            const REAL *xa = x1 + (size_t)h * W + w;
            for (int q = 0; q < W; q++) {
                REAL s = xa[0] * y[q];
                for (int c = 1; c < C; c++) s += xa[c * hw] * y[c * hw + q];
#if SEED_RECIP_C
                row[q] = s * inv_c;
#else
                row[q] = s / (REAL)C;
#endif
            }
        }
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
    size_t plane = (size_t)Wp * Wp;
    REAL *xt = malloc(sizeof(REAL) * (size_t)n * C * H * W);
    REAL *v = malloc(sizeof(REAL) * (size_t)n * Ho * Wo);
    REAL *rv = malloc(sizeof(REAL) * (size_t)n * Ho * Wo);
    REAL *g = calloc(plane * H, sizeof(REAL)); /* one diagonal's Gram planes */
    REAL *a = calloc(plane, sizeof(REAL));     /* their h-window mean */
    REAL *acc_n = malloc(sizeof(REAL) * Wo), *acc_t = malloc(sizeof(REAL) * Wo);
    if (!xt || !v || !rv || !g || !a || !acc_n || !acc_t) {
        free(xt); free(v); free(rv); free(g); free(a); free(acc_n); free(acc_t);
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
            if (C == 3)
                CAT(gram_planes, SFX)(3, H, W, lo, Wp, h0, h1, dd, x1, x2, g);
            else
                CAT(gram_planes, SFX)(C, H, W, lo, Wp, h0, h1, dd, x1, x2, g);
            /* output rows (ho, ho + dd): the mean of their k planes (ho - lo + t) */
            int o0 = dd < 0 ? -dd : 0, o1 = dd > 0 ? Ho - dd : Ho;
            if (k == 3)
                CAT(diagonal_rows, SFX)(3, lo, h0, h1, o0, o1, dd, Wo, Wp, g, a, cw2, cb2,
                                        v1, v2, r1, r2, acc_n, acc_t);
            else
                CAT(diagonal_rows, SFX)(k, lo, h0, h1, o0, o1, dd, Wo, Wp, g, a, cw2, cb2,
                                        v1, v2, r1, r2, acc_n, acc_t);
        }
        for (int q = 0; q < Wo; q++) { tot_n += acc_n[q]; tot_t += acc_t[q]; }
        double count = (double)Ho * Ho * Wo * Wo;
        REAL pool_n = (REAL)(tot_n / count), pool_t = (REAL)(tot_t / count);
        REAL nngp = dw2 * pool_n + db2;
        out_nngp[p] = nngp;
        out_ntk[p] = dw2 * pool_t + nngp;
    }
    free(xt); free(v); free(rv); free(g); free(a); free(acc_n); free(acc_t);
    return 0;
}

/* One conv + ReLU layer on full covariances (the per-layer block of cnn5_gap and
 * cnn21_gap; kernelcli/kernels/_fused.conv_pointwise with abrelu): kn, kt the input
 * NNGP and NTK of npairs pairs, (H, H, W, W) each ([h, H', w, W'] as kernelcli lays
 * them out), v1, v2 the ReLU's variances (npairs, Ho, Wo) of each pair's two inputs;
 * on, ot the outputs (Ho, Ho, Wo, Wo) per pair. The conv's NTK: w2 * mean(ntk) + its
 * NNGP; the ReLU's: ntk * kdot. k = 3 only (the bench nets' filter). Returns 0, -1
 * when memory runs out, -2 for another k. */
int CAT(layer_pairs, SFX)(const REAL *kn, const REAL *kt, int npairs, int H, int W, int k,
                          int same, const REAL *v1s, const REAL *v2s, double cw2_,
                          double cb2_, REAL *on, REAL *ot) {
    if (k != 3) return -2;
    const REAL cw2 = (REAL)cw2_, cb2 = (REAL)cb2_;
    const int lo = same ? (k - 1) / 2 : 0;
    const int Ho = same ? H : H - k + 1, Wo = same ? W : W - k + 1, Wp = W + 2 * lo;
    const REAL inv_k = (REAL)(1.0 / k);
    const REAL factor = (REAL)(1.0 / (2.0 * M_PI));
    const REAL half_pi = (REAL)(M_PI / 2), pi = (REAL)M_PI;
    const REAL snap = EXACT ? (REAL)0x1p-50 : (REAL)0x1p-21;
    const size_t plane = (size_t)Wp * Wp, in_plane = (size_t)W * W;
    REAL *an = calloc(plane, sizeof(REAL)), *at = calloc(plane, sizeof(REAL));
    REAL *r1 = malloc(sizeof(REAL) * Ho * Wo), *r2 = malloc(sizeof(REAL) * Ho * Wo);
    if (!an || !at || !r1 || !r2) { free(an); free(at); free(r1); free(r2); return -1; }
    for (int p = 0; p < npairs; p++) {
        const REAL *n_in = kn + (size_t)p * H * H * in_plane;
        const REAL *t_in = kt + (size_t)p * H * H * in_plane;
        const REAL *v1 = v1s + (size_t)p * Ho * Wo, *v2 = v2s + (size_t)p * Ho * Wo;
        for (int e = 0; e < Ho * Wo; e++) {
            r1[e] = SQRT(v1[e] > 0 ? v1[e] : 0);
            r2[e] = SQRT(v2[e] > 0 ? v2[e] : 0);
        }
        for (int ho = 0; ho < Ho; ho++)
            for (int Hq = 0; Hq < Ho; Hq++) {
                /* the h window's mean of both kinds, into the planes' interiors */
                int first = 1;
                for (int t = 0; t < k; t++) {
                    int h = ho - lo + t, hh = Hq - lo + t;
                    if (h < 0 || h >= H || hh < 0 || hh >= H) continue;  /* a zero tap */
                    const REAL *gn = n_in + ((size_t)h * H + hh) * in_plane;
                    const REAL *gt = t_in + ((size_t)h * H + hh) * in_plane;
                    for (int w = 0; w < W; w++) {
                        REAL *dn = an + (size_t)(w + lo) * Wp + lo, *dt = at + (size_t)(w + lo) * Wp + lo;
                        const REAL *sn = gn + (size_t)w * W, *st = gt + (size_t)w * W;
                        if (first) for (int q = 0; q < W; q++) { dn[q] = sn[q]; dt[q] = st[q]; }
                        else for (int q = 0; q < W; q++) { dn[q] += sn[q]; dt[q] += st[q]; }
                    }
                    first = 0;
                }
                for (int w = 0; w < W; w++) {
                    REAL *dn = an + (size_t)(w + lo) * Wp + lo, *dt = at + (size_t)(w + lo) * Wp + lo;
                    if (first) for (int q = 0; q < W; q++) { dn[q] = 0; dt[q] = 0; }
                    else for (int q = 0; q < W; q++) { dn[q] *= inv_k; dt[q] *= inv_k; }
                }
                const REAL *p2 = v2 + (size_t)Hq * Wo, *q2 = r2 + (size_t)Hq * Wo;
                for (int wo = 0; wo < Wo; wo++) {
                    const REAL *arn = an + (size_t)wo * Wp, *art = at + (size_t)wo * Wp;
                    REAL *restrict out_n = on + (((size_t)p * Ho + ho) * Ho + Hq) * Wo * Wo + (size_t)wo * Wo;
                    REAL *restrict out_t = ot + (((size_t)p * Ho + ho) * Ho + Hq) * Wo * Wo + (size_t)wo * Wo;
                    const REAL p1 = v1[ho * Wo + wo], q1 = r1[ho * Wo + wo];
                    for (int q = 0; q < Wo; q++) {
                        REAL mn = (arn[q] + arn[Wp + 1 + q]) + arn[2 * Wp + 2 + q];
                        REAL mt = (art[q] + art[Wp + 1 + q]) + art[2 * Wp + 2 + q];
                        REAL c = cw2 * (mn * inv_k) + cb2;
                        REAL tk = cw2 * (mt * inv_k) + c;
                        REAL ac = FABS(c);
#if EXACT || SEED_ONE_SQRT
                        REAL s = q1 * q2[q];
#else
                        REAL s = SQRT(p1 * p2[q]);
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
                        out_n[q] = factor * sq + kdot * c;
                        out_t[q] = tk * kdot;
                    }
                    (void)p1; (void)q1; (void)p2; (void)q2;
                }
            }
    }
    free(an); free(at); free(r1); free(r2);
    return 0;
}

#undef CAT
#undef CAT_
