// `attnjit inspect NAME|SPEC`: resolve a kernel, fetch or compile it, and show
// its identity, resources, rendered source, PTX, SASS or ptxas report.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <sstream>

#include "attnjit/error.hpp"
#include "cli/context.hpp"
#include "cli/spec_parse.hpp"
#include "compile/nvrtc_compiler.hpp"
#include "ops/decode/decode_generator.hpp"
#include "ops/fia/prefill_family.hpp"
#include "mla/mla_params.cuh"
#include "ops/mla/mla_family.hpp"
#include "render/renderer.hpp"
#include "runtime/backend.hpp"
#include "runtime/kernel_registry.hpp"

namespace attnjit::cli {

namespace {

const char* origin_name(runtime::Origin o) {
  switch (o) {
    case runtime::Origin::kMemory: return "memory";
    case runtime::Origin::kStore: return "store";
    case runtime::Origin::kCompiled: return "compiled";
  }
  return "?";
}

// The ptxas lines of an NVRTC log (the `-Xptxas -v` report).
std::string ptxas_lines(const std::string& log) {
  std::istringstream in(log);
  std::string line, out;
  while (std::getline(in, line))
    if (line.find("ptxas") != std::string::npos) out += line + "\n";
  return out.empty() ? log : out;
}

std::string resources_text(const compile::Resources& r) {
  if (r.registers < 0) return "unknown (no ptxas report)";
  // ptxas leaves out the smem line when a kernel has no static shared memory.
  return fmt::format("{} registers, {} B static smem, {} B stack, {} B spill stores, {} B spill loads",
                     r.registers, std::max(r.shared_bytes, 0), r.stack_bytes, r.spill_stores, r.spill_loads);
}

constexpr const char* kNoSassTool =
    "SASS needs cuobjdump or nvdisasm (CUDA toolkit); not found on PATH or in /usr/local/cuda/bin";

// Disassembles a cubin with cuobjdump or nvdisasm. Throws Error(kUnsupported) when neither exists.
std::string disassemble(const std::string& cubin) {
  std::string tool = find_program("cuobjdump");
  std::string args = " -sass ";
  if (tool.empty()) {
    tool = find_program("nvdisasm");
    args = " ";
  }
  if (tool.empty()) throw Error(ErrorCode::kUnsupported, kNoSassTool);
  TempFile file(".cubin", cubin);
  std::string out;
  const int rc = run_capture(shell_quote(tool) + args + shell_quote(file.path()), &out);
  if (rc != 0) throw Error(ErrorCode::kInternal, fmt::format("{} failed (exit {}):\n{}", tool, rc, out));
  return out;
}

// How the decode kernel is laid out for this spec (the renderer's figures, which the
// TU static_asserts): what a kernel engineer needs to read its SASS or ncu report.
int ctas_per_sm_by_smem(const ops::DecodeTiling& t) {
  return (t.smem_limit + 1024) / (t.smem_bytes + 1024);  // the driver reserves 1 KB per CTA
}

nlohmann::json tiling_json(const ops::DecodeTiling& t) {
  return {{"warps", t.warps},
          {"tile_tokens", t.tile},
          {"stages", t.stages},
          {"smem_bytes", t.smem_bytes},
          {"ctas_per_sm_by_smem", ctas_per_sm_by_smem(t)},
          {"lazy_rescale", t.lazy_rescale},
          {"mma_layout", t.transposed ? "transposed: tokens in M, heads in N" : "heads in M, tokens in N"},
          {"dual_m", t.dual_m},
          {"split_m_stages", t.split_m_stages}};
}

std::string tiling_text(const ops::DecodeTiling& t) {
  // Spec decoding's wider CTAs (decode_rows_per_cta picks one per launch).
  std::string rows;
  if (t.dual_m) rows += "; 17-32 query rows: 32 a CTA, two M tiles a warp";
  if (t.split_m_stages > 0)
    rows += fmt::format("; {} query rows: 64 a CTA, one M tile a warp, {}-stage CTA ring", t.dual_m ? "33+" : "17+",
                        t.split_m_stages);
  return fmt::format("{} warps x {}-token tiles, {}-stage cp.async ring per warp, {} dynamic smem ({} CTAs/SM by "
                     "smem){}{}{}",
                     t.warps, t.tile, t.stages, human_bytes(t.smem_bytes), ctas_per_sm_by_smem(t),
                     t.lazy_rescale ? ", lazy rescale" : "",
                     t.transposed ? ", transposed MMA tile (S^T = K Q^T: tokens in M, the group's heads in N)" : "", rows);
}

// The mla family's layout (src/ops/mla/mla_family.hpp): head rows in M, shared KV tiles.
nlohmann::json mla_tiling_json(const ops::MlaTiling& t) {
  const bool narrow = t.hopper && t.rows < mla_const::kHopperRows;
  return {{"kernel", narrow ? "wgmma, narrow tile (rows in N), two math warpgroups on alternate tiles"
                     : t.hopper ? "wgmma, two math warpgroups (seesaw)" : "mma.sync"},
          {"warps", t.warps}, {"rows_per_cta", t.rows}, {"tile_tokens", t.tile},
          {narrow ? "ring_slots" : "stages", narrow ? t.ring_slots : t.stages},
          {"kv_row_bytes", t.kv_row_bytes}, {"kv_widened_in_registers", (!t.hopper || narrow) && t.kv_elem_bytes == 1},
          {"kv_widened_in_smem", t.hopper && !narrow && t.kv_elem_bytes == 1},
          {"smem_bytes", t.smem_bytes}, {"ctas_per_sm_by_smem", (t.smem_limit + 1024) / (t.smem_bytes + 1024)},
          {"schedule", t.flat ? "flat" : "split"}};
}
std::string mla_tiling_text(const ops::MlaTiling& t) {
  const char* fp8 = t.kv_elem_bytes == 1 ? ", fp8 KV landed in the tile buffers and widened to fp16 in shared memory by the "
                                           "warpgroup that computes the tile's S"
                                         : "";
  if (t.hopper && t.rows < mla_const::kHopperRows)
    return fmt::format("wgmma, narrow tile: up to {} head rows in N and {}-token tiles of 576 dims in M (S^T = K Q^T, "
                       "O^T = V^T P^T), two math warpgroups on alternate tiles, each with its own softmax and O^T, "
                       "merged at the end; a producer warpgroup streams the tiles' 64-dim blocks into a ring of {} "
                       "slots of {} (TMA for dense pages, cp.async for sparse rows), each released once read; {} "
                       "dynamic smem ({} CTA/SM by smem){}",
                       t.rows, t.tile, t.ring_slots, human_bytes(mla_ring_block_bytes(t.kv_elem_bytes)), human_bytes(t.smem_bytes),
                       (t.smem_limit + 1024) / (t.smem_bytes + 1024),
                       t.kv_elem_bytes == 1 ? ", fp8 KV widened to fp16 in registers: wgmma's A operands (K, and V "
                                              "transposed) by ldmatrix from 64-byte-swizzled fp8 blocks"
                                            : "");
  if (t.hopper)
    return fmt::format("wgmma, two math warpgroups (seesaw): {} head rows x {}-token tiles of 576 dims, two "
                       "tiles at a time (each warpgroup S and softmax of one, P V of both for its half of the "
                       "512 O columns, loads of its half of the columns: TMA for dense pages, cp.async for sparse "
                       "rows); {} buffers, {} dynamic smem ({} CTA/SM by smem){}{}",
                       t.rows, t.tile, t.stages, human_bytes(t.smem_bytes), (t.smem_limit + 1024) / (t.smem_bytes + 1024),
                       fp8,
                       t.flat ? "; flat schedule: a CTA per SM and row block, each an equal share of the batch's "
                                "tiles across request boundaries, split requests merged by their last piece"
                              : "");
  return fmt::format("{} head rows x {}-token tiles of 576 dims, {} warps (O split along 512), {}-stage cp.async "
                     "ring, {} dynamic smem ({} CTAs/SM by smem){}",
                     t.rows, t.tile, t.warps, t.stages, human_bytes(t.smem_bytes),
                     (t.smem_limit + 1024) / (t.smem_bytes + 1024),
                     t.kv_elem_bytes == 1 ? ", fp8 KV widened to fp16 in registers" : "");
}
// The prefill family's layout (src/ops/fia/prefill_family.hpp): the portable
// mma.sync kernel or the sm_90a warp-specialized wgmma one.
const char* prefill_schedule_name(int mode) {
  return mode == 2 ? "one wave taking work items from a counter" : mode == 1 ? "one wave striding the work items"
                                                                             : "one CTA per work item";
}
// mode: prefill_persistent_mode of the spec (the wgmma kernel's schedule for large calls).
nlohmann::json prefill_tiling_json(const ops::PrefillTiling& t, int mode) {
  if (t.dequant_pass)
    return {{"kernel", "int8 K/V dequantising pass"}, {"threads", t.threads}, {"tile_tokens", t.kv_tile},
            {"smem_bytes", t.smem_bytes}};
  nlohmann::json j = {{"kernel", t.hopper ? "wgmma, warp-specialized" : "mma.sync"},
                      {"rows_per_cta", t.rows},
                      {"threads", t.threads},
                      {"tile_tokens", t.kv_tile},
                      {"stages", t.stages},
                      {"pingpong", t.pingpong},
                      {"smem_bytes", t.smem_bytes}};
  j["kv_loads"] = t.tma_kv ? "TMA where the strides allow, else cp.async" : "cp.async";
  if (t.hopper) j["schedule"] = prefill_schedule_name(mode);
  return j;
}
std::string prefill_tiling_text(const ops::PrefillTiling& t, int mode) {
  if (t.dequant_pass)
    return fmt::format("int8 K/V dequantising pass: a CTA of {} threads per {} tokens of one KV head, (x + offset) * "
                       "scale in fp32 into 16-bit copies the attention kernel reads, {} dynamic smem (the scales)",
                       t.threads, t.kv_tile, human_bytes(t.smem_bytes));
  if (t.hopper)
    return fmt::format("{} rows (2 consumer warpgroups, wgmma) x {}-token KV tiles, a producer warpgroup filling a "
                       "{}-stage ring behind mbarriers ({}), ping-pong {}, {} (a large call), {} dynamic smem",
                       t.rows, t.kv_tile, t.stages,
                       t.tma_kv ? "K/V by TMA where the strides allow, else cp.async" : "K/V by cp.async",
                       t.pingpong ? "on" : "off", prefill_schedule_name(mode), human_bytes(t.smem_bytes));
  return fmt::format("{} rows (4 warps, mma.sync) x {}-token KV tiles, 2-stage cp.async double buffer, {} dynamic smem",
                     t.rows, t.kv_tile, human_bytes(t.smem_bytes));
}
nlohmann::json family_tiling_json(const spec::KernelSpec& s) {
  if (s.family == spec::OpFamily::kPrefill)
    return prefill_tiling_json(ops::prefill_tiling(s), ops::prefill_persistent_mode(s));
  return s.family == spec::OpFamily::kMla ? mla_tiling_json(ops::mla_tiling(s)) : tiling_json(ops::decode_tiling(s));
}
std::string family_tiling_text(const spec::KernelSpec& s) {
  if (s.family == spec::OpFamily::kPrefill)
    return prefill_tiling_text(ops::prefill_tiling(s), ops::prefill_persistent_mode(s));
  return s.family == spec::OpFamily::kMla ? mla_tiling_text(ops::mla_tiling(s)) : tiling_text(ops::decode_tiling(s));
}

}  // namespace

void add_inspect_command(CLI::App& app, Context& ctx) {
  struct Options {
    std::string target, arch;
    bool source = false, ptx = false, sass = false, resources = false, json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "inspect", "Show one kernel: identity and resources, or its source, PTX, SASS or ptxas report");
  sub->add_option("kernel", o->target,
                  "A kernel name (decode.bf16.hd128.g4.contig.nhd.sm90a), a spec JSON object, or a .json file")
      ->required();
  CLI::Option* arch_opt = sub->add_option(
      "-a,--arch", o->arch, "Override the target arch (default: the name's, else the GPU's, else sm_90a)");
  sub->add_flag("--source", o->source, "Print the rendered translation unit");
  sub->add_flag("--ptx", o->ptx, "Print the PTX");
  sub->add_flag("--sass", o->sass, "Print the SASS (needs cuobjdump or nvdisasm)");
  sub->add_flag("--resources", o->resources, "Print the ptxas resource report");
  sub->add_flag("--json", o->json, "Print everything asked for as one JSON object");
  sub->callback([&ctx, o, arch_opt] {
    const bool arch_given = arch_opt->count() > 0;
    ctx.action = [&ctx, o, arch_given]() -> int {
      std::optional<spec::Arch> arch;
      // `--arch ""` is a typo, not a request for the default.
      if (arch_given && o->arch.empty()) throw UsageError("--arch '': empty arch name (expected e.g. sm_90a)");
      if (arch_given) arch = spec::Arch::parse(o->arch);
      const spec::KernelSpec s = spec_from_text(o->target, arch, default_arch());
      // Check for SASS tools before a possibly long compile.
      if (o->sass && find_program("cuobjdump").empty() && find_program("nvdisasm").empty()) {
        throw Error(ErrorCode::kUnsupported, kNoSassTool);
      }
      runtime::Origin origin = runtime::Origin::kMemory;
      const runtime::Artifact& a = ctx.runtime().registry().artifact(s, &origin);
      // What `auto` would pick for this spec on its arch, and why (the family's table).
      runtime::BackendDecision auto_pick;
      try {
        auto_pick = runtime::decide_backend(*render::find_family(s.family), runtime::BackendChoice::kAuto, s);
      } catch (const Error& e) {
        auto_pick.why = e.what();
      }
      const std::string auto_text =
          fmt::format("auto picks {}: {}", spec::to_string(auto_pick.backend), auto_pick.why);

      if (o->json) {
        nlohmann::json j = {{"name", a.name},
                            {"key", a.key},
                            {"arch", s.arch.str()},
                            {"backend", spec::to_string(s.backend)},
                            {"backend_auto", {{"backend", spec::to_string(auto_pick.backend)}, {"why", auto_pick.why}}},
                            {"launch", {{"threads", a.unit.launch.threads},
                                        {"smem_bytes", a.unit.launch.smem_bytes},
                                        {"cluster", {a.unit.launch.cluster[0], a.unit.launch.cluster[1],
                                                     a.unit.launch.cluster[2]}},
                                        {"min_blocks_per_sm", a.unit.launch.min_blocks_per_sm},
                                        {"split_granule", a.unit.launch.split_granule}}},
                            {"origin", origin_name(origin)},
                            {"compile_ms", a.compile_ms},
                            {"resources", a.resources.to_json()},
                            {"entry", a.unit.entry},
                            {"options", a.options},
                            {"cubin_bytes", a.cubin.size()},
                            {"ptx_bytes", a.ptx_bytes},
                            {"spec", s.to_json()},
                            {"tiling", family_tiling_json(s)}};
        if (o->source) j["source"] = a.unit.source;
        if (o->ptx) j["ptx"] = ctx.runtime().registry().ptx(s);
        if (o->resources) j["ptxas"] = ptxas_lines(a.log);
        if (o->sass) j["sass"] = disassemble(a.cubin);
        print_json(j);
        return kExitOk;
      }
      const bool any = o->source || o->ptx || o->sass || o->resources;
      if (!any) {
        std::cout << fmt::format("name:       {}\n", a.name)
                  << fmt::format("key:        {}\n", a.key)
                  << fmt::format("arch:       {}\n", s.arch.str())
                  << fmt::format("backend:    {} ({})\n", spec::to_string(s.backend), auto_text)
                  << fmt::format("origin:     {}\n", origin_name(origin))
                  << fmt::format("compile:    {:.1f} ms{}\n", a.compile_ms,
                                 origin == runtime::Origin::kCompiled ? "" : " (when it was compiled)")
                  << fmt::format("resources:  {}\n", resources_text(a.resources))
                  << fmt::format("tiling:     {}\n", family_tiling_text(s))
                  << fmt::format("cubin:      {} (PTX {})\n", human_bytes(static_cast<int64_t>(a.cubin.size())),
                                 human_bytes(static_cast<int64_t>(a.ptx_bytes)))
                  << fmt::format("entry:      {}\n", a.unit.entry)
                  << fmt::format("options:    {}\n", a.options)
                  << fmt::format("spec:       {}\n", s.to_json().dump());
        return kExitOk;
      }
      if (o->source) std::cout << a.unit.source;
      if (o->ptx) std::cout << ctx.runtime().registry().ptx(s);
      if (o->resources) std::cout << ptxas_lines(a.log);
      if (o->sass) std::cout << disassemble(a.cubin);
      std::cout << std::flush;
      return kExitOk;
    };
  });
}

}  // namespace attnjit::cli
