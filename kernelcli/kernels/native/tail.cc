// The native plan's custom calls: convolution -> ABReLU-family nonlinearity, on a batch
// of pairs' full covariances, writing the output covariances (a layer) or their global
// average pool (the tail before a global pool), as one XLA custom call each.
//
// Why C++: XLA:CPU evaluates the nonlinearity's angle once per output kind (no
// multi-output fusion there), does not vectorise a reduction fused with the
// nonlinearity's chain, and streams every intermediate (H W)^2 array through memory
// (BENCHMARKS.md, issue 26). Here each output row pair (h, h') is windowed, mapped and
// written or summed into the pool in one pass over cache-resident planes: the angle
// once per entry. The formulas and their order are kernelcli's own
// (kernels/_fused._conv_row, _linear.affine, _nonlinear.abrelu, _angle.atan2_nonneg);
// only the pool's sum differs (per lane in the dtype over a row, then in double).
// Python checks every shape and attribute before the call (kernels/_native.py); the
// handler checks the shapes again and refuses a mismatch.
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr double kPi = 3.14159265358979323846;

// float32: atan(t) ~= t P(t^2) on [0, 1] (_angle._ATAN_COEFFS)
constexpr float kAtan32[7] = {0.99999562f, -0.33316001f, 0.19796881f, -0.13195862f,
                              0.0789991f, -0.03310461f, 0.00665807f};
// float64: fdlibm's atan (_angle._FDLIBM_AT, _ATAN_HALF, _ATAN_ONE)
constexpr double kAt64[11] = {3.33333333333329318027e-01, -1.99999999998764832476e-01,
                              1.42857142725034663711e-01, -1.11111104054623557880e-01,
                              9.09088713343650656196e-02, -7.69187620504482999495e-02,
                              6.66107313738753120669e-02, -5.83357013379057348645e-02,
                              4.97687799461593236017e-02, -3.65315727442169155270e-02,
                              1.62858201153657823623e-02};
constexpr double kHalfHi = 4.63647609000806093515e-01, kHalfLo = 2.26987774529616870924e-17;
constexpr double kOneHi = 7.85398163397448278999e-01, kOneLo = 3.06161699786838301793e-17;

inline float AtanRatio(float small, float big) {
  float t = small / big;
  float u = t * t;
  float p = kAtan32[6];
  for (int i = 5; i >= 0; --i) p = p * u + kAtan32[i];
  return t * p;
}

inline double AtanRatio(double small, double big) {
  bool mid = small >= 0.4375 * big;
  bool upper = small >= 0.6875 * big;
  double num = upper ? small - big : (mid ? 2 * small - big : small);
  double den = upper ? small + big : (mid ? 2 * big + small : big);
  double r = num / den;
  double z = r * r;
  double p = kAt64[10];
  for (int i = 9; i >= 0; --i) p = p * z + kAt64[i];
  double a = r - r * (z * p);
  double hi = upper ? kOneHi : (mid ? kHalfHi : 0.0);
  double lo = upper ? kOneLo : (mid ? kHalfLo : 0.0);
  return hi + (a + lo);
}

// atan2(y, x) for y >= 0, in [0, pi] (_angle.atan2_nonneg)
template <typename T>
inline T Atan2NonNeg(T y, T x) {
  T ax = std::fabs(x);
  T big = ax > y ? ax : y;
  T small = ax < y ? ax : y;
  big = big > 0 ? big : T(1);
  T a = AtanRatio(small, big);
  a = y > ax ? T(kPi / 2) - a : a;
  return x < 0 ? T(kPi) - a : a;
}

struct Params {
  int64_t kh, kw, lo_h, lo_w, ntk_mode, standard, has_bias, from_images;
  double w_var, b_var, fan_in, a, b;
};

// One layer's affine map and ABReLU-family map of one covariance entry, the angle once
// for both kinds (_linear.affine, _nonlinear.abrelu): `mean`, `mean_t` the window's
// NNGP and NTK means, `s` sqrt(v1 v2) of the two inputs' variances (as the caller
// computes it).
template <typename T>
struct Unit {
  T w_var, bias, fan_in, ntk_one, factor, k0, snap;
  bool standard;

