// Explicit vectors for the map's loop (map.h's ChainPlane): GCC's vector extensions, one
// register of the variant's widest vectors (AVX-512's 64 bytes, AVX's 32, else 16), and
// the square root lane by lane, which the compiler makes one instruction.
//
// Why not the compiler's loop vectoriser: on the angle's selects it wrote mask logic for
// the nested conditions and reloaded pointers it had no registers for, about 125
// instructions per 8 lanes in the x86-64-v3 loop against 62 here; and a loop it
// vectorises runs one vector per iteration, so the angle's long chain of dependent
// operations (square root, division, the polynomial) left the cores waiting. Every
// operation here is the scalar code's, lane by lane, in its order (IEEE arithmetic, exact
// square root, selects), so the bits are the scalar code's and every variant's.
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;  // SSE2, NEON
#endif

namespace {

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  typedef float V __attribute__((vector_size(kVecBytes)));
  typedef int32_t M __attribute__((vector_size(kVecBytes)));
  static constexpr int kLanes = kVecBytes / 4;
  static constexpr int32_t kAbs = 0x7fffffff;
  // vectors in flight per loop iteration: enough independent chains to hide the angle's
  // latency, few enough for the registers (AVX-512 has 32, AVX2 and SSE 16): the best of
  // 1-8 on the seed's network and bench/native_loop.py, Zen 4
  static constexpr int kInFlight = kVecBytes == 64 ? 6 : 2;
  // ChainPlane's loop in two passes (map.h): where the out-of-order window holds too few
  // lanes of the angle's chain
  static constexpr bool kTwoPass = kVecBytes <= 32;
};

template <>
struct Vec<double> {
  typedef double V __attribute__((vector_size(kVecBytes)));
  typedef int64_t M __attribute__((vector_size(kVecBytes)));
  static constexpr int kLanes = kVecBytes / 8;
  static constexpr int64_t kAbs = 0x7fffffffffffffffLL;
  // 6 on every width: 4 ran x86-64-v3's loop 7% slower (Zen 4), the same on x86-64-v2
  static constexpr int kInFlight = 6;
  static constexpr bool kTwoPass = false;
};

template <typename V>
inline V Load(const void* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}

template <typename V>
inline void Store(void* p, V v) {
  __builtin_memcpy(p, &v, sizeof(V));
}

// Lane by lane: the compiler makes this one square-root instruction of the vector's
// width (-fno-math-errno: no call to the library's sqrt for errno's sake).
inline Vec<float>::V Sqrt(Vec<float>::V v) {
  for (int k = 0; k < Vec<float>::kLanes; ++k) v[k] = __builtin_sqrtf(v[k]);
  return v;
}

inline Vec<double>::V Sqrt(Vec<double>::V v) {
  for (int k = 0; k < Vec<double>::kLanes; ++k) v[k] = __builtin_sqrt(v[k]);
  return v;
}

}  // namespace
