// The mla family: can_implement, the generator and its tiling, the backend table,
// and the family's registration (its line is in src/spec/families.def).
#include "ops/mla/mla_family.hpp"

#include <fmt/format.h>

#include <iterator>

#include "attnjit/error.hpp"
#include "mla/mla_params.cuh"
#include "render/renderer.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

namespace {
constexpr uint32_t kMlaFeatures = spec::feature::kSinks | spec::feature::kReturnLse | spec::feature::kScalePointers |
                                   spec::feature::kSplitRope | spec::feature::kNarrowTile | spec::feature::kNarrow32 |
                                   spec::feature::kTile32 | spec::feature::kFlat;
}  // namespace

MlaTiling mla_tiling(const spec::KernelSpec& s) {
  MlaTiling t;
  t.smem_limit = render::max_smem_per_block(s.arch);
  if (s.backend == spec::Backend::kTrtllmGen) {
    // MlaHopperTraits: two math warpgroups; 64 rows, Q and the KV buffers of 576 dims (9
    // swizzled column blocks each), A's P (B's sits in Q's rope block), the row statistics
    // (mla_wide_smem_bytes; fp8 lands inside the buffers).
    t.hopper = true;
    t.warps = 8;
    t.tile = mla_const::kHopperTile;
    t.stages = 2;
    // The narrow tile (<= 16 or 32 rows in wgmma's N): its ring (below).
    t.rows = s.has(spec::feature::kNarrow32)     ? mla_const::kNarrow32Rows
             : s.has(spec::feature::kNarrowTile) ? mla_const::kNarrowRows
                                                 : mla_const::kHopperRows;
    t.kv_row_bytes = mla_const::kHeadDimQk * 2;  // (as widened: fp8 lands in the same buffers)
    t.kv_elem_bytes = static_cast<int>(dtype_size(s.kv_dtype));
    if (t.rows != mla_const::kHopperRows) {
      // The narrow tile: a producer warpgroup beside the two math ones and a ring of 64 x 64
      // blocks in the rest of the 227 KB (mla_hopper_narrow_ring.cuh, mla_params.cuh).
      t.warps = mla_const::kRingThreads / 32;
      t.ring_slots = mla_ring_slots(t.rows, t.kv_elem_bytes);
      t.smem_bytes = mla_ring_smem_bytes(t.rows, t.kv_elem_bytes);
    } else {
      // 64-token tiles in two buffers, or (tile32) 32-token tiles in four: the same bytes.
      if (s.has(spec::feature::kTile32)) t.tile = mla_const::kHopperTile32;
      t.flat = s.has(spec::feature::kFlat);
      t.stages = mla_wide_buffers(t.tile);
      t.smem_bytes = mla_wide_smem_bytes(t.tile, s.mask == spec::MaskMode::kCustom);
    }
    return t;
  }
  const int q_row_bytes = mla_const::kHeadDimQk * 2 + 16;  // MlaTraits::kQRowBytes (Q as 16-bit MMA operands)
  t.kv_elem_bytes = static_cast<int>(dtype_size(s.kv_dtype));
  t.kv_row_bytes = mla_const::kHeadDimQk * t.kv_elem_bytes + 16;  // MlaTraits::kKvRowBytes
  // 16-bit KV, two stages: one 36 KB tile lands while the other is computed, and the
  // CTA (~96 KB) fits the 99 KB of sm_86/89/120; sm_80/90 then hold two CTAs per SM.
  // fp8 KV: 18 KB tiles, so four stages keep the same bytes in flight in the same space.
  // ATTNJIT_MLA_STAGES (2 to 8) overrides it for tuning: it changes the rendered Traits, so the
  // cache key follows; a depth the arch cannot hold is refused by can_implement.
  t.stages = util::env_knob("ATTNJIT_MLA_STAGES", 2, 8).value_or(t.kv_elem_bytes == 1 ? 4 : 2);
  t.smem_bytes = t.rows * q_row_bytes + t.stages * t.tile * t.kv_row_bytes + t.rows * (t.tile + 4) * 4 +
                 t.stages * t.tile * 4 + 16;
  return t;
}

