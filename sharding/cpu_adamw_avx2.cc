// The AVX2 AdamW kernel (8 floats a step), compiled for AVX2 and F16C alone
// (CMake gives this file those flags, and no contraction into fused
// multiply-adds): the scalar loop's operations in its order, so its bits.
#include <immintrin.h>

#include <cstdint>

#include "sharding/cpu_adamw.h"

namespace rtd::shard::cpu {
namespace {

__m256 load8(const BufferView& b, std::size_t j) {
  if (b.dtype == DType::kFloat32) return _mm256_loadu_ps(static_cast<const float*>(b.data) + j);
  const __m128i half = _mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(b.data) + j));
  if (b.dtype == DType::kFloat16) return _mm256_cvtph_ps(half);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// float_to_bf16's rounding (to nearest, ties to even; NaN kept quiet), 8 at a time.
__m128i to_bf16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i out = _mm256_blendv_epi8(rounded, quiet, nan);
  // 32-bit lanes to 16: packus works within 128-bit halves, then the halves in order.
  const __m256i packed = _mm256_packus_epi32(out, out);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

void store8(const BufferView& b, std::size_t j, __m256 x) {
  if (b.dtype == DType::kFloat32) return _mm256_storeu_ps(static_cast<float*>(b.data) + j, x);
  auto* dst = reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(b.data) + j);
  if (b.dtype == DType::kFloat16)
    _mm_storeu_si128(dst, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  else
    _mm_storeu_si128(dst, to_bf16(x));
}

}  // namespace

bool adamw_avx2(const AdamWShard& s, const AdamWConstants& k, std::size_t begin, std::size_t end) {
  const AdamWOptions& o = s.options;
  const __m256 scale = _mm256_set1_ps(s.grad_scale), b1 = _mm256_set1_ps(o.beta1),
               c1 = _mm256_set1_ps(1.0f - o.beta1), b2 = _mm256_set1_ps(o.beta2),
               c2 = _mm256_set1_ps(1.0f - o.beta2), decay = _mm256_set1_ps(k.decay),
               lr = _mm256_set1_ps(o.lr), bc1 = _mm256_set1_ps(k.bc1), bc2 = _mm256_set1_ps(k.bc2),
               eps = _mm256_set1_ps(o.eps);
  auto* p = static_cast<float*>(s.param.data);
  std::size_t j = begin;
  for (; j + 8 <= end; j += 8) {
    const __m256 g = _mm256_mul_ps(load8(s.grad, j), scale);
    const __m256 m =
        _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(s.m + j)), _mm256_mul_ps(c1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(s.v + j)),
                                   _mm256_mul_ps(_mm256_mul_ps(c2, g), g));
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(lr, _mm256_div_ps(m, bc1)),
                                      _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(v, bc2)), eps));
    const __m256 x = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(p + j), decay), step);
    _mm256_storeu_ps(s.m + j, m);
    _mm256_storeu_ps(s.v + j, v);
    _mm256_storeu_ps(p + j, x);
    if (s.out.data) store8(s.out, j, x);
  }
  if (j < end) adamw_scalar(s, k, j, end);
  return true;
}

}  // namespace rtd::shard::cpu
