// y = x W^T + b in int8 for the few rows of a decoding step: the weight read once, as a stream.
//
//   qkv::int8_linear(x, packed, row_sums, scale, bias) -> y
//   x (M, K) float32, K a multiple of 16; packed (ceil(N / 64), K / 4, 64, 4) int8: W (N, K)
//   quantized per output row (W ≈ Wq * scale), each block of 64 output rows laid out four columns
//   at a time, the last block padded (`pack_int8_weight` in qkv/runtime/kernels/__init__.py);
//   row_sums (N) int32, sum_k Wq[n, k]; scale (N) float32; bias (N) float32 or None;
//   y (M, N) float32.
//
// x is quantized per row as `Int8Linear` does (sx = max |x| / 127, xq = round(x / sx)), and
// y = (xq Wq^T) sx scale + b: the integer sums torch._int_mm makes, the same float arithmetic
// after (built without contracting a * b + c into one rounding). AVX512-VNNI's vpdpbusd multiplies
// unsigned bytes by signed ones, so xq + 128 is multiplied and 128 sum_k Wq[n, k] taken off. At one
// row each weight byte serves one multiply-add: the step runs at the speed the weight streams from
// memory, and the packed layout (one linear pass, 256 bytes a turn) lets the hardware prefetcher
// stream it (a software prefetch ahead of it measured slower at one row); up to
// four rows share each pass. Needs AVX512-VNNI (`has_int8_linear`).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kBlock = 64;  // output rows a block of the packed weight holds
constexpr int64_t kGroup = 4;   // columns a vpdpbusd lane sums

bool has_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

void check_arguments(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& row_sums,
                     const at::Tensor& scale, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(has_vnni(), "int8_linear needs AVX512-VNNI, which this CPU lacks");
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat,
              "int8_linear: x must be an (M, K) float32 tensor, got ", x.scalar_type(), " ",
              x.sizes());
  TORCH_CHECK(packed.dim() == 4 && packed.scalar_type() == at::kChar && packed.is_contiguous() &&
                  packed.size(2) == kBlock && packed.size(3) == kGroup,
              "int8_linear: packed must be a contiguous (N / 64, K / 4, 64, 4) int8 tensor, got ",
              packed.scalar_type(), " ", packed.sizes());
  const int64_t K = x.size(1), N = scale.numel();
  TORCH_CHECK(packed.size(1) * kGroup == K && K % 16 == 0, "int8_linear: x has ", K,
              " columns, the weight ", packed.size(1) * kGroup, " (a multiple of 16)");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.dim() == 1 && scale.is_contiguous() &&
                  (N + kBlock - 1) / kBlock == packed.size(0),
              "int8_linear: scale must be one float32 value per output row of the weight");
  TORCH_CHECK(row_sums.scalar_type() == at::kInt && row_sums.numel() == N &&
                  row_sums.is_contiguous(),
              "int8_linear: row_sums must be ", N, " int32 values");
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->numel() == N &&
                                    bias->is_contiguous()),
              "int8_linear: bias must be ", N, " float32 values");
}

#if defined(__x86_64__)  // the vector code; elsewhere the op refuses

// row (K) -> its unsigned bytes (xq + 128, K) and its scale sx, as `Int8Linear.forward` does
__attribute__((target("avx512f,avx512bw,avx512vnni"))) float quantize_row(
    const float* row, int64_t K, uint8_t* out) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16) {
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(row + k)));
  }
  const float sx = std::max(_mm512_reduce_max_ps(amax), 1e-12f) / 127.f;
  const __m512 vsx = _mm512_set1_ps(sx), shift = _mm512_set1_ps(128.f);
  for (int64_t k = 0; k < K; k += 16) {
    __m512 q = _mm512_roundscale_ps(_mm512_div_ps(_mm512_loadu_ps(row + k), vsx),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k),
                     _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(_mm512_add_ps(q, shift))));
  }
  return sx;
}

// the same sums with vpdpbusd, up to 4 rows at a time: each 256 bytes of the block read once.
// The accumulators are named, not an array: GCC keeps an array of vectors in memory.
#define QKV_ROW(m, a0, a1, a2, a3)                                         \
  if constexpr (MR > m) {                                                  \
    int32_t four;                                                          \
    std::memcpy(&four, xu + m * K + g * kGroup, sizeof four);              \
    const __m512i x = _mm512_set1_epi32(four);                             \
    a0 = _mm512_dpbusd_epi32(a0, x, w0);                                   \
    a1 = _mm512_dpbusd_epi32(a1, x, w1);                                   \
    a2 = _mm512_dpbusd_epi32(a2, x, w2);                                   \
    a3 = _mm512_dpbusd_epi32(a3, x, w3);                                   \
  }
#define QKV_STORE(m, a0, a1, a2, a3)                                       \
  if constexpr (MR > m) {                                                  \
    int32_t* out = sums + m * kBlock;                                      \
    _mm512_storeu_si512(out, a0);                                          \
    _mm512_storeu_si512(out + 16, a1);                                     \
    _mm512_storeu_si512(out + 32, a2);                                     \
    _mm512_storeu_si512(out + 48, a3);                                     \
  }

