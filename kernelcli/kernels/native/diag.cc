// The diagonal chain: L (3 x 3 SAME convolution -> ABReLU-family nonlinearity) layers on
// a pair's spatial diagonal, (P, H, W): the state of a network without pooling (the
// flatten nets) or after its last pool, where each input position meets only the same
// position of the other input.
//
// Why: on the cpu engine XLA writes each layer's diagonals and reads them back, and
// evaluates the angle once per kind; the pair's whole diagonal is an H x W plane, a few
// KiB, so here all L layers run on it while it stays in L1, ping-ponging between two
// zero-bordered planes per kind, and only the last layer's plane is written. What a pair
// reads besides its plane comes from the per-input tables by the pair's two rows, not
// gathered per pair by XLA: each layer's roots (Tables), and where the chain starts at
// the network's input, the two images it makes the input's diagonal from (ImageDiag).
//
// A plane is stored with row stride W + 2 and one zero row and column before: output
// entry (h, w), at flat index i = h (W + 2) + w, writes to i + (W + 3), and its window
// reads i + t1 (W + 2) + t2 of the input plane: the first axis's taps as the three tap
// planes of ChainPlane (map.h), the second's at distance 1, so the sums are
// _diagonal_conv.conv_mean's in its order. The scratch columns w >= W are written as 0, the
// zero border the next layer reads.
#include "map.h"

namespace {

// The roots' products sqrt(v1) sqrt(v2) of one row of W entries, from the two inputs'
// roots. Its own function with restrict pointers, as ChainPlane, so the loop is
// vectorised.
template <typename T>
__attribute__((noinline)) void PairRoots(int64_t W, const T* __restrict ra,
                                         const T* __restrict rb, T* __restrict ss) {
  for (int64_t w = 0; w < W; ++w) ss[w] = ra[w] * rb[w];
}

// Each input with itself: the roots r = sqrt(max(v, 0)) of the layer's pre-activation
// variances v (the window's own entries, affine) and their products r r, 0 in scratch
// columns.
template <typename T>
__attribute__((noinline)) void SelfRoots(const Unit<T> unit, int64_t n, int64_t Wq,
                                         const T* __restrict t, const T* __restrict keep,
                                         T* __restrict root, T* __restrict ss) {
  for (int64_t i = 0; i < n; ++i) {
    T x = unit.Affine(Window3(t, t + Wq, t + 2 * Wq, i, 1));
    T r = std::sqrt(x > 0 ? x : T(0));
    root[i] = r;
    ss[i] = keep[i] * (r * r);
  }
}

// The input's diagonal of two images (H, W, C) into a plane of row stride Wq: per pixel
// the channel mean of the products (_linear.input_state), the channels summed in order.
// Why here: XLA gathered each pair's two images and summed their interleaved channels in
// a loop that did not vectorise, a quarter of a 5-layer flatten network's time
// (bench/program_calls.py). kC: the channels where known when compiled (1 and 3
// are vectorised across pixels), else 0 and C.
template <typename T, int64_t kC>
__attribute__((noinline)) void ImageDiag(const T* __restrict a, const T* __restrict b,
                                         int64_t H, int64_t W, int64_t C, int64_t Wq,
                                         T* __restrict plane) {
  const int64_t c = kC > 0 ? kC : C;
  const T n = T(c);
  for (int64_t h = 0; h < H; ++h) {
    const T* ra = a + h * W * c;
    const T* rb = b + h * W * c;
    T* out = plane + h * Wq;
    for (int64_t w = 0; w < W; ++w) {
      T s = ra[w * c] * rb[w * c];
      for (int64_t k = 1; k < c; ++k) s += ra[w * c + k] * rb[w * c + k];
      out[w] = s / n;
    }
  }
}

template <typename T>
void ImageDiag(const T* a, const T* b, int64_t H, int64_t W, int64_t C, int64_t Wq,
               T* plane) {
  if (C == 3) return ImageDiag<T, 3>(a, b, H, W, C, Wq, plane);
  if (C == 1) return ImageDiag<T, 1>(a, b, H, W, C, Wq, plane);
  ImageDiag<T, 0>(a, b, H, W, C, Wq, plane);
}

// Where a pair pass reads layer l's roots of pair p: row ra[p] of the first input's table
// a[l] (n_a, H, W) and row rb[p] of the second's b[l]. Why not the pairs' own rows:
// gathered and stacked by XLA they were written and read back, L x H x W per side and
// pair, as much as the chain's own planes (bench/program_calls.py).
template <typename T>
struct Tables {
  std::vector<const T*> a, b;
  const int32_t *ra, *rb;
};

// kSelf: each input with itself (the per-input pass): the roots are not given but made
// from the layer's own window, and written to made (L, P, H, W). What the chain takes
// of a layer's variances is their roots, so the per-input pass records those: taken
// once per input instead of twice per pair.
//
// C > 0: x and xt are the two inputs' images (n, H, W, C), the pair's rows as for the
// roots (the per-input pass: row p), and the chain's input is their diagonal, made here
// (ImageDiag); else x and xt are the pair's input diagonal (P, H, W), NNGP and NTK.
template <typename T, bool kNtk, bool kSelf>
void Diag(const T* x, const T* xt, int64_t C, T* made, const Tables<T>* tables, T* out_nngp,
          T* out_ntk, int64_t P, int64_t H, int64_t W, int64_t ntk_mode, const Blocks& q) {
  const int64_t L = q.layers, Wq = W + 2, n = H * Wq, plane = (H + 2) * Wq + 3;
  const int64_t shift = Wq + 1;
  const std::vector<Unit<T>> units = q.Units<T>();
  std::vector<T> in_n(plane), in_t(plane), nx_n(plane), nx_t(plane), zero(plane);
  std::vector<T> ss(n), keep(n), root(kSelf ? n : 0);  // ss: 0 in scratch columns
  std::vector<T> scratch(ScratchEntries(n, 1));           // ChainPlane's window sums, its blocks
  for (int64_t i = 0; i < n; ++i) keep[i] = (i % Wq) < W ? T(1) : T(0);
  const int64_t HW = H * W;
  for (int64_t p = 0; p < P; ++p) {
    std::fill(in_n.begin(), in_n.end(), T(0));
    std::fill(in_t.begin(), in_t.end(), T(0));
    if (C > 0) {
      const int64_t ia = kSelf ? p : tables->ra[p], ib = kSelf ? p : tables->rb[p];
      ImageDiag(x + ia * HW * C, xt + ib * HW * C, H, W, C, Wq, in_n.data() + shift);
    } else {
      for (int64_t h = 0; h < H; ++h) {
        std::copy(x + p * HW + h * W, x + p * HW + (h + 1) * W, in_n.data() + shift + h * Wq);
        if (ntk_mode == 2)
          std::copy(xt + p * HW + h * W, xt + p * HW + (h + 1) * W,
                    in_t.data() + shift + h * Wq);
      }
    }
    T* a_n = in_n.data();
    T* a_t = in_t.data();
    T* b_n = nx_n.data();
    T* b_t = nx_t.data();
    for (int64_t l = 0; l < L; ++l) {
      const Unit<T>& unit = units[l];
      const T* u = (l == 0 && ntk_mode != 2) ? zero.data() : a_t;  // the raw input's 0
      if (kSelf) {  // the pre-activation variance is the window's own entry
        SelfRoots(unit, n, Wq, a_n, keep.data(), root.data(), ss.data());
        T* vout = made + (l * P + p) * HW;
        for (int64_t h = 0; h < H; ++h)
          std::copy(root.data() + h * Wq, root.data() + h * Wq + W, vout + h * W);
      } else {
        const T* ra = tables->a[l] + int64_t(tables->ra[p]) * HW;
        const T* rb = tables->b[l] + int64_t(tables->rb[p]) * HW;
        for (int64_t h = 0; h < H; ++h) PairRoots(W, ra + h * W, rb + h * W, ss.data() + h * Wq);
      }
      RunPlane<T, kNtk>(false, l == 0 && ntk_mode != 2, unit, n, 1, a_n, a_n + Wq,
                        a_n + 2 * Wq, u, u + Wq, u + 2 * Wq, ss.data(), keep.data(),
                        b_n + shift, b_t + shift, scratch.data());
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

// The call's input and output shapes: the outputs (P, H, W), the NTK's (0, 0, 0) where
// ntk_mode is 0; from_images: x and xt the images (n, H, W, C) and n' (n', H, W, C), the
// input the raw one (ntk_mode 0 or 1); else x and xt the pair's diagonal (P, H, W) (xt is x
// again where ntk_mode is not 2). C: the images' channels, 0 where not from images.
template <typename X, typename O>
bool DiagShapes(const X& x, const X& xt, const O& on, const O& ot, int64_t ntk_mode,
                bool from_images, int64_t& C) {
  C = 0;
  bool outs = on.size() == 3 && (ntk_mode == 0 || SameShape(ot, on)) && ntk_mode >= 0 &&
              ntk_mode <= 2;
  if (!from_images) return outs && SameShape(x, on) && SameShape(xt, on);
  if (!(outs && ntk_mode != 2 && x.size() == 4 && xt.size() == 4)) return false;
  C = x[3];
  return C >= 1 && x[1] == on[1] && x[2] == on[2] && xt[1] == on[1] && xt[2] == on[2] &&
         xt[3] == C;
}

// The 2 L tables (the first inputs' L, then the second's), each (n, H, W) with one n per
// side, and the pairs' rows inside them and inside the images' n_img (where the input is
// made from images; else -1); false where any is not so.
template <ffi::DataType DT>
bool ToTables(const ffi::RemainingArgs& args, int64_t L, int64_t P, int64_t H, int64_t W,
              ffi::Buffer<ffi::S32, 1> rows1, ffi::Buffer<ffi::S32, 1> rows2,
              const int64_t (&n_img)[2], Tables<ffi::NativeType<DT>>& out) {
  if (int64_t(args.size()) != 2 * L || rows1.element_count() != size_t(P) ||
      rows2.element_count() != size_t(P))
    return false;
  int64_t n[2] = {-1, -1};
  for (int64_t k = 0; k < 2 * L; ++k) {
    auto t = args.get<ffi::Buffer<DT, 3>>(k);
    if (!t.has_value()) return false;
    auto d = t->dimensions();
    int64_t& side = n[k / L];
    if (d[1] != H || d[2] != W || (side >= 0 && d[0] != side)) return false;
    side = d[0];
    (k < L ? out.a : out.b).push_back(t->typed_data());
  }
  for (int s = 0; s < 2; ++s)
    if (n_img[s] >= 0) n[s] = std::min(n[s], n_img[s]);
  out.ra = rows1.typed_data();
  out.rb = rows2.typed_data();
  for (int64_t p = 0; p < P; ++p)
    if (out.ra[p] < 0 || out.ra[p] >= n[0] || out.rb[p] < 0 || out.rb[p] >= n[1]) return false;
  return true;
}

template <ffi::DataType DT>
ffi::Error DiagImpl(ffi::Buffer<DT> x, ffi::Buffer<DT> xt, ffi::Buffer<ffi::S32, 1> rows1,
                    ffi::Buffer<ffi::S32, 1> rows2, ffi::RemainingArgs tables,
                    ffi::ResultBuffer<DT, 3> out_nngp, ffi::ResultBuffer<DT, 3> out_ntk,
                    int64_t ntk_mode, int64_t standard, int64_t from_images,
                    ffi::Span<const int64_t> has_bias, ffi::Span<const double> w_var,
                    ffi::Span<const double> b_var, ffi::Span<const double> fan_in,
                    ffi::Span<const double> a, ffi::Span<const double> b) {
  auto d = out_nngp->dimensions();
  const int64_t L = int64_t(has_bias.size()), P = d[0], H = d[1], W = d[2];
  using T = ffi::NativeType<DT>;
  Blocks q{};
  Tables<T> t;
  int64_t C = 0;
  bool ok = DiagShapes(x.dimensions(), xt.dimensions(), d, out_ntk->dimensions(), ntk_mode,
                       from_images != 0, C);
  const int64_t n_img[2] = {ok && C ? x.dimensions()[0] : -1, ok && C ? xt.dimensions()[0] : -1};
  ok = ok && ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q) &&
       ToTables<DT>(tables, L, P, H, W, rows1, rows2, n_img, t);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli diag: inconsistent shapes");
  auto run = ntk_mode != 0 ? Diag<T, true, false> : Diag<T, false, false>;
  run(x.typed_data(), xt.typed_data(), C, nullptr, &t, out_nngp->typed_data(),
      out_ntk->typed_data(), P, H, W, ntk_mode, q);
  return ffi::Error::Success();
}

// the per-input pass: each input with itself; v (L, P, H, W) its roots
template <ffi::DataType DT>
ffi::Error DiagSelfImpl(ffi::Buffer<DT> x, ffi::Buffer<DT> xt,
                        ffi::ResultBuffer<DT, 3> out_nngp, ffi::ResultBuffer<DT, 3> out_ntk,
                        ffi::ResultBuffer<DT, 4> v, int64_t ntk_mode, int64_t standard,
                        int64_t from_images, ffi::Span<const int64_t> has_bias,
                        ffi::Span<const double> w_var, ffi::Span<const double> b_var,
                        ffi::Span<const double> fan_in, ffi::Span<const double> a,
                        ffi::Span<const double> b) {
  auto d = out_nngp->dimensions(), e = v->dimensions();
  const int64_t L = e[0], P = d[0], H = d[1], W = d[2];
  Blocks q{};
  int64_t C = 0;
  bool ok = DiagShapes(x.dimensions(), xt.dimensions(), d, out_ntk->dimensions(), ntk_mode,
                       from_images != 0, C) &&
            (!from_images || (x.dimensions()[0] == P && xt.dimensions()[0] == P)) &&
            e[1] == P && e[2] == H && e[3] == W &&
            ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q);
  if (!ok) return ffi::Error::InvalidArgument("kernelcli self diag: inconsistent shapes");
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Diag<T, true, true> : Diag<T, false, true>;
  run(x.typed_data(), xt.typed_data(), C, v->typed_data(), nullptr, out_nngp->typed_data(),
      out_ntk->typed_data(), P, H, W, ntk_mode, q);
  return ffi::Error::Success();
}

}  // namespace

#define KERNELCLI_DIAG_ATTRS                                                        \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard")                                                    \
      .Attr<int64_t>("from_images") KERNELCLI_BLOCK_ATTRS

#define KERNELCLI_DIAG_BINDING(DT)                                                  \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT>>()                                                       \
      .Arg<ffi::Buffer<DT>>()                                                       \
      .Arg<ffi::Buffer<ffi::S32, 1>>()                                              \
      .Arg<ffi::Buffer<ffi::S32, 1>>()                                              \
      .RemainingArgs()                                                              \
      .Ret<ffi::Buffer<DT, 3>>()                                                    \
      .Ret<ffi::Buffer<DT, 3>>() KERNELCLI_DIAG_ATTRS

#define KERNELCLI_DIAG_SELF_BINDING(DT)                                             \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT>>()                                                       \
      .Arg<ffi::Buffer<DT>>()                                                       \
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
