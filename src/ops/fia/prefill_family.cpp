// The prefill family (FIA's kernels): can_implement, the tiling shared with the
// generator, the generator, the backend table and the registration.
#include "ops/fia/prefill_family.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "attnjit/error.hpp"
#include "prefill/prefill_params.cuh"
#include "render/renderer.hpp"
#include "util/env_knob.hpp"

namespace attnjit::ops {

namespace {

// Quantised K/V values per byte (int8 1, int4 packed in int32 2); 0: not quantised.
int kv_quant_div(DType kv) { return kv == DType::kInt8 ? 1 : kv == DType::kInt32 ? 2 : 0; }
int smem_for(int hd_qk, int hd_vo, int kv_tile, int quant_div) {
  // PrefillTraits::kSmemBytes: the Q tile and two K/V stages, rows padded by 8
  // elements; quantised K/V: two stages of raw rows, one 16-bit stage, the channels' and rows' scales.
  const int raw = quant_div ? 2 * kv_tile * (hd_qk + hd_vo) / quant_div + (hd_qk + hd_vo + 2 * kv_tile) * 8 : 0;
  return kPrefillRows * (hd_qk + 8) * 2 + (quant_div ? 1 : 2) * kv_tile * ((hd_qk + 8) * 2 + (hd_vo + 8) * 2) + raw;
}
// PrefillHopperTraits::kSmemBytes: alignment slack, two consumers' Q, the stages, int8 K/V's
// two raw slots and dims' table (kRawBytes), the mbarriers (full and empty, K's and V's),
// the item ring (4 slots).
int hopper_smem_for(int hd_qk, int hd_vo, int kv_tile, int stages, bool int8_kv) {
  const int raw = int8_kv ? 2 * (kv_tile * (hd_qk + hd_vo) + kv_tile * 16) + (hd_qk + hd_vo) * 8 : 0;
  // (the swizzle's slack, both consumers' Q, the stages, int8's raw slots, the stage and item
  // mbarriers, the item ids, the two Q mbarriers: PrefillHopperTraits::kSmemBytes)
  return 1024 + 2 * 64 * hd_qk * 2 + stages * kv_tile * (hd_qk + hd_vo) * 2 + raw + 4 * stages * 8 + 4 * (2 * 8 + 4) + 16;
}
bool is_hopper(const spec::KernelSpec& s) { return s.backend == spec::Backend::kTrtllmGen; }
}  // namespace

unsigned prefill_ext_bits(const spec::KernelSpec& s) {
  return (s.has(spec::feature::kLeftPad) ? prefill_ext::kLeftPad : 0u) |
         (s.has(spec::feature::kSharedPrefix) ? prefill_ext::kPrefix : 0u) |
         (s.out_dtype == DType::kInt8 ? prefill_ext::kInt8Out : 0u) |
         (s.kv_dtype == DType::kInt8 ? prefill_ext::kKvInt8 : 0u) | (s.kv_dtype == DType::kInt32 ? prefill_ext::kKvInt4 : 0u) |
         (s.q_dtype == DType::kInt8 ? prefill_ext::kQInt8 : 0u);
}

PrefillGridShape prefill_grid_shape(const spec::KernelSpec& s) {
  PrefillGridShape g;
  if (is_hopper(s)) {
    g.rows = 128;  // two consumer warpgroups of 64 rows
    return g;
  }
  // Past 256 value dims O no longer fits a warp's registers: two CTAs take half the
  // value dims each, both scoring the whole q.k.
  g.dv_chunks = s.head_dim_vo > 256 ? 2 : 1;
  return g;
}

int prefill_persistent_mode(const spec::KernelSpec& s) {
  // Measured in one H200 call (PERFORMANCE.md, eighth session): the static wave wins without
  // a band (B16·S2K 546 against 502 dynamic), the dynamic one under a band (B16·S2K causal
  // 436 against 392 per item and 411 static; D256 causal 380 against 375 and 319).
  const bool band = s.mask != spec::MaskMode::kNone;
  return util::env_knob("ATTNJIT_PREFILL_PERSISTENT", 0, 2, "0, 1 or 2").value_or(band ? 2 : 1);
}

bool prefill_tma_capable(const spec::KernelSpec& s) {
  // [prefix | own KV] and raw int8 rows (the dequantising producer) are gathered; paged K/V
  // goes by TMA where a block holds whole tiles (prefill_set_kv_maps, prefill_tiling).
  return is_hopper(s) && !s.has(spec::feature::kSharedPrefix) && s.kv_dtype == s.q_dtype;
}

PrefillSchedule prefill_schedule(const FiaPlan& plan, int tiles, int sm_count) {
  PrefillSchedule sch;
  Grid& g = sch.grid;
  if (!is_hopper(plan.spec)) {
    g.x = static_cast<unsigned>(tiles);
    g.y = static_cast<unsigned>(plan.num_kv_heads);
    g.z = static_cast<unsigned>(plan.dv_chunks);
    return sch;
  }
  const long long items = 1LL * tiles * plan.num_kv_heads;
  long long ctas = items;
  const bool band = plan.spec.mask != spec::MaskMode::kNone;
  const int mode = prefill_persistent_mode(plan.spec);
  if (mode > 0 && sm_count > 0) {
    // A static wave under a band takes an odd count, so that a CTA's items c, c + grid,
    // ... cycle through each batch's heavy-first tiles instead of repeating a few.
    const bool odd = mode == 1 && band && sm_count > 1;
    ctas = std::min<long long>(items, odd ? (sm_count - 1) | 1 : sm_count);
    sch.dynamic = mode == 2 && ctas < items;
  }
  // A cap for tests: few CTAs walk many items each.
  if (const auto cap = util::env_knob("ATTNJIT_PREFILL_CTAS", 1, 1 << 30, "a CTA count from 1"))
    if (*cap < ctas) ctas = *cap, sch.dynamic = mode == 2;
  g.x = static_cast<unsigned>(ctas);
  return sch;
}

PrefillTiling prefill_tiling(const spec::KernelSpec& s) {
  PrefillTiling t;
  t.smem_limit = render::max_smem_per_block(s.arch);
  if (s.has(spec::feature::kDequantPass)) {  // PrefillDequantPassTraits: 64-token tiles, 256 threads
    t.dequant_pass = true;
    t.threads = 256;
    t.stages = 1;
    t.dv_chunk = s.head_dim_vo;
    t.smem_bytes = (s.head_dim_qk + s.head_dim_vo + 2 * t.kv_tile) * 8;
    return t;
  }
  const PrefillGridShape g = prefill_grid_shape(s);
  t.rows = g.rows;
  t.dv_chunks = g.dv_chunks;
  t.dv_chunk = s.head_dim_vo / t.dv_chunks;
  const int widest = std::max(s.head_dim_qk, s.head_dim_vo);
  if (is_hopper(s)) {
    // Two consumer warpgroups of 64 rows and a producer; S (kv_tile / 2 registers)
    // and O (head_dim_vo / 2) live in a consumer's registers, so 128-token tiles up
    // to head dim 128. As many stages as shared memory holds, at most 4.
    t.hopper = true;
    t.threads = 384;
    // A mask tensor or pse keeps four more row pointers live: 64-token tiles there.
    const bool row_pointers = s.mask == spec::MaskMode::kCustom || s.has(spec::feature::kPse);
    // int8 K/V: 64-token tiles, so that the raw slots leave room for four stages.
    const bool int8_kv = s.kv_dtype == DType::kInt8;
    t.kv_tile = widest > 128 || row_pointers || int8_kv ? 64 : 128;
    // Measured on the H200 (PERFORMANCE.md, sixteenth session), with K and V released
    // apart: head dim 256 at 80 tokens (two stages) 610 -> 645-704 TFLOP/s without a band,
    // even with one (508-527 in one call); head dim 64 at 192 (four stages) 410-412 ->
    // 421-429; head dim 128 stays at 128 (160 and 176 within 2% at S 8K, 7-10% slower at S 2K).
    if (!row_pointers && !int8_kv) {
      if (widest == 256) t.kv_tile = 80;
      if (widest <= 64) t.kv_tile = 192;
    }
    // A tuning knob (it changes the rendered Traits, so the cache key follows it): the
    // KV tile's tokens, the N of the S wgmma (the sizes templates/common/wgmma.cuh has).
    if (const auto tile = util::env_knob("ATTNJIT_PREFILL_KV_TILE", 64, 256, "64, 80, 96, 128, 160, 176, 192 or 256")) {
      if (*tile % 16 != 0 || *tile == 112 || *tile == 144 || *tile == 208 || *tile == 224 || *tile == 240)
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("ATTNJIT_PREFILL_KV_TILE={}: expected 64, 80, 96, 128, 160, 176, 192 or 256", *tile));
      t.kv_tile = *tile;
    }
    t.stages = 2;
    while (t.stages < 4 &&
           hopper_smem_for(s.head_dim_qk, s.head_dim_vo, t.kv_tile, t.stages + 1, int8_kv) <= t.smem_limit)
      ++t.stages;
    t.smem_bytes = hopper_smem_for(s.head_dim_qk, s.head_dim_vo, t.kv_tile, t.stages, int8_kv);
    // Ping-pong (the consumers take turns at their GEMMs) pays without a band and costs
    // under one: measured on the H200 in two calls (PERFORMANCE.md, nineteenth session),
    // off gained 1-5% on every causal row and lost up to 10% on full ones (B16·S2K).
    // A tuning knob: it changes the rendered Traits, so the cache key follows it.
    const bool band = s.mask != spec::MaskMode::kNone;
    t.pingpong = util::env_knob("ATTNJIT_PREFILL_PINGPONG", 0, 1, "0 or 1").value_or(band ? 0 : 1) == 1;
    t.tma_kv = prefill_tma_capable(s) && (s.page_size == 0 || s.page_size % t.kv_tile == 0);
    return t;
  }
  // 64-token KV tiles where they fit; 32 for head dims over 128 (registers: S and O
  // both live in them) and where shared memory is 99 KB.
  const int quant = kv_quant_div(s.kv_dtype);
  // Quantised K/V past head dim 128: 16-token tiles, whose S registers make room for the
  // dequantising pass (hd 256 with a block table and a mask spilled at 32).
  t.kv_tile = widest > 128 ? (quant ? 16 : 32) : 64;
  if (smem_for(s.head_dim_qk, t.dv_chunk, t.kv_tile, quant) > t.smem_limit) t.kv_tile = 32;
  t.smem_bytes = smem_for(s.head_dim_qk, t.dv_chunk, t.kv_tile, quant);
  return t;
}