bool mla_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why) {
  auto refuse = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  if (s.backend == spec::Backend::kTrtllmGen) {
    if (arch.sm != 90 || !arch.arch_specific)
      return refuse([&] { return fmt::format("the trtllm-gen mla kernel is sm_90a (wgmma), not {}", arch.str()); });
    if (s.has(spec::feature::kSplitRope))
      return refuse([] { return std::string("splitrope (FIA's query_rope/key_rope) is the xqa mla kernel's"); });
    if (s.has(spec::feature::kNarrow32) && s.has(spec::feature::kNarrowTile))
      return refuse([] { return std::string("narrow and narrow32 are two tiles: one of them"); });
    if (s.has(spec::feature::kNarrow32) && s.kv_dtype == DType::kFloat8E4M3)
      return refuse([] { return std::string("narrow32 takes 16-bit KV (fp8 KV: the 16-row narrow tile or the wide one)"); });
    if (s.has(spec::feature::kTile32) &&
        (s.has(spec::feature::kNarrowTile | spec::feature::kNarrow32) || s.kv_dtype == DType::kFloat8E4M3 ||
         s.mask != spec::MaskMode::kCausal))
      return refuse([] { return std::string("tile32 is the wide tile's, with dense (causal) 16-bit KV"); });
    if (s.has(spec::feature::kFlat) &&
        (s.has(spec::feature::kNarrowTile | spec::feature::kNarrow32) || s.mask != spec::MaskMode::kCausal))
      return refuse([] { return std::string("flat is the wide tile's schedule, with dense (causal) KV"); });
  } else if (s.has(spec::feature::kNarrowTile | spec::feature::kNarrow32 | spec::feature::kTile32 | spec::feature::kFlat)) {
    return refuse([] { return std::string("narrow, narrow32, tile32 and flat are tiles of the trtllm-gen mla kernel"); });
  }
  if (arch.sm < 80) return refuse([] { return std::string("the mla templates need sm_80 or newer (mma.sync bf16, cp.async)"); });
  if (s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16 && s.q_dtype != DType::kFloat8E4M3)
    return refuse([&] { return fmt::format("query dtype {}: the mla templates take bf16, fp16 or fp8_e4m3 queries", dtype_name(s.q_dtype)); });
  if (s.kv_dtype != s.q_dtype && s.kv_dtype != DType::kFloat8E4M3)
    return refuse([&] { return fmt::format("kv_cache dtype {}: the query's ({}) or fp8_e4m3", dtype_name(s.kv_dtype), dtype_name(s.q_dtype)); });
  if (s.out_dtype != mla_out_dtype(s.q_dtype))
    return refuse([&] { return fmt::format("out dtype {}: mla writes {} for a {} query", dtype_name(s.out_dtype),
                                           dtype_name(mla_out_dtype(s.q_dtype)), dtype_name(s.q_dtype)); });
  if (s.head_dim_qk != mla_const::kHeadDimQk || s.head_dim_vo != mla_const::kHeadDimVo)
    return refuse([&] { return fmt::format("head dims {}/{}: mla kernels are 576/512", s.head_dim_qk, s.head_dim_vo); });
  if (s.group_size != 1) return refuse([&] { return fmt::format("group_size {}: mla specs use 1 (heads are a launch parameter)", s.group_size); });
  if (s.page_size != 16 && s.page_size != 32 && s.page_size != 64 && s.page_size != 128)
    return refuse([&] { return fmt::format("page_size {}: 16, 32, 64 or 128", s.page_size); });
  if (s.layout != spec::KvLayout::kNHD) return refuse([] { return std::string("mla caches are [pages, page_size, 576] (nhd)"); });
  if (s.mask != spec::MaskMode::kCausal && s.mask != spec::MaskMode::kCustom)
    return refuse([] { return std::string("mla masks are causal (dense) or custom (sparse indices)"); });
  if (s.pos_encoding != spec::PosEncoding::kNone) return refuse([] { return std::string("mla applies no positional encoding (RoPE is in the 64 rope dims)"); });
  if (s.features & ~kMlaFeatures) return refuse([&] { return fmt::format("feature bits {:#x}: mla takes sinks, lse, scaleptr, splitrope, narrow, narrow32, tile32 and flat", s.features); });
  if (s.has(spec::feature::kSplitRope) &&
      (s.kv_dtype != s.q_dtype || s.q_dtype == DType::kFloat8E4M3 || s.mask != spec::MaskMode::kCausal))
    return refuse([] { return std::string("splitrope (FIA's query_rope/key_rope) is dense (causal) with 16-bit Q and KV of one dtype"); });
  spec::KernelSpec on_arch = s;
  on_arch.arch = arch;
  const MlaTiling t = mla_tiling(on_arch);
  if (t.smem_bytes > t.smem_limit)
    return refuse([&] { return fmt::format("needs {} bytes of shared memory per block, {} allows {}", t.smem_bytes, arch.str(), t.smem_limit); });
  return true;
}

