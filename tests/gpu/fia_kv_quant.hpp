// Quantised K/V (antiquant) for the FIA GPU tests: the raw int8 or int4 values, the
// scale and offset tensors in each of the seed's shapes, and the dequantised value
// the float64 reference reads, (x + offset) * scale (the rule).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attnjit/fia.hpp"
#include "common/device_tensor.hpp"
#include "util/host_dtype.hpp"

namespace attnjit::fia_gpu {

struct FiaKvQuant {
  int bits = 0;           // 0: fp16/bf16 K/V; 8: int8; 4: int4 packed eight to an int32
  bool combined = false;  // antiquant_scale/offset (K at index 0, V at 1); else key_/value_antiquant_*
  int key_mode = 0, value_mode = 0;  // the separate modes; combined: antiquant_mode = key_mode
  bool per_tensor = false;           // mode 0's (1,) shape ((2,) combined)
  int channel_shape = 0;             // mode 0: (1, N, 1, D), (1, N, D) or (1, H) (combined: by layout)
  bool offset = false;
  int octaves = 0;  // > 0: each scale also times 2^k, k uniform in [-octaves, octaves]
};

inline std::string describe(const FiaKvQuant& q) {
  if (!q.bits) return "";
  return " kv" + std::to_string(q.bits) + (q.combined ? " combined" : " separate") + " modes" +
         std::to_string(q.key_mode) + "/" + std::to_string(q.value_mode) + (q.per_tensor ? " per-tensor" : "") +
         " ch" + std::to_string(q.channel_shape) + (q.offset ? " offset" : "") +
         (q.octaves ? " octaves" + std::to_string(q.octaves) : "");
}

// Where element (batch b, KV head hk, position pos, channel d) of a scale lives; blk
// and off are the block and offset of pos under a block table (modes 4 and 5).
struct KvQuantAt {
  int b, hk, pos, blk, off, d;
};

class KvQuantData {
 public:
  // B batches, KN KV heads, head dims D/DV, S scale positions (the key's S, or the paged
  // capacity), nb blocks of bs tokens (paged), the query's dtype and layout, Q_S = 1.
  KvQuantData(const FiaKvQuant& q, int B, int KN, int D, int DV, int S, int nb, int bs, DType qd,
              const std::string& layout, bool decode, std::mt19937& rng)
      : q_(q), B_(B), KN_(KN), D_(D), DV_(DV), S_(S), nb_(nb), bs_(bs), qd_(qd), layout_(layout), decode_(decode) {
    const int key_mode = q.key_mode, value_mode = q.combined ? q.key_mode : q.value_mode;
    make(false, key_mode, rng);
    make(true, value_mode, rng);
  }

  // Random raw values: int8 in [-127, 127], int4 in [-8, 7].
  std::vector<float> raw(size_t n, std::mt19937& rng) const {
    std::vector<float> v(n);
    for (float& x : v) x = q_.bits == 8 ? float(int(rng() % 255) - 127) : float(int(rng() % 16) - 8);
    return v;
  }
  DType storage() const { return q_.bits == 8 ? DType::kInt8 : DType::kInt32; }
  int pack() const { return q_.bits == 4 ? 8 : 1; }
  // The K/V tensor of raw values (logical shape, last dim unpacked) as the device stores it.
  void upload(testing::DeviceTensor& t, std::vector<int64_t> shape, const std::vector<float>& values) const {
    shape.back() /= pack();
    t.allocate(storage(), shape);
    if (q_.bits == 8) {
      std::vector<int8_t> b(values.size());
      for (size_t i = 0; i < values.size(); ++i) b[i] = int8_t(values[i]);
      t.upload_pod(b);
    } else {
      std::vector<uint32_t> w(values.size() / 8, 0u);
      for (size_t i = 0; i < values.size(); ++i)  // low nibble first along the last dim
        w[i / 8] |= (uint32_t(int(values[i])) & 0xFu) << (4 * (i % 8));
      t.upload_pod(w);
    }
  }

