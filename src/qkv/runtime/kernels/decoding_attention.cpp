// Equation 1 for decoding: a few queries a row (one new token, or the stacked queries of a
// sentence's beams) over that row's cached keys and values, one pass per row and head.
//
//   qkv::decoding_attention(q, k, v, mask, scale) -> out
//   q (B, H, G, Dh) float32; k, v (B, H, L, Dh) float32 or float16, any strides with a contiguous
//   last axis (a narrowed cache buffer); mask (B | 1, 1, 1, L) bool, True = may attend, at least
//   one key of every row; out (B, H, G, Dh) float32 = softmax(q k^T * scale) v.
//
// TorchInductor writes this as loops that reduce every key's dot product across a vector and
// divide per key. Here the products of a vector's width of keys are summed lane by lane, then
// transposed and added into one vector of scores; the softmax runs over whole vectors (the keys
// past the last at -inf); the weighted sum of the values keeps up to four independent sums; the
// output is divided once. Vectorized with ATen's `at::vec`, compiled for the instruction set this
// CPU has (qkv/runtime/kernels/__init__.py).

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

constexpr int64_t kWidth = 2 * Vec::size();  // floats handled a turn: two vectors
constexpr int kKeys = Vec::size();  // keys whose dot products are summed up together

template <typename T>
std::pair<Vec, Vec> load_float(const T* p) {  // kWidth values from p, as float32
  if constexpr (std::is_same_v<T, float>) {
    return {Vec::loadu(p), Vec::loadu(p + Vec::size())};
  } else {
    static_assert(at::vec::Vectorized<T>::size() == kWidth);
    auto [low, high] = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
    return {low, high};
  }
}

// scores (n) = q . k_t for the keys t < n <= kKeys, k_t = k + t * step: each key's products
// summed lane by lane into a row of `partial`, and the kKeys rows transposed and added, one vector
// of scores at once (no reduction across a vector per key)
template <typename T>
void dots(const float* q, const T* k, int64_t n, int64_t step, int64_t Dh, float* scores) {
  alignas(64) float partial[kKeys * kKeys];
  alignas(64) float columns[kKeys * kKeys];
  const int64_t whole = Dh / kWidth * kWidth;
  for (int64_t t = 0; t < n; ++t) {
    const T* kt = k + t * step;
    Vec low_acc(0.f), high_acc(0.f);
    for (int64_t d = 0; d < whole; d += kWidth) {
      auto [low, high] = load_float(kt + d);
      low_acc = at::vec::fmadd(Vec::loadu(q + d), low, low_acc);
      high_acc = at::vec::fmadd(Vec::loadu(q + d + Vec::size()), high, high_acc);
    }
    (low_acc + high_acc).store(partial + t * kKeys);
    for (int64_t d = whole; d < Dh; ++d) partial[t * kKeys] += q[d] * static_cast<float>(kt[d]);
  }
  std::fill(partial + n * kKeys, partial + kKeys * kKeys, 0.f);
  at::vec::transpose_mxn<float, kKeys, kKeys>(partial, kKeys, columns, kKeys);
  Vec sum = Vec::loadu(columns);
  for (int64_t lane = 1; lane < kKeys; ++lane) sum = sum + Vec::loadu(columns + lane * kKeys);
  sum.store(scores, n);
}

// out (C * kWidth) = sum_t w_t v_t * inverse over the keys `mask` keeps, v_t = v + t * step: 2 C
// independent sums (a masked key is skipped, not weighted by 0: an unwritten cache position may
// hold anything, NaN too)
template <int C, typename T>
void weighted_columns(const float* w, const T* v, const bool* mask, int64_t L, int64_t step,
                      Vec inverse, float* out) {
  Vec acc[2 * C];
  for (auto& a : acc) a = Vec(0.f);
  for (int64_t t = 0; t < L; ++t) {
    if (!mask[t]) continue;
    const Vec weight(w[t]);
    for (int c = 0; c < C; ++c) {
      auto [low, high] = load_float(v + t * step + c * kWidth);
      acc[2 * c] = at::vec::fmadd(weight, low, acc[2 * c]);
      acc[2 * c + 1] = at::vec::fmadd(weight, high, acc[2 * c + 1]);
    }
  }
  for (int c = 0; c < 2 * C; ++c) (acc[c] * inverse).store(out + c * Vec::size());
}

