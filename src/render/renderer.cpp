#include "render/renderer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "attnjit/error.hpp"
#include "render/embedded_templates.hpp"
#include "util/env_knob.hpp"
#include "util/hash.hpp"

namespace attnjit::render {

namespace {

// NVRTC reads an include it was not handed from disk (relative to the working
// directory), where the template hash cannot see it; and the host fills the params
// struct as it was built. So an override must be self-contained and keep that struct.
void check_template_set(const std::vector<TemplateFile>& files, const std::string& dir) {
  std::set<std::string> names;
  for (const auto& f : files) names.insert(f.path);
  static const std::regex include_line(R"(^\s*#\s*include\s*([<"])([^">]*)[">])");
  for (const auto& f : files) {
    std::istringstream lines(f.content);
    std::string line;
    std::smatch m;
    while (std::getline(lines, line))
      if (std::regex_search(line, m, include_line) && (m[1] == "<" || !names.count(m[2])))
        throw Error(ErrorCode::kInvalidArgument,
                    fmt::format("ATTNJIT_TEMPLATE_DIR='{}': {} includes {}{}{}, which is not a .cuh file of that "
                                "folder; the cache key covers only those, so the templates must be self-contained",
                                dir, f.path, m[1].str(), m[2].str(), m[1] == "<" ? ">" : "\""));
  }
  const std::string params = "decode/decode_params.cuh";  // (a std::string: built.path is a char*)
  for (const auto& built : embedded_templates())
    if (built.path == params)
      for (const auto& f : files)
        if (f.path == params && f.content != built.content)
          throw Error(ErrorCode::kInvalidArgument,
                      fmt::format("ATTNJIT_TEMPLATE_DIR='{}': {} differs from the one this library was built "
                                  "with; the host fills that struct, so it cannot change without a rebuild",
                                  dir, params));
}

std::vector<TemplateFile> load_template_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<TemplateFile> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ATTNJIT_TEMPLATE_DIR='{}' is not a directory", dir));
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".cuh") continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    files.push_back({fs::relative(e.path(), dir).generic_string(), ss.str()});
  }
  std::sort(files.begin(), files.end(),
            [](const TemplateFile& a, const TemplateFile& b) { return a.path < b.path; });
  check_template_set(files, dir);
  return files;
}

const char* device_type(DType d) {
  switch (d) {
    case DType::kFloat16: return "attnjit::half_t";
    case DType::kBFloat16: return "attnjit::bf16_t";
    case DType::kFloat8E4M3: return "attnjit::e4m3_t";
    case DType::kFloat8E5M2: return "attnjit::e5m2_t";
    default:
      throw Error(ErrorCode::kUnsupported,
                  fmt::format("dtype {} has no device type in the decode templates", dtype_name(d)));
  }
}

// Every spec reaches the templates through here (ops, CLI names, JSON, model
// configs), so here is where one the templates cannot build is refused.
void check_decode_spec(const spec::KernelSpec& s) {
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorCode::kUnsupported, fmt::format("{}: {}", s.name(), why));
  };
  if (s.backend != spec::Backend::kXqa) refuse("only the xqa backend has decode templates");
  if (s.arch.sm < 80) refuse("the decode templates need sm_80 or newer (mma.sync bf16, cp.async)");
  if (s.q_dtype != DType::kFloat16 && s.q_dtype != DType::kBFloat16)
    refuse(fmt::format("q dtype {}: the decode templates take fp16 or bf16 queries", dtype_name(s.q_dtype)));
  const bool fp8_kv = s.kv_dtype == DType::kFloat8E4M3 || s.kv_dtype == DType::kFloat8E5M2;
  if (s.kv_dtype != s.q_dtype && !fp8_kv)
    refuse(fmt::format("kv dtype {}: K/V are q's dtype or fp8", dtype_name(s.kv_dtype)));
  const bool out_16 = s.out_dtype == DType::kFloat16 || s.out_dtype == DType::kBFloat16;
  if (!out_16 && !(fp8_kv && s.out_dtype == DType::kFloat8E4M3))
    refuse(fmt::format("output dtype {}: fp16, bf16, or fp8_e4m3 with fp8 K/V", dtype_name(s.out_dtype)));
  if (s.head_dim % 16 != 0 || s.head_dim < 16 || s.head_dim > 256)
    refuse(fmt::format("head_dim {}: the decode templates need a multiple of 16 in [16, 256]", s.head_dim));
  if (s.group_size < 1 || s.group_size > 256) refuse(fmt::format("group_size {}: expected 1 to 256", s.group_size));
  if (s.page_size != 0 && (s.page_size % 16 != 0 || s.page_size < 16 || s.page_size > 1024))
    refuse(fmt::format("page_size {}: 0 (contiguous) or a multiple of 16 up to 1024", s.page_size));
  if (s.layout != spec::KvLayout::kNHD && s.layout != spec::KvLayout::kHND) refuse("unknown KV layout");
  if (s.mask != spec::MaskMode::kNone && s.mask != spec::MaskMode::kCausal && s.mask != spec::MaskMode::kCustom)
    refuse("unknown mask mode");
  if (s.pos_encoding != spec::PosEncoding::kNone && s.pos_encoding != spec::PosEncoding::kRopeLlama &&
      s.pos_encoding != spec::PosEncoding::kAlibi)
    refuse("unknown positional encoding");
  if (s.features & ~spec::feature::kAll) refuse(fmt::format("unknown feature bits {:#x}", s.features));
}

