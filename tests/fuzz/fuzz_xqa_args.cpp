// libFuzzer target: xqa's argument validation (ops::plan_xqa), as xqa() runs it and
// as prewarm_xqa runs it (shapes only: data may be null). Every input plans a launch
// whose shapes hold together or is refused with an Error naming the argument.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_op_input.hpp"
#include "ops/common/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnjit;
  namespace fz = attnjit::fuzz;
  using testing::fake;
  FuzzedDataProvider bytes(data, size);
  fz::OpInput in(bytes);
  const bool shapes_only = in.coin();
  const int q_seq_len = in.coin() ? 1 + in.below(40) : 1;
  XqaArgs a = testing::valid_xqa(in.coin() ? KvLayout::kNHD : KvLayout::kHND, q_seq_len);
  if (in.coin()) a.workspace_buffer = TensorView::contiguous(fake(0x800000), DType::kUInt8, {1 << 20});
  if (in.coin()) a.semaphores = TensorView::contiguous(fake(0x810000), DType::kUInt32, {64});
  if (in.coin()) a.sinks = TensorView::contiguous(fake(0x820000), DType::kFloat32, {testing::kKvHeads, testing::kGroup});
  for (int e = 0; e < 8 && in.more(); ++e) {
    switch (in.below(21)) {
      case 0: in.tensor(a.q); break;
      case 1: in.tensor(a.k_cache); break;
      case 2: in.tensor(a.v_cache); break;
      case 3: in.tensor(a.page_table); break;
      case 4: in.tensor(a.seq_lens); break;
      case 5: in.tensor(a.output); break;
      case 6: in.tensor(a.workspace_buffer); break;
      case 7: in.tensor(a.semaphores); break;
      case 8: in.tensor(a.sinks); break;
      case 9: in.tensor(a.mask); break;
      case 10: in.tensor(a.q_cu_seq_lens); break;
      case 11: a.num_kv_heads = in.any_int(); break;
      case 12: a.page_size = in.any_int(); break;
      case 13: a.q_seq_len = in.any_int(); break;
      case 14: a.sliding_win_size = in.any_int(); break;
      case 15: a.rcp_out_scale = in.scalar(); break;
      case 16: a.q_scale = in.coin() ? ScaleArg(in.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
      case 17: a.kv_scale = in.coin() ? ScaleArg(in.scalar()) : ScaleArg(static_cast<const float*>(fake(0x830000))); break;
      case 18: a.sm_count = in.any_int(); break;
      case 19: a.enable_pdl = in.coin(); break;
      default:
        if (in.coin()) a.kv_layout = in.any_enum<KvLayout>(2);
        else a.backend = in.any_enum<Backend>(3);
    }
  }
  const spec::Arch arch = in.coin() ? testing::kPlanArch : spec::Arch::parse(in.coin() ? "sm_100a" : "sm_80");
  ops::XqaPlan plan;
  const bool ok = fz::planned([&] {
    if (shapes_only) {
      ops::ShapesOnlyScope scope;
      plan = ops::plan_xqa(a, arch);
    } else {
      plan = ops::plan_xqa(a, arch);
    }
  });
  if (!ok) return 0;
  for (const TensorView* t : {&a.q, &a.k_cache, &a.v_cache, &a.page_table, &a.seq_lens, &a.output})
    fz::require_well_formed(*t, shapes_only);
  fz::check(a.kv_layout == KvLayout::kNHD || a.kv_layout == KvLayout::kHND, "accepted an unknown layout");
  const ops::DecodeShape& s = plan.shape;
  fz::check(s.batch >= 1 && s.num_kv_heads >= 1 && s.q_seq_len >= 1, "accepted an empty shape");
  fz::check(s.group >= 1 && s.group <= 64, "accepted a head group ratio out of range", std::to_string(s.group));
  fz::check(s.head_dim >= 16 && s.head_dim % 16 == 0, "accepted a head_dim", std::to_string(s.head_dim));
  fz::check(s.max_seq_len >= a.page_size, "max_seq_len below one page");
  fz::check(plan.params.pages_per_seq >= 1, "no pages per sequence");
  return 0;
}
