// attnjit._ext.trtllm_batch_decode_with_kv_cache_mla: FlashInfer's MLA decode arguments
// -> attnjit::MlaArgs -> batch_decode_mla or prewarm_mla; plus mla_workspace_bytes.
#include "attnjit/mla.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "errors.hpp"
#include "registry.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;

namespace attnjit_py {
namespace {

attnjit::LseBase lse_base_from_name(const std::string& n) {
  if (n == "e") return attnjit::LseBase::kE;
  if (n == "2") return attnjit::LseBase::kTwo;
  invalid_argument("lse_base", "'e' or '2'", "'" + n + "'");
}

// arch None launches on `stream`; a string prewarms for that arch ("" = this GPU).
// Sparse (sparse_mla_top_k > 0) takes FlashInfer's convention: block_tables is the
// [batch, q_len_per_request, top_k] index tensor. The C++ op has them apart, so the
// indices go to MlaArgs::indices and block_tables becomes a [batch, pages] view that
// the sparse kernel never reads (it only bounds max_seq_len).
nb::object mla_call(std::optional<std::string> arch, uintptr_t stream, nb::handle query, nb::handle kv_cache,
                    nb::handle workspace_buffer, nb::handle qk_nope_head_dim, nb::handle kv_lora_rank,
                    nb::handle qk_rope_head_dim, nb::handle block_tables, nb::handle seq_lens, nb::handle max_seq_len_arg,
                    nb::handle sparse_mla_top_k_arg,
                    nb::handle out, nb::handle bmm1_scale, nb::handle bmm2_scale, nb::handle sinks,
                    std::optional<bool> enable_pdl, const std::string& backend, nb::handle lse,
                    const std::string& lse_base, nb::handle sm_count) {
  TensorArgs t(arch ? Mode::kPrewarm : Mode::kLaunch);
  attnjit::MlaArgs a;
  a.query = t.tensor(query, "query");
  a.kv_cache = t.tensor(kv_cache, "kv_cache");
  a.workspace_buffer = t.tensor(workspace_buffer, "workspace_buffer");
  a.qk_nope_head_dim = int_arg(qk_nope_head_dim, "qk_nope_head_dim");
  a.kv_lora_rank = int_arg(kv_lora_rank, "kv_lora_rank");
  a.qk_rope_head_dim = int_arg(qk_rope_head_dim, "qk_rope_head_dim");
  const int max_seq_len = int_arg(max_seq_len_arg, "max_seq_len");
  const int sparse_mla_top_k = int_arg(sparse_mla_top_k_arg, "sparse_mla_top_k");
  a.block_tables = t.tensor(block_tables, "block_tables");
  a.seq_lens = t.tensor(seq_lens, "seq_lens");
  a.max_seq_len = max_seq_len;
  a.sparse_mla_top_k = sparse_mla_top_k;
  if (sparse_mla_top_k > 0) {
    if (a.block_tables.rank != 3)
      invalid_argument("block_tables", "[batch, q_len_per_request, sparse_mla_top_k] int32 token indices (sparse)",
                       a.block_tables.rank ? a.block_tables.shape_string() : std::string("none"));
    a.indices = a.block_tables;
    const int64_t batch = a.indices.shape[0];
    const int kr = a.kv_cache.rank;
    const int64_t page = kr >= 2 ? a.kv_cache.shape[kr - 2] : 0;
    const int64_t pages = page > 0 ? (int64_t{max_seq_len} + page - 1) / page : 1;
    a.block_tables = attnjit::TensorView::contiguous(a.indices.data, attnjit::DType::kInt32,
                                                     {batch, pages > 0 ? pages : 1});
  }
  a.out = t.tensor(out, "out");
  a.bmm1_scale = t.scale(bmm1_scale, "bmm1_scale");
  a.bmm2_scale = t.scale(bmm2_scale, "bmm2_scale");
  a.sinks = t.tensor(sinks, "sinks");
  a.enable_pdl = enable_pdl;
  a.backend = backend_from_name(backend);
  a.lse = t.tensor(lse, "lse");
  a.lse_base = lse_base_from_name(lse_base);
  a.sm_count = optional_int_arg(sm_count, "sm_count");
  if (arch) {
    std::string name;
    {
      nb::gil_scoped_release release;  // a miss compiles for seconds
      name = attnjit::prewarm_mla(a, *arch);
    }
    return nb::str(name.c_str());
  }
  {
    nb::gil_scoped_release release;
    attnjit::batch_decode_mla(a, reinterpret_cast<attnjit::Stream>(stream));
  }
  return nb::none();
}

void bind_mla(nb::module_& m) {
  m.def("trtllm_batch_decode_with_kv_cache_mla", &mla_call, nb::arg("arch").none(), nb::arg("stream"),
        nb::arg("query").none(), nb::arg("kv_cache").none(), nb::arg("workspace_buffer").none(),
        nb::arg("qk_nope_head_dim").none(), nb::arg("kv_lora_rank").none(), nb::arg("qk_rope_head_dim").none(),
        nb::arg("block_tables").none(), nb::arg("seq_lens").none(), nb::arg("max_seq_len").none(),
        nb::arg("sparse_mla_top_k").none(), nb::arg("out").none(), nb::arg("bmm1_scale").none(),
        nb::arg("bmm2_scale").none(), nb::arg("sinks").none(), nb::arg("enable_pdl").none(), nb::arg("backend"),
        nb::arg("lse").none(), nb::arg("lse_base"), nb::arg("sm_count").none());
  m.def("mla_workspace_bytes", &attnjit::mla_workspace_bytes, nb::arg("batch"), nb::arg("num_heads"),
        nb::arg("q_len_per_request"), nb::arg("max_seq_len"), nb::arg("sm_count"), nb::arg("sparse_mla_top_k") = 0);
}
ATTNJIT_PY_OP(bind_mla);

}  // namespace
}  // namespace attnjit_py
