// attnjit._ext.npu_fused_infer_attention_score: torch_npu's FIA arguments ->
// attnjit::FiaArgs -> fused_infer_attention_score or its prewarm.
#include "attnjit/fia.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "errors.hpp"
#include "registry.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;
using attnjit::FiaArgs;
using attnjit::TensorView;

namespace attnjit_py {
namespace {

// The seed's tensors that the op refuses today (quantisation, left padding, shared
// prefix, MLA rope): they come in a dict of the given ones only, so the common call
// converts none of them, and a given one reaches the op, which names it.
struct RareTensor {
  const char* name;
  TensorView FiaArgs::*member;
};
constexpr RareTensor kRare[] = {
    {"dequant_scale1", &FiaArgs::dequant_scale1},
    {"quant_scale1", &FiaArgs::quant_scale1},
    {"dequant_scale2", &FiaArgs::dequant_scale2},
    {"quant_scale2", &FiaArgs::quant_scale2},
    {"quant_offset2", &FiaArgs::quant_offset2},
    {"antiquant_scale", &FiaArgs::antiquant_scale},
    {"antiquant_offset", &FiaArgs::antiquant_offset},
    {"query_padding_size", &FiaArgs::query_padding_size},
    {"kv_padding_size", &FiaArgs::kv_padding_size},
    {"key_antiquant_scale", &FiaArgs::key_antiquant_scale},
    {"key_antiquant_offset", &FiaArgs::key_antiquant_offset},
    {"value_antiquant_scale", &FiaArgs::value_antiquant_scale},
    {"value_antiquant_offset", &FiaArgs::value_antiquant_offset},
    {"key_shared_prefix", &FiaArgs::key_shared_prefix},
    {"value_shared_prefix", &FiaArgs::value_shared_prefix},
    {"actual_shared_prefix_len", &FiaArgs::actual_shared_prefix_len},
    {"query_rope", &FiaArgs::query_rope},
    {"key_rope", &FiaArgs::key_rope},
    {"key_rope_antiquant_scale", &FiaArgs::key_rope_antiquant_scale},
};

// arch None launches on `stream`; a string prewarms for that arch ("" = this GPU).
nb::object fia_call(std::optional<std::string> arch, uintptr_t stream, nb::handle query, nb::handle key,
                    nb::handle value, nb::handle attention_out, nb::handle softmax_lse, nb::handle pse_shift,
                    nb::handle atten_mask, std::optional<std::vector<int64_t>> actual_seq_lengths,
                    std::optional<std::vector<int64_t>> actual_seq_lengths_kv, nb::handle block_table,
                    nb::dict rare, int64_t num_heads, double scale, int64_t pre_tokens, int64_t next_tokens,
                    const std::string& input_layout, int64_t num_key_value_heads, int64_t sparse_mode,
                    int64_t inner_precise, int64_t block_size, int64_t antiquant_mode, bool softmax_lse_flag,
                    int64_t key_antiquant_mode, int64_t value_antiquant_mode, const std::string& backend) {
  TensorArgs t(arch ? Mode::kPrewarm : Mode::kLaunch);
  FiaArgs a;
  a.query = t.tensor(query, "query");
  a.key = t.tensor(key, "key");
  a.value = t.tensor(value, "value");
  a.attention_out = t.tensor(attention_out, "attention_out");
  a.softmax_lse = t.tensor(softmax_lse, "softmax_lse");
  a.pse_shift = t.tensor(pse_shift, "pse_shift");
  a.atten_mask = t.tensor(atten_mask, "atten_mask");
  if (actual_seq_lengths) a.actual_seq_lengths = std::move(*actual_seq_lengths);
  if (actual_seq_lengths_kv) a.actual_seq_lengths_kv = std::move(*actual_seq_lengths_kv);
  a.block_table = t.tensor(block_table, "block_table");
  if (rare.size() != 0) {
    size_t known = 0;
    for (const RareTensor& r : kRare) {
      if (!rare.contains(r.name)) continue;
      ++known;
      a.*(r.member) = t.tensor(rare[r.name], r.name);
    }
    if (known != rare.size())
      invalid_argument("rare", "only names of npu_fused_infer_attention_score's optional tensors",
                       std::to_string(rare.size() - known) + " other names");
  }
  a.num_heads = num_heads;
  a.scale = scale;
  a.pre_tokens = pre_tokens;
  a.next_tokens = next_tokens;
  a.input_layout = input_layout;
  a.num_key_value_heads = num_key_value_heads;
  a.sparse_mode = sparse_mode;
  a.inner_precise = inner_precise;
  a.block_size = block_size;
  a.antiquant_mode = antiquant_mode;
  a.softmax_lse_flag = softmax_lse_flag;
  a.key_antiquant_mode = key_antiquant_mode;
  a.value_antiquant_mode = value_antiquant_mode;
  a.backend = backend_from_name(backend);
  if (arch) {
    std::string name;
    {
      nb::gil_scoped_release release;  // a miss compiles for seconds
      name = attnjit::prewarm_fused_infer_attention_score(a, *arch);
    }
    return nb::str(name.c_str());
  }
  {
    nb::gil_scoped_release release;
    attnjit::fused_infer_attention_score(a, reinterpret_cast<attnjit::Stream>(stream));
  }
  return nb::none();
}

void bind_fia(nb::module_& m) {
  m.def("npu_fused_infer_attention_score", &fia_call, nb::arg("arch").none(), nb::arg("stream"),
        nb::arg("query").none(), nb::arg("key").none(), nb::arg("value").none(), nb::arg("attention_out").none(),
        nb::arg("softmax_lse").none(), nb::arg("pse_shift").none(), nb::arg("atten_mask").none(),
        nb::arg("actual_seq_lengths").none(), nb::arg("actual_seq_lengths_kv").none(),
        nb::arg("block_table").none(), nb::arg("rare"), nb::arg("num_heads"), nb::arg("scale"),
        nb::arg("pre_tokens"), nb::arg("next_tokens"), nb::arg("input_layout"), nb::arg("num_key_value_heads"),
        nb::arg("sparse_mode"), nb::arg("inner_precise"), nb::arg("block_size"), nb::arg("antiquant_mode"),
        nb::arg("softmax_lse_flag"), nb::arg("key_antiquant_mode"), nb::arg("value_antiquant_mode"),
        nb::arg("backend"));
  // The C++ op's own name: the package exports both (tests pair every public op with an entry here).
  m.attr("fused_infer_attention_score") = m.attr("npu_fused_infer_attention_score");
}
ATTNJIT_PY_OP(bind_fia);

}  // namespace
}  // namespace attnjit_py