  Unit(bool standard_, bool has_bias, double w_var_, double b_var, double fan_in_, double a,
       double b)
      : w_var(T(w_var_)), bias(has_bias ? T(b_var) : T(0)), fan_in(T(fan_in_)),
        ntk_one((standard_ && has_bias) ? T(1) : T(0)),
        factor(T((a - b) * (a - b) / (2 * kPi))), k0(T((a * a + b * b) / 2)),
        snap(sizeof(T) == 8 ? T(std::ldexp(1.0, -50)) : T(std::ldexp(1.0, -21))),
        standard(standard_) {}

  // kStandard: the layer's `standard` as a template argument; a branch on it inside a
  // loop keeps the compiler from vectorising the loop
  inline T Affine(T mean) const { return w_var * mean + bias; }

  template <bool kStandard>
  inline void Map(T mean, T mean_t, T s, T& out_n, T& out_t) const {
    T c = Affine(mean);
    T nt = (kStandard ? fan_in * mean + w_var * mean_t : w_var * mean_t + c) + ntk_one;
    T ac = std::fabs(c);
    s = (s - ac <= s * snap) ? ac : s;
    T d = (s - ac) * (s + ac);
    T sq = std::sqrt(d > 0 ? d : T(0));
    T theta = Atan2NonNeg(sq, c);
    T kdot = k0 - factor * theta;
    out_n = factor * sq + kdot * c;
    out_t = nt * kdot;
  }
};

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

