// The native engine's custom calls: convolution -> ABReLU-family nonlinearity, on a batch
// of pairs' full covariances, writing the output covariances (a layer) or their global
// average pool (the tail before a global pool), as one XLA custom call each.
//
// Why C++: XLA:CPU evaluates the nonlinearity's angle once per output kind (no
// multi-output fusion there), does not vectorise a reduction fused with the
// nonlinearity's chain, and streams every intermediate (H W)^2 array through memory
// (measured: bench/roofline.py and bench/history/). Here each output row pair (h, h') is windowed, mapped and
// written or summed into the pool in one pass over cache-resident planes: the angle
// once per entry. The formulas and their order are kernelcli's own
// (kernels/_fused._conv_row, _linear.affine, _nonlinear.abrelu, _angle.atan2_nonneg);
// only the pool's sum differs (per lane in the dtype over a row, then in double).
// Python checks every shape and attribute before the call (kernels/_native.py); the
// handler checks the shapes again and refuses a mismatch.
#include "map.h"

// The variant this library was compiled for, in its bytes: the loader reads it before
// mapping them (_native_recipe.marked_variant), so another variant's instructions under
// a record that names this one are refused before any of their code runs.
#ifndef KERNELCLI_VARIANT
#define KERNELCLI_VARIANT "unnamed"
#endif
extern "C" __attribute__((visibility("default"), used)) const char kernelcli_variant[] =
    "kernelcli-variant:" KERNELCLI_VARIANT;

