// libFuzzer target: single_decode_with_kv_cache's argument validation
// (ops::plan_single_decode), as the op runs it and as its prewarm runs it (shapes
// only). Every input plans a launch with finite positive scales and a non-empty
// shape, or is refused with an Error naming the argument.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_op_input.hpp"
#include "ops/common/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attnjit;
  namespace fz = attnjit::fuzz;
  FuzzedDataProvider bytes(data, size);
  fz::OpInput in(bytes);
  const bool shapes_only = in.coin();
  testing::SingleDecodeCall c = testing::valid_single(in.coin() ? KvLayout::kNHD : KvLayout::kHND);
  c.with_lse = in.coin();
  for (int e = 0; e < 8 && in.more(); ++e) {
    switch (in.below(18)) {
      case 0: in.tensor(c.q); break;
      case 1: in.tensor(c.k); break;
      case 2: in.tensor(c.v); break;
      case 3: in.tensor(c.out); break;
      case 4: in.tensor(c.lse); break;
      case 5: c.o.q_scale = in.scalar(); break;
      case 6: c.o.k_scale = in.scalar(); break;
      case 7: c.o.v_scale = in.scalar(); break;
      case 8: c.o.window_left = in.any_int(); break;
      case 9: c.o.logits_soft_cap = in.scalar(); break;
      case 10: c.o.sm_scale = in.scalar(); break;
      case 11: c.o.rope_scale = in.scalar(); break;
      case 12: c.o.rope_theta = in.scalar(); break;
      case 13: c.o.pos_encoding_mode = in.any_enum<PosEncodingMode>(3); break;
      case 14: c.o.kv_layout = in.any_enum<KvLayout>(2); break;
      case 15: c.o.use_tensor_cores = in.coin(); break;
      case 16: c.o.enable_pdl = in.coin(); break;
      default: c.o.backend = in.any_enum<Backend>(3);
    }
  }
  ops::SingleDecodePlan plan;
  const bool ok = fz::planned([&] {
    if (shapes_only) {
      ops::ShapesOnlyScope scope;
      plan = c.plan();
    } else {
      plan = c.plan();
    }
  });
  if (!ok) return 0;
  for (const TensorView* t : {&c.q, &c.k, &c.v, &c.out}) fz::require_well_formed(*t, shapes_only);
  if (c.with_lse) fz::require_well_formed(c.lse, shapes_only);
  fz::check(c.o.kv_layout == KvLayout::kNHD || c.o.kv_layout == KvLayout::kHND, "accepted an unknown layout");
  fz::check(c.o.pos_encoding_mode == PosEncodingMode::kNone || c.o.pos_encoding_mode == PosEncodingMode::kRopeLlama ||
                c.o.pos_encoding_mode == PosEncodingMode::kAlibi,
            "accepted an unknown pos encoding");
  const DecodeParams& p = plan.params;
  const struct {
    const char* name;
    float value;
  } scales[] = {{"sm_scale", p.sm_scale}, {"q_scale", p.q_scale}, {"k_scale", p.k_scale}, {"v_scale", p.v_scale},
                {"rope_rcp_scale", p.rope_rcp_scale}, {"rope_rcp_theta", p.rope_rcp_theta}};
  for (const auto& s : scales)
    fz::check(std::isfinite(s.value) && s.value > 0.f, "accepted a scale that poisons the output",
              std::string(s.name) + " = " + std::to_string(s.value) + " from options sm_scale " +
                  (c.o.sm_scale ? std::to_string(*c.o.sm_scale) : "default") + ", rope_scale " +
                  std::to_string(c.o.rope_scale) + ", rope_theta " + std::to_string(c.o.rope_theta) +
                  ", q/k/v scales " + std::to_string(c.o.q_scale) + "/" + std::to_string(c.o.k_scale) + "/" +
                  std::to_string(c.o.v_scale) + ", head_dim " + std::to_string(c.q.shape[c.q.rank - 1]));
  fz::check(std::isfinite(p.soft_cap) && p.soft_cap >= 0.f, "accepted a soft cap", std::to_string(p.soft_cap));
  fz::check(plan.shape.num_kv_heads >= 1 && plan.shape.group >= 1 && plan.shape.max_seq_len >= 1,
            "accepted an empty shape");
  return 0;
}