namespace {
// The dequantising pass (dqpass): int8 K/V of a Q_S > 1 call into 16-bit copies, run before
// the 16-bit attention kernel of either backend (fia_dequant_first.hpp).
bool dequant_pass_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why) {
  auto refuse = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  if (s.backend != spec::Backend::kXqa)
    return refuse([] { return std::string("dqpass is one portable kernel (backend xqa) that runs before either backend's "
                                          "attention"); });
  if (arch.sm < 80) return refuse([] { return std::string("the prefill templates need sm_80 or newer"); });
  if (s.kv_dtype != DType::kInt8)
    return refuse([&] { return fmt::format("dqpass dequantises int8 K/V (the seed has int4 at Q_S = 1 only), not {}",
                                           dtype_name(s.kv_dtype)); });
  // Copies in the query's dtype; the full int8 path's (int8 query) are fp16, as the seed's output.
  const bool int8_query = s.q_dtype == DType::kInt8 && s.out_dtype == DType::kFloat16;
  if (!int8_query && ((s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16) || s.out_dtype != s.q_dtype))
    return refuse([] { return std::string("dqpass writes fp16 or bf16 copies (the query's dtype, as out_dtype), or "
                                          "fp16 ones of an int8 query"); });
  if (s.page_size != 0 || s.mask != spec::MaskMode::kNone || s.layout != spec::KvLayout::kNHD ||
      s.pos_encoding != spec::PosEncoding::kNone || s.group_size != 1)
    return refuse([] { return std::string("dqpass reads contiguous K/V (the seed: no antiquant with page attention at "
                                          "Q_S > 1) and takes no mask, RoPE or group"); });
  if (s.features & ~(spec::feature::kDequantPass | spec::feature::kLeftPad))
    return refuse([&] { return fmt::format("feature bits {:#x}: dqpass takes leftpad only", s.features); });
  for (int hd : {s.head_dim_qk, s.head_dim_vo})
    if (hd % 16 != 0 || hd < 16 || hd > 512)
      return refuse([&] { return fmt::format("head dim {}: dqpass takes multiples of 16 up to 512", hd); });
  return true;
}

// Both prefill entries' launch metadata and symbols (the source is each one's own).
render::RenderedUnit prefill_unit(const PrefillTiling& t) {
  render::RenderedUnit u;
  u.launch.threads = t.threads;
  u.launch.smem_bytes = t.smem_bytes;
  u.launch.min_blocks_per_sm = 1;
  u.entry = "attnjit_prefill";
  u.smem_symbol = "attnjit_smem_bytes";
  return u;
}

render::RenderedUnit dequant_pass_generate(const spec::KernelSpec& s) {
  const PrefillTiling t = prefill_tiling(s);
  render::RenderedUnit u = prefill_unit(t);
  u.source = fmt::format(
      "// attnjit {name}\n"
      "#include \"prefill/prefill_dequant_pass.cuh\"\n"
      "using Traits = attnjit::PrefillDequantPassTraits<{type}, {hd_qk}, {hd_vo}, {ext}u>;\n"
      "static_assert(Traits::kSmemBytes == {smem_bytes} && Traits::kThreads == {threads} && Traits::kMinBlocks == 1, "
      "\"host and kernel disagree on launch metadata\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::PrefillParams params) {{\n"
      "  extern __shared__ __align__(16) unsigned char smem[];\n"
      "  attnjit::PrefillDequantPass<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()), fmt::arg("type", render::device_type(s.out_dtype, "prefill")),
      fmt::arg("hd_qk", s.head_dim_qk), fmt::arg("hd_vo", s.head_dim_vo), fmt::arg("ext", prefill_ext_bits(s)),
      fmt::arg("smem_bytes", t.smem_bytes), fmt::arg("threads", t.threads), fmt::arg("smem", u.smem_symbol),
      fmt::arg("entry", u.entry));
  return u;
}
}  // namespace

bool prefill_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why) {
  if (s.has(spec::feature::kDequantPass)) return dequant_pass_can_implement(s, arch, why);
  auto refuse = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  const bool kv_quant = kv_quant_div(s.kv_dtype) != 0;
  if (is_hopper(s)) {
    // int8 K/V with an fp16 query: the producer dequantises to fp16 (the seed's Q_S > 1
    // pairing of the combined scales). bf16 with int8 (per-token, Q_S > 1) and int4: portable.
    if (kv_quant && (s.kv_dtype != DType::kInt8 || s.q_dtype != DType::kFloat16))
      return refuse([&] { return fmt::format("kv dtype {} with a {} query (antiquant): the trtllm-gen prefill kernel "
                                             "dequantises int8 to fp16 only (the portable kernel serves it)",
                                             dtype_name(s.kv_dtype), dtype_name(s.q_dtype)); });
    if (arch.sm != 90 || !arch.arch_specific)
      return refuse([&] { return fmt::format("the trtllm-gen prefill kernel is sm_90a only (wgmma, setmaxnreg); {} has none",
                                             arch.str()); });
    for (int hd : {s.head_dim_qk, s.head_dim_vo})
      if (hd % 64 != 0 || hd > 256)
        return refuse([&] { return fmt::format("head dim {}: the trtllm-gen prefill kernel takes 64, 128, 192 or 256 "
                                               "(whole 128-byte swizzle blocks)", hd); });
    // O (head_dim_vo / 2 registers) and the mask and pse rows together overflow a consumer.
    if (s.head_dim_vo > 192 && s.mask == spec::MaskMode::kCustom && s.has(spec::feature::kPse))
      return refuse([&] { return fmt::format("head dim {} with both a mask tensor and pse: the wgmma kernel's consumer "
                                             "registers do not hold them (the portable kernel serves it)", s.head_dim_vo); });
  } else if (s.backend != spec::Backend::kXqa) {
    return refuse([&] { return fmt::format("backend {} has no prefill kernels", spec::to_string(s.backend)); });
  }
  if (arch.sm < 80) return refuse([] { return std::string("the prefill templates need sm_80 or newer (mma.sync bf16, cp.async)"); });
  if (s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16)
    return refuse([&] { return fmt::format("q dtype {}: the prefill templates take fp16 or bf16", dtype_name(s.q_dtype)); });
  if ((s.kv_dtype != s.q_dtype && !kv_quant) || (s.out_dtype != s.q_dtype && s.out_dtype != DType::kInt8))
    return refuse([] { return std::string("K and V take q's dtype, int8 or int4 in int32 (antiquant); the output q's "
                                          "dtype or int8 (quant_scale2)"); });
  if (kv_quant && (s.head_dim_qk % (s.kv_dtype == DType::kInt32 ? 32 : 16) != 0 ||
                   s.head_dim_vo % (s.kv_dtype == DType::kInt32 ? 32 : 16) != 0))
    return refuse([&] { return fmt::format("head dims {}/{}: quantised rows are whole 16-byte chunks", s.head_dim_qk,
                                           s.head_dim_vo); });
  if (s.head_dim_qk % 16 != 0 || s.head_dim_qk < 16 || s.head_dim_qk > 512)
    return refuse([&] { return fmt::format("head dim {}: the prefill templates need a multiple of 16 in [16, 512]",
                                           s.head_dim_qk); });
  const int hv = s.head_dim_vo;
  if (hv < 16 || hv > 512 || hv % (hv > 256 ? 32 : 16) != 0)
    return refuse([&] { return fmt::format("value head dim {}: the prefill templates need a multiple of 16 up to 256, "
                                           "or of 32 up to 512 (split in two halves)", hv); });
  if (s.group_size != 1) return refuse([] { return std::string("group_size is a runtime value for prefill (1 in the spec)"); });
  if (s.page_size != 0 && (s.page_size % 16 != 0 || s.page_size < 16 || s.page_size > 512))
    return refuse([&] { return fmt::format("page_size {}: 0 (contiguous) or a multiple of 16 up to 512", s.page_size); });
  if (s.layout != spec::KvLayout::kNHD) return refuse([] { return std::string("prefill layouts are strides: the spec says nhd"); });
  if (s.mask != spec::MaskMode::kNone && s.mask != spec::MaskMode::kCausal && s.mask != spec::MaskMode::kCustom)
    return refuse([] { return std::string("unknown mask mode"); });
  if (s.pos_encoding != spec::PosEncoding::kNone) return refuse([] { return std::string("prefill has no RoPE/ALiBi (pse_shift is a feature)"); });
  constexpr uint32_t kServed = spec::feature::kReturnLse | spec::feature::kPse | spec::feature::kLeftPad |
                               spec::feature::kSharedPrefix;
  if (s.features & ~kServed)
    return refuse([&] { return fmt::format("feature bits {:#x}: prefill serves lse, pse, leftpad and prefix only",
                                           s.features); });
  if (s.has(spec::feature::kSharedPrefix) && s.page_size != 0)
    return refuse([] { return std::string("the shared prefix is contiguous KV only (the seed: no page attention)"); });
  spec::KernelSpec on_arch = s;
  on_arch.arch = arch;
  const PrefillTiling t = prefill_tiling(on_arch);
  if (t.smem_bytes > t.smem_limit)
    return refuse([&] { return fmt::format("needs {} bytes of shared memory per block, {} allows {}", t.smem_bytes,
                                           arch.str(), t.smem_limit); });
  return true;
}