template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void block_sums_vnni(
    const uint8_t* xu, int64_t K, const int8_t* block, int32_t* sums) {
  const __m512i z = _mm512_setzero_si512();
  __m512i a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
  __m512i a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
  for (int64_t g = 0; g < K / kGroup; ++g) {
    const int8_t* w = block + g * kBlock * kGroup;
    const __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);
    const __m512i w2 = _mm512_loadu_si512(w + 128), w3 = _mm512_loadu_si512(w + 192);
    QKV_ROW(0, a00, a01, a02, a03)
    QKV_ROW(1, a10, a11, a12, a13)
    QKV_ROW(2, a20, a21, a22, a23)
    QKV_ROW(3, a30, a31, a32, a33)
  }
  QKV_STORE(0, a00, a01, a02, a03)
  QKV_STORE(1, a10, a11, a12, a13)
  QKV_STORE(2, a20, a21, a22, a23)
  QKV_STORE(3, a30, a31, a32, a33)
}
#undef QKV_ROW
#undef QKV_STORE

// sums (M, 64) of the unsigned rows xu (M, K) against one packed block, 4 rows a pass
void block_sums(const uint8_t* xu, int64_t M, int64_t K, const int8_t* block, int32_t* sums) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) block_sums_vnni<4>(xu + m * K, K, block, sums + m * kBlock);
  switch (M - m) {
    case 3: return block_sums_vnni<3>(xu + m * K, K, block, sums + m * kBlock);
    case 2: return block_sums_vnni<2>(xu + m * K, K, block, sums + m * kBlock);
    case 1: return block_sums_vnni<1>(xu + m * K, K, block, sums + m * kBlock);
    default: return;
  }
}

// y (M, N) at a block's `count` outputs from its sums (M, 64): the shift of xq (128) taken off,
// exact in int32, then scaled as `Int8Linear` scales; r, s, b, y start at the block's first output
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void scale_block(
    const int32_t* sums, int64_t M, int64_t count, const float* sx, const int32_t* r,
    const float* s, const float* b, float* y, int64_t N) {
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 mask = count - i >= 16 ? 0xFFFF : (1u << (count - i)) - 1;
    const __m512i shift = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(mask, r + i), 7);
    const __m512 scale = _mm512_maskz_loadu_ps(mask, s + i);
    const __m512 bias = b ? _mm512_maskz_loadu_ps(mask, b + i) : _mm512_setzero_ps();
    for (int64_t m = 0; m < M; ++m) {
      const __m512i sum = _mm512_sub_epi32(_mm512_loadu_si512(sums + m * kBlock + i), shift);
      const __m512 sx_scale = _mm512_mul_ps(_mm512_set1_ps(sx[m]), scale);
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), sx_scale);
      if (b) v = _mm512_add_ps(v, bias);
      _mm512_mask_storeu_ps(y + m * N + i, mask, v);
    }
  }
}

at::Tensor int8_linear(const at::Tensor& input, const at::Tensor& packed,
                       const at::Tensor& row_sums, const at::Tensor& scale,
                       const std::optional<at::Tensor>& bias) {
  check_arguments(input, packed, row_sums, scale, bias);
  const at::Tensor x = input.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = scale.numel();
  std::vector<uint8_t> xu(M * K);
  std::vector<float> sx(M);
  for (int64_t m = 0; m < M; ++m) {
    sx[m] = quantize_row(x.data_ptr<float>() + m * K, K, &xu[m * K]);
  }
  at::Tensor y = at::empty({M, N}, x.options());
  float* ys = y.data_ptr<float>();
  const int8_t* w = packed.data_ptr<int8_t>();
  const float* s = scale.data_ptr<float>();
  const int32_t* r = row_sums.data_ptr<int32_t>();
  const float* b = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  at::parallel_for(0, packed.size(0), 1, [&](int64_t begin, int64_t end) {
    std::vector<int32_t> sums(M * kBlock);
    for (int64_t nb = begin; nb < end; ++nb) {
      block_sums(xu.data(), M, K, w + nb * kBlock * K, sums.data());
      const int64_t n = nb * kBlock, count = std::min(kBlock, N - n);
      scale_block(sums.data(), M, count, sx.data(), r + n, s + n, b ? b + n : nullptr, ys + n, N);
    }
  });
  return y;
}

#else

at::Tensor int8_linear(const at::Tensor& input, const at::Tensor& packed,
                       const at::Tensor& row_sums, const at::Tensor& scale,
                       const std::optional<at::Tensor>& bias) {
  check_arguments(input, packed, row_sums, scale, bias);  // refuses: no AVX512-VNNI
  return at::Tensor();
}

#endif

bool has_int8_linear() { return has_vnni(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(qkv, m) {
  m.def("int8_linear(Tensor x, Tensor packed, Tensor row_sums, Tensor scale, Tensor? bias) -> "
        "Tensor");
  m.def("has_int8_linear() -> bool", &has_int8_linear);
}

TORCH_LIBRARY_IMPL(qkv, CPU, m) { m.impl("int8_linear", &int8_linear); }
