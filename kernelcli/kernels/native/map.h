// What the native engine's custom calls share (layer.cc, chain.cc): the angle, one layer's
// map of one covariance entry, and a shape check. The formulas and their order are
// kernelcli's own (kernels/_linear.affine, _nonlinear.abrelu, _angle.atan2_nonneg).
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "xla/ffi/api/ffi.h"
#include "vec.h"

namespace ffi = xla::ffi;

namespace {

constexpr double kPi = 3.14159265358979323846;

#include "atan.inc"  // kAtan32, kAt64, kAtanHalf, kAtanOne (also read by _angle.py)

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
  double hi = upper ? kAtanOne[0] : (mid ? kAtanHalf[0] : 0.0);
  double lo = upper ? kAtanOne[1] : (mid ? kAtanHalf[1] : 0.0);
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
        snap(T(kSnap[sizeof(T) == 8 ? 0 : 1])),
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

// The 3 x 3 window's mean at flat entry i of the tap planes t0, t1, t2 (the first
// axis's taps summed, then the second's at i, i + dd, i + 2 dd): the layer's sums in
// its order (layer.cc's Tail with kThree; _diagonal_conv.conv_mean's on a diagonal).
template <typename T>
inline T Window3(const T* t0, const T* t1, const T* t2, int64_t i, int64_t dd) {
  const T third = T(1.0 / 3);
  T g0 = ((t0[i] + t1[i]) + t2[i]) * third;
  T g1 = ((t0[i + dd] + t1[i + dd]) + t2[i + dd]) * third;
  T g2 = ((t0[i + 2 * dd] + t1[i + 2 * dd]) + t2[i + 2 * dd]) * third;
  return ((g0 + g1) + g2) * third;
}

// float32's ratio atan(t) from t = small / big, each lane AtanRatio's operations in its
// order: the polynomial that AtanRatioV applies after its division, and ChainPlane's
// second pass applies to the ratio its first pass kept.
inline Vec<float>::V AtanOfRatio(Vec<float>::V t) {
  typedef Vec<float>::V V;
  V u = t * t;
  V p = V{} + kAtan32[6];
  for (int i = 5; i >= 0; --i) p = p * u + kAtan32[i];
  return t * p;
}

// The angle's ratio atan(small / big) on K vectors at once, each lane AtanRatio's
// operations in its order.
template <int K>
inline void AtanRatioV(const Vec<float>::V* small, const Vec<float>::V* big, Vec<float>::V* a) {
  for (int k = 0; k < K; ++k) a[k] = AtanOfRatio(small[k] / big[k]);
}

template <int K>
inline void AtanRatioV(const Vec<double>::V* small, const Vec<double>::V* big,
                       Vec<double>::V* a) {
  typedef Vec<double>::V V;
  typedef Vec<double>::M M;
  M mid[K], upper[K];
  V r[K], z[K], p[K];
  for (int k = 0; k < K; ++k) {
    mid[k] = small[k] >= 0.4375 * big[k];
    upper[k] = small[k] >= 0.6875 * big[k];
    V num = upper[k] ? small[k] - big[k] : (mid[k] ? 2.0 * small[k] - big[k] : small[k]);
    V den = upper[k] ? small[k] + big[k] : (mid[k] ? 2.0 * big[k] + small[k] : big[k]);
    r[k] = num / den;
  }
  for (int k = 0; k < K; ++k) z[k] = r[k] * r[k];
  for (int k = 0; k < K; ++k) p[k] = V{} + kAt64[10];
  for (int i = 9; i >= 0; --i)
    for (int k = 0; k < K; ++k) p[k] = p[k] * z[k] + kAt64[i];
  for (int k = 0; k < K; ++k) {
    V e = r[k] - r[k] * (z[k] * p[k]);
    V hi = upper[k] ? V{} + kAtanOne[0] : (mid[k] ? V{} + kAtanHalf[0] : V{});
    V lo = upper[k] ? V{} + kAtanOne[1] : (mid[k] ? V{} + kAtanHalf[1] : V{});
    a[k] = hi + (e + lo);
  }
}

// ChainPlane's scratch, in entries: the window's first-axis sums of both kinds (n + 2 dd
// each), then a block's four arrays for the two passes (the ratio, c, sq, the NTK's
// factor: kBlock entries each)
constexpr int64_t kBlock = 256;
inline int64_t ScratchEntries(int64_t n, int64_t dd) { return 2 * (n + 2 * dd) + 4 * kBlock; }

// One output plane of a chain's layer (chain.cc, diag.cc): the 3 x 3 window of the tap
// planes t (NNGP) and u (NTK), the map, and either the plane (zero in scratch columns)
// or its sum into the pool's lanes. The window's first-axis sums once per plane into
// `scratch` (ScratchEntries), then Window3's second-axis sums of them; kZeroT: the
// NTK's taps are the raw input's, all zero, so their window is 0 and not read. The map
// runs on kInFlight vectors at a time (vec.h), the remainder as Unit::Map: the same
// operations, so the same bits.
//
// Where vec.h says kTwoPass (float32 on 16 or 32 bytes) the map runs in blocks of
// kBlock entries, each in two passes: to the angle's division, then its polynomial
// (AtanOfRatio) and the rest. One pass is a chain of some 140 cycles'
// latency a vector, whose waiting operations fill the out-of-order window of an AVX2
// core; two passes of half the chain each ran the plane 17% faster in Zen 4's
// x86-64-v3 loop (bench/native_loop.py). float64's longer chain and AVX-512's wider
// vectors ran 9-12% slower so: they keep the one pass.
//
// Its own function, not inlined, its pointers restrict and the layer's constants a
// copy: else the compiler's runtime aliasing check sends the loop to its scalar version.
template <typename T, bool kNtk, bool kLast, bool kStandard, bool kZeroT>
__attribute__((noinline)) void ChainPlane(const Unit<T> unit, int64_t n, int64_t dd, const T* __restrict t0,
                const T* __restrict t1, const T* __restrict t2, const T* __restrict u0,
                const T* __restrict u1, const T* __restrict u2, const T* __restrict roots,
                const T* __restrict keep, T* __restrict out_n, T* __restrict out_t,
                T* __restrict scratch) {
  typedef typename Vec<T>::V V;
  typedef typename Vec<T>::M M;
  constexpr int K = Vec<T>::kInFlight, N = Vec<T>::kLanes;
  constexpr bool kMeanT = kNtk && !kZeroT;
  const T third = T(1.0 / 3);
  const int64_t m = n + 2 * dd;
  T* __restrict g = scratch;
  T* __restrict gt = scratch + m;
  for (int64_t i = 0; i < m; ++i) g[i] = ((t0[i] + t1[i]) + t2[i]) * third;
  if (kMeanT)
    for (int64_t i = 0; i < m; ++i) gt[i] = ((u0[i] + u1[i]) + u2[i]) * third;
  const V zero{};
  const V one = zero + T(1), half_pi = zero + T(kPi / 2), pi = zero + T(kPi);
  const V w_var = zero + unit.w_var, bias = zero + unit.bias, fan_in = zero + unit.fan_in;
  const V ntk_one = zero + unit.ntk_one, factor = zero + unit.factor, k0 = zero + unit.k0;
  const V snap = zero + unit.snap, thirdv = zero + third;
  const M magnitude = M{} + Vec<T>::kAbs;
  // the map to the angle's ratio on K vectors from entry j: the window's means, c and
  // |c|, the NTK's factor, the snapped root's sq, and Atan2NonNeg's big and small
  auto first = [&](int64_t j, V* c, V* ac, V* nt, V* sq, V* big, V* small)
      __attribute__((always_inline)) {
    for (int k = 0; k < K; ++k) {
      const int64_t e = j + k * N;
      V mean = ((Load<V>(g + e) + Load<V>(g + e + dd)) + Load<V>(g + e + 2 * dd)) * thirdv;
      V mean_t = kMeanT ? ((Load<V>(gt + e) + Load<V>(gt + e + dd)) + Load<V>(gt + e + 2 * dd)) *
                              thirdv
                        : zero;
      c[k] = w_var * mean + bias;
      nt[k] = (kStandard ? fan_in * mean + w_var * mean_t : w_var * mean_t + c[k]) + ntk_one;
      ac[k] = (V)((M)c[k] & magnitude);
    }
    for (int k = 0; k < K; ++k) {
      V s = Load<V>(roots + j + k * N);
      s = (s - ac[k] <= s * snap) ? ac[k] : s;
      V d = (s - ac[k]) * (s + ac[k]);
      sq[k] = Sqrt(d > 0 ? d : zero);
    }
    for (int k = 0; k < K; ++k) {
      big[k] = ac[k] > sq[k] ? ac[k] : sq[k];
      small[k] = ac[k] < sq[k] ? ac[k] : sq[k];
      big[k] = big[k] > 0 ? big[k] : one;
    }
  };
  int64_t i = 0;
  if constexpr (Vec<T>::kTwoPass) {
    constexpr int64_t B = K * N * (kBlock / (K * N));
    static_assert(B > 0 && B <= kBlock, "a block's arrays hold kBlock entries");
    T* __restrict br = scratch + 2 * m;  // the block's ratio, c, sq and NTK factor
    T* __restrict bc = br + kBlock;
    T* __restrict bs = bc + kBlock;
    T* __restrict bn = bs + kBlock;
    for (int64_t len; (len = std::min(B, (n - i) / (K * N) * (K * N))) > 0; i += len) {
      for (int64_t o = 0; o < len; o += K * N) {  // to the angle's division
        V c[K], ac[K], nt[K], sq[K], big[K], small[K];
        first(i + o, c, ac, nt, sq, big, small);
        for (int k = 0; k < K; ++k) {
          const int64_t j = o + k * N;
          Store(br + j, small[k] / big[k]);
          Store(bc + j, c[k]);
          Store(bs + j, sq[k]);
          if (kNtk) Store(bn + j, nt[k]);
        }
      }
      for (int64_t o = 0; o < len; o += N) {  // the polynomial and the rest
        const int64_t q = i + o;
        V a = AtanOfRatio(Load<V>(br + o));
        V c = Load<V>(bc + o), sq = Load<V>(bs + o);
        V ac = (V)((M)c & magnitude);
        V e = sq > ac ? half_pi - a : a;
        V theta = c < 0 ? pi - e : e;
        V kdot = k0 - factor * theta;
        V vn = factor * sq + kdot * c;
        V kp = Load<V>(keep + q);
        if (kLast) {
          Store(out_n + q, Load<V>(out_n + q) + kp * vn);
          if (kNtk) Store(out_t + q, Load<V>(out_t + q) + kp * (Load<V>(bn + o) * kdot));
        } else {
          Store(out_n + q, kp * vn);
          if (kNtk) Store(out_t + q, kp * (Load<V>(bn + o) * kdot));
        }
      }
    }
  }
  for (; !Vec<T>::kTwoPass && i + K * N <= n; i += K * N) {
    V c[K], ac[K], nt[K], sq[K], big[K], small[K], a[K];
    first(i, c, ac, nt, sq, big, small);
    AtanRatioV<K>(small, big, a);
    for (int k = 0; k < K; ++k) {
      V e = sq[k] > ac[k] ? half_pi - a[k] : a[k];
      V theta = c[k] < 0 ? pi - e : e;
      V kdot = k0 - factor * theta;
      V vn = factor * sq[k] + kdot * c[k];
      V vt = nt[k] * kdot;
      const int64_t j = i + k * N;
      V kp = Load<V>(keep + j);
      if (kLast) {
        Store(out_n + j, Load<V>(out_n + j) + kp * vn);
        if (kNtk) Store(out_t + j, Load<V>(out_t + j) + kp * vt);
      } else {
        Store(out_n + j, kp * vn);
        if (kNtk) Store(out_t + j, kp * vt);
      }
    }
  }
  for (; i < n; ++i) {
    T mean = ((g[i] + g[i + dd]) + g[i + 2 * dd]) * third;
    T mean_t = kMeanT ? ((gt[i] + gt[i + dd]) + gt[i + 2 * dd]) * third : T(0);
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

// ChainPlane with its template arguments from the call's values
template <typename T, bool kNtk>
void RunPlane(bool last, bool zero_t, const Unit<T>& unit, int64_t n, int64_t dd,
              const T* t0, const T* t1, const T* t2, const T* u0, const T* u1, const T* u2,
              const T* roots, const T* keep, T* out_n, T* out_t, T* scratch) {
  auto fn = last ? (unit.standard ? (zero_t ? ChainPlane<T, kNtk, true, true, true>
                                            : ChainPlane<T, kNtk, true, true, false>)
                                  : (zero_t ? ChainPlane<T, kNtk, true, false, true>
                                            : ChainPlane<T, kNtk, true, false, false>))
                 : (unit.standard ? (zero_t ? ChainPlane<T, kNtk, false, true, true>
                                            : ChainPlane<T, kNtk, false, true, false>)
                                  : (zero_t ? ChainPlane<T, kNtk, false, false, true>
                                            : ChainPlane<T, kNtk, false, false, false>));
  fn(unit, n, dd, t0, t1, t2, u0, u1, u2, roots, keep, out_n, out_t, scratch);
}

// A chain's blocks (chain.cc, diag.cc): each layer's parameters, one entry per layer, as
// the calls' attributes (KERNELCLI_BLOCK_ATTRS) give them.
struct Blocks {
  int64_t layers;
  bool standard;
  const int64_t* has_bias;
  const double *w_var, *b_var, *fan_in, *a, *b;

  template <typename T>
  std::vector<Unit<T>> Units() const {
    std::vector<Unit<T>> out;
    for (int64_t l = 0; l < layers; ++l)
      out.emplace_back(standard, has_bias[l] != 0, w_var[l], b_var[l], fan_in[l], a[l], b[l]);
    return out;
  }
};

// The attributes as Blocks of L layers; false where a list's length is not L.
template <typename S, typename F>
bool ToBlocks(int64_t L, int64_t standard, const S& has_bias, const F& w_var, const F& b_var,
              const F& fan_in, const F& a, const F& b, Blocks& out) {
  out = Blocks{L, standard != 0, has_bias.begin(), w_var.begin(), b_var.begin(),
               fan_in.begin(), a.begin(), b.begin()};
  return L >= 1 && int64_t(has_bias.size()) == L && int64_t(w_var.size()) == L &&
         int64_t(b_var.size()) == L && int64_t(fan_in.size()) == L &&
         int64_t(a.size()) == L && int64_t(b.size()) == L;
}

#define KERNELCLI_BLOCK_ATTRS                                                       \
      .Attr<ffi::Span<const int64_t>>("has_bias")                                   \
      .Attr<ffi::Span<const double>>("w_var")                                       \
      .Attr<ffi::Span<const double>>("b_var")                                       \
      .Attr<ffi::Span<const double>>("fan_in")                                      \
      .Attr<ffi::Span<const double>>("a")                                           \
      .Attr<ffi::Span<const double>>("b")

template <typename A, typename B>
bool SameShape(const A& a, const B& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace
