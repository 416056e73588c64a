// The prefill family (FIA's kernels): can_implement, the tiling shared with the
// generator, the generator, the backend table and the registration.
#include "ops/fia/prefill_family.hpp"

#include <fmt/format.h>

#include <iterator>

#include "attnjit/error.hpp"
#include "prefill/prefill_params.cuh"
#include "render/renderer.hpp"

namespace attnjit::ops {

namespace {
const char* device_type(DType d) {
  switch (d) {
    case DType::kFloat16: return "attnjit::half_t";
    case DType::kBFloat16: return "attnjit::bf16_t";
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("dtype {} has no device type in the prefill templates", dtype_name(d)));
  }
}

int smem_for(int hd_qk, int hd_vo, int kv_tile) {
  // PrefillTraits::kSmemBytes: the Q tile and two K/V stages, rows padded by 8 elements.
  return kPrefillRows * (hd_qk + 8) * 2 + 2 * kv_tile * ((hd_qk + 8) * 2 + (hd_vo + 8) * 2);
}
}  // namespace

PrefillTiling prefill_tiling(const spec::KernelSpec& s) {
  PrefillTiling t;
  t.smem_limit = render::max_smem_per_block(s.arch);
  // 64-token KV tiles where they fit; 32 for head dims over 128 (registers: S and O
  // both live in them) and where shared memory is 99 KB.
  t.kv_tile = std::max(s.head_dim_qk, s.head_dim_vo) > 128 ? 32 : 64;
  if (smem_for(s.head_dim_qk, s.head_dim_vo, t.kv_tile) > t.smem_limit) t.kv_tile = 32;
  t.smem_bytes = smem_for(s.head_dim_qk, s.head_dim_vo, t.kv_tile);
  return t;
}

bool prefill_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why) {
  auto refuse = [&](auto&& reason) {
    if (why) *why = reason();
    return false;
  };
  if (s.backend != spec::Backend::kXqa)
    return refuse([&] { return fmt::format("only the xqa (mma.sync) backend has prefill kernels ({} has none yet)",
                                           spec::to_string(s.backend)); });
  if (arch.sm < 80) return refuse([] { return std::string("the prefill templates need sm_80 or newer (mma.sync bf16, cp.async)"); });
  if (s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16)
    return refuse([&] { return fmt::format("q dtype {}: the prefill templates take fp16 or bf16", dtype_name(s.q_dtype)); });
  if (s.kv_dtype != s.q_dtype || s.out_dtype != s.q_dtype)
    return refuse([] { return std::string("K, V and the output take q's dtype"); });
  for (int hd : {s.head_dim_qk, s.head_dim_vo})
    if (hd % 16 != 0 || hd < 16 || hd > 256)
      return refuse([&] { return fmt::format("head dim {}: the prefill templates need a multiple of 16 in [16, 256]", hd); });
  if (s.group_size != 1) return refuse([] { return std::string("group_size is a runtime value for prefill (1 in the spec)"); });
  if (s.page_size != 0 && (s.page_size % 16 != 0 || s.page_size < 16 || s.page_size > 512))
    return refuse([&] { return fmt::format("page_size {}: 0 (contiguous) or a multiple of 16 up to 512", s.page_size); });
  if (s.layout != spec::KvLayout::kNHD) return refuse([] { return std::string("prefill layouts are strides: the spec says nhd"); });
  if (s.mask != spec::MaskMode::kNone && s.mask != spec::MaskMode::kCausal && s.mask != spec::MaskMode::kCustom)
    return refuse([] { return std::string("unknown mask mode"); });
  if (s.pos_encoding != spec::PosEncoding::kNone) return refuse([] { return std::string("prefill has no RoPE/ALiBi (pse_shift is a feature)"); });
  if (s.features & ~(spec::feature::kReturnLse | spec::feature::kPse))
    return refuse([&] { return fmt::format("feature bits {:#x}: prefill serves lse and pse only", s.features); });
  spec::KernelSpec on_arch = s;
  on_arch.arch = arch;
  const PrefillTiling t = prefill_tiling(on_arch);
  if (t.smem_bytes > t.smem_limit)
    return refuse([&] { return fmt::format("needs {} bytes of shared memory per block, {} allows {}", t.smem_bytes,
                                           arch.str(), t.smem_limit); });
  return true;
}

render::RenderedUnit prefill_generate(const spec::KernelSpec& s) {
  const PrefillTiling t = prefill_tiling(s);
  render::RenderedUnit u;
  u.launch.threads = 128;
  u.launch.smem_bytes = t.smem_bytes;
  u.launch.min_blocks_per_sm = 1;
  u.entry = "attnjit_prefill";
  u.smem_symbol = "attnjit_smem_bytes";
  u.source = fmt::format(
      "// attnjit {name}\n"
      "#include \"prefill/prefill_kernel.cuh\"\n"
      "using Traits = attnjit::PrefillTraits<{t}, {hq}, {hv}, {tile}, {mask}, {page}, {pse}, {lse}>;\n"
      "static_assert(Traits::kSmemBytes == {smem_bytes}, \"host and kernel disagree on shared memory\");\n"
      "static_assert(Traits::kThreads == {threads} && Traits::kMinBlocks == 1 && Traits::kRows == {rows}, "
      "\"host and kernel disagree on launch metadata\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::PrefillParams params) {{\n"
      "  extern __shared__ __align__(16) unsigned char smem[];\n"
      "  attnjit::Prefill<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()), fmt::arg("t", device_type(s.q_dtype)), fmt::arg("hq", s.head_dim_qk),
      fmt::arg("hv", s.head_dim_vo), fmt::arg("tile", t.kv_tile), fmt::arg("mask", static_cast<int>(s.mask)),
      fmt::arg("page", s.page_size), fmt::arg("pse", s.has(spec::feature::kPse) ? "true" : "false"),
      fmt::arg("lse", s.has(spec::feature::kReturnLse) ? "true" : "false"), fmt::arg("smem_bytes", t.smem_bytes),
      fmt::arg("threads", u.launch.threads), fmt::arg("rows", kPrefillRows), fmt::arg("smem", u.smem_symbol),
      fmt::arg("entry", u.entry));
  return u;
}

namespace {
// Only the portable mma.sync kernel exists; the Hopper warpgroup kernel (a
// separate issue) will serve the same Params and work list.
constexpr render::BackendRow kRows[] = {{0, spec::Backend::kXqa, false, "the portable mma.sync prefill kernel"}};
constexpr render::VerifiedBackend kVerified[] = {{spec::Backend::kXqa, 0}};
const render::BackendTable kTable = {kRows, std::size(kRows), kVerified, std::size(kVerified), nullptr};
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
