// The diagonal chain: L (3 x 3 SAME convolution -> ABReLU-family nonlinearity) layers on
// a pair's spatial diagonal, (P, H, W): the state of a network without pooling (the
// flatten nets) or after its last pool, where each input position meets only the same
// position of the other input.
//
// Why: on the CPU plan XLA writes each layer's diagonals and reads them back, and
// evaluates the angle once per kind; the pair's whole diagonal is an H x W plane, a few
// KiB, so here all L layers run on it while it stays in L1, ping-ponging between two
// zero-bordered planes per kind, and only the last layer's plane is written.
//
// A plane is stored with row stride W + 2 and one zero row and column before: output
// entry (h, w), at flat index i = h (W + 2) + w, writes to i + (W + 3), and its window
// reads i + t1 (W + 2) + t2 of the input plane: the first axis's taps as the three tap
// planes of ChainPlane (map.h), the second's at distance 1, so the sums are
// _diagonal.conv_mean's in its order. The scratch columns w >= W are written as 0, the
// zero border the next layer reads.
#include "map.h"

namespace {

// The roots' products sqrt(v1) sqrt(v2) of one row of W entries (pairs: the two inputs'
// variances; as the chain takes sqrt(v1 v2)). Its own function with restrict pointers,
// as ChainPlane, so the loop is vectorised.
template <typename T>
__attribute__((noinline)) void PairRoots(int64_t W, const T* __restrict va,
                                         const T* __restrict vb, T* __restrict ss) {
  for (int64_t w = 0; w < W; ++w)
    ss[w] = std::sqrt(va[w] > 0 ? va[w] : T(0)) * std::sqrt(vb[w] > 0 ? vb[w] : T(0));
}

// Each input with itself: the layer's pre-activation variances v (the window's own
// entries, affine) and their roots' products sqrt(v) sqrt(v), 0 in scratch columns.
template <typename T>
__attribute__((noinline)) void SelfRoots(const Unit<T> unit, int64_t n, int64_t Wq,
                                         const T* __restrict t, const T* __restrict keep,
                                         T* __restrict v, T* __restrict ss) {
  for (int64_t i = 0; i < n; ++i) {
    T x = unit.Affine(Window3(t, t + Wq, t + 2 * Wq, i, 1));
    T r = std::sqrt(x > 0 ? x : T(0));
    v[i] = x;
    ss[i] = keep[i] * (r * r);
  }
}

// kSelf: each input with itself (the per-input pass): the variances are not given but
// made from the layer's own window, and written to v1 (L, P, H, W).
template <typename T, bool kNtk, bool kSelf>
void Diag(const T* x, const T* xt, T* v1, const T* v2, T* out_nngp, T* out_ntk, int64_t P,
          int64_t H, int64_t W, int64_t ntk_mode, const Blocks& q) {
  const int64_t L = q.layers, Wq = W + 2, n = H * Wq, plane = (H + 2) * Wq + 3;
  const int64_t shift = Wq + 1;
  const std::vector<Unit<T>> units = q.Units<T>();
  std::vector<T> in_n(plane), in_t(plane), nx_n(plane), nx_t(plane), zero(plane);
  std::vector<T> ss(n), keep(n), pre(kSelf ? n : 0);  // ss: 0 in scratch columns
  for (int64_t i = 0; i < n; ++i) keep[i] = (i % Wq) < W ? T(1) : T(0);
  const int64_t HW = H * W;
  for (int64_t p = 0; p < P; ++p) {
    std::fill(in_n.begin(), in_n.end(), T(0));
    std::fill(in_t.begin(), in_t.end(), T(0));
    for (int64_t h = 0; h < H; ++h) {
      std::copy(x + p * HW + h * W, x + p * HW + (h + 1) * W, in_n.data() + shift + h * Wq);
      if (ntk_mode == 2)
        std::copy(xt + p * HW + h * W, xt + p * HW + (h + 1) * W, in_t.data() + shift + h * Wq);
    }
    T* a_n = in_n.data();
    T* a_t = in_t.data();
    T* b_n = nx_n.data();
    T* b_t = nx_t.data();
    for (int64_t l = 0; l < L; ++l) {
      const Unit<T>& unit = units[l];
      const T* u = (l == 0 && ntk_mode != 2) ? zero.data() : a_t;  // the raw input's 0
      if (kSelf) {  // the pre-activation variance is the window's own entry
        SelfRoots(unit, n, Wq, a_n, keep.data(), pre.data(), ss.data());
        T* vout = v1 + (l * P + p) * HW;
        for (int64_t h = 0; h < H; ++h)
          std::copy(pre.data() + h * Wq, pre.data() + h * Wq + W, vout + h * W);
      } else {
        const T* va = v1 + (l * P + p) * HW;
        const T* vb = v2 + (l * P + p) * HW;
        for (int64_t h = 0; h < H; ++h) PairRoots(W, va + h * W, vb + h * W, ss.data() + h * Wq);
      }
      auto plane_fn = unit.standard ? ChainPlane<T, kNtk, false, true>
                                    : ChainPlane<T, kNtk, false, false>;
      plane_fn(unit, n, 1, a_n, a_n + Wq, a_n + 2 * Wq, u, u + Wq, u + 2 * Wq, ss.data(),
               keep.data(), b_n + shift, b_t + shift);
      std::swap(a_n, b_n);
      std::swap(a_t, b_t);
    }
    for (int64_t h = 0; h < H; ++h) {
      std::copy(a_n + shift + h * Wq, a_n + shift + h * Wq + W, out_nngp + p * HW + h * W);
      if (kNtk)
        std::copy(a_t + shift + h * Wq, a_t + shift + h * Wq + W, out_ntk + p * HW + h * W);
    }
  }
}

// x and xt (P, H, W): the pair's diagonal, NNGP and NTK (xt is x again where ntk_mode is
// not 2); the outputs the same shape, the NTK's (0, 0, 0) where ntk_mode is 0; v
// (L, P, H, W) the layers' variances
template <typename X, typename O, typename V>
bool DiagShapes(const X& x, const X& xt, const O& on, const O& ot, const V& v,
                int64_t ntk_mode) {
  return x.size() == 3 && SameShape(xt, x) && SameShape(on, x) &&
         (ntk_mode == 0 || SameShape(ot, x)) && ntk_mode >= 0 && ntk_mode <= 2 &&
         v.size() == 4 && v[1] == x[0] && v[2] == x[1] && v[3] == x[2];
}

template <ffi::DataType DT>
ffi::Error DiagImpl(ffi::Buffer<DT, 3> x, ffi::Buffer<DT, 3> xt, ffi::Buffer<DT, 4> v1,
                    ffi::Buffer<DT, 4> v2, ffi::ResultBuffer<DT, 3> out_nngp,
                    ffi::ResultBuffer<DT, 3> out_ntk, int64_t ntk_mode, int64_t standard,
                    ffi::Span<const int64_t> has_bias, ffi::Span<const double> w_var,
                    ffi::Span<const double> b_var, ffi::Span<const double> fan_in,
                    ffi::Span<const double> a, ffi::Span<const double> b) {
  auto d = x.dimensions(), e = v1.dimensions();
  const int64_t L = e[0], P = d[0], H = d[1], W = d[2];
  Blocks q{};
  bool ok = DiagShapes(d, xt.dimensions(), out_nngp->dimensions(), out_ntk->dimensions(), e,
                       ntk_mode) &&
            SameShape(v2.dimensions(), e) && ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli diag: inconsistent shapes");
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Diag<T, true, false> : Diag<T, false, false>;
  run(x.typed_data(), xt.typed_data(), const_cast<T*>(v1.typed_data()), v2.typed_data(),
      out_nngp->typed_data(), out_ntk->typed_data(), P, H, W, ntk_mode, q);
  return ffi::Error::Success();
}

// the per-input pass: each input with itself; v (L, P, H, W) its variances
template <ffi::DataType DT>
ffi::Error DiagSelfImpl(ffi::Buffer<DT, 3> x, ffi::Buffer<DT, 3> xt,
                        ffi::ResultBuffer<DT, 3> out_nngp, ffi::ResultBuffer<DT, 3> out_ntk,
                        ffi::ResultBuffer<DT, 4> v, int64_t ntk_mode, int64_t standard,
                        ffi::Span<const int64_t> has_bias, ffi::Span<const double> w_var,
                        ffi::Span<const double> b_var, ffi::Span<const double> fan_in,
                        ffi::Span<const double> a, ffi::Span<const double> b) {
  auto d = x.dimensions(), e = v->dimensions();
  const int64_t L = e[0], P = d[0], H = d[1], W = d[2];
  Blocks q{};
  bool ok = DiagShapes(d, xt.dimensions(), out_nngp->dimensions(), out_ntk->dimensions(), e,
                       ntk_mode) &&
            ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli self diag: inconsistent shapes");
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Diag<T, true, true> : Diag<T, false, true>;
  run(x.typed_data(), xt.typed_data(), v->typed_data(), nullptr, out_nngp->typed_data(),
      out_ntk->typed_data(), P, H, W, ntk_mode, q);
  return ffi::Error::Success();
}

}  // namespace

#define KERNELCLI_DIAG_ATTRS                                                        \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard") KERNELCLI_BLOCK_ATTRS

#define KERNELCLI_DIAG_BINDING(DT)                                                  \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Ret<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, 3>>() KERNELCLI_DIAG_ATTRS

#define KERNELCLI_DIAG_SELF_BINDING(DT)                                             \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Arg<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, 4>>() KERNELCLI_DIAG_ATTRS

// the diagonal chain on pairs and on each input with itself, per dtype
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_diag_f32, DiagImpl<ffi::F32>,
                              KERNELCLI_DIAG_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_diag_f64, DiagImpl<ffi::F64>,
                              KERNELCLI_DIAG_BINDING(ffi::F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_diag_self_f32, DiagSelfImpl<ffi::F32>,
                              KERNELCLI_DIAG_SELF_BINDING(ffi::F32));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_diag_self_f64, DiagSelfImpl<ffi::F64>,
                              KERNELCLI_DIAG_SELF_BINDING(ffi::F64));
