// Model config loading, validation and expansion into KernelSpecs (see model_config.hpp).
#include "cli/model_config.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "attnjit/error.hpp"
#include "attnjit/decode.hpp"
#include "attnjit/fia.hpp"
#include "attnjit/mla.hpp"
#include "attnjit/xqa.hpp"
#include "ops/decode/decode_launch.hpp"
#include "ops/decode/decode_spec.hpp"
#include "ops/fia/fia_plan.hpp"
#include "ops/mla/mla_family.hpp"
#include "ops/mla/mla_plan.hpp"
#include "cli/bundled_configs.hpp"
#include "runtime/backend.hpp"
#include "util/bounded_input.hpp"

namespace attnjit::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  // Both may quote the config (a key, a value's dump): bounded and escaped.
  throw Error(ErrorCode::kInvalidArgument, fmt::format("model config: {}: {}", util::quote_input(field),
                                                       util::quote_input(what, 2 * util::kMaxQuotedChars)));
}

// e.what() without its "attnjit: invalid argument: " prefix, which bad() adds again.
std::string bare(const Error& e) { return util::bare_message(e); }

// An integer that fits in int, or nullopt: get<int>() would silently truncate
// 4294967328 to 32.
std::optional<int> as_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int>::max())) return std::nullopt;
    return static_cast<int>(u);
  }
  if (!v.is_number_integer()) return std::nullopt;
  const auto i = v.get<int64_t>();
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) return std::nullopt;
  return static_cast<int>(i);
}

// A string field (nlohmann's value() throws a type_error that names no field).
std::string get_string(const json& obj, const char* key, const std::string& fallback, const std::string& field) {
  if (!obj.contains(key)) return fallback;
  if (!obj[key].is_string())
    bad(field, fmt::format("expected a string, got {} {}", obj[key].type_name(), obj[key].dump()));
  return obj[key].get<std::string>();
}

const std::set<std::string> kTopLevelFields = {
    "name", "description", "source", "num_attention_heads", "num_key_value_heads", "head_dim",
    "dtype", "kv_cache_dtypes", "page_sizes", "kv_layouts", "sliding_window", "ops"};
const std::set<std::string> kDecodeFields = {"op", "kv_cache_dtypes", "kv_layouts", "backend",
                                             "pos_encodings", "return_lse", "logits_soft_cap",
                                             "sliding_window"};
const std::set<std::string> kXqaFields = {"op", "kv_cache_dtypes", "page_sizes", "kv_layouts",
                                          "backend", "spec_decode", "sinks", "sliding_window",
                                          "scale_pointers", "fp8_output"};
// fused_infer_attention_score: which sparse modes (0 without a mask unless
// atten_mask), paged block sizes (0: contiguous), LSE, pse, and Q_S = 1 too.
const std::set<std::string> kFiaFields = {"op", "backend", "sparse_modes", "atten_mask", "block_sizes",
                                          "return_lse", "pse_shift", "decode", "query_rope"};
const std::set<std::string> kMlaFields = {"op", "kv_cache_dtypes", "page_sizes", "backend", "kv_lora_rank",
                                          "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sinks",
                                          "scale_pointers", "return_lse", "sparse", "tensor_parallel"};

void check_fields(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& f : allowed) list += (list.empty() ? "" : ", ") + f;
      bad(where + "." + it.key(), fmt::format("unknown field (known: {})", list));
    }
}

int get_int(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key)) bad(where + key, "missing (an integer)");
  const std::optional<int> v = as_int(obj[key]);
  if (!v || *v <= 0)
    bad(where + key, fmt::format("expected a positive integer below 2^31, got {}", obj[key].dump()));
  return *v;
}

bool get_bool(const json& op, const char* key, bool fallback, const std::string& where) {
  if (!op.contains(key)) return fallback;
  if (!op[key].is_boolean()) bad(where + "." + key, fmt::format("expected true or false, got {}", op[key].dump()));
  return op[key].get<bool>();
}

// A list field from the op, else from the top level, else `fallback`.
json list_field(const json& config, const json& op, const char* key, const json& fallback,
                const std::string& where, std::string* field_name) {
  const json* src = op.contains(key) ? &op : config.contains(key) ? &config : nullptr;
  *field_name = src == &op ? where + "." + key : key;
  json v = src ? (*src)[key] : fallback;
  if (!v.is_array() || v.empty()) bad(*field_name, fmt::format("expected a non-empty list, got {}", v.dump()));
  return v;
}