render::RenderedUnit prefill_generate(const spec::KernelSpec& s) {
  if (s.has(spec::feature::kDequantPass)) return dequant_pass_generate(s);
  const PrefillTiling t = prefill_tiling(s);
  render::RenderedUnit u = prefill_unit(t);
  // The Hopper traits take the stage count and ping-pong after the tile.
  const char* q = render::device_type(s.q_dtype, "prefill");
  const std::string traits =
      t.hopper ? fmt::format("attnjit::PrefillHopperTraits<{}, {}, {}, {}, {}, {}", q, s.head_dim_qk, s.head_dim_vo,
                             t.kv_tile, t.stages, t.pingpong ? "true" : "false")
               : fmt::format("attnjit::PrefillTraits<{}, {}, {}, {}", q, s.head_dim_qk, t.dv_chunk, t.kv_tile);
  // The rarer switches render only when set: the other variants' source is unchanged.
  const unsigned ext = prefill_ext_bits(s);
  u.source = fmt::format(
      "// attnjit {name}\n"
      "#include \"prefill/{header}\"\n"
      "using Traits = {traits}, {mask}, {page}, {pse}, {lse}{ext}>;\n"
      "static_assert(Traits::kSmemBytes == {smem_bytes}, \"host and kernel disagree on shared memory\");\n"
      "static_assert(Traits::kThreads == {threads} && Traits::kMinBlocks == 1 && Traits::kRows == {rows}, "
      "\"host and kernel disagree on launch metadata\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::PrefillParams params) {{\n"
      "  extern __shared__ __align__(16) unsigned char smem[];\n"
      "  attnjit::{kernel}<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()), fmt::arg("header", t.hopper ? "prefill_hopper.cuh" : "prefill_kernel.cuh"),
      fmt::arg("traits", traits), fmt::arg("mask", static_cast<int>(s.mask)), fmt::arg("page", s.page_size),
      fmt::arg("pse", s.has(spec::feature::kPse) ? "true" : "false"),
      fmt::arg("lse", s.has(spec::feature::kReturnLse) ? "true" : "false"),
      fmt::arg("ext", ext ? fmt::format(", {}u", ext) : std::string()),
      fmt::arg("smem_bytes", t.smem_bytes),
      fmt::arg("threads", t.threads), fmt::arg("rows", t.rows), fmt::arg("smem", u.smem_symbol),
      fmt::arg("entry", u.entry), fmt::arg("kernel", t.hopper ? "PrefillHopper" : "Prefill"));
  return u;
}

