// attnjit._ext.xqa: flashinfer.xqa.xqa's arguments -> attnjit::XqaArgs -> xqa or
// prewarm_xqa; plus the workspace and semaphore sizing helpers.
#include "attnjit/xqa.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "registry.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;

namespace attnjit_py {
namespace {

// One entry for both paths: arch None launches on `stream`, a string prewarms for
// that arch ("" = this GPU) and returns the kernel's name.
nb::object xqa_call(std::optional<std::string> arch, uintptr_t stream, nb::handle q, nb::handle k_cache,
                    nb::handle v_cache, nb::handle page_table, nb::handle seq_lens, nb::handle output,
                    nb::handle workspace_buffer, nb::handle semaphores, nb::handle num_kv_heads, nb::handle page_size,
                    nb::handle sinks, nb::handle q_scale, nb::handle kv_scale, nb::handle sliding_win_size,
                    const std::string& kv_layout, nb::handle sm_count, std::optional<bool> enable_pdl,
                    float rcp_out_scale, nb::handle q_seq_len, nb::handle mask, const std::string& backend) {
  TensorArgs t(arch ? Mode::kPrewarm : Mode::kLaunch);
  attnjit::XqaArgs a;
  a.q = t.tensor(q, "q");
  a.k_cache = t.tensor(k_cache, "k_cache");
  a.v_cache = t.tensor(v_cache, "v_cache");
  a.page_table = t.tensor(page_table, "page_table");
  a.seq_lens = t.tensor(seq_lens, "seq_lens");
  a.output = t.tensor(output, "output");
  a.workspace_buffer = t.tensor(workspace_buffer, "workspace_buffer");
  a.semaphores = t.tensor(semaphores, "semaphores");
  a.num_kv_heads = int_arg(num_kv_heads, "num_kv_heads");
  a.page_size = int_arg(page_size, "page_size");
  a.sinks = t.tensor(sinks, "sinks");
  a.q_scale = t.scale(q_scale, "q_scale");
  a.kv_scale = t.scale(kv_scale, "kv_scale");
  a.sliding_win_size = int_arg(sliding_win_size, "sliding_win_size");
  a.kv_layout = layout_from_name(kv_layout);
  a.sm_count = optional_int_arg(sm_count, "sm_count");
  a.enable_pdl = enable_pdl;
  a.rcp_out_scale = rcp_out_scale;
  a.q_seq_len = int_arg(q_seq_len, "q_seq_len");
  a.mask = t.tensor(mask, "mask");
  a.backend = backend_from_name(backend);
  if (arch) {
    std::string name;
    {
      nb::gil_scoped_release release;  // a miss compiles for seconds
      name = attnjit::prewarm_xqa(a, *arch);
    }
    return nb::str(name.c_str());
  }
  {
    nb::gil_scoped_release release;
    attnjit::xqa(a, reinterpret_cast<attnjit::Stream>(stream));
  }
  return nb::none();
}

void bind_xqa(nb::module_& m) {
  m.def("xqa", &xqa_call, nb::arg("arch").none(), nb::arg("stream"), nb::arg("q").none(), nb::arg("k_cache").none(),
        nb::arg("v_cache").none(), nb::arg("page_table").none(), nb::arg("seq_lens").none(),
        nb::arg("output").none(), nb::arg("workspace_buffer").none(), nb::arg("semaphores").none(),
        nb::arg("num_kv_heads").none(), nb::arg("page_size").none(), nb::arg("sinks").none(),
        nb::arg("q_scale").none(), nb::arg("kv_scale").none(), nb::arg("sliding_win_size").none(),
        nb::arg("kv_layout"), nb::arg("sm_count").none(), nb::arg("enable_pdl").none(), nb::arg("rcp_out_scale"),
        nb::arg("q_seq_len").none(), nb::arg("mask").none(),
        nb::arg("backend"));
  m.def("xqa_workspace_bytes", &attnjit::xqa_workspace_bytes, nb::arg("batch"), nb::arg("num_kv_heads"),
        nb::arg("head_group_ratio"), nb::arg("q_seq_len"), nb::arg("head_dim"), nb::arg("max_seq_len"),
        nb::arg("sm_count"));
  m.def("xqa_semaphore_count", &attnjit::xqa_semaphore_count, nb::arg("batch"), nb::arg("num_kv_heads"),
        nb::arg("head_group_ratio"), nb::arg("q_seq_len"));
}
ATTNJIT_PY_OP(bind_xqa);

}  // namespace
}  // namespace attnjit_py
