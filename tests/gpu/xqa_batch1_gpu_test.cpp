// xqa at batch 1 with its own kernel (32-token warp tiles where batches keep 16:
// ops::decode_batch1_tile32) on the GPU against the float64 reference.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "xqa_gpu_case.hpp"

namespace attnjit {
namespace {

using xqa_gpu::XqaCase;
using xqa_gpu::describe;
using xqa_gpu::run_xqa;
using xqa_gpu::tolerance;

// bf16 / fp16 hd128 g8 at batch 1 past 4096 planned tokens: lengths that end inside a
// page and a tile, pages 32 / 64 / 128, NHD and HND, sinks, windows (one shorter than
// the sequence, one longer), device scales, and a page table far longer than the request
// (the splits are planned for the table, most of them empty). The call takes the tile32
// kernel, up to 128K (one wave), and at head_dim 384 and 512 (split-D); with sm_count 1 (one
// split) and at batch 2 it does not.
TEST(XqaGpu, Batch1TakesThirtyTwoTokenTiles) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  XqaCase b;
  b.batch = 1;
  b.num_kv_heads = 8;
  b.seq_lens = {4096};
  cases.push_back(b);
  XqaCase c = b;
  c.seq_lens = {33000 + 7};
  c.dtype = c.out_dtype = c.kv_dtype = DType::kFloat16;
  c.layout = KvLayout::kHND;
  cases.push_back(c);
  c = b;
  c.seq_lens = {9000 + 13};
  c.page_size = 64;
  c.sinks = true;
  c.window = 4096 + 5;
  cases.push_back(c);
  c = b;
  c.seq_lens = {20000 + 1};
  c.page_size = 128;
  c.layout = KvLayout::kHND;
  c.window = 30000;  // longer than the sequence
  c.scale_ptrs = true;
  c.q_scale = 0.5f;
  cases.push_back(c);
  c = b;
  c.seq_lens = {700};
  c.spare_pages = 8192 / 32;  // planned for ~9K tokens, 700 present
  c.sinks = true;
  cases.push_back(c);
  c = b;
  c.seq_lens = {1};
  c.spare_pages = 4096 / 32;
  cases.push_back(c);
  c = b;
  c.seq_lens = {131072 - 100};
  cases.push_back(c);
  c = b;  // split-D: three 32-token stages, one CTA an SM
  c.head_dim = 512;
  c.group = 4;
  c.seq_lens = {20000 + 3};
  cases.push_back(c);
  c = b;
  c.head_dim = 384;
  c.group = 16;
  c.num_kv_heads = 2;
  c.page_size = 64;
  c.layout = KvLayout::kHND;
  c.seq_lens = {9000 + 17};
  cases.push_back(c);
  int n = 0;
  for (auto& x : cases) {
    std::string name;
    const double err = run_xqa(x, 13000 + n++, &name);
    EXPECT_LE(err, tolerance(x)) << describe(x);
    EXPECT_NE(name.find(".tile32"), std::string::npos) << describe(x) << " ran " << name;
  }
  // The 16-token kernel: one split, batch 2.
  std::vector<XqaCase> others;
  c = b;
  c.seq_lens = {5000 + 3};
  c.sm_count = 1;
  others.push_back(c);
  c = b;
  c.batch = 2;
  c.seq_lens = {4096, 300};
  others.push_back(c);
  for (auto& x : others) {
    std::string name;
    EXPECT_LE(run_xqa(x, 13000 + n++, &name), tolerance(x)) << describe(x);
    EXPECT_EQ(name.find(".tile32"), std::string::npos) << describe(x) << " ran " << name;
  }
}

}  // namespace
}  // namespace attnjit
