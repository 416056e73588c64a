// The launch path allocates nothing once warm (DESIGN decision 5): argument
// validation, spec building and backend selection are counted here on the CPU
// with a global operator new hook (the GPU half is the registry's shared-lock lookup).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "attnjit/xqa.hpp"
#include "ops/decode/decode_spec.hpp"

namespace {
std::atomic<long> g_allocations{0};
std::atomic<bool> g_counting{false};
}  // namespace

void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow forms too (std::stable_sort's buffer uses them): every new here
// pairs with the free below (ASan checks the pairing).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace attnjit {
namespace {

void* fake(uintptr_t a) { return reinterpret_cast<void*>(a); }

XqaArgs valid_args(int q_seq_len) {
  XqaArgs a;
  const int B = 8, KH = 8, G = 8, D = 128, P = 32, pages = 256;
  if (q_seq_len > 1) {
    a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {B, 1, q_seq_len, KH * G, D});
    a.output = TensorView::contiguous(fake(0x20000), DType::kBFloat16, {B, 1, q_seq_len, KH * G, D});
    a.mask = TensorView::contiguous(fake(0x30000), DType::kUInt16, {B, q_seq_len, 2});
    a.q_seq_len = q_seq_len;
  } else {
    a.q = TensorView::contiguous(fake(0x10000), DType::kBFloat16, {B, 1, KH * G, D});
    a.output = TensorView::contiguous(fake(0x20000), DType::kBFloat16, {B, 1, KH * G, D});
  }
  a.k_cache = TensorView::contiguous(fake(0x40000), DType::kFloat8E4M3, {pages, P, KH, D});
  a.v_cache = TensorView::contiguous(fake(0x50000), DType::kFloat8E4M3, {pages, P, KH, D});
  a.page_table = TensorView::contiguous(fake(0x60000), DType::kInt32, {B, pages / B});
  a.seq_lens = TensorView::contiguous(fake(0x70000), DType::kUInt32, {B, 1});
  a.workspace_buffer = TensorView::contiguous(fake(0x80000), DType::kUInt8, {1 << 20});
  a.semaphores = TensorView::contiguous(fake(0x90000), DType::kUInt32, {1024});
  a.sinks = TensorView::contiguous(fake(0xa0000), DType::kFloat32, {KH, G});
  a.num_kv_heads = KH;
  a.page_size = P;
  a.sliding_win_size = 1000;
  return a;
}

TEST(LaunchPath, ValidationAndSpecBuildingAllocateNothing) {
  const spec::Arch arch = spec::Arch::parse("sm_90a");
  for (int q_seq_len : {1, 4}) {
    const XqaArgs a = valid_args(q_seq_len);
    ops::plan_xqa(a, arch);  // warm: any lazy statics
    g_allocations = 0;
    g_counting = true;
    for (int i = 0; i < 1000; ++i) {
      ops::XqaPlan p = ops::plan_xqa(a, arch);
      ASSERT_EQ(p.spec.backend, spec::Backend::kXqa);
    }
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "q_seq_len " << q_seq_len;
  }
}

TEST(LaunchPath, TheHookCountsAllocations) {
  g_allocations = 0;
  g_counting = true;
  auto* p = new int(3);
  g_counting = false;
  delete p;
  EXPECT_EQ(g_allocations.load(), 1);
}

}  // namespace
}  // namespace attnjit
