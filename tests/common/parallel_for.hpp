// Runs f(i) for i in [0, n) on up to `threads` threads; f must only write its own slots.
// The test harness's host work (float64 reference, random data) is spread this way.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace attnjit::testing {

template <class F>
void parallel_for(int64_t n, unsigned threads, const F& f) {
  threads = static_cast<unsigned>(std::min<int64_t>(std::max(threads, 1u), std::max<int64_t>(n, 1)));
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) f(i);
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

inline unsigned hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace attnjit::testing