// out (n) = sum_t p_t v_t / total over the L keys that `mask` keeps, v_t = v + t * step
template <typename T>
void weighted_sum(const float* p, const T* v, const bool* mask, int64_t L, int64_t step, int64_t n,
                  float total, float* out) {
  const Vec inverse(1.f / total);
  int64_t d = 0;
  for (; d + 2 * kWidth <= n; d += 2 * kWidth) {
    weighted_columns<2>(p, v + d, mask, L, step, inverse, out + d);
  }
  for (; d + kWidth <= n; d += kWidth) {
    weighted_columns<1>(p, v + d, mask, L, step, inverse, out + d);
  }
  for (; d < n; ++d) {
    float acc = 0.f;
    for (int64_t t = 0; t < L; ++t) {
      if (mask[t]) acc += p[t] * static_cast<float>(v[t * step + d]);
    }
    out[d] = acc / total;
  }
}

struct Rows {  // one (row, head): where its queries, keys, values, mask and output are
  const float* q;
  const void* k;
  const void* v;
  const bool* mask;
  float* out;
};

// The G queries of one row and head; `scores` holds L floats rounded up to whole vectors.
template <typename T>
void attend(const Rows& r, int64_t G, int64_t L, int64_t Dh, int64_t k_step, int64_t v_step,
            float scale, std::vector<float>& scores) {
  const T* k = static_cast<const T*>(r.k);
  const T* v = static_cast<const T*>(r.v);
  const int64_t padded = static_cast<int64_t>(scores.size());
  const float minus_infinity = -std::numeric_limits<float>::infinity();
  const auto maximum = [](Vec& x, Vec& y) { return at::vec::maximum(x, y); };
  float* s = scores.data();
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t t = 0; t < L; t += kKeys) {  // Q K^T * scale; masked keys and padding at -inf
      dots(r.q + g * Dh, k + t * k_step, std::min<int64_t>(kKeys, L - t), k_step, Dh, s + t);
    }
    for (int64_t t = 0; t < padded; ++t) s[t] = t < L && r.mask[t] ? s[t] * scale : minus_infinity;
    Vec top(minus_infinity), total(0.f);  // exp(s - max), its sum divided out of the output
    for (int64_t t = 0; t < padded; t += kKeys) top = at::vec::maximum(top, Vec::loadu(s + t));
    const Vec largest(at::vec::vec_reduce_all<float>(maximum, top));
    for (int64_t t = 0; t < padded; t += kKeys) {
      const Vec e = (Vec::loadu(s + t) - largest).exp();
      e.store(s + t);
      total = total + e;
    }
    const float sum = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, total);
    weighted_sum(s, v, r.mask, L, v_step, Dh, sum, r.out + g * Dh);
  }
}

template <typename T>
void run(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& mask,
         double scale, at::Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), G = q.size(2), Dh = q.size(3), L = k.size(2);
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const T* kp = static_cast<const T*>(k.const_data_ptr());
  const T* vp = static_cast<const T*>(v.const_data_ptr());
  const bool* mp = mask.const_data_ptr<bool>();
  const int64_t mask_row = mask.size(0) == 1 ? 0 : mask.stride(0);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores((L + kKeys - 1) / kKeys * kKeys);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / H, h = i % H;
      const Rows r{qp + i * G * Dh, kp + b * k.stride(0) + h * k.stride(1),
                   vp + b * v.stride(0) + h * v.stride(1), mp + b * mask_row, op + i * G * Dh};
      attend<T>(r, G, L, Dh, k.stride(2), v.stride(2), static_cast<float>(scale), scores);
    }
  });
}

at::Tensor decoding_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& mask, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && mask.dim() == 4,
              "decoding_attention: q, k, v and mask are 4-d");
  TORCH_CHECK(q.scalar_type() == at::kFloat, "decoding_attention: q is float32");
  TORCH_CHECK(k.scalar_type() == v.scalar_type(), "decoding_attention: k and v of one dtype");
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.size(-1) == k.size(2) &&
                  mask.stride(-1) == 1 && (mask.size(0) == 1 || mask.size(0) == k.size(0)),
              "decoding_attention: mask (B | 1, 1, 1, L) bool, contiguous keys");
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3) &&
                  v.sizes() == k.sizes(),
              "decoding_attention: q (B, H, G, Dh) over k, v (B, H, L, Dh)");
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, "decoding_attention: contiguous heads");
  const at::Tensor qc = q.contiguous();
  at::Tensor out = at::empty(q.sizes(), q.options());
  if (k.scalar_type() == at::kFloat) {
    run<float>(qc, k, v, mask, scale, out);
  } else {
    TORCH_CHECK(k.scalar_type() == at::kHalf, "decoding_attention: k, v float32 or float16");
    run<c10::Half>(qc, k, v, mask, scale, out);
  }
  return out;
}

}  // namespace

TORCH_LIBRARY(qkv, m) {
  m.def("decoding_attention(Tensor q, Tensor k, Tensor v, Tensor mask, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(qkv, CPU, m) { m.impl("decoding_attention", &decoding_attention); }
