// The chain: L (3 x 3 SAME convolution -> ABReLU-family nonlinearity) layers and the
// global average pool (the seed's network, cnn5_gap, cnn21_gap) or a 2 x 2 average pool
// (Myrtle's networks), with no (H W)^2 covariance written between layers.
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
// (layer.cc's Tail with kThree): the same formulas in the same order; the pool's sum
// runs per lane in the dtype along a diagonal, then in double.
#include "map.h"

namespace {

// pool2: the chain ends in a 2 x 2 average pool of stride 2 (VALID), whose output
// covariances (P, H / 2, H / 2, W / 2, W / 2) are written (each plane of the last
// layer adds its 2 x 2 sums to its output plane: the pool's window mixes diagonals);
// else in the global average pool, (P,).
struct ChainParams {
  int64_t lo, ntk_mode, from_images, pool2;
  Blocks blocks;
};

// kSelf: each input with itself (x and xt the same input; the per-input pass): the
// variances are not given but made, and written to v1 (L, P, H, W): layer l's
// pre-activation variance at (oh, ow) is its plane (oh, oh)'s entry (ow, ow), so the
// diagonal d = 0 runs first, each plane's own diagonal entries taken before its map.
template <typename T, bool kNtk, bool kSelf>
void Chain(const T* x, const T* xt, T* v1, const T* v2, T* out_nngp, T* out_ntk,
           int64_t P, int64_t H, int64_t W, const ChainParams& q) {
  const bool images = q.from_images != 0;
  const int64_t L = q.blocks.layers, lo = q.lo;
  const int64_t Wq = W + 2;                 // a padded plane's row stride
  const int64_t n = W * Wq;                 // the flat output plane
  const int64_t plane = (W + 2) * Wq + 3;   // a padded plane, with the last tap's reach
  const int64_t shift = lo * Wq + lo, dd = Wq + 1;
  const T inv_c = T(1.0 / 3);
  const std::vector<Unit<T>> units = q.blocks.Units<T>();
  // two diagonals' planes per kind (ping-pong), each zero outside what is written
  std::vector<T> buf_a(2 * H * plane), buf_b(2 * H * plane), zero(plane);
  std::vector<T> ss(n), keep(n), part_n(n), part_t(n), r1(L * H * W), r2(L * H * W);
  std::vector<double> acc_n(n), acc_t(n);
  std::vector<T> scratch(ScratchEntries(n, dd));  // ChainPlane's window sums, its blocks
  std::vector<T> x2t(images ? H * 3 * W : 0);
  const bool pool2 = q.pool2 != 0;
  const int64_t Hh = H / 2, Wh = W / 2, pooled = Hh * Hh * Wh * Wh;
  std::vector<T> last_n(pool2 ? n : 0), last_t(pool2 ? n : 0);
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
    T* pool_n = pool2 ? out_nngp + p * pooled : nullptr;
    T* pool_t = pool2 && kNtk ? out_ntk + p * pooled : nullptr;
    if (pool2) {
      std::fill(pool_n, pool_n + pooled, T(0));
      if (kNtk) std::fill(pool_t, pool_t + pooled, T(0));
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
              T v = unit.Affine(Window3(t0, t1, t2, ow * Wq + ow, dd));
              vout[ow] = v;
              root[ow] = r2[(l * H + oh) * W + ow] = std::sqrt(v > 0 ? v : T(0));
            }
          }
          for (int64_t r = 0; r < W; ++r) {  // the roots' plane, 0 in the scratch columns
            const T a = R1[oh * W + r];
            const T* __restrict b = R2 + oh2 * W;
            T* __restrict row = ss.data() + r * Wq;
            for (int64_t c = 0; c < W; ++c) row[c] = a * b[c];
            row[W] = row[W + 1] = T(0);
          }
          // the plane goes to the next layer's input, to the pool's lanes (the global
          // pool) or to a scratch plane (the 2 x 2 pool's sums, below)
          const bool sums = last && !pool2;
          T* on = sums ? part_n.data() : last ? last_n.data() : nx_n + pos * plane + shift;
          T* ot = sums ? part_t.data() : last ? last_t.data() : nx_t + pos * plane + shift;
          RunPlane<T, kNtk>(sums, l == 0 && zero_t0, unit, n, dd, t0, t1, t2, u0, u1, u2,
                            ss.data(), keep.data(), on, ot, scratch.data());
          if (last && pool2 && oh < 2 * Hh && oh2 < 2 * Hh) {  // into output plane (oh / 2, oh2 / 2)
            const int64_t o = ((oh / 2) * Hh + oh2 / 2) * Wh * Wh;
            for (int64_t pw = 0; pw < Wh; ++pw)
              for (int64_t pw2 = 0; pw2 < Wh; ++pw2) {
                const int64_t i = 2 * pw * Wq + 2 * pw2;
                pool_n[o + pw * Wh + pw2] += (last_n[i] + last_n[i + 1]) + (last_n[i + Wq] + last_n[i + Wq + 1]);
                if (kNtk)
                  pool_t[o + pw * Wh + pw2] += (last_t[i] + last_t[i + 1]) + (last_t[i + Wq] + last_t[i + Wq + 1]);
              }
          }
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
    if (pool2) {  // the 16 terms' sums to their mean
      for (int64_t i = 0; i < pooled; ++i) pool_n[i] *= T(1.0 / 16);
      if (kNtk) for (int64_t i = 0; i < pooled; ++i) pool_t[i] *= T(1.0 / 16);
      continue;
    }
    double sn = 0, st = 0;
    for (int64_t i = 0; i < n; ++i) { sn += acc_n[i]; st += acc_t[i]; }
    const double count = double(H) * H * W * W;
    out_nngp[p] = T(sn / count);
    if (kNtk) out_ntk[p] = T(st / count);
  }
}

// The output's shape: (P,) after the global pool (kRank 1), (P, H / 2, H / 2, W / 2,
// W / 2) after the 2 x 2 pool (kRank 5).
template <size_t kRank, typename R>
bool PooledShape(const R& out, int64_t P, int64_t H, int64_t W) {
  const int64_t want[5] = {P, H / 2, H / 2, W / 2, W / 2};
  if (kRank == 5 && (H < 2 || W < 2)) return false;
  for (size_t i = 0; i < kRank; ++i)
    if (out.dimensions()[i] != want[i]) return false;
  return true;
}

// x (P, H, H, W, W), or from_images x and xt (P, H, W, 3, 1) the two images
template <typename D>
bool InputShape(const D& d, const D& dt, bool images, int64_t ntk_mode, int64_t P,
                int64_t H, int64_t W) {
  return d[0] == P && SameShape(dt, d) &&
         (images ? (d[1] == H && d[2] == W && d[3] == 3 && d[4] == 1 && ntk_mode != 2)
                 : (d[1] == H && d[2] == H && d[3] == W && d[4] == W));
}

template <ffi::DataType DT, size_t kRank>
ffi::Error ChainImpl(ffi::Buffer<DT, 5> x, ffi::Buffer<DT, 5> xt, ffi::Buffer<DT, 4> v1,
                     ffi::Buffer<DT, 4> v2, ffi::ResultBuffer<DT, kRank> out_nngp,
                     ffi::ResultBuffer<DT, kRank> out_ntk, int64_t lo, int64_t ntk_mode,
                     int64_t standard, int64_t from_images, ffi::Span<const int64_t> has_bias,
                     ffi::Span<const double> w_var, ffi::Span<const double> b_var,
                     ffi::Span<const double> fan_in, ffi::Span<const double> a,
                     ffi::Span<const double> b) {
  auto e = v1.dimensions();
  const int64_t L = e[0], P = e[1], H = e[2], W = e[3];
  ChainParams q{lo, ntk_mode, from_images, kRank == 5, {}};
  bool ok = SameShape(v2.dimensions(), e) && lo >= 0 && lo <= 2 &&
            InputShape(x.dimensions(), xt.dimensions(), from_images != 0, ntk_mode, P, H, W) &&
            ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q.blocks) &&
            PooledShape<kRank>(*out_nngp, P, H, W) &&
            (ntk_mode == 0 || PooledShape<kRank>(*out_ntk, P, H, W));
  if (!ok) return ffi::Error::InvalidArgument("kernelcli chain: inconsistent shapes");
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Chain<T, true, false> : Chain<T, false, false>;
  run(x.typed_data(), xt.typed_data(), const_cast<T*>(v1.typed_data()), v2.typed_data(),
      out_nngp->typed_data(), out_ntk->typed_data(), P, H, W, q);
  return ffi::Error::Success();
}

