// Grid planning and launch shared by the decode-family ops (single_decode, xqa):
// split-KV choice, workspace sizing and the launch itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnjit/runtime.hpp"
#include "decode/decode_params.cuh"
#include "driver/cuda_driver.hpp"
#include "spec/kernel_spec.hpp"

namespace attnjit::ops {

struct DecodeShape {
  int batch = 1;
  int num_kv_heads = 1;
  int group = 1;
  int q_seq_len = 1;
  int head_dim = 128;
  int max_seq_len = 1;
};

constexpr int kDecodeRowsPerCta = 16;   // query rows per CTA
constexpr int kMaxBlocksPerSmForSplit = 4;

int decode_row_blocks(int group, int q_seq_len);
int64_t decode_base_ctas(const DecodeShape& s);  // CTAs before splitting

// Splits minimising waves x (tokens per split + fixed cost): fills the GPU for
// small batches and evens out the last wave for large ones. At most ~4 waves'
// worth and 256 splits, never fewer than ~128 tokens per split. Pure: tested on the CPU.
int choose_splits(int64_t base_ctas, int max_seq_len, int slots);
int max_splits(const DecodeShape& s, int sm_count);

size_t decode_workspace_bytes(const DecodeShape& s, int splits);
size_t decode_semaphore_count(const DecodeShape& s);

struct DecodeLaunch {
  const spec::KernelSpec* spec = nullptr;
  DecodeShape shape;
  int device = -1;   // the current device; -1: ask the driver
  int sm_count = 0;  // 0: the device's
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  unsigned* semaphores = nullptr;
  size_t semaphore_count = 0;
  const char* workspace_name = "workspace_buffer";
  const char* semaphores_name = "semaphores";
  bool pdl = false;
  bool use_runtime_scratch = false;  // single_decode: the runtime owns the scratch
};

// The arch to prewarm for: `arch` when given, else the current GPU's (kNoDevice
// without one).
spec::Arch prewarm_arch(const std::string& arch);

// Fills the split fields of `p` and launches. Returns the number of splits used.
int launch_decode(Runtime& rt, const DecodeLaunch& launch, DecodeParams& p, Stream stream);

}  // namespace attnjit::ops
