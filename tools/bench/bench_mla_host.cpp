// attnjit-bench --startup's MLA rows: the host cost of a batch_decode_mla call (a tiny problem,
// bursts of 100 calls, only the calls timed), and of its parts: the plan (validation, spec,
// splits) and the KV tensor map (encoded once: later calls over the same cache tensor find it in
// the thread's map cache, driver/tensor_map.cpp).
#include <fmt/format.h>

#include <vector>

#include "attnjit/mla.hpp"
#include "attnjit/runtime.hpp"
#include "bench_cases.hpp"
#include "bench_timing.hpp"
#include "common/device_tensor.hpp"
#include "driver/cuda_driver.hpp"
#include "ops/mla/mla_plan.hpp"
#include "runtime/kernel_registry.hpp"
#include "store/cubin_store.hpp"

namespace attnjit::bench {

int mla_host_overhead() {
  // 16 heads, one request of 256 tokens (four pages of 64): the narrow tile, no split.
  using testing::DeviceTensor;
  const int B = 1, H = 16, P = 64, pages = 4;
  DeviceTensor q(DType::kBFloat16, {B, 1, H, 576}), out(DType::kBFloat16, {B, 1, H, 512});
  DeviceTensor kv(DType::kBFloat16, {pages, P, 576}), bt(DType::kInt32, {B, pages}), sl(DType::kInt32, {B});
  DeviceTensor ws(DType::kUInt8, {1 << 20});
  q.zero(); kv.zero(); ws.zero();
  bt.upload_pod(std::vector<int>{0, 1, 2, 3});
  sl.upload_pod(std::vector<int>{pages * P});
  MlaArgs a;
  a.query = q.view; a.kv_cache = kv.view; a.out = out.view; a.block_tables = bt.view; a.seq_lens = sl.view;
  a.max_seq_len = pages * P; a.workspace_buffer = ws.view; a.bmm1_scale = 1.0f / 24.0f;
  a.backend = Backend::kTrtllmGen;
  const auto info = driver::device_caps(driver::current_device());
  const spec::Arch arch = spec::arch_for_device(info.sm_major, info.sm_minor);
  ops::MlaPlan plan = ops::plan_mla(a, arch);
  auto& registry = Runtime::global().registry();
  if (!registry.store() || !registry.store()->contains(registry.key_of(plan.spec))) {
    fmt::print("host overhead per MLA launch: {} is not in the store, skipped\n", plan.spec.name());
    return 0;
  }
  CUstream own = driver::stream_create();
  batch_decode_mla(a, own);
  driver::ctx_sync();
  const double call_us = host_us_per_call([&] { batch_decode_mla(a, own); });
  const double plan_us = host_us_per_call([&] { ops::plan_mla(a, arch); });
  const double map_us = host_us_per_call([&] { ops::mla_set_kv_map(a, plan); });
  fmt::print("host overhead per MLA launch ({}, non-blocking stream): {:.2f} us; of which planning {:.2f} us, "
             "the KV tensor map {:.2f} us (cached)\n", plan.spec.name(), call_us, plan_us, map_us);
  driver::ctx_sync();
  driver::stream_destroy(own);
  return 0;
}

}  // namespace attnjit::bench