  // Poisons the per-token scales of positions a batch does not hold (outside
  // [first, first + len)): a kernel that reads them turns NaN.
  void poison_tokens(int b, int first, int len) {
    for (int value = 0; value < 2; ++value) {
      Param& p = value ? v_ : k_;
      if (p.dtype != DType::kFloat32 || p.token_axis != 1) continue;
      for (int pos = 0; pos < S_; ++pos) {
        if (pos >= first && pos < first + len) continue;
        for (int hk = 0; hk < KN_; ++hk) {
          const size_t i = index(value, KvQuantAt{b, hk, pos, 0, 0, 0});
          scale_[i] = NAN;
          if (q_.offset) offset_[i] = NAN;
        }
      }
    }
  }

  // Uploads the scale and offset tensors and points the arguments at them.
  void bind(FiaArgs& a) {
    scale_t_.clear();
    auto make_tensor = [&](const Param& p, const std::vector<float>& host, size_t at) {
      scale_t_.emplace_back();
      testing::DeviceTensor& t = scale_t_.back();
      t.allocate(p.dtype, p.shape);
      t.upload_floats(std::vector<float>(host.begin() + long(at), host.begin() + long(at + p.numel())));
      return t.view;
    };
    scale_t_.reserve(4);
    if (q_.combined) {
      a.antiquant_scale = make_tensor(k_, scale_, 0);
      if (q_.offset) a.antiquant_offset = make_tensor(k_, offset_, 0);
      a.antiquant_mode = q_.key_mode;
    } else {
      a.key_antiquant_scale = make_tensor(k_, scale_, k_.base);
      a.value_antiquant_scale = make_tensor(v_, scale_, v_.base);
      if (q_.offset) {
        a.key_antiquant_offset = make_tensor(k_, offset_, k_.base);
        a.value_antiquant_offset = make_tensor(v_, offset_, v_.base);
      }
      a.key_antiquant_mode = q_.key_mode;
      a.value_antiquant_mode = q_.value_mode;
    }
  }

  // The scale of the element at `at`.
  double scale(bool value, const KvQuantAt& at) const { return double(scale_[index(value, at)]); }

  // The dequantised value of raw x at `at`.
  double dequant(bool value, const KvQuantAt& at, double x) const {
    const size_t i = index(value, at);
    return (x + (q_.offset ? double(offset_[i]) : 0.0)) * double(scale_[i]);
  }

 private:
  struct Param {
    std::vector<int64_t> shape;
    DType dtype = DType::kFloat32;
    size_t base = 0;     // first element in the host vectors
    int token_axis = 0;  // 1: indexed by (b, pos); 2: by (blk, off); 0: by neither
    size_t numel() const {
      size_t n = 1;
      for (auto s : shape) n *= size_t(s);
      return n;
    }
  };

  // The seed's shape for `mode` (combined: the (2, ...) tensor's, whose half V takes).
  void make(bool value, int mode, std::mt19937& rng) {
    Param& p = value ? v_ : k_;
    const int64_t N = KN_, D = value ? DV_ : D_;
    p.dtype = qd_;
    if (q_.combined) {
      if (mode == 1 && decode_) p.shape = {2, B_, S_}, p.dtype = DType::kFloat32, p.token_axis = 1;
      else if (q_.per_tensor) p.shape = {2};
      else if (layout_ == "BSH") p.shape = {2, N * D};
      else if (layout_ == "BSND") p.shape = {2, N, D};
      else p.shape = {2, N, 1, D};
      if (value) {  // one tensor for both: V's half follows K's
        p.base = 0;
        return;
      }
    } else {
      switch (mode) {
        case 0:
          p.shape = q_.per_tensor ? std::vector<int64_t>{1}
                    : q_.channel_shape == 0 ? std::vector<int64_t>{1, N, 1, D}
                    : q_.channel_shape == 1 ? std::vector<int64_t>{1, N, D}
                                            : std::vector<int64_t>{1, N * D};
          break;
        case 1:
          // Q_S > 1 takes (B, S); Q_S = 1 (1, B, S): the lead dim of 1 changes no index.
          p.shape = decode_ ? std::vector<int64_t>{1, B_, S_} : std::vector<int64_t>{B_, S_};
          p.dtype = DType::kFloat32, p.token_axis = 1;
          break;
        case 2: p.shape = {N}; break;
        case 3: p.shape = {B_, N, S_}, p.dtype = DType::kFloat32, p.token_axis = 1; break;
        case 4: p.shape = {nb_, bs_}, p.dtype = DType::kFloat32, p.token_axis = 2; break;
        default: p.shape = {nb_, N, bs_}, p.dtype = DType::kFloat32, p.token_axis = 2; break;
      }
      p.base = scale_.size();
    }
    // Scales spread the raw range to about unit values; offsets a few units.
    const float unit = q_.bits == 8 ? 1.0f / 64 : 1.0f / 4;
    const size_t n = p.numel();
    std::vector<float> s(n), o(n);
    for (size_t i = 0; i < n; ++i) {
      s[i] = unit * (0.5f + float(rng() % 1000) / 1000.0f);
      if (q_.octaves) s[i] = std::ldexp(s[i], int(rng() % (2 * q_.octaves + 1)) - q_.octaves);
      o[i] = float(int(rng() % 25) - 12) / 4.0f;
    }
    s = util::quantize(s, p.dtype);
    o = util::quantize(o, p.dtype);
    scale_.insert(scale_.end(), s.begin(), s.end());
    offset_.insert(offset_.end(), o.begin(), o.end());
  }