RenderedUnit render_decode(const spec::KernelSpec& s) {
  check_decode_spec(s);
  const DecodeTiling t = decode_tiling(s);
  if (t.smem_bytes > t.smem_limit)
    throw Error(ErrorCode::kUnsupported,
                fmt::format("{}: needs {} bytes of shared memory per block, {} allows {}", s.name(), t.smem_bytes,
                            s.arch.str(), t.smem_limit));
  RenderedUnit u;
  // The host's shared-memory arithmetic mirrors the Traits; the static_assert in
  // the TU makes every compile (CI's variant matrix too) check the mirror.
  u.expected_smem_bytes = t.smem_bytes;
  u.tile_tokens = t.tile;
  u.entry = "attnjit_decode";
  u.smem_symbol = "attnjit_smem_bytes";
  u.source = fmt::format(
      "// attnjit {name}\n"
      "#include \"decode/gqa_decode.cuh\"\n"
      "using Traits = attnjit::DecodeTraits<{q}, {kv}, {o}, {hd}, {g}, {page}, {hnd}, {mask}, {pos}, "
      "{feat}u, {warps}, {stages}, {smem_limit}, {tile}, {lazy}>;\n"
      "static_assert(Traits::kSmemBytes == {expected}, \"host and kernel disagree on shared memory\");\n"
      "extern \"C\" __constant__ int {smem} = Traits::kSmemBytes;\n"
      "extern \"C\" __global__ void __launch_bounds__(Traits::kThreads, Traits::kMinBlocks)\n"
      "{entry}(const __grid_constant__ attnjit::DecodeParams params) {{\n"
      "  extern __shared__ __align__(16) unsigned char smem[];\n"
      "  attnjit::GqaDecode<Traits>::run(params, smem);\n"
      "}}\n",
      fmt::arg("name", s.name()), fmt::arg("q", device_type(s.q_dtype)),
      fmt::arg("kv", device_type(s.kv_dtype)), fmt::arg("o", device_type(s.out_dtype)),
      fmt::arg("hd", s.head_dim), fmt::arg("g", s.group_size), fmt::arg("page", s.page_size),
      fmt::arg("hnd", s.layout == spec::KvLayout::kHND ? "true" : "false"),
      fmt::arg("mask", static_cast<int>(s.mask)), fmt::arg("pos", static_cast<int>(s.pos_encoding)),
      fmt::arg("feat", s.features), fmt::arg("warps", t.warps), fmt::arg("stages", t.stages),
      fmt::arg("smem_limit", t.smem_limit), fmt::arg("tile", t.tile),
      fmt::arg("lazy", t.lazy_rescale ? "true" : "false"),
      fmt::arg("expected", t.smem_bytes), fmt::arg("smem", u.smem_symbol), fmt::arg("entry", u.entry));
  return u;
}

}  // namespace

const std::vector<TemplateFile>& template_files() {
  static const std::vector<TemplateFile> files = [] {
    if (const char* dir = std::getenv("ATTNJIT_TEMPLATE_DIR"); dir && *dir) return load_template_dir(dir);
    std::vector<TemplateFile> v;
    for (const auto& f : embedded_templates()) v.push_back({f.path, f.content});
    return v;
  }();
  return files;
}

const std::string& template_hash() {
  static const std::string h = [] {
    util::KeyEncoder e;
    for (const auto& f : template_files()) e.field(f.path, f.content);
    return e.hex();
  }();
  return h;
}