template <typename A, typename B>
bool SameShape(const A& a, const B& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
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

// The chain: L (3 x 3 SAME convolution -> ABReLU-family nonlinearity) layers and the
// global average pool, for networks like the seed's, cnn5_gap and cnn21_gap, with no
// (H W)^2 covariance written between layers.
//
// Why it can stay in cache: a stride-1 convolution's window on a covariance sums the
// taps (ih, ih2) = (oh - lo + t, oh2 - lo + t), so output row pair (oh, oh2) reads only
// input row pairs on its own diagonal oh - oh2. Each of the 2 H - 1 diagonals is an
// independent chain of at most H planes: the L layers run one diagonal at a time,
// ping-ponging between two diagonals' worth of planes (2 x H planes per kind: 0.3 MiB
// at 32 x 32 in float32, a core's L2), and only the pool's per-lane sums leave it.
//
// A plane is stored zero-bordered (row stride W + 2, lo zero rows and columns before):
// the layer's output entry (ow, ow2), at flat index i = ow (W + 2) + ow2, writes to
// i + lo (W + 3), and its 3 x 3 window reads i + u (W + 3) of the three tap planes, so
// the whole chain is flat loops over planes. The scratch columns ow2 >= W are written
// as 0: the zero border the next layer reads. The sums and the map are the layer's
// (Tail with kThree): the same formulas in the same order; the pool's sum runs per
// lane in the dtype along a diagonal, then in double.
struct ChainParams {
  int64_t layers, lo, ntk_mode, standard, from_images;
  const int64_t* has_bias;
  const double *w_var, *b_var, *fan_in, *a, *b;
};

// One output plane of a chain's layer: the 3 x 3 window of the tap planes t (NNGP) and
// u (NTK), the map, and either the plane (zero in scratch columns) or its sum into the
// pool's lanes. Its own function, not inlined, its pointers restrict and the layer's
// constants a copy: else the compiler's runtime aliasing check sends the loop to its
// scalar version (8x slower).
template <typename T, bool kNtk, bool kLast, bool kStandard>
__attribute__((noinline)) void ChainPlane(const Unit<T> unit, int64_t n, int64_t dd, const T* __restrict t0,
                const T* __restrict t1, const T* __restrict t2, const T* __restrict u0,
                const T* __restrict u1, const T* __restrict u2, const T* __restrict roots,
                const T* __restrict keep, T* __restrict out_n, T* __restrict out_t) {
  const T third = T(1.0 / 3);
  for (int64_t i = 0; i < n; ++i) {
    T g0 = ((t0[i] + t1[i]) + t2[i]) * third;
    T g1 = ((t0[i + dd] + t1[i + dd]) + t2[i + dd]) * third;
    T g2 = ((t0[i + 2 * dd] + t1[i + 2 * dd]) + t2[i + 2 * dd]) * third;
    T mean = ((g0 + g1) + g2) * third;
    T mean_t = T(0);
    if (kNtk) {
      T e0 = ((u0[i] + u1[i]) + u2[i]) * third;
      T e1 = ((u0[i + dd] + u1[i + dd]) + u2[i + dd]) * third;
      T e2 = ((u0[i + 2 * dd] + u1[i + 2 * dd]) + u2[i + 2 * dd]) * third;
      mean_t = ((e0 + e1) + e2) * third;
    }
    T vn, vt;
    unit.template Map<kStandard>(mean, mean_t, roots[i], vn, vt);
    if (kLast) {
      out_n[i] += keep[i] * vn;
      if (kNtk) out_t[i] += keep[i] * vt;
    } else {
      out_n[i] = keep[i] * vn;
      if (kNtk) out_t[i] = keep[i] * vt;
    }
  }
}

// kSelf: each input with itself (x and xt the same input; the per-input pass): the
// variances are not given but made, and written to v1 (L, P, H, W): layer l's
// pre-activation variance at (oh, ow) is its plane (oh, oh)'s entry (ow, ow), so the
// diagonal d = 0 runs first, each plane's own diagonal entries taken before its map.
template <typename T, bool kNtk, bool kSelf>
void Chain(const T* x, const T* xt, T* v1, const T* v2, T* out_nngp, T* out_ntk,
           int64_t P, int64_t H, int64_t W, const ChainParams& q) {
  const bool images = q.from_images != 0;
  const int64_t L = q.layers, lo = q.lo;
  const int64_t Wq = W + 2;                 // a padded plane's row stride
  const int64_t n = W * Wq;                 // the flat output plane
  const int64_t plane = (W + 2) * Wq + 3;   // a padded plane, with the last tap's reach
  const int64_t shift = lo * Wq + lo, dd = Wq + 1;
  const T inv_c = T(1.0 / 3), third = T(1.0 / 3);
  std::vector<Unit<T>> units;
  for (int64_t l = 0; l < L; ++l)
    units.emplace_back(q.standard != 0, q.has_bias[l] != 0, q.w_var[l], q.b_var[l],
                       q.fan_in[l], q.a[l], q.b[l]);
  // two diagonals' planes per kind (ping-pong), each zero outside what is written
  std::vector<T> buf_a(2 * H * plane), buf_b(2 * H * plane), zero(plane);
  std::vector<T> ss(n), keep(n), part_n(n), part_t(n), r1(L * H * W), r2(L * H * W);
  std::vector<double> acc_n(n), acc_t(n);
  std::vector<T> x2t(images ? H * 3 * W : 0);
  for (int64_t i = 0; i < n; ++i) keep[i] = (i % Wq) < W ? T(1) : T(0);
  for (int64_t p = 0; p < P; ++p) {
    // the variances' roots per layer and position: sqrt(v1 v2) as their product in
    // both dtypes (one square root per entry fewer in the loop)
    for (int64_t i = 0; i < (kSelf ? 0 : L * H * W); ++i) {
      T a = v1[(i / (H * W)) * P * H * W + p * H * W + i % (H * W)];
      T b = v2[(i / (H * W)) * P * H * W + p * H * W + i % (H * W)];
      r1[i] = std::sqrt(a > 0 ? a : T(0));
      r2[i] = std::sqrt(b > 0 ? b : T(0));
    }
    const T* xp = images ? x + p * H * W * 3 : x + p * H * H * W * W;
    const T* xtp = q.ntk_mode == 2 ? xt + p * H * H * W * W : nullptr;
    if (images) {  // the second image channel-major per row
      const T* y = xt + p * H * W * 3;
      for (int64_t r = 0; r < H; ++r)
        for (int64_t ch = 0; ch < 3; ++ch)
          for (int64_t c = 0; c < W; ++c) x2t[(r * 3 + ch) * W + c] = y[(r * W + c) * 3 + ch];
    }
    for (int64_t i = 0; i < n; ++i) acc_n[i] = acc_t[i] = 0.0;
    for (int64_t k = 0; k < 2 * H - 1; ++k) {  // d = 0 first, then -(H - 1) .. -1, 1 .. H - 1
      const int64_t d = k == 0 ? 0 : (k <= H - 1 ? k - H : k - H + 1);
      const int64_t len = H - (d < 0 ? -d : d), h0 = d > 0 ? d : 0, h20 = d < 0 ? -d : 0;
      T* in_n = buf_a.data();
      T* in_t = buf_a.data() + H * plane;
      T* nx_n = buf_b.data();
      T* nx_t = buf_b.data() + H * plane;
      // the first layer's input planes on this diagonal, zero-bordered
      for (int64_t pos = 0; pos < len; ++pos) {
        T* dst = in_n + pos * plane + shift;
        const int64_t ih = h0 + pos, ih2 = h20 + pos;
        if (images) {
          const T* a = xp + ih * W * 3;
          const T* b = x2t.data() + ih2 * 3 * W;
          for (int64_t r = 0; r < W; ++r) {
            const T a0 = a[r * 3], a1 = a[r * 3 + 1], a2 = a[r * 3 + 2];
            for (int64_t c = 0; c < W; ++c)
              dst[r * Wq + c] = ((a0 * b[c] + a1 * b[W + c]) + a2 * b[2 * W + c]) * inv_c;
          }
        } else {
          const T* src = xp + (ih * H + ih2) * W * W;
          for (int64_t r = 0; r < W; ++r)
            std::copy(src + r * W, src + (r + 1) * W, dst + r * Wq);
          if (xtp) {
            const T* srct = xtp + (ih * H + ih2) * W * W;
            T* dstt = in_t + pos * plane + shift;
            for (int64_t r = 0; r < W; ++r)
              std::copy(srct + r * W, srct + (r + 1) * W, dstt + r * Wq);
          }
        }
      }
      const bool zero_t0 = q.ntk_mode != 2;  // the raw input's NTK: exactly zero
      for (int64_t l = 0; l < L; ++l) {
        const Unit<T>& unit = units[l];
        const bool last = l == L - 1;
        const T* R1 = r1.data() + l * H * W;
        const T* R2 = r2.data() + l * H * W;
        for (int64_t pos = 0; pos < len; ++pos) {
          const int64_t oh = h0 + pos, oh2 = h20 + pos;
          const T *t0 = zero.data(), *t1 = zero.data(), *t2 = zero.data();
          const T *u0 = zero.data(), *u1 = zero.data(), *u2 = zero.data();
          const int64_t ip = pos - lo;  // tap t reads position ip + t
          if (ip >= 0) t0 = in_n + ip * plane, u0 = in_t + ip * plane;
          if (ip + 1 >= 0 && ip + 1 < len) t1 = in_n + (ip + 1) * plane, u1 = in_t + (ip + 1) * plane;
          if (ip + 2 < len) t2 = in_n + (ip + 2) * plane, u2 = in_t + (ip + 2) * plane;
          if (l == 0 && zero_t0) u0 = u1 = u2 = zero.data();
          if (kSelf && d == 0) {  // this plane's diagonal: the layer's variances at row oh
            T* vout = v1 + ((l * P + p) * H + oh) * W;
            T* root = r1.data() + (l * H + oh) * W;
            for (int64_t ow = 0; ow < W; ++ow) {
              const int64_t i = ow * Wq + ow;
              T g0 = ((t0[i] + t1[i]) + t2[i]) * third;
              T g1 = ((t0[i + dd] + t1[i + dd]) + t2[i + dd]) * third;
              T g2 = ((t0[i + 2 * dd] + t1[i + 2 * dd]) + t2[i + 2 * dd]) * third;
              T v = unit.Affine(((g0 + g1) + g2) * third);
              vout[ow] = v;
              root[ow] = r2[(l * H + oh) * W + ow] = std::sqrt(v > 0 ? v : T(0));
            }
          }
          for (int64_t r = 0; r < W; ++r) {
            const T a = R1[oh * W + r];
            for (int64_t c = 0; c < Wq; ++c)
              ss[r * Wq + c] = c < W ? a * R2[oh2 * W + c] : T(0);
          }
          T* on = nx_n + pos * plane + shift;
          T* ot = nx_t + pos * plane + shift;
          auto plane_fn = last ? (unit.standard ? ChainPlane<T, kNtk, true, true>
                                                : ChainPlane<T, kNtk, true, false>)
                               : (unit.standard ? ChainPlane<T, kNtk, false, true>
                                                : ChainPlane<T, kNtk, false, false>);
          plane_fn(unit, n, dd, t0, t1, t2, u0, u1, u2, ss.data(), keep.data(),
                   last ? part_n.data() : on, last ? part_t.data() : ot);
        }
        std::swap(in_n, nx_n);
        std::swap(in_t, nx_t);
      }
      for (int64_t i = 0; i < n; ++i) {
        acc_n[i] += double(part_n[i]);
        acc_t[i] += double(part_t[i]);
        part_n[i] = part_t[i] = T(0);
      }
    }
    double sn = 0, st = 0;
    for (int64_t i = 0; i < n; ++i) { sn += acc_n[i]; st += acc_t[i]; }
    const double count = double(H) * H * W * W;
    out_nngp[p] = T(sn / count);
    if (kNtk) out_ntk[p] = T(st / count);
  }
}

template <ffi::DataType DT>
ffi::Error ChainImpl(ffi::Buffer<DT, 5> x, ffi::Buffer<DT, 5> xt, ffi::Buffer<DT, 4> v1,
                     ffi::Buffer<DT, 4> v2, ffi::ResultBuffer<DT, 1> out_nngp,
                     ffi::ResultBuffer<DT, 1> out_ntk, int64_t lo, int64_t ntk_mode,
                     int64_t standard, int64_t from_images, ffi::Span<const int64_t> has_bias,
                     ffi::Span<const double> w_var, ffi::Span<const double> b_var,
                     ffi::Span<const double> fan_in, ffi::Span<const double> a,
                     ffi::Span<const double> b) {
  auto d = x.dimensions();
  auto e = v1.dimensions();
  const bool images = from_images != 0;
  const int64_t L = e[0], P = e[1], H = e[2], W = e[3];
  // from_images: x and xt (P, H, W, 3, 1) are the two images; else (P, H, H, W, W)
  bool ok = L >= 1 && SameShape(v2.dimensions(), e) && lo >= 0 && lo <= 2 && d[0] == P &&
            SameShape(xt.dimensions(), d) &&
            (images ? (d[1] == H && d[2] == W && d[3] == 3 && d[4] == 1 && ntk_mode != 2)
                    : (d[1] == H && d[2] == H && d[3] == W && d[4] == W)) &&
            int64_t(has_bias.size()) == L && int64_t(w_var.size()) == L &&
            int64_t(b_var.size()) == L && int64_t(fan_in.size()) == L &&
            int64_t(a.size()) == L && int64_t(b.size()) == L &&
            out_nngp->dimensions()[0] == P &&
            (ntk_mode == 0 || out_ntk->dimensions()[0] == P);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli chain: inconsistent shapes");
  ChainParams q{L, lo, ntk_mode, standard, from_images, has_bias.begin(), w_var.begin(),
                b_var.begin(), fan_in.begin(), a.begin(), b.begin()};
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Chain<T, true, false> : Chain<T, false, false>;
  run(x.typed_data(), xt.typed_data(), const_cast<T*>(v1.typed_data()), v2.typed_data(),
      out_nngp->typed_data(), out_ntk->typed_data(), P, H, W, q);
  return ffi::Error::Success();
}


// the per-input pass's chain: each input with itself; v (L, P, H, W) its variances
template <ffi::DataType DT>
ffi::Error SelfImpl(ffi::Buffer<DT, 5> x, ffi::Buffer<DT, 5> xt, ffi::ResultBuffer<DT, 1> out_nngp,
                    ffi::ResultBuffer<DT, 1> out_ntk, ffi::ResultBuffer<DT, 4> v, int64_t lo,
                    int64_t ntk_mode, int64_t standard, int64_t from_images,
                    ffi::Span<const int64_t> has_bias, ffi::Span<const double> w_var,
                    ffi::Span<const double> b_var, ffi::Span<const double> fan_in,
                    ffi::Span<const double> a, ffi::Span<const double> b) {
  auto d = x.dimensions();
  auto e = v->dimensions();
  const bool images = from_images != 0;
  const int64_t L = e[0], P = e[1], H = e[2], W = e[3];
  bool ok = L >= 1 && lo >= 0 && lo <= 2 && d[0] == P && SameShape(xt.dimensions(), d) &&
            (images ? (d[1] == H && d[2] == W && d[3] == 3 && d[4] == 1 && ntk_mode != 2)
                    : (d[1] == H && d[2] == H && d[3] == W && d[4] == W)) &&
            int64_t(has_bias.size()) == L && int64_t(w_var.size()) == L &&
            int64_t(b_var.size()) == L && int64_t(fan_in.size()) == L &&
            int64_t(a.size()) == L && int64_t(b.size()) == L &&
            out_nngp->dimensions()[0] == P && (ntk_mode == 0 || out_ntk->dimensions()[0] == P);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli self chain: inconsistent shapes");
  ChainParams q{L, lo, ntk_mode, standard, from_images, has_bias.begin(), w_var.begin(),
                b_var.begin(), fan_in.begin(), a.begin(), b.begin()};
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Chain<T, true, true> : Chain<T, false, true>;
  run(x.typed_data(), xt.typed_data(), v->typed_data(), nullptr, out_nngp->typed_data(),
      out_ntk->typed_data(), P, H, W, q);
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

#define KERNELCLI_CHAIN_BINDING(DT)                                                 \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Ret<ffi::Buffer<DT, 1>>()                                                    \
      .Ret<ffi::Buffer<DT, 1>>()                                                    \
      .Attr<int64_t>("lo")                                                          \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard")                                                    \
      .Attr<int64_t>("from_images")                                                 \
      .Attr<ffi::Span<const int64_t>>("has_bias")                                   \
      .Attr<ffi::Span<const double>>("w_var")                                       \
      .Attr<ffi::Span<const double>>("b_var")                                       \
      .Attr<ffi::Span<const double>>("fan_in")                                      \
      .Attr<ffi::Span<const double>>("a")                                           \
      .Attr<ffi::Span<const double>>("b")

// the chain of 3 x 3 SAME layers and the global average pool, per dtype
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_f32, ChainImpl<ffi::F32>,
                              KERNELCLI_CHAIN_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_f64, ChainImpl<ffi::F64>,
                              KERNELCLI_CHAIN_BINDING(ffi::F64));

#define KERNELCLI_SELF_BINDING(DT)                                                  \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Ret<ffi::Buffer<DT, 1>>()                                                    \
      .Ret<ffi::Buffer<DT, 1>>()                                                    \
      .Ret<ffi::Buffer<DT, 4>>()                                                    \
      .Attr<int64_t>("lo")                                                          \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard")                                                    \
      .Attr<int64_t>("from_images")                                                 \
      .Attr<ffi::Span<const int64_t>>("has_bias")                                   \
      .Attr<ffi::Span<const double>>("w_var")                                       \
      .Attr<ffi::Span<const double>>("b_var")                                       \
      .Attr<ffi::Span<const double>>("fan_in")                                      \
      .Attr<ffi::Span<const double>>("a")                                           \
      .Attr<ffi::Span<const double>>("b")

// the chain of each input with itself (the per-input pass), per dtype
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_f32, SelfImpl<ffi::F32>,
                              KERNELCLI_SELF_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_f64, SelfImpl<ffi::F64>,
                              KERNELCLI_SELF_BINDING(ffi::F64));