std::vector<DType> dtype_list(const json& v, const std::string& field, const std::vector<DType>& allowed) {
  std::vector<DType> out;
  for (const auto& item : v) {
    if (!item.is_string()) bad(field, fmt::format("expected dtype names, got {}", item.dump()));
    DType d;
    try {
      d = spec::parse_dtype(item.get<std::string>());
    } catch (const Error& e) {
      bad(field, bare(e));
    }
    if (std::find(allowed.begin(), allowed.end(), d) == allowed.end()) {
      std::string names;
      for (DType a : allowed) names += (names.empty() ? "" : ", ") + std::string(dtype_name(a));
      bad(field, fmt::format("{} is not served here (expected one of: {})", item.get<std::string>(), names));
    }
    out.push_back(d);
  }
  return out;
}

std::vector<spec::KvLayout> layout_list(const json& v, const std::string& field) {
  std::vector<spec::KvLayout> out;
  for (const auto& item : v) {
    std::string s = item.is_string() ? item.get<std::string>() : "";
    std::transform(s.begin(), s.end(), s.begin(), ::toupper);
    if (s == "NHD") out.push_back(spec::KvLayout::kNHD);
    else if (s == "HND") out.push_back(spec::KvLayout::kHND);
    else bad(field, fmt::format("expected \"NHD\" or \"HND\", got {}", item.dump()));
  }
  return out;
}

// Integers only (`what` they are): which values the op serves (page sizes) is its plan's to say.
std::vector<int> int_list(const json& v, const std::string& field, const char* what) {
  std::vector<int> out;
  for (const auto& item : v) {
    const std::optional<int> p = as_int(item);
    if (!p) bad(field, fmt::format("expected {}, got {}", what, item.dump()));
    out.push_back(*p);
  }
  return out;
}
std::vector<int> page_size_list(const json& v, const std::string& field) {
  return int_list(v, field, "page sizes in tokens");
}

struct ModelShape {
  DType dtype = DType::kBFloat16;
  int head_dim = 0, heads = 0, kv_heads = 0;
  bool window = false;
};

ModelShape model_shape(const json& c) {
  ModelShape m;
  const int heads = get_int(c, "num_attention_heads", "");
  const int kv_heads = get_int(c, "num_key_value_heads", "");
  m.head_dim = get_int(c, "head_dim", "");
  if (heads % kv_heads != 0)
    bad("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}", kv_heads, heads));
  m.heads = heads;
  m.kv_heads = kv_heads;
  const std::string dt = get_string(c, "dtype", "bf16", "dtype");
  try {
    m.dtype = spec::parse_dtype(dt);
  } catch (const Error& e) {
    bad("dtype", bare(e));
  }
  if (m.dtype != DType::kBFloat16 && m.dtype != DType::kFloat16)
    bad("dtype", fmt::format("expected \"bf16\" or \"fp16\" (the query/output dtype), got \"{}\"", dt));
  if (c.contains("sliding_window") && !c["sliding_window"].is_null()) {
    const std::optional<int> w = as_int(c["sliding_window"]);
    if (!w || *w < 0)
      bad("sliding_window", fmt::format("expected a window length in tokens (or null), got {}", c["sliding_window"].dump()));
    m.window = *w > 0;
  }
  return m;
}

// A batch-1 length whose plan takes batch 1's kernel where one exists (8K tokens: past its
// threshold, one wave on 132 SMs for up to 16 KV-head row blocks).
constexpr int kBatch1Tokens = 2 * ops::kBatch1Tile32AboveTokens;

}  // namespace

const std::vector<std::string>& planned_ops() {
  static const std::vector<std::string> ops = {"prefill"};
  return ops;
}

// Folders on disk first ($ATTNJIT_CONFIG_DIR, the installed share/attnjit/configs), then
// the configs built into the binary: those need no file, so a copied binary finds them too.
std::vector<std::string> bundled_config_names() {
  std::set<std::string> names;
  for (const auto& c : embedded_configs()) names.insert(c.name);
  for (const auto& dir : config_override_dirs()) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".json") names.insert(it->path().stem().string());
  }
  return {names.begin(), names.end()};
}