// the per-input pass's chain: each input with itself; v (L, P, H, W) its variances
template <ffi::DataType DT, size_t kRank>
ffi::Error SelfImpl(ffi::Buffer<DT, 5> x, ffi::Buffer<DT, 5> xt,
                    ffi::ResultBuffer<DT, kRank> out_nngp, ffi::ResultBuffer<DT, kRank> out_ntk,
                    ffi::ResultBuffer<DT, 4> v, int64_t lo, int64_t ntk_mode, int64_t standard,
                    int64_t from_images, ffi::Span<const int64_t> has_bias,
                    ffi::Span<const double> w_var, ffi::Span<const double> b_var,
                    ffi::Span<const double> fan_in, ffi::Span<const double> a,
                    ffi::Span<const double> b) {
  auto e = v->dimensions();
  const int64_t L = e[0], P = e[1], H = e[2], W = e[3];
  ChainParams q{lo, ntk_mode, from_images, kRank == 5, {}};
  bool ok = lo >= 0 && lo <= 2 &&
            InputShape(x.dimensions(), xt.dimensions(), from_images != 0, ntk_mode, P, H, W) &&
            ToBlocks(L, standard, has_bias, w_var, b_var, fan_in, a, b, q.blocks) &&
            PooledShape<kRank>(*out_nngp, P, H, W) &&
            (ntk_mode == 0 || PooledShape<kRank>(*out_ntk, P, H, W));
  if (!ok) return ffi::Error::InvalidArgument("kernelcli self chain: inconsistent shapes");
  using T = ffi::NativeType<DT>;
  auto run = ntk_mode != 0 ? Chain<T, true, true> : Chain<T, false, true>;
  run(x.typed_data(), xt.typed_data(), v->typed_data(), nullptr, out_nngp->typed_data(),
      out_ntk->typed_data(), P, H, W, q);
  return ffi::Error::Success();
}

}  // namespace

#define KERNELCLI_ATTRS                                                             \
      .Attr<int64_t>("lo")                                                          \
      .Attr<int64_t>("ntk_mode")                                                    \
      .Attr<int64_t>("standard")                                                    \
      .Attr<int64_t>("from_images") KERNELCLI_BLOCK_ATTRS

#define KERNELCLI_CHAIN_BINDING(DT, RANK)                                           \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Arg<ffi::Buffer<DT, 4>>()                                                    \
      .Ret<ffi::Buffer<DT, RANK>>()                                                 \
      .Ret<ffi::Buffer<DT, RANK>>() KERNELCLI_ATTRS

#define KERNELCLI_SELF_BINDING(DT, RANK)                                            \
  ffi::Ffi::Bind()                                                                  \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Arg<ffi::Buffer<DT, 5>>()                                                    \
      .Ret<ffi::Buffer<DT, RANK>>()                                                 \
      .Ret<ffi::Buffer<DT, RANK>>()                                                 \
      .Ret<ffi::Buffer<DT, 4>>() KERNELCLI_ATTRS

// the chain on pairs and on each input with itself (the per-input pass), ending in the
// global pool or the 2 x 2 pool, per dtype
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_f32, (ChainImpl<ffi::F32, 1>),
                              KERNELCLI_CHAIN_BINDING(ffi::F32, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_f64, (ChainImpl<ffi::F64, 1>),
                              KERNELCLI_CHAIN_BINDING(ffi::F64, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_pool_f32, (ChainImpl<ffi::F32, 5>),
                              KERNELCLI_CHAIN_BINDING(ffi::F32, 5));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_chain_pool_f64, (ChainImpl<ffi::F64, 5>),
                              KERNELCLI_CHAIN_BINDING(ffi::F64, 5));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_f32, (SelfImpl<ffi::F32, 1>),
                              KERNELCLI_SELF_BINDING(ffi::F32, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_f64, (SelfImpl<ffi::F64, 1>),
                              KERNELCLI_SELF_BINDING(ffi::F64, 1));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_pool_f32, (SelfImpl<ffi::F32, 5>),
                              KERNELCLI_SELF_BINDING(ffi::F32, 5));
XLA_FFI_DEFINE_HANDLER_SYMBOL(kernelcli_self_pool_f64, (SelfImpl<ffi::F64, 5>),
                              KERNELCLI_SELF_BINDING(ffi::F64, 5));
