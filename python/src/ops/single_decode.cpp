// attnjit._ext.single_decode_with_kv_cache: FlashInfer's arguments ->
// SingleDecodeOptions -> single_decode_with_kv_cache or its prewarm.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "attnjit/decode.hpp"
#include "registry.hpp"
#include "tensor_arg.hpp"

namespace nb = nanobind;

namespace attnjit_py {
namespace {

// arch None launches on `stream`; a string prewarms for that arch ("" = this GPU).
nb::object single_decode_call(std::optional<std::string> arch, uintptr_t stream, nb::handle q, nb::handle k,
                              nb::handle v, nb::handle out, nb::handle lse, const std::string& kv_layout,
                              const std::string& pos_encoding_mode, bool use_tensor_cores, float q_scale,
                              float k_scale, float v_scale, nb::handle window_left, float logits_soft_cap,
                              std::optional<float> sm_scale, float rope_scale, float rope_theta,
                              const std::string& backend, bool enable_pdl) {
  TensorArgs t(arch ? Mode::kPrewarm : Mode::kLaunch);
  const attnjit::TensorView qv = t.tensor(q, "q");
  const attnjit::TensorView kv = t.tensor(k, "k");
  const attnjit::TensorView vv = t.tensor(v, "v");
  const attnjit::TensorView ov = t.tensor(out, "out");
  const attnjit::TensorView lv = t.tensor(lse, "lse");
  attnjit::SingleDecodeOptions o;
  o.kv_layout = layout_from_name(kv_layout);
  o.pos_encoding_mode = pos_encoding_from_name(pos_encoding_mode);
  o.use_tensor_cores = use_tensor_cores;
  o.q_scale = q_scale;
  o.k_scale = k_scale;
  o.v_scale = v_scale;
  o.window_left = int_arg(window_left, "window_left");
  o.logits_soft_cap = logits_soft_cap;
  o.sm_scale = sm_scale;
  o.rope_scale = rope_scale;
  o.rope_theta = rope_theta;
  o.backend = backend_from_name(backend);
  o.enable_pdl = enable_pdl;
  const bool has_lse = !lse.is_none();
  if (arch) {
    std::string name;
    {
      nb::gil_scoped_release release;  // a miss compiles for seconds
      name = attnjit::prewarm_single_decode_with_kv_cache(qv, kv, vv, ov, o, has_lse ? &lv : nullptr, *arch);
    }
    return nb::str(name.c_str());
  }
  {
    nb::gil_scoped_release release;
    attnjit::single_decode_with_kv_cache(qv, kv, vv, ov, o, reinterpret_cast<attnjit::Stream>(stream),
                                         has_lse ? &lv : nullptr);
  }
  return nb::none();
}

void bind_single_decode(nb::module_& m) {
  m.def("single_decode_with_kv_cache", &single_decode_call, nb::arg("arch").none(), nb::arg("stream"), nb::arg("q").none(),
        nb::arg("k").none(), nb::arg("v").none(), nb::arg("out").none(), nb::arg("lse").none(), nb::arg("kv_layout"),
        nb::arg("pos_encoding_mode"), nb::arg("use_tensor_cores"), nb::arg("q_scale"), nb::arg("k_scale"),
        nb::arg("v_scale"), nb::arg("window_left").none(), nb::arg("logits_soft_cap"), nb::arg("sm_scale").none(),
        nb::arg("rope_scale"), nb::arg("rope_theta"), nb::arg("backend"), nb::arg("enable_pdl"));
}
ATTNJIT_PY_OP(bind_single_decode);

}  // namespace
}  // namespace attnjit_py