namespace {
// sm_90a: the wgmma kernel wherever it can serve the spec (its head dims), else the
// portable mma.sync kernel, which every other arch takes.
spec::Backend hopper_where_it_serves(const spec::KernelSpec& s, const char** why) {
  if (s.has(spec::feature::kDequantPass)) {
    if (why) *why = "the int8 K/V dequantising pass is one portable kernel, run before either backend's attention";
    return spec::Backend::kXqa;
  }
  spec::KernelSpec h = s;
  h.backend = spec::Backend::kTrtllmGen;
  const bool ok = prefill_can_implement(h, s.arch, nullptr);
  if (why) *why = ok ? "the wgmma kernel measured faster than mma.sync at every prefill shape"
                     : "head dims the wgmma kernel does not take: the portable kernel";
  return ok ? spec::Backend::kTrtllmGen : spec::Backend::kXqa;
}
constexpr render::BackendRow kRows[] = {
    {90, spec::Backend::kTrtllmGen, true, "the wgmma (trtllm-gen) kernel where it serves the spec"},
    {0, spec::Backend::kXqa, false, "the portable mma.sync prefill kernel"}};
constexpr render::VerifiedBackend kVerified[] = {{spec::Backend::kXqa, 0}, {spec::Backend::kTrtllmGen, 90}};
const render::BackendTable kTable = {kRows, std::size(kRows), kVerified, std::size(kVerified), hopper_where_it_serves};
}  // namespace

const render::BackendTable& prefill_backend_table() { return kTable; }

namespace fia {
// The prefill family's registration (its line is in src/spec/families.def).
const render::Family& family() {
  static const render::Family f = {spec::OpFamily::kPrefill, prefill_can_implement, prefill_generate,
                                   &prefill_backend_table(), "prefill/prefill_params.cuh", sizeof(PrefillParams)};
  return f;
}
}  // namespace fia

}  // namespace attnjit::ops
