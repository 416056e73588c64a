// See stream_lengths.hpp.
#include "ops/common/stream_lengths.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit::ops {

namespace {

struct Table {
  driver::DeviceBuffer buf;
  size_t entries = 0;
  std::vector<driver::DeviceBuffer> retired;
};

uint32_t* table_for(const char* op, int device, CUstream stream, size_t need, bool capturing) {
  static std::mutex mu;
  using Key = std::tuple<std::string, int, unsigned long long>;
  static auto* all = new std::map<Key, std::unique_ptr<Table>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  auto& t = (*all)[Key{op, device, driver::stream_id(stream)}];
  if (!t) t = std::make_unique<Table>();
  if (t->entries < need) {
    if (capturing)
      throw Error(ErrorCode::kNotPrewarmed,
                  fmt::format("{}: the lengths table for device {} must grow to {} entries while the stream is "
                              "capturing: run the op once with these shapes before capture",
                              op, device, need));
    driver::RelaxedCaptureScope relaxed;  // allocating must not break another thread's capture
    const size_t n = std::max(need * 2, t->entries);
    driver::DeviceBuffer buf(n * sizeof(uint32_t));
    if (t->buf.bytes()) t->retired.push_back(std::move(t->buf));
    t->buf = std::move(buf);
    t->entries = n;
  }
  return static_cast<uint32_t*>(t->buf.ptr());
}

}  // namespace

uint32_t* upload_stream_lengths(const char* op, int device, CUstream stream, const uint32_t* values, size_t n) {
  const bool capturing = driver::is_capturing(stream);
  uint32_t* table = table_for(op, device, stream, n, capturing);
  const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(table);
  if (!capturing) {
    driver::memcpy_htod_async(at, values, n * sizeof(uint32_t), stream);
    return table;
  }
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && values[j] == values[i]) ++j;
    driver::memset_d32_async(at + i * sizeof(uint32_t), values[i], j - i, stream);
    i = j;
  }
  return table;
}

}  // namespace attnjit::ops
