// The prefill kernel family (FIA): can_implement, tiling and the generator.
#pragma once

#include <string>

#include "ops/common/launch.hpp"
#include "ops/fia/fia_plan.hpp"
#include "render/family.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct PrefillTiling {
  bool hopper = false;  // the trtllm-gen (sm_90a wgmma) kernel, else the portable mma.sync one
  bool dequant_pass = false;  // the int8 K/V dequantising pass (dqpass), not an attention kernel
  int rows = 64;        // rows (token x group head) per CTA
  int threads = 128;
  int kv_tile = 64;     // KV tokens per main-loop step
  int dv_chunks = 1;    // CTAs (blockIdx.z) that split the value dims: 2 past 256 (portable kernel)
  int dv_chunk = 0;     // value dims per CTA (the kernel's kHdVo)
  int stages = 2;       // K/V stages in shared memory
  bool pingpong = false;  // Hopper: the consumers take turns issuing GEMMs (ATTNJIT_PREFILL_PINGPONG)
  bool tma_kv = false;    // Hopper: K/V may land by TMA (prefill_tma_capable); else cp.async only
  int smem_bytes = 0;
  int smem_limit = 0;
};
PrefillTiling prefill_tiling(const spec::KernelSpec& s);

// What a launch needs of the tiling: rows per CTA (the work-list tile) and CTAs along
// z (value-dim halves). Pure arithmetic on the spec, unlike prefill_tiling, which
// also reads the tuning knobs: the launch path calls this one.
struct PrefillGridShape {
  int rows = 64;
  int dv_chunks = 1;
};
PrefillGridShape prefill_grid_shape(const spec::KernelSpec& s);

// The launch over `tiles` work-list tiles. The portable kernel: a grid of (tiles, KV
// heads, value-dim chunks). The wgmma kernel walks items (tile x KV head) from a 1-D
// grid, by ATTNJIT_PREFILL_PERSISTENT: 2 (the default under a band or mask) one wave
// of sm_count CTAs taking items from a counter as they finish (dynamic: the launch
// needs the counter, two zeroed unsigneds, in PrefillParams::item_counter); 1 (the
// default without) one wave striding statically; 0 one CTA per item.
// ATTNJIT_PREFILL_CTAS caps the grid (tests).
// The wgmma kernel's schedule for this spec's large calls (a call of no more work items than
// SMs runs one CTA each): ATTNJIT_PREFILL_PERSISTENT, else 2 under a band, 1 without.
int prefill_persistent_mode(const spec::KernelSpec& s);
// A wgmma spec whose K/V TMA can carry (16-bit, no shared prefix; paged where a block holds
// whole KV tiles): the launch then builds the maps where the strides allow
// (prefill_set_kv_maps); the rest is cp.async.
bool prefill_tma_capable(const spec::KernelSpec& s);
struct PrefillSchedule {
  Grid grid;
  bool dynamic = false;
};
PrefillSchedule prefill_schedule(const FiaPlan& plan, int tiles, int sm_count);

// The Traits' kExt bits (prefill_ext) of a spec: left padding, the shared prefix, int8 output.
unsigned prefill_ext_bits(const spec::KernelSpec& s);

bool prefill_can_implement(const spec::KernelSpec& s, const spec::Arch& arch, std::string* why);
render::RenderedUnit prefill_generate(const spec::KernelSpec& s);
const render::BackendTable& prefill_backend_table();

}  // namespace attnjit::ops