  size_t index(bool value, const KvQuantAt& at) const {
    const Param& p = value ? v_ : k_;
    const int mode = q_.combined ? q_.key_mode : value ? q_.value_mode : q_.key_mode;
    const int64_t D = value ? DV_ : D_;
    size_t i = 0;
    if (q_.combined) {
      const size_t half = p.numel() / 2;
      if (mode == 1 && decode_) i = size_t(at.b) * S_ + at.pos;  // Q_S > 1 ignores antiquant_mode: per channel
      else if (!q_.per_tensor) i = size_t(at.hk) * D + at.d;
      return (value ? half : 0) + i;
    }
    switch (mode) {
      case 0: i = q_.per_tensor ? 0 : size_t(at.hk) * D + at.d; break;
      case 1: i = size_t(at.b) * S_ + at.pos; break;
      case 2: i = size_t(at.hk); break;
      case 3: i = (size_t(at.b) * KN_ + at.hk) * S_ + at.pos; break;
      case 4: i = size_t(at.blk) * bs_ + at.off; break;
      default: i = (size_t(at.blk) * KN_ + at.hk) * bs_ + at.off; break;
    }
    return p.base + i;
  }

  FiaKvQuant q_;
  int B_, KN_, D_, DV_, S_, nb_, bs_;
  DType qd_;
  std::string layout_;
  bool decode_;
  Param k_, v_;
  std::vector<float> scale_, offset_;  // both tensors' host values (combined: one tensor)
  std::vector<testing::DeviceTensor> scale_t_;
};

// The full int8 path: raw int8 values in [-127, 127], and per-tensor scales that give
// logits of order 1 (scale * dequant_scale1 * q.k, with scale 1/sqrt(D)) and dequantised
// V (v * quant_scale1 * dequant_scale2) of order 1.
inline std::vector<float> int8_raw(size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = float(int(rng() % 255) - 127);
  return v;
}

inline void upload_int8(testing::DeviceTensor& t, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  t.allocate(DType::kInt8, shape);
  std::vector<int8_t> b(values.size());
  for (size_t i = 0; i < values.size(); ++i) b[i] = int8_t(values[i]);
  t.upload_pod(b);
}

struct Int8QkvScales {
  float ds1, qs1, ds2;  // dequant_scale1, quant_scale1, dequant_scale2
  void bind(FiaArgs& a, testing::DeviceTensor& d1, testing::DeviceTensor& q1, testing::DeviceTensor& d2) const {
    for (auto [t, x, arg] : {std::tuple{&d1, ds1, &a.dequant_scale1}, {&q1, qs1, &a.quant_scale1},
                             {&d2, ds2, &a.dequant_scale2}}) {
      t->allocate(DType::kFloat32, {1});
      t->upload_floats({x});
      *arg = t->view;
    }
  }
};

inline Int8QkvScales int8_qkv_scales(std::mt19937& rng) {
  Int8QkvScales s;
  s.ds1 = float(1 + rng() % 4) / (127.0f * 127.0f);  // |q k| / D ~ 127^2 / 3
  s.qs1 = float(64 + rng() % 64);                      // Ascend: P in [0, 1] to int8
  s.ds2 = float(50 + rng() % 100) / 100.0f / (127.0f * s.qs1);
  return s;
}

}  // namespace attnjit::fia_gpu