std::string resolve_config_path(const std::string& path_or_name) {
  std::error_code ec;
  const auto type = fs::status(path_or_name, ec).type();
  if (type == fs::file_type::regular || bundled_content(path_or_name)) return path_or_name;
  // Something else by that name (a directory, FIFO, device): a bundled config
  // of that name wins, else load_config() says what it is.
  const bool exists = type != fs::file_type::not_found && type != fs::file_type::none;
  if (path_or_name.find('/') == std::string::npos) {
    std::string stem = path_or_name;
    if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0) stem.resize(stem.size() - 5);
    for (const auto& dir : config_override_dirs()) {
      fs::path p = fs::path(dir) / (stem + ".json");
      if (fs::is_regular_file(p, ec)) return p.string();
    }
    if (bundled_content(bundled_path(stem))) return bundled_path(stem);
  }
  if (exists) return path_or_name;
  std::string names;
  for (const auto& n : bundled_config_names()) names += (names.empty() ? "" : ", ") + n;
  throw Error(ErrorCode::kInvalidArgument,
              fmt::format("config '{}': no such file, and no bundled config of that name (bundled: {})",
                          util::quote_input(path_or_name), names.empty() ? "none found" : names));
}

json load_config(const std::string& path) {
  const std::string where = fmt::format("config '{}'", util::quote_input(path));
  const char* bundled = bundled_content(path);
  const std::string text = bundled ? std::string(bundled) : util::read_regular_file(path, "config");
  json j = util::parse_json_bounded(text, where, /*allow_comments=*/true);
  if (!j.is_object())
    throw Error(ErrorCode::kInvalidArgument, fmt::format("{}: expected a JSON object, got {}", where, j.type_name()));
  return j;
}

ModelPlan load_model_plan(const std::string& path_or_name, const std::vector<spec::Arch>& archs) {
  // A folder named by the operator that is not there would silently fall back to the
  // built-in configs: the override they meant to test would never run.
  if (const char* d = std::getenv("ATTNJIT_CONFIG_DIR"); d && *d) {
    std::error_code ec;
    if (!fs::is_directory(d, ec))
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("ATTNJIT_CONFIG_DIR '{}' is not a folder (unset it to use the bundled configs)",
                              util::quote_input(d)));
  }
  const std::string path = resolve_config_path(path_or_name);
  const json config = load_config(path);
  ModelPlan plan;
  try {
    plan = expand_model_config(config, archs);
  } catch (const Error& e) {
    if (bundled_content(path)) throw;  // a built-in config: its name is in the message's context
    throw Error(e.code(), fmt::format("config '{}': {}", util::quote_input(path), bare(e)));
  }
  plan.source = path;
  return plan;
}

