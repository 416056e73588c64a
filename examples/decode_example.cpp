// decode_example: a host program that uses attnjit through its public headers only.
// It sizes an xqa workspace, then runs single_decode_with_kv_cache on a GPU, or
// reports cleanly (exit 0) that there is no GPU to launch on.
#include <attnjit/decode.hpp>
#include <attnjit/error.hpp>
#include <attnjit/runtime.hpp>
#include <attnjit/version.hpp>
#include <attnjit/xqa.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
}

float from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void* device_copy(const std::vector<uint16_t>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, host.size() * 2) != cudaSuccess) return nullptr;
  cudaMemcpy(p, host.data(), host.size() * 2, cudaMemcpyHostToDevice);
  return p;
}

}  // namespace

int main() {
  // Llama-3-8B's attention shape: 32 query heads, 8 KV heads, head_dim 128.
  const int heads = 32, kv_heads = 8, head_dim = 128, kv_len = 2048;

  // The runtime owns the kernel registry and the on-disk cubin store.
  attnjit::Runtime& rt = attnjit::Runtime::global();
  std::printf("attnjit cache: %s\n", rt.stats().cache_path.c_str());

  // xqa takes caller-owned scratch: size it once for the largest batch you serve.
  const size_t ws = attnjit::xqa_workspace_bytes(/*batch=*/64, kv_heads, heads / kv_heads, /*q_seq_len=*/1,
                                                 head_dim, /*max_seq_len=*/32768, /*sm_count=*/132);
  const size_t sems = attnjit::xqa_semaphore_count(64, kv_heads, heads / kv_heads, 1);
  std::printf("xqa scratch for batch 64, 32k tokens: %zu workspace bytes, %zu semaphores\n", ws, sems);

  // Prewarm before serving (or before CUDA-graph capture): shapes and dtypes only,
  // no data and no GPU needed when the arch is named.
  attnjit::TensorView pq, pk, pv, pout;
  pq.dtype = pk.dtype = pv.dtype = pout.dtype = attnjit::DType::kBFloat16;
  pq.rank = pout.rank = 2;
  pq.shape[0] = pout.shape[0] = heads;
  pq.shape[1] = pout.shape[1] = head_dim;
  pq.stride[0] = pout.stride[0] = head_dim;
  pq.stride[1] = pout.stride[1] = 1;
  pk.rank = pv.rank = 3;
  pk.shape[0] = pv.shape[0] = kv_len;
  pk.shape[1] = pv.shape[1] = kv_heads;
  pk.shape[2] = pv.shape[2] = head_dim;
  pk.stride[0] = pv.stride[0] = int64_t(kv_heads) * head_dim;
  pk.stride[1] = pv.stride[1] = head_dim;
  pk.stride[2] = pv.stride[2] = 1;
  std::printf("prewarmed %s\n",
              attnjit::prewarm_single_decode_with_kv_cache(pq, pk, pv, pout, {}, nullptr, "sm_90a").c_str());
  std::printf("attnjit %s\n", attnjit::version());

  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("no GPU to launch on (%s); `attnjit prewarm` can still fill the cache here\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "no device");
    return 0;
  }

  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = to_bf16(dist(rng));
    return v;
  };
  const auto hq = random(size_t(heads) * head_dim);
  const auto hk = random(size_t(kv_len) * kv_heads * head_dim);
  const auto hv = random(size_t(kv_len) * kv_heads * head_dim);
  void* q = device_copy(hq);
  void* k = device_copy(hk);
  void* v = device_copy(hv);
  void* out = device_copy(std::vector<uint16_t>(hq.size()));
  if (!q || !k || !v || !out) {
    std::printf("cudaMalloc failed\n");
    return 1;
  }

  using attnjit::DType;
  using attnjit::TensorView;
  const auto tq = TensorView::contiguous(q, DType::kBFloat16, {heads, head_dim});
  const auto tk = TensorView::contiguous(k, DType::kBFloat16, {kv_len, kv_heads, head_dim});  // NHD
  const auto tv = TensorView::contiguous(v, DType::kBFloat16, {kv_len, kv_heads, head_dim});
  const auto to = TensorView::contiguous(out, DType::kBFloat16, {heads, head_dim});
  try {
    attnjit::single_decode_with_kv_cache(tq, tk, tv, to);  // first call: compile or store hit
    attnjit::single_decode_with_kv_cache(tq, tk, tv, to);  // later calls: a lookup and a launch
  } catch (const attnjit::Error& e) {
    if (e.code() == attnjit::ErrorCode::kNoDevice) {
      std::printf("no GPU to launch on: %s\n", e.what());
      return 0;
    }
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  cudaDeviceSynchronize();
  std::vector<uint16_t> hout(hq.size());
  cudaMemcpy(hout.data(), out, hout.size() * 2, cudaMemcpyDeviceToHost);

  // Check query head 0 (KV head 0) against a double-precision reference.
  std::vector<double> p(kv_len), ref(head_dim, 0.0);
  double mx = -1e300, den = 0;
  for (int t = 0; t < kv_len; ++t) {
    double s = 0;
    for (int d = 0; d < head_dim; ++d) s += from_bf16(hq[d]) * from_bf16(hk[size_t(t) * kv_heads * head_dim + d]);
    p[t] = s / std::sqrt(double(head_dim));
    mx = std::max(mx, p[t]);
  }
  for (int t = 0; t < kv_len; ++t) den += (p[t] = std::exp(p[t] - mx));
  for (int t = 0; t < kv_len; ++t)
    for (int d = 0; d < head_dim; ++d) ref[d] += p[t] / den * from_bf16(hv[size_t(t) * kv_heads * head_dim + d]);
  double max_err = 0;
  for (int d = 0; d < head_dim; ++d) max_err = std::max(max_err, std::abs(from_bf16(hout[d]) - ref[d]));

  const attnjit::RuntimeStats st = rt.stats();
  std::printf("single_decode_with_kv_cache: head 0 max abs error %.2e vs float64; %lld compiles, %lld store hits\n",
              max_err, static_cast<long long>(st.compiles), static_cast<long long>(st.store_hits));
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(out);
  return max_err < 2e-2 ? 0 : 1;
}