namespace {

// ntk_mode: 0 no NTK; 1 the input's NTK is exactly zero (the raw input's); 2 an array.
//
// Layout of the work on one output row pair (oh, oh2): the first axis pair's window
// sums whole input planes (W x W2, contiguous); the plane is copied into a zero-padded
// buffer with row stride W2p, so the second axis pair's window is kw contiguous
// streams over the flat output plane (entry (ow, ow2) at ow * W2p + ow2; the columns
// ow2 >= Wo2 are scratch, masked out of the pool). Every loop runs over a whole plane:
// short per-row loops cost more in their set-up than in their arithmetic.
//
// kPool: the global average pool of the nonlinearity's output, (P,) per kind; else
// the output covariances themselves, (P, Ho, Ho2, Wo, Wo2) per kind (a layer inside
// the network, whose next convolution reads them).
//
// kThree: a 3 x 3 filter, whose taps are summed inline (no pass per tap, no window
// buffer): the same sums in the same order.
template <typename T, bool kPool, bool kThree, bool kStandard>
void Tail(const T* x, const T* xt, const T* v1, const T* v2, T* out_nngp, T* out_ntk,
          int64_t P, int64_t H, int64_t H2, int64_t W, int64_t W2, int64_t Ho,
          int64_t Ho2, int64_t Wo, int64_t Wo2, const Params& q) {
  const bool exact = sizeof(T) == 8;
  const bool has_ntk = q.ntk_mode != 0, ntk_in = q.ntk_mode == 2;
  const T inv_kh = T(1.0 / q.kh), inv_kw = T(1.0 / q.kw);
  const Unit<T> unit(q.standard, q.has_bias, q.w_var, q.b_var, q.fan_in, q.a, q.b);
  const int64_t plane = W * W2;
  const int64_t W2p = Wo2 + q.kw - 1, Wp = Wo + q.kw - 1;  // the padded plane
  const int64_t n = Wo * W2p;                                // the flat output plane
  const int64_t copy_rows = std::min(W, Wp - q.lo_w), copy_cols = std::min(W2, W2p - q.lo_w);
  std::vector<T> row(plane), row_t(plane), pad(Wp * W2p + q.kw), pad_t(Wp * W2p + q.kw);
  std::vector<T> m(n), mt(n), s1(n), s2(Ho2 * n), keep(n), part_n(n), part_t(n);
  std::vector<double> acc_n(n), acc_t(n);
  // the plane (or image row) a tap outside the input reads
  std::vector<T> zero(std::max(plane, 3 * std::max(W, W2)));
  // from_images (3 x 3 filter, 3 channels, the network's first layer): the input's
  // covariance planes are made here from the images, x (P, H, W, 3) and xt
  // (P, H2, W2, 3), instead of read; x2t holds the second image channel-major per row
  const bool images = q.from_images != 0;
  std::vector<T> x2t(images ? H2 * 3 * W2 : 0);
  const T inv_c = T(1.0 / 3);
  for (int64_t i = 0; i < n; ++i) keep[i] = (i % W2p) < Wo2 ? T(1) : T(0);  // scratch: 0
  for (int64_t p = 0; p < P; ++p) {
    const T* xp = images ? x + p * H * W * 3 : x + p * H * H2 * plane;
    const T* xtp = ntk_in ? xt + p * H * H2 * plane : nullptr;
    if (images) {
      const T* y = xt + p * H2 * W2 * 3;
      for (int64_t r = 0; r < H2; ++r)
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t c = 0; c < W2; ++c) x2t[(r * 3 + ch) * W2 + c] = y[(r * W2 + c) * 3 + ch];
    }
    const T* v1p = v1 + p * Ho * Wo;
    const T* v2p = v2 + p * Ho2 * Wo2;
    // the second input's variance term per flat entry, for every oh2 (0 in scratch
    // columns: finite, and masked): v2 in float32, its square root in float64
    for (int64_t oh2 = 0; oh2 < Ho2; ++oh2)
      for (int64_t i = 0; i < n; ++i) {
        int64_t c = i % W2p;
        T v = c < Wo2 ? v2p[oh2 * Wo2 + c] : T(0);
        s2[oh2 * n + i] = exact ? std::sqrt(v > 0 ? v : T(0)) : v;
      }
    for (int64_t i = 0; i < n; ++i) acc_n[i] = acc_t[i] = 0.0;
    for (int64_t i = 0; i < Wp * W2p + q.kw; ++i) pad[i] = pad_t[i] = T(0);
    for (int64_t oh = 0; oh < Ho; ++oh) {
      for (int64_t r = 0; r < Wo; ++r) {
        T v = v1p[oh * Wo + r];
        v = exact ? std::sqrt(v > 0 ? v : T(0)) : v;
        for (int64_t c = 0; c < W2p; ++c) s1[r * W2p + c] = v;
      }
      for (int64_t oh2 = 0; oh2 < Ho2; ++oh2) {
        // the first axis pair's window: the taps' planes summed in order (a tap outside
        // the input reads the zero plane), then the mean, into the padded buffer
        const T* src[3] = {zero.data(), zero.data(), zero.data()};
        const T* srct[3] = {zero.data(), zero.data(), zero.data()};
        if (kThree && images) {
          // tap t's plane: sum over the 3 channels of x[ih, w, ch] xt[ih2, w2, ch], / 3
          const T* a[3] = {zero.data(), zero.data(), zero.data()};
          const T* b[3] = {zero.data(), zero.data(), zero.data()};
          for (int64_t t = 0; t < 3; ++t) {
            int64_t ih = oh - q.lo_h + t, ih2 = oh2 - q.lo_h + t;
            if (ih < 0 || ih >= H || ih2 < 0 || ih2 >= H2) continue;
            a[t] = xp + ih * W * 3;
            b[t] = x2t.data() + ih2 * 3 * W2;
          }
          for (int64_t r = 0; r < copy_rows; ++r) {
            T* dst = pad.data() + (r + q.lo_w) * W2p + q.lo_w;
            const T a00 = a[0][r * 3], a01 = a[0][r * 3 + 1], a02 = a[0][r * 3 + 2];
            const T a10 = a[1][r * 3], a11 = a[1][r * 3 + 1], a12 = a[1][r * 3 + 2];
            const T a20 = a[2][r * 3], a21 = a[2][r * 3 + 1], a22 = a[2][r * 3 + 2];
            const T *b0 = b[0], *b1 = b[1], *b2 = b[2];
            for (int64_t c = 0; c < copy_cols; ++c) {
              T g0 = ((a00 * b0[c] + a01 * b0[W2 + c]) + a02 * b0[2 * W2 + c]) * inv_c;
              T g1 = ((a10 * b1[c] + a11 * b1[W2 + c]) + a12 * b1[2 * W2 + c]) * inv_c;
              T g2 = ((a20 * b2[c] + a21 * b2[W2 + c]) + a22 * b2[2 * W2 + c]) * inv_c;
              dst[c] = ((g0 + g1) + g2) * inv_kh;
            }
          }
        } else if (kThree) {
          for (int64_t t = 0; t < 3; ++t) {
            int64_t ih = oh - q.lo_h + t, ih2 = oh2 - q.lo_h + t;
            if (ih < 0 || ih >= H || ih2 < 0 || ih2 >= H2) continue;
            src[t] = xp + (ih * H2 + ih2) * plane;
            if (ntk_in) srct[t] = xtp + (ih * H2 + ih2) * plane;
          }
          for (int64_t r = 0; r < copy_rows; ++r) {
            T* dst = pad.data() + (r + q.lo_w) * W2p + q.lo_w;
            const int64_t o = r * W2;
            for (int64_t c = 0; c < copy_cols; ++c)
              dst[c] = ((src[0][o + c] + src[1][o + c]) + src[2][o + c]) * inv_kh;
            if (ntk_in) {
              T* dstt = pad_t.data() + (r + q.lo_w) * W2p + q.lo_w;
              for (int64_t c = 0; c < copy_cols; ++c)
                dstt[c] = ((srct[0][o + c] + srct[1][o + c]) + srct[2][o + c]) * inv_kh;
            }
          }
        } else {
          for (int64_t i = 0; i < plane; ++i) row[i] = T(0);
          if (ntk_in) for (int64_t i = 0; i < plane; ++i) row_t[i] = T(0);
          for (int64_t t = 0; t < q.kh; ++t) {
            int64_t ih = oh - q.lo_h + t, ih2 = oh2 - q.lo_h + t;
            if (ih < 0 || ih >= H || ih2 < 0 || ih2 >= H2) continue;  // reads zeros
            const T* from = xp + (ih * H2 + ih2) * plane;
            for (int64_t i = 0; i < plane; ++i) row[i] += from[i];
            if (ntk_in) {
              const T* fromt = xtp + (ih * H2 + ih2) * plane;
              for (int64_t i = 0; i < plane; ++i) row_t[i] += fromt[i];
            }
          }
          for (int64_t r = 0; r < copy_rows; ++r) {
            T* dst = pad.data() + (r + q.lo_w) * W2p + q.lo_w;
            for (int64_t c = 0; c < copy_cols; ++c) dst[c] = row[r * W2 + c] * inv_kh;
            if (ntk_in) {
              T* dstt = pad_t.data() + (r + q.lo_w) * W2p + q.lo_w;
              for (int64_t c = 0; c < copy_cols; ++c) dstt[c] = row_t[r * W2 + c] * inv_kh;
            }
          }
          // the second axis pair's window: tap u of entry i reads pad[i + u (W2p + 1)]
          for (int64_t i = 0; i < n; ++i) m[i] = T(0);
          for (int64_t u = 0; u < q.kw; ++u) {
            const T* from = pad.data() + u * (W2p + 1);
            for (int64_t i = 0; i < n; ++i) m[i] += from[i];
          }
          if (ntk_in) {
            for (int64_t i = 0; i < n; ++i) mt[i] = T(0);
            for (int64_t u = 0; u < q.kw; ++u) {
              const T* from = pad_t.data() + u * (W2p + 1);
              for (int64_t i = 0; i < n; ++i) mt[i] += from[i];
            }
          }
        }
        // the affine map (c the NNGP, nt the NTK; mt stays 0 for the raw input's zero
        // NTK), the nonlinearity with its angle once for both kinds, and the pool
        const T* s2row = s2.data() + oh2 * n;
        const T* pn = pad.data();
        const T* ptn = pad_t.data();  // all zeros for the raw input's zero NTK
        const int64_t d = W2p + 1;
        for (int64_t i = 0; i < n; ++i) {
          // kThree: the second axis pair's three taps, pad[i + u (W2p + 1)], inline
          T mean = (kThree ? (pn[i] + pn[i + d]) + pn[i + 2 * d] : m[i]) * inv_kw;
          T mean_t = (kThree ? (ptn[i] + ptn[i + d]) + ptn[i + 2 * d] : mt[i]) * inv_kw;
          T on, ot;
          unit.template Map<kStandard>(
              mean, mean_t, exact ? s1[i] * s2row[i] : std::sqrt(s1[i] * s2row[i]), on, ot);
          if (kPool) {
            part_n[i] += keep[i] * on;
            part_t[i] += keep[i] * ot;
          } else {
            part_n[i] = on;
            part_t[i] = ot;
          }
        }
        if (!kPool) {  // the plane's valid columns, row by row
          T* dn = out_nngp + ((p * Ho + oh) * Ho2 + oh2) * Wo * Wo2;
          T* dt = has_ntk ? out_ntk + ((p * Ho + oh) * Ho2 + oh2) * Wo * Wo2 : nullptr;
          for (int64_t r = 0; r < Wo; ++r) {
            std::copy(part_n.begin() + r * W2p, part_n.begin() + r * W2p + Wo2, dn + r * Wo2);
            if (has_ntk)
              std::copy(part_t.begin() + r * W2p, part_t.begin() + r * W2p + Wo2, dt + r * Wo2);
          }
        }
      }
      if (!kPool) continue;
      // a row's partial sums (Ho2 terms in the dtype) into the double accumulators
      for (int64_t i = 0; i < n; ++i) {
        acc_n[i] += double(part_n[i]);
        acc_t[i] += double(part_t[i]);
        part_n[i] = part_t[i] = T(0);
      }
    }
    if (!kPool) continue;
    double sn = 0, st = 0;
    for (int64_t i = 0; i < n; ++i) { sn += acc_n[i]; st += acc_t[i]; }
    const double count = double(Ho) * Ho2 * Wo * Wo2;
    out_nngp[p] = T(sn / count);
    out_ntk[p] = has_ntk ? T(st / count) : T(0);
  }
}

