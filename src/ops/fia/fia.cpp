// fused_infer_attention_score: plan -> the mla kernel for query_rope/key_rope calls
// (fia_mla.cpp), the decode kernel for the Q_S = 1 calls it serves (fia_decode.cpp),
// else one prefill launch per chunk of batches (the work list travels in the Params);
// the placeholder LSE when the flag is off.
#include "attnjit/fia.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "ops/common/launch.hpp"
#include "ops/common/prewarm.hpp"
#include "ops/common/validate.hpp"
#include "ops/fia/fia_decode.hpp"
#include "ops/fia/fia_dequant_first.hpp"
#include "ops/fia/fia_mla.hpp"
#include "ops/fia/fia_plan.hpp"
#include "ops/fia/prefill_family.hpp"
#include "ops/fia/prefill_tma.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit {

std::vector<spec::KernelSpec> ops::fia_prewarm_specs(const FiaArgs& a, const spec::Arch& arch) {
  ShapesOnlyScope shapes_only;
  if (fia_empty_inputs(a) != FiaEmpty::kNone) return {};  // the seed's empty inputs launch no kernel
  const FiaPlan plan = plan_fia(a, arch);
  if (auto m = plan_fia_mla(plan, a, arch)) return {m->spec};     // query_rope/key_rope on the mla kernel
  if (auto d = plan_fia_decode(plan, a, arch)) return {d->spec};  // Q_S = 1 on the decode kernel
  if (plan.dequant_first) return {plan.dequant_first->pass, plan.spec};
  return {plan.spec};
}

spec::KernelSpec ops::fia_prewarm_spec(const FiaArgs& a, const spec::Arch& arch) {
  const std::vector<spec::KernelSpec> specs = fia_prewarm_specs(a, arch);
  if (specs.empty()) ops::invalid("query", "a call that launches a kernel", "empty inputs (no kernel runs)");
  return specs.back();
}

// Builds every kernel of the call; returns the attention kernel's name (the last; "" for
// the seed's empty inputs, which launch none).
std::string prewarm_fused_infer_attention_score(const FiaArgs& args, const std::string& arch, Runtime* runtime) {
  Runtime& rt = runtime ? *runtime : Runtime::global();
  std::string name;
  for (const spec::KernelSpec& s : ops::fia_prewarm_specs(args, ops::prewarm_arch(arch)))
    name = ops::prewarm_spec(rt, s, arch);
  return name;
}

namespace {
// The dynamic prefill schedule's two counters: the stream's runtime scratch semaphores
// (zeroed once; the kernel's last CTA leaves them zero). Where they would have to be
// allocated during capture, the static schedule serves (null) and nothing is allocated.
unsigned* item_counter(Runtime& rt, int device, CUstream cs) {
  try {
    return rt.registry().scratch(device, 16, 2, cs).semaphores;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotPrewarmed) throw;
    return nullptr;
  }
}
}  // namespace

void fused_infer_attention_score(const FiaArgs& args, Stream stream, Runtime* runtime) {
  switch (ops::fia_empty_inputs(args)) {  // the seed's empty inputs
    case ops::FiaEmpty::kNothing: return;
    case ops::FiaEmpty::kZeroOutput: {
      driver::current_device();  // a clear error without a GPU, as for any call
      CUstream cs = reinterpret_cast<CUstream>(stream);
      const TensorView& o = args.attention_out;
      driver::memset_d8_async(reinterpret_cast<CUdeviceptr>(o.data), 0, size_t(o.numel()) * dtype_size(o.dtype), cs);
      if (ops::present(args.softmax_lse))  // rows that saw no key (+inf), or the [1] placeholder's 0
        driver::memset_d32_async(reinterpret_cast<CUdeviceptr>(args.softmax_lse.data),
                                 args.softmax_lse_flag ? 0x7f800000u : 0u,
                                 args.softmax_lse_flag ? size_t(args.softmax_lse.numel()) : 1, cs);
      return;
    }
    case ops::FiaEmpty::kNone: break;
  }
  const int device = driver::current_device();
  const driver::DeviceCaps& info = driver::device_caps(device);
  const spec::Arch arch = spec::arch_for_device(info.sm_major, info.sm_minor);
  ops::FiaPlan plan = ops::plan_fia(args, arch);
  Runtime& rt = runtime ? *runtime : Runtime::global();
  CUstream cs = reinterpret_cast<CUstream>(stream);
  if (std::optional<ops::FiaMlaPlan> mla = ops::plan_fia_mla(plan, args, arch)) {  // MLA: the mla family's kernel
    rt.registry().kernel(mla->spec, device, cs);  // a miss during capture throws with nothing queued
    if (plan.lse_placeholder)
      driver::memset_d32_async(reinterpret_cast<CUdeviceptr>(args.softmax_lse.data), 0u, 1, cs);
    return ops::launch_fia_mla(rt, *mla, device, cs);
  }
  std::optional<ops::FiaDecodePlan> decode = ops::plan_fia_decode(plan, args, arch);
  // Looked up before anything is queued: a miss during capture throws with nothing done.
  const runtime::LoadedKernel& k = rt.registry().kernel(decode ? decode->spec : plan.spec, device, cs);
  const runtime::LoadedKernel* pass =
      plan.dequant_first ? &rt.registry().kernel(plan.dequant_first->pass, device, cs) : nullptr;
  // int8 K/V (and an int8 query) dequantised first: the copies live in the stream's
  // scratch (growing it during capture throws, before anything is queued).
  PrefillParams pass_params;
  PrefillParams& p = plan.params;
  if (pass) {
    const ops::FiaDequantFirst& f = *plan.dequant_first;
    void* copies = rt.registry().scratch(device, f.k_bytes + f.v_bytes + f.q_bytes, 2, cs).workspace;
    ops::fia_dequant_params(plan, copies, pass_params, p);
  }
  if (plan.lse_placeholder)  // the seed's [1] tensor holding 0 (0.0f is all-zero bits)
    driver::memset_d32_async(reinterpret_cast<CUdeviceptr>(args.softmax_lse.data), 0u, 1, cs);
  if (decode) return ops::launch_fia_decode(rt, *decode, device, cs);  // Q_S = 1: split-KV decode kernel
  ops::prefill_set_kv_maps(plan, args, p);
  for (int first = 0; first < plan.batch; first += kPrefillMaxBatches) {
    const int count = std::min(kPrefillMaxBatches, plan.batch - first);
    const int tiles = ops::fia_fill_work(plan, args, first, count, p);
    if (tiles == 0) continue;
    if (pass) {  // the chunk's K/V rows, then its attention (stream order)
      std::copy(p.batches, p.batches + count, pass_params.batches);
      pass_params.num_batches = p.num_batches;
      pass_params.first_batch = p.first_batch;
      ops::launch_kernel(*pass, ops::fia_dequant_grid(plan, p), cs, false, pass_params);
    }
    p.tiles = tiles;
    p.kv_heads = plan.num_kv_heads;
    const ops::PrefillSchedule sch = ops::prefill_schedule(plan, tiles, info.sm_count);
    p.item_counter = sch.dynamic ? item_counter(rt, device, cs) : nullptr;
    ops::launch_kernel(k, sch.grid, cs, false, p);
  }
}

}  // namespace attnjit
