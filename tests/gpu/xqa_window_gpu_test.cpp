// xqa's sliding window on the GPU against the float64 reference: windows on
// sequences much longer than them (issue 9), with sinks, spec decode, pages and
// head dims; the cost side is attnjit-bench --window.
#include <gtest/gtest.h>

#include <vector>

#include "xqa_gpu_case.hpp"

namespace attnjit {
namespace {

using xqa_gpu::XqaCase;
using xqa_gpu::describe;
using xqa_gpu::run_xqa;
using xqa_gpu::tolerance;

// Issue 9: a window on sequences much longer than it. The splits are planned over
// the visible span (window + q_seq_len), so these exercise many splits starting
// at kv_begin, windows that cut pages, sinks and spec decode's union of windows.
TEST(XqaGpu, WindowOnLongSequences) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  for (int window : {1, 33, 1000, 4096})
    for (int sm : {0, 1}) {
      XqaCase c;
      c.batch = 4;
      c.seq_lens = {window, 8192 + 5, 40000 + 17, 3};  // one at the window, one shorter
      c.window = window;
      c.sm_count = sm;  // 0: many splits over the window; 1: one split
      c.sinks = window != 33;
      cases.push_back(c);
    }
  for (int qlen : {2, 3, 4})
    for (bool ragged : {false, true}) {
      XqaCase c;  // spec decode: each row's window ends at its own position
      c.batch = 3;
      c.q_seq_len = qlen;
      c.ragged = ragged;
      c.mask_kind = qlen == 3 ? 0 : 1;
      c.sinks = true;
      c.window = 500 + qlen;
      c.seq_lens = {qlen + 1, 30000 + qlen, 9000};
      cases.push_back(c);
    }
  {
    XqaCase c;  // fp8 KV, HND, page 64, window not a multiple of the page
    c.kv_dtype = DType::kFloat8E4M3;
    c.kv_scale = 0.5f;
    c.layout = KvLayout::kHND;
    c.page_size = 64;
    c.window = 777;
    c.sinks = true;
    c.q_seq_len = 2;
    c.seq_lens = {50000, 2, 1500};
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 11000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

// Issue 9 item 1: sliding_win_size costs what the window holds. Each CTA reads the
// page ids of its own first tiles once the window has moved its start (the early
// ones belong to the plain split), the splits are planned over window + q_seq_len
// - 1 keys, and a start that is not a whole tile hands the last split up to a tile
// more. Covers: 128K sequences under a 4K window (aligned, and 5 / 17 keys off a
// tile), a 32K window on 128K, sinks, spec decode q_seq_len 3 ragged and 64-row
// (split-M) CTAs, fp8 KV (32-token tiles), HND, windows that cut pages and splits
// anywhere, a window as long as the sequence and longer, one split, and head_dim
// 256 and 512 (split-D's CTA ring).
TEST(XqaGpu, WindowCostsOnlyTheWindow) {
  ATTNJIT_REQUIRE_GPU_OR_PREWARM();
  std::vector<XqaCase> cases;
  {
    XqaCase c;  // the bench's shape, with sinks: aligned, 5 keys off, a window-long and a short sequence
    c.batch = 4;
    c.seq_lens = {131072, 131072 + 5, 4096, 100};
    c.window = 4096;
    c.sinks = true;
    cases.push_back(c);
    c.kv_dtype = DType::kFloat8E4M3;  // 32-token tiles
    c.kv_scale = 0.5f;
    c.seq_lens = {131072 + 17, 65536 + 31, 4097, 32};
    cases.push_back(c);
    c.sm_count = 1;  // one split: the whole window in one CTA per head
    c.sinks = false;
    cases.push_back(c);
  }
  {
    XqaCase c;  // 32K window on 128K
    c.batch = 2;
    c.seq_lens = {131072 + 3, 32768};
    c.window = 32768;
    c.sinks = true;
    cases.push_back(c);
  }
  for (bool ragged : {false, true}) {
    XqaCase c;  // spec decode q_seq_len 3: the union of three windows, one start
    c.batch = 4;
    c.q_seq_len = 3;
    c.ragged = ragged;
    c.mask_kind = ragged ? 1 : 0;
    c.sinks = true;
    c.window = 1024;
    c.seq_lens = {65536 + 7, 30000 + 1, 1026, 3};
    cases.push_back(c);
  }
  {
    XqaCase c;  // 64 rows per CTA (group 16 x 4 drafts): split-M's CTA ring from the moved start
    c.group = 16;
    c.num_kv_heads = 1;
    c.q_seq_len = 4;
    c.ragged = true;
    c.mask_kind = 1;
    c.window = 2000;
    c.sinks = true;
    c.batch = 2;
    c.seq_lens = {70000 + 9, 2100};
    cases.push_back(c);
  }
  for (int page : {16, 64, 128}) {
    XqaCase c;  // windows that cut pages and splits at odd places; HND
    c.page_size = page;
    c.layout = page == 64 ? KvLayout::kHND : KvLayout::kNHD;
    c.window = page == 16 ? 4100 : 777;
    c.batch = 3;
    c.seq_lens = {50000 + page / 2 + 1, 9999, c.window + 1};
    cases.push_back(c);
  }
  for (int window : {5000, 5001, 1 << 20}) {
    XqaCase c;  // a window as long as the longest sequence, and longer: the plain plan
    c.batch = 2;
    c.seq_lens = {5000, 777};
    c.window = window;
    c.sinks = window == 5001;
    cases.push_back(c);
  }
  for (int hd : {256, 512}) {
    XqaCase c;  // split-D's CTA ring (512) and the widest token-split kernel (256)
    c.head_dim = hd;
    c.group = 8;
    c.num_kv_heads = 1;
    c.batch = 2;
    c.seq_lens = {65536 + 13, 3000};
    c.window = 3000;
    c.sinks = true;
    cases.push_back(c);
  }
  int n = 0;
  for (auto& c : cases) {
    double err = run_xqa(c, 21000 + n++);
    EXPECT_LE(err, tolerance(c)) << describe(c);
  }
}

}  // namespace
}  // namespace attnjit