template <ffi::DataType DT, size_t kRank>
ffi::Error TailImpl(ffi::Buffer<DT, 5> x, ffi::Buffer<DT, 5> xt, ffi::Buffer<DT, 3> v1,
                    ffi::Buffer<DT, 3> v2, ffi::ResultBuffer<DT, kRank> out_nngp,
                    ffi::ResultBuffer<DT, kRank> out_ntk, int64_t kh, int64_t kw, int64_t lo_h,
                    int64_t lo_w, int64_t ntk_mode, int64_t standard, int64_t has_bias,
                    double w_var, double b_var, double fan_in, double a, double b,
                    int64_t from_images) {
  constexpr bool kPool = kRank == 1;
  auto d = x.dimensions();
  auto dt = xt.dimensions();
  auto e1 = v1.dimensions();
  auto e2 = v2.dimensions();
  // from_images: x (P, H, W, 3, 1) and xt (P, H2, W2, 3, 1) are the two images
  const bool images = from_images != 0;
  const int64_t P = d[0], H = d[1], H2 = images ? dt[1] : d[2], W = images ? d[2] : d[3],
                W2 = images ? dt[2] : d[4];
  const int64_t Ho = e1[1], Wo = e1[2], Ho2 = e2[1], Wo2 = e2[2];
  const int64_t want[5] = {P, Ho, Ho2, Wo, Wo2};
  bool ok = e1[0] == P && e2[0] == P && kh >= 1 && kw >= 1 && lo_h >= 0 && lo_w >= 0 &&
            (ntk_mode != 2 || SameShape(xt.dimensions(), d)) &&
            (!images || (kh == 3 && kw == 3 && ntk_mode != 2 && d[3] == 3 && dt[3] == 3 &&
                         d[4] == 1 && dt[4] == 1 && dt[0] == P));
  for (size_t i = 0; i < kRank; ++i) {
    ok = ok && out_nngp->dimensions()[i] == want[i];
    ok = ok && (ntk_mode == 0 || out_ntk->dimensions()[i] == want[i]);
  }
  if (!ok) return ffi::Error::InvalidArgument("kernelcli tail: inconsistent shapes");
  Params q{kh, kw, lo_h, lo_w, ntk_mode, standard, has_bias, from_images,
           w_var, b_var, fan_in, a, b};
  using T = ffi::NativeType<DT>;
  auto run = kh == 3 && kw == 3 ? (standard ? Tail<T, kPool, true, true> : Tail<T, kPool, true, false>)
                                : (standard ? Tail<T, kPool, false, true> : Tail<T, kPool, false, false>);
  run(x.typed_data(), xt.typed_data(), v1.typed_data(), v2.typed_data(),
      out_nngp->typed_data(), out_ntk->typed_data(), P, H, H2, W, W2, Ho, Ho2, Wo, Wo2, q);
  return ffi::Error::Success();
}

}  // namespace