int max_smem_per_block(const spec::Arch& arch) {
  switch (arch.sm) {
    case 80:
    case 87: return 163 * 1024;
    case 90:
    case 100:
    case 101:
    case 103:
    case 110: return 227 * 1024;
    default: return 99 * 1024;  // sm_86, sm_89, sm_120, sm_121 and anything unknown
  }
}

// Tuning knobs for experiments (defaults are the measured configuration): each
// one lands in the rendered source, so the cache key follows it. A bad value is
// an Error naming the variable, never a silent other setting.
constexpr int kMaxRingKb = 1024;  // above every arch's shared memory; * 1024 still fits int

namespace {

DecodeTiling tiling_for(const spec::KernelSpec& s, int tile, bool lazy) {
  DecodeTiling t;
  t.tile = tile;
  t.lazy_rescale = lazy;
  const int hd = s.head_dim;
  const int kv_bytes = static_cast<int>(dtype_size(s.kv_dtype));
  const bool fp8 = kv_bytes == 1;
  const bool widen = fp8 && (s.pos_encoding == spec::PosEncoding::kRopeLlama || hd % 32 != 0 ||
                             s.has(spec::feature::kCudaCores));  // !Traits::kDirectFp8
  const int raw_row = hd * kv_bytes + (fp8 && hd % 128 == 0 ? 0 : 16);  // Traits::kRawRowBytes
  const int per_stage = t.warps * 2 * t.tile * raw_row;
  const int conv = widen ? t.warps * 2 * t.tile * (hd + 8) * 2 : 0;
  const int fixed = 16 * (hd + 8) * 2 + hd * 2;  // Q tile + RoPE frequencies
  const int tail = std::max(t.warps * 16 * (hd + 2) * 4, 2 * 16 * 256 * 4);  // warp merge / split weights and sums
  t.smem_limit = max_smem_per_block(s.arch);
  // Ring budget per CTA: ~105 KB lets two CTAs share an SM with two tiles in
  // flight per warp (~128 KB per SM: what HBM latency needs at full bandwidth).
  // Never more than the arch allows per block.
  int budget = util::env_knob("ATTNJIT_DECODE_RING_KB", 1, kMaxRingKb).value_or(105) * 1024;
  if (t.tile == 32) budget = std::max(budget, 2 * per_stage + conv);  // a 32-token ring still prefetches
  // At least two stages (one tile in flight while another is computed), fewer
  // only where the arch's shared memory cannot hold two.
  t.stages = std::clamp((budget - conv) / per_stage, 2, 4);
  auto smem = [&] { return fixed + std::max(t.stages * per_stage + conv, tail); };
  while (t.stages > 1 && smem() > t.smem_limit) --t.stages;
  t.smem_bytes = smem();
  return t;
}

}  // namespace

DecodeTiling decode_tiling(const spec::KernelSpec& s) {
  // Warp tiles of 16 tokens for 16-bit KV and 32 for fp8: the same bytes per
  // tile, so fp8 pays the softmax and address work once per 32 tokens (a tile
  // never spans two pages, so 32 needs pages of 32 or more). Spec-decode masks
  // and head dims over 128 keep 16: the larger tile's registers spill there. Lazy rescaling
  // skips the O rescale while no row max moves. ATTNJIT_DECODE_TILE=16|32 and
  // ATTNJIT_DECODE_LAZY_RESCALE=0|1 override both, for measurement.
  const bool one_byte = dtype_size(s.kv_dtype) == 1;
  const bool lazy = util::env_knob("ATTNJIT_DECODE_LAZY_RESCALE", 0, 1, "0 or 1").value_or(1) == 1;
  const int tile = util::env_knob("ATTNJIT_DECODE_TILE", 16, 32, "16 or 32").value_or(
      one_byte && s.mask == spec::MaskMode::kNone && s.head_dim <= 128 ? 32 : 16);
  if (tile != 16 && tile != 32)  // the only warp tiles the template has
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("ATTNJIT_DECODE_TILE='{}': expected 16 or 32; unset it for the default", tile));
  if (tile == 32 && (s.page_size == 0 || s.page_size % 32 == 0)) {
    DecodeTiling t = tiling_for(s, 32, lazy);
    if (t.smem_bytes <= t.smem_limit) return t;
  }
  return tiling_for(s, 16, lazy);
}

RenderedUnit render(const spec::KernelSpec& s) {
  switch (s.family) {
    case spec::OpFamily::kDecode:
    case spec::OpFamily::kXqa: return render_decode(s);
  }
  throw Error(ErrorCode::kUnsupported, fmt::format("no renderer for family of {}", s.name()));
}

}  // namespace attnjit::render