ModelPlan expand_model_config(const json& c, const std::vector<spec::Arch>& archs) {
  ModelPlan plan;
  check_fields(c, kTopLevelFields, "config");
  if (!c.contains("name") || !c["name"].is_string()) bad("name", "missing (a string)");
  plan.model = c["name"].get<std::string>();
  const char* kOpsShape = "a list of {\"op\": \"decode\" | \"xqa\" | ...}";
  if (!c.contains("ops")) bad("ops", fmt::format("missing ({})", kOpsShape));
  if (!c["ops"].is_array()) bad("ops", fmt::format("expected {}, got {} {}", kOpsShape, c["ops"].type_name(), c["ops"].dump()));
  if (c["ops"].empty()) bad("ops", fmt::format("empty (expected {})", kOpsShape));

  std::set<std::string> seen;  // canonical JSON of every spec, to keep them unique
  // Specs come from the op's own planning (shapes only), as prewarm_* builds them,
  // so the op's limits and its field mapping have one copy. An argument the op
  // refuses is reported against the config field it came from.
  auto add = [&](const std::string& where, const std::string& combo, auto&& spec_on) {
    for (const auto& arch : archs) {
      spec::KernelSpec s;
      try {
        s = spec_on(arch);
      } catch (const Error& e) {
        // A backend that cannot serve the op's kernel: reported against the op's backend field.
        if (e.code() == ErrorCode::kUnsupported && std::string(e.what()).find("backend ") != std::string::npos)
          throw Error(ErrorCode::kUnsupported,
                      fmt::format("model config: {}: {} ({}): {}", util::quote_input(where + ".backend"), combo,
                                  arch.str(), util::quote_input(bare(e), 2 * util::kMaxQuotedChars)));
        if (e.code() != ErrorCode::kInvalidArgument) throw;
        const std::string why = bare(e);
        const std::string field = why.find("'page_size'") != std::string::npos      ? where + ".page_sizes"
                                  : why.find("'num_kv_heads'") != std::string::npos ? std::string("num_key_value_heads")
                                  : why.find("head_dim") != std::string::npos       ? std::string("head_dim")
                                                                                    : where;
        bad(field, fmt::format("{} ({}): {}", combo, arch.str(), why));
      }
      if (seen.insert(s.to_json().dump()).second) plan.specs.push_back(s);
    }
  };

  for (size_t i = 0; i < c["ops"].size(); ++i) {
    const json& op = c["ops"][i];
    const std::string where = fmt::format("ops[{}]", i);
    if (!op.is_object() || !op.contains("op") || !op["op"].is_string())
      bad(where, "expected an object with \"op\": \"decode\" | \"xqa\" | ...");
    const std::string name = op["op"].get<std::string>();
    const auto& planned = planned_ops();
    if (std::find(planned.begin(), planned.end(), name) != planned.end()) {
      plan.skipped.push_back({name, "family not implemented yet"});
      continue;
    }
    const bool mla = name == "mla" || name == "batch_decode_mla";
    if (name != "decode" && name != "xqa" && !mla && name != "fia" && name != "fused_infer_attention_score") {
      std::string names;
      for (const auto& p : planned) names += (names.empty() ? "" : ", ") + p;
      bad(where + ".op", fmt::format("unknown op '{}' (known: decode, xqa, mla (batch_decode_mla), fia (fused_infer_attention_score); planned: {})", name, names));
    }
    const ModelShape m = model_shape(c);
    const std::string backend_text = get_string(op, "backend", "auto", where + ".backend");
    runtime::BackendChoice backend;
    try {
      backend = runtime::parse_backend_choice(backend_text);
    } catch (const Error& e) {
      std::string why = bare(e);
      if (why.rfind("backend: ", 0) == 0) why.erase(0, 9);  // the field is named already
      bad(where + ".backend", why);
    }
    const bool window = get_bool(op, "sliding_window", m.window, where);
    std::string field;
    const json layouts_json = list_field(c, op, "kv_layouts", json::array({"NHD"}), where, &field);
    const auto layouts = layout_list(layouts_json, field);

    const Backend op_backend = static_cast<Backend>(backend);
    const KvLayout to_layout[] = {KvLayout::kNHD, KvLayout::kHND};
    const int64_t H = m.heads, KH = m.kv_heads, D = m.head_dim;

    if (name == "fia" || name == "fused_infer_attention_score") {
      check_fields(op, kFiaFields, where);
      std::vector<int> modes = {0, 3};
      if (op.contains("sparse_modes")) modes = int_list(op["sparse_modes"], where + ".sparse_modes", "sparse modes (0-4)");
      std::vector<int> blocks = {0};
      if (op.contains("block_sizes")) blocks = int_list(op["block_sizes"], where + ".block_sizes", "block sizes in tokens");
      const bool mask = get_bool(op, "atten_mask", false, where);
      const bool lse = get_bool(op, "return_lse", false, where);
      const bool pse = get_bool(op, "pse_shift", false, where);
      const bool with_decode = get_bool(op, "decode", true, where);
      if (get_bool(op, "query_rope", false, where)) {
        // MLA inside FIA: query D 512 + query_rope 64, the key's one head (also value) + key_rope,
        // paged (block_sizes 16 or 128, default 128); Q_S 2 (sparse 3) and 1 (sparse 0), one kernel.
        if (!op.contains("block_sizes")) blocks = {128};
        std::vector<int> mla_qs = {2};
        if (with_decode) mla_qs.push_back(1);
        for (int bs : blocks)
          for (int qs : mla_qs) {
            FiaArgs a;
            a.input_layout = "BSND";
            a.num_heads = H;
            a.num_key_value_heads = 1;
            a.query = TensorView::contiguous(nullptr, m.dtype, {1, qs, H, 512});
            a.query_rope = TensorView::contiguous(nullptr, m.dtype, {1, qs, H, 64});
            a.attention_out = a.query;
            a.key = TensorView::contiguous(nullptr, m.dtype, {1, bs, 512});
            a.value = a.key;
            a.key_rope = TensorView::contiguous(nullptr, m.dtype, {1, bs, 64});
            a.block_table = TensorView::contiguous(nullptr, DType::kInt32, {1, 1});
            a.block_size = bs;
            a.actual_seq_lengths_kv = {bs};
            if (qs > 1) a.sparse_mode = 3, a.atten_mask = TensorView::contiguous(nullptr, DType::kUInt8, {2048, 2048});
            if (pse) a.pse_shift = TensorView::contiguous(nullptr, m.dtype, {1, H, qs, bs});  // the op names it
            a.softmax_lse_flag = lse;
            if (lse) a.softmax_lse = TensorView::contiguous(nullptr, DType::kFloat32, {1, H, qs, 1});
            a.backend = op_backend;
            add(where, fmt::format("fia with query_rope, block_size {}, Q_S {}", bs, qs),
                [&](const spec::Arch& arch) { return ops::fia_prewarm_spec(a, arch); });
          }
        continue;
      }
      std::vector<int> q_seqs = {128};
      if (with_decode) q_seqs.push_back(1);
      for (int bs : blocks)
        for (int qs : q_seqs)
          for (int mode : modes) {
            if (qs == 1 && mode != modes.front()) continue;
            // Q_S = 1 ignores sparse_mode (and refuses the compressed 2048x2048 mask).
            const int used_mode = qs == 1 ? 0 : mode;
            const bool full_mask = mask || mode == 1;
            // The op's arguments, shapes only: batch 1, BSND, KV_S 2048 (paged: one block).
            FiaArgs a;
            a.input_layout = "BSND";
            a.num_heads = H;
            a.num_key_value_heads = KH;
            a.query = TensorView::contiguous(nullptr, m.dtype, {1, qs, H, D});
            a.attention_out = a.query;
            const int64_t kv_s = bs > 0 ? bs : 2048;
            a.key = bs > 0 ? TensorView::contiguous(nullptr, m.dtype, {1, bs, KH * D})
                           : TensorView::contiguous(nullptr, m.dtype, {1, kv_s, KH, D});
            a.value = a.key;
            if (bs > 0) {
              a.block_table = TensorView::contiguous(nullptr, DType::kInt32, {1, 1});
              a.block_size = bs;
              a.actual_seq_lengths_kv = {bs};
            }
            a.sparse_mode = used_mode;
            if (used_mode >= 2) a.atten_mask = TensorView::contiguous(nullptr, DType::kUInt8, {2048, 2048});
            else if (full_mask)
              a.atten_mask = qs == 1 ? TensorView::contiguous(nullptr, DType::kUInt8, {1, kv_s})
                                     : TensorView::contiguous(nullptr, DType::kUInt8, {qs, kv_s});
            if (pse) a.pse_shift = TensorView::contiguous(nullptr, m.dtype, {1, H, qs, kv_s});
            a.softmax_lse_flag = lse;
            if (lse) a.softmax_lse = TensorView::contiguous(nullptr, DType::kFloat32, {1, H, qs, 1});
            a.backend = op_backend;
            add(where, fmt::format("fia, sparse_mode {}, block_size {}, Q_S {}", used_mode, bs, qs),
                [&](const spec::Arch& arch) { return ops::fia_prewarm_spec(a, arch); });
          }
    } else if (name == "decode") {
      check_fields(op, kDecodeFields, where);
      const auto kv_dtypes = dtype_list(
          list_field(c, op, "kv_cache_dtypes", json::array({dtype_name(m.dtype)}), where, &field), field,
          {m.dtype, DType::kFloat8E4M3, DType::kFloat8E5M2});
      std::vector<PosEncodingMode> pos = {PosEncodingMode::kNone};
      if (op.contains("pos_encodings")) {
        pos.clear();
        for (const auto& p : list_field(c, op, "pos_encodings", json(), where, &field)) {
          const std::string t = p.is_string() ? p.get<std::string>() : "";
          if (t == "none") pos.push_back(PosEncodingMode::kNone);
          else if (t == "rope_llama") pos.push_back(PosEncodingMode::kRopeLlama);
          else if (t == "alibi") pos.push_back(PosEncodingMode::kAlibi);
          else bad(field, fmt::format("expected \"none\", \"rope_llama\" or \"alibi\", got {}", p.dump()));
        }
      }
      const bool lse = get_bool(op, "return_lse", false, where);
      const bool soft_cap = get_bool(op, "logits_soft_cap", false, where);
      for (DType kv : kv_dtypes)
        for (auto layout : layouts)
          for (auto pe : pos)
            // One KV token, and a sequence long enough for batch 1's own kernel where there is one
            // (ops::decode_batch1_tile32; a single request is batch 1).
            for (int64_t kv_len : {int64_t(1), int64_t(kBatch1Tokens)}) {
              // single_decode_with_kv_cache's arguments, shapes only.
              const KvLayout l = to_layout[static_cast<int>(layout)];
              const TensorView q = TensorView::contiguous(nullptr, m.dtype, {H, D});
              const TensorView k = l == KvLayout::kNHD ? TensorView::contiguous(nullptr, kv, {kv_len, KH, D})
                                                       : TensorView::contiguous(nullptr, kv, {KH, kv_len, D});
              const TensorView lse_view = TensorView::contiguous(nullptr, DType::kFloat32, {H});
              SingleDecodeOptions o;
              o.kv_layout = l;
              o.pos_encoding_mode = pe;
              o.logits_soft_cap = soft_cap ? 30.0f : 0.0f;
              o.window_left = window ? 4096 : -1;
              o.backend = op_backend;
              add(where, fmt::format("decode, kv {}, {}", dtype_name(kv), l == KvLayout::kNHD ? "NHD" : "HND"),
                  [&](const spec::Arch& arch) {
                    return ops::single_decode_prewarm_spec(q, k, k, q, o, lse ? &lse_view : nullptr, arch);
                  });
            }
    } else if (mla) {
      check_fields(op, kMlaFields, where);
      const auto kv_dtypes = dtype_list(
          list_field(c, op, "kv_cache_dtypes", json::array({dtype_name(m.dtype)}), where, &field), field,
          {m.dtype, DType::kFloat8E4M3});
      const auto pages = page_size_list(list_field(c, op, "page_sizes", json::array({64}), where, &field), field);
      const bool sinks = get_bool(op, "sinks", false, where);
      const bool scale_pointers = get_bool(op, "scale_pointers", false, where);
      const bool lse = get_bool(op, "return_lse", false, where);
      const bool sparse = get_bool(op, "sparse", false, where);
      // Tensor-parallel degrees: each GPU runs num_attention_heads / tp heads, and at 16 or
      // fewer a CTA the wgmma kernel takes its narrow tile, a kernel of its own.
      std::vector<int64_t> head_counts;
      for (int tp : int_list(list_field(c, op, "tensor_parallel", json::array({1}), where, &field), field,
                             "tensor-parallel degrees")) {
        if (tp < 1 || H % tp != 0)
          bad(field, fmt::format("{} does not divide num_attention_heads {}", tp, H));
        head_counts.push_back(H / tp);
      }
      const float* fake_scale = reinterpret_cast<const float*>(uintptr_t{256});
      for (DType kv : kv_dtypes) {
        // An fp8 cache is read with the model's query dtype or with an fp8 query (FlashInfer's
        // pairs; engines quantize q too), so both variants are built; an fp8 query writes bf16.
        std::vector<DType> q_dtypes = {m.dtype};
        if (kv == DType::kFloat8E4M3) q_dtypes.push_back(DType::kFloat8E4M3);
        for (DType q : q_dtypes)
          for (int page : pages)
            for (bool sp : {false, true})
              for (int64_t heads : head_counts) {
                if (sp && !sparse) continue;
                // batch_decode_mla's arguments, shapes only (batch 1, one page).
                MlaArgs a;
                a.query = TensorView::contiguous(nullptr, q, {1, 1, heads, 576});
                a.kv_cache = TensorView::contiguous(nullptr, kv, {1, page, 576});
                a.block_tables = TensorView::contiguous(nullptr, DType::kInt32, {1, 1});
                a.seq_lens = TensorView::contiguous(nullptr, DType::kInt32, {1});
                a.max_seq_len = page;
                a.out = TensorView::contiguous(nullptr, ops::mla_out_dtype(q), {1, 1, heads, 512});
                if (op.contains("kv_lora_rank")) a.kv_lora_rank = get_int(op, "kv_lora_rank", where + ".");
                if (op.contains("qk_rope_head_dim")) a.qk_rope_head_dim = get_int(op, "qk_rope_head_dim", where + ".");
                if (op.contains("qk_nope_head_dim")) a.qk_nope_head_dim = get_int(op, "qk_nope_head_dim", where + ".");
                if (sp) {
                  a.sparse_mla_top_k = 1;
                  a.indices = TensorView::contiguous(nullptr, DType::kInt32, {1, 1, 1});
                }
                if (sinks) a.sinks = TensorView::contiguous(nullptr, DType::kFloat32, {heads});
                if (lse) a.lse = TensorView::contiguous(nullptr, DType::kFloat32, {1, heads});
                if (scale_pointers) a.bmm1_scale = a.bmm2_scale = fake_scale;
                a.backend = op_backend;
                const std::string combo = fmt::format("mla, kv {}, query {}, page_size {}, {} heads{}", dtype_name(kv),
                                                      dtype_name(q), page, heads, sp ? ", sparse" : "");
                add(where, combo, [&](const spec::Arch& arch) { return ops::mla_prewarm_spec(a, arch); });
              }
      }
    } else {
      check_fields(op, kXqaFields, where);
      const auto kv_dtypes = dtype_list(
          list_field(c, op, "kv_cache_dtypes", json::array({dtype_name(m.dtype)}), where, &field), field,
          {m.dtype, DType::kFloat8E4M3});
      const auto pages = page_size_list(list_field(c, op, "page_sizes", json::array({32}), where, &field), field);
      const bool sinks = get_bool(op, "sinks", false, where);
      const bool scale_pointers = get_bool(op, "scale_pointers", false, where);
      const bool fp8_out = get_bool(op, "fp8_output", false, where);
      // The fp8 output variant exists only next to an fp8 KV cache: asking for it
      // without one would silently prewarm nothing.
      if (fp8_out && std::find(kv_dtypes.begin(), kv_dtypes.end(), DType::kFloat8E4M3) == kv_dtypes.end())
        bad(where + ".fp8_output",
            "needs fp8_e4m3 in kv_cache_dtypes (the fp8 output is built only for an fp8 KV cache)");
      std::vector<int> q_seq_lens = {1};
      if (get_bool(op, "spec_decode", false, where)) q_seq_lens.push_back(2);  // > 1: the masked kernel
      // A device scale pointer, never read while planning from shapes.
      const float* fake_scale = reinterpret_cast<const float*>(uintptr_t{256});
      for (DType kv : kv_dtypes)
        for (int page : pages)
          for (auto layout : layouts)
            for (int qlen : q_seq_lens)
              for (DType out : {m.dtype, DType::kFloat8E4M3})
                // One page, and a sequence long enough for batch 1's own kernel where there is one
                // (ops::decode_batch1_tile32): the two specs every batch and length need.
                for (int64_t pages_per_seq : {int64_t(1), int64_t((kBatch1Tokens + page - 1) / page)}) {
                  if (out == DType::kFloat8E4M3 && !(fp8_out && kv == DType::kFloat8E4M3)) continue;
                  // xqa's arguments, shapes only (batch 1).
                  XqaArgs a;
                  const KvLayout l = to_layout[static_cast<int>(layout)];
                  a.q = qlen > 1 ? TensorView::contiguous(nullptr, m.dtype, {1, 1, qlen, H, D})
                                 : TensorView::contiguous(nullptr, m.dtype, {1, 1, H, D});
                  a.output = a.q;
                  a.output.dtype = out;
                  a.k_cache = l == KvLayout::kNHD ? TensorView::contiguous(nullptr, kv, {1, page, KH, D})
                                                  : TensorView::contiguous(nullptr, kv, {1, KH, page, D});
                  a.v_cache = a.k_cache;
                  a.page_table = TensorView::contiguous(nullptr, DType::kInt32, {1, pages_per_seq});
                  a.seq_lens = TensorView::contiguous(nullptr, DType::kUInt32, {1});
                  a.num_kv_heads = m.kv_heads;
                  a.page_size = page;
                  a.kv_layout = l;
                  a.q_seq_len = qlen;
                  if (qlen > 1)
                    a.mask = TensorView::contiguous(nullptr, DType::kUInt16, {1, qlen, ((qlen + 31) / 32) * 2});
                  if (sinks) a.sinks = TensorView::contiguous(nullptr, DType::kFloat32, {KH, H / KH});
                  a.sliding_win_size = window ? 4096 : 0;
                  if (scale_pointers) a.q_scale = fake_scale;
                  if (scale_pointers && kv == DType::kFloat8E4M3) a.kv_scale = fake_scale;
                  a.backend = op_backend;
                  add(where,
                      fmt::format("xqa, kv {}, page_size {}, {}", dtype_name(kv), page, l == KvLayout::kNHD ? "NHD" : "HND"),
                      [&](const spec::Arch& arch) { return ops::xqa_prewarm_spec(a, arch); });
                }
    }
  }
  return plan;
}

}  // namespace attnjit::cli