#define KERNELCLI_TAIL_BINDING(DT, RANK)                                            \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, RANK>>()                                                 \
      .Ret<ffi::Buffer<DT, RANK>>()                                                 \
      .Attr<int64_t>("kh")                                                          \
      .Attr<int64_t>("kw")                                                          \
      .Attr<int64_t>("lo_h")                                                        \
      .Attr<int64_t>("lo_w")                                                        \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard")                                                    \
      .Attr<int64_t>("has_bias")                                                    \
      .Attr<double>("w_var")                                                        \
      .Attr<double>("b_var")                                                        \
      .Attr<double>("fan_in")                                                       \
      .Attr<double>("a")                                                            \
      .Attr<double>("b")                                                            \
      .Attr<int64_t>("from_images")

// the pooled tail (conv -> nonlinearity -> global average pool) and the layer
// (conv -> nonlinearity, the full output covariances), per dtype
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_tail_f32, (TailImpl<ffi::F32, 1>),
                              KERNELCLI_TAIL_BINDING(ffi::F32, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_tail_f64, (TailImpl<ffi::F64, 1>),
                              KERNELCLI_TAIL_BINDING(ffi::F64, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_layer_f32, (TailImpl<ffi::F32, 5>),
                              KERNELCLI_TAIL_BINDING(ffi::F32, 5));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_layer_f64, (TailImpl<ffi::F64, 5>),
                              KERNELCLI_TAIL_BINDING(ffi::F64, 5));