render::RenderedUnit mla_generate(const spec::KernelSpec& s) {
  const MlaTiling t = mla_tiling(s);
  render::RenderedUnit u;
  u.launch.threads = t.warps * 32;
  u.launch.smem_bytes = t.smem_bytes;
  u.launch.min_blocks_per_sm = t.min_blocks;
  u.launch.split_granule = t.tile;
  u.entry = "attnjit_mla_decode";
  u.smem_symbol = "attnjit_smem_bytes";
  // The two kernels differ in their header, traits and entry struct (and the wgmma one's
  // 1024-aligned shared memory for its swizzled tiles); the rest of the unit is one text.
  const std::string sparse = s.mask == spec::MaskMode::kCustom ? "true" : "false";
  const char* q = render::device_type(s.q_dtype, "mla");
  const char* kv = render::device_type(s.kv_dtype, "mla");
  const char* o = render::device_type(s.out_dtype, "mla");
  const std::string traits =
      t.hopper ? fmt::format("MlaHopperTraits<{}, {}, {}, {}, {}, {}u>", q, kv, o, s.page_size, sparse, s.features)
               : fmt::format("MlaTraits<{}, {}, {}, {}, {}, {}u, {}>", q, kv, o, s.page_size, sparse, s.features,
                             t.stages);
  u.source = fmt::format(
      "// attnjit {name}\n"
      "#include \"mla/{header}\"\n"
      "using Traits = attnjit::{traits};\n"
      "static_assert(Traits::kSmemBytes == {expected}, \"host and kernel disagree on shared memory\");\n"
      "static_assert(Traits::kThreads == {threads} && Traits::kMinBlocks == {min_blocks} && Traits::kTile == {tile}, "
      "\"host and kernel disagree on launch metadata\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::MlaParams params) {{\n"
      "  extern __shared__ __align__({align}) unsigned char smem[];\n"
      "  attnjit::{kernel}<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()), fmt::arg("header", t.hopper ? "mla_hopper.cuh" : "mla_decode.cuh"),
      fmt::arg("traits", traits), fmt::arg("expected", t.smem_bytes), fmt::arg("threads", u.launch.threads),
      fmt::arg("min_blocks", t.min_blocks), fmt::arg("tile", t.tile), fmt::arg("smem", u.smem_symbol),
      fmt::arg("entry", u.entry), fmt::arg("align", t.hopper ? 1024 : 16),
      fmt::arg("kernel", t.hopper ? "MlaHopper" : "MlaDecode"));
  return u;
}

namespace {
// Backend rows: the MLA seed's (render::kMlaSeedBackendRows). The wgmma kernel has run
// correctly on the H200 (MlaGpuHopper); sm_100/103 have no tcgen05 kernel, so xqa serves there.
constexpr render::VerifiedBackend kVerified[] = {{spec::Backend::kXqa, 0}, {spec::Backend::kTrtllmGen, 90}};

// sm_90a: the wgmma kernel wherever it serves the spec: 16-bit Q and KV (with its splits
// merged by the combine launch it was 1.2-5.7x xqa at every measured shape, one short
// request to B128: docs/PERFORMANCE.md, fifteenth session) and fp8 KV (1.4-5.0x xqa at
// every measured dense shape, twenty-sixth session). xqa for FIA's split rope.
spec::Backend measured_faster(const spec::KernelSpec& s, const char** why) {
  spec::KernelSpec h = s;
  h.backend = spec::Backend::kTrtllmGen;
  const bool ok = mla_can_implement(h, s.arch, nullptr);
  if (why)
    *why = ok ? (s.kv_dtype == DType::kFloat8E4M3 ? "the wgmma kernel: 1.4-5.0x xqa at every measured fp8 shape"
                                                  : "the wgmma kernel: 1.2-5.7x xqa at every measured shape")
              : "xqa: the wgmma kernel does not serve this spec";
  return ok ? spec::Backend::kTrtllmGen : spec::Backend::kXqa;
}

const render::BackendTable kTable = {render::kMlaSeedBackendRows, std::size(render::kMlaSeedBackendRows), kVerified,
                                     std::size(kVerified), measured_faster};
}  // namespace

const render::BackendTable& mla_backend_table() { return kTable; }

namespace mla {
const render::Family& family() {
  static const render::Family f = {spec::OpFamily::kMla, mla_can_implement, mla_generate, &mla_backend_table(),
                                   "mla/mla_params.cuh", sizeof(MlaParams)};
  return f;
}
}  // namespace mla

}  // namespace attnjit::ops
