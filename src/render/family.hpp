// The family plug-in interface: what each op family registers (one line in
// src/spec/families.def), and the lookup the renderer and runtime use.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spec/kernel_spec.hpp"

namespace attnjit::render {

// How to launch a rendered kernel, decided by its family's generator and carried
// unchanged through the render result, the store and the loaded kernel. The
// rendered TU static_asserts what the kernel itself defines (threads, min blocks,
// shared memory), so host and device cannot drift apart.
struct LaunchMetadata {
  int threads = 0;              // per CTA (x dimension)
  int smem_bytes = 0;           // dynamic shared memory per CTA
  unsigned cluster[3] = {1, 1, 1};  // thread-block cluster dims (1,1,1: no cluster)
  int min_blocks_per_sm = 1;    // __launch_bounds__' second argument
  int split_granule = 1;        // KV tokens a split boundary aligns to (1: none)
};

// One header a unit may include, by view: into the library's embedded text, or into text
// that outlives every unit holding it (an ATTNJIT_TEMPLATE_DIR set is kept for the process),
// so that a process's first render copies none of the ~490 KB.
struct TemplateFile {
  std::string_view path;  // include name, relative to templates/
  std::string_view content;
};

// A toolkit header folder NVRTC reads from disk (CCCL): its path is not part of the key (it
// differs between machines), the hash of its headers' content is.
struct IncludeDir {
  std::string path;
  std::string content_hash;
};

struct RenderedUnit {
  std::string source;
  // Everything the source can include, so that compile() needs nothing else: the templates, handed
  // to NVRTC by name (all of them: a superset of what it includes; render() fills them in when the
  // generator leaves them unset), and toolkit folders. Shared: the units of a process carry one
  // template set, so copying a unit copies a pointer, and the key hashes that set once.
  std::shared_ptr<const std::vector<TemplateFile>> headers;
  std::vector<IncludeDir> include_dirs;
  std::string entry;        // the extern "C" kernel symbol
  std::string smem_symbol;  // __constant__ int holding the dynamic smem bytes
  LaunchMetadata launch;
};

// Backend resolution for one family: one row per arch (src/runtime/backend.cpp
// reads it). `auto` prefers `prefer` on that arch, or on rows marked
// by_measurement the backend measured faster for the spec.
struct BackendRow {
  int sm;                 // 0: every arch without a row of its own
  spec::Backend prefer;
  bool by_measurement;    // ask BackendTable::measured_faster
  const char* source;     // why the row says so (the seed, a measurement)
};
// The decode families' table, from the MLA seed: trtllm-gen on sm_100/sm_103, xqa on
// sm_120; on sm_90a the backend measured faster for the spec.
inline constexpr BackendRow kMlaSeedBackendRows[] = {
    {90, spec::Backend::kXqa, true, "the backend measured faster for the spec"},
    {100, spec::Backend::kTrtllmGen, false, "the MLA seed"},
    {103, spec::Backend::kTrtllmGen, false, "the MLA seed"},
    {120, spec::Backend::kXqa, false, "the MLA seed"},
    {0, spec::Backend::kXqa, false, "the portable mma.sync kernels"},
};
// A (backend, arch) whose kernel exists and has run correctly on a GPU: only
// these count as available. sm 0: portable code, every arch can_implement allows.
struct VerifiedBackend {
  spec::Backend backend;
  int sm;
};
struct BackendTable {
  const BackendRow* rows;
  size_t num_rows;
  const VerifiedBackend* verified;
  size_t num_verified;
  // For rows by_measurement: the faster backend for this spec, and why. Null: xqa.
  spec::Backend (*measured_faster)(const spec::KernelSpec& spec, const char** why);
};

struct Family {
  spec::OpFamily id;
  // The one place that decides whether `spec` (its backend included) can be
  // served on `arch`. On false, *why (when given) says why; no allocation on true.
  bool (*can_implement)(const spec::KernelSpec& spec, const spec::Arch& arch, std::string* why);
  // spec -> translation unit and launch metadata; called only after can_implement.
  RenderedUnit (*generate)(const spec::KernelSpec& spec);
  const BackendTable* backends;
  // The kernel's by-value Params: its template header (an ATTNJIT_TEMPLATE_DIR
  // override may not change it, the host fills it) and its size on the host,
  // which launch_kernel<Params> checks.
  const char* params_header;
  size_t params_bytes;
};

// A dtype's type name in the templates (templates/common: half_t, bf16_t, e4m3_t, e5m2_t,
// i8_t, and i4x8_t for int4 K/V eight to an int32 word), for a generator's rendered Traits.
// One the templates have no type for is Error(kUnsupported) naming `family`'s templates
// (can_implement refuses those first).
const char* device_type(DType d, std::string_view family);

// The registered family of `id`; nullptr when none is (src/ops/families.cpp).
const Family* find_family(spec::OpFamily id);
// Every registered family, in families.def order.
const Family* const* families_begin();
const Family* const* families_end();

}  // namespace attnjit::render
