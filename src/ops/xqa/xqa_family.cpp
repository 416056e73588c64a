// The xqa family's registration (its line is in src/spec/families.def): paged
// GQA decode renders the decode family's kernel, so it registers those pieces.
#include "decode/decode_params.cuh"
#include "ops/decode/decode_generator.hpp"

namespace attnjit::ops::xqa {

const render::Family& family() {
  static const render::Family f = {spec::OpFamily::kXqa, decode_can_implement, decode_generate,
                                   &decode_backend_table(), "decode/decode_params.cuh", sizeof(DecodeParams)};
  return f;
}

}  // namespace attnjit::ops::xqa
