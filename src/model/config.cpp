#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "attnlab/printable.h"
#include "core/json.h"
#include "model/attention/mechanism.h"
#include "model/config_values.h"
#include "model/residual/residual.h"

namespace attnlab {
namespace {

// The text of a value (model/config_values.h), shared with the grid files of `attnlab compare`.
using config_values::bad_value;
using config_values::parse_bool;
using config_values::parse_choice;
using config_values::parse_float;
using config_values::parse_int;
using config_values::parse_layers;
using config_values::strip_comment;
using config_values::trim;
using config_values::unquote;

// One configuration key: how to set it from text, how to read it back as JSON, and when it is
// meaningful (a key set while its mechanism is inactive is an error, §7.2 Validation).
struct KeyDef {
  std::string name;
  std::function<void(Config&, const std::string&, const std::string& where)> set;
  std::function<nlohmann::json(const Config&)> get;
  std::function<bool(const Config&)> active;
  std::string inactive_reason;
  // Whether the resolved configuration (to_json) shows it, when active; null: always.
  std::function<bool(const Config&)> shown = nullptr;
};

nlohmann::json layers_json(const std::vector<int>& layers) {
  return layers.empty() ? nlohmann::json("all") : nlohmann::json(layers);
}

std::vector<KeyDef> make_keys() {
  std::vector<KeyDef> k;
  auto always = [](const Config&) { return true; };
  auto add_int = [&](std::string name, auto member, long long lo, long long hi,
                     std::function<bool(const Config&)> active = nullptr, std::string why = "") {
    k.push_back({name,
                 [=](Config& c, const std::string& v, const std::string& w) { member(c) = (std::remove_reference_t<decltype(member(c))>)parse_int(name, v, w, lo, hi); },
                 [=](const Config& c) { return nlohmann::json(member(const_cast<Config&>(c))); },
                 active ? active : always, why});
  };
  auto add_float = [&](std::string name, auto member, double lo, double hi,
                       std::function<bool(const Config&)> active = nullptr, std::string why = "") {
    k.push_back({name, [=](Config& c, const std::string& v, const std::string& w) { member(c) = parse_float(name, v, w, lo, hi); },
                 [=](const Config& c) { return nlohmann::json(member(const_cast<Config&>(c))); },
                 active ? active : always, why});
  };
  auto add_choice = [&](std::string name, auto member, std::vector<std::string> choices,
                        std::function<bool(const Config&)> active = nullptr, std::string why = "") {
    k.push_back({name, [=](Config& c, const std::string& v, const std::string& w) { member(c) = parse_choice(name, v, w, choices); },
                 [=](const Config& c) { return nlohmann::json(member(const_cast<Config&>(c))); },
                 active ? active : always, why});
  };
  auto add_bool = [&](std::string name, auto member, std::function<bool(const Config&)> active = nullptr, std::string why = "") {
    k.push_back({name, [=](Config& c, const std::string& v, const std::string& w) { member(c) = parse_bool(name, v, w); },
                 [=](const Config& c) { return nlohmann::json(member(const_cast<Config&>(c))); },
                 active ? active : always, why});
  };
  auto add_string = [&](std::string name, auto member) {
    k.push_back({name, [=](Config& c, const std::string& v, const std::string&) { member(c) = unquote(v); },
                 [=](const Config& c) { return nlohmann::json(member(const_cast<Config&>(c))); }, always, ""});
  };
  const long long big = 1LL << 30;
  add_int("model.n_layer", [](Config& c) -> int& { return c.model.n_layer; }, 1, 1024);
  add_int("model.d_model", [](Config& c) -> int& { return c.model.d_model; }, 1, 1 << 16);
  add_int("model.n_head", [](Config& c) -> int& { return c.model.n_head; }, 1, 1024);
  add_int("model.kv_heads", [](Config& c) -> int& { return c.model.kv_heads; }, 1, 1024);
  add_choice("model.norm", [](Config& c) -> std::string& { return c.model.norm; }, {"layernorm", "rmsnorm"});
  add_choice("model.mlp", [](Config& c) -> std::string& { return c.model.mlp; }, {"gelu", "swiglu"});
  k.push_back({"model.mlp_hidden",
               [](Config& c, const std::string& v, const std::string& w) {
                 c.model.mlp_hidden = unquote(v) == "auto" ? 0 : (int)parse_int("model.mlp_hidden", v, w, 1, 1 << 20);
               },
               [](const Config& c) { return nlohmann::json(c.model.mlp_hidden); }, always, ""});
  k.push_back({"model.bias", [](Config& c, const std::string& v, const std::string& w) { c.model.bias = parse_bool("model.bias", v, w); },
               [](const Config& c) { return nlohmann::json(c.model.bias); }, always, ""});
  add_int("model.seq_len", [](Config& c) -> int& { return c.model.seq_len; }, 1, 1 << 20);
  add_int("model.vocab_size", [](Config& c) -> int& { return c.model.vocab_size; }, 2, 65536);

  add_choice("attn.pos", [](Config& c) -> std::string& { return c.attn.pos; }, {"none", "learned", "rope", "alibi", "goat"});
  add_float("attn.rope.base", [](Config& c) -> double& { return c.attn.rope_base; }, 1.0, 1e12,
            [](const Config& c) { return c.attn.pos == "rope" || (c.attn.pos == "goat" && c.attn.goat.other_pos == "rope"); },
            "no layer uses rope (attn.pos is not rope, nor goat with attn.goat.other_pos = rope)");
  add_choice("attn.sink", [](Config& c) -> std::string& { return c.attn.sink; }, {"none", "learned"});
  add_float("attn.sink.init", [](Config& c) -> double& { return c.attn.sink_init; }, -1e6, 1e6,
            [](const Config& c) { return c.attn.sink == "learned"; }, "attn.sink is not learned");
  add_choice("attn.xsa", [](Config& c) -> std::string& { return c.attn.xsa; }, {"off", "on", "gated"});
  auto xsa_active = [](const Config& c) { return c.attn.xsa != "off"; };
  k.push_back({"attn.xsa.layers",
               [](Config& c, const std::string& v, const std::string& w) { c.attn.xsa_layers = parse_layers("attn.xsa.layers", v, w); },
               [](const Config& c) { return layers_json(c.attn.xsa_layers); }, xsa_active, "attn.xsa is off"});
  auto goat = [](const Config& c) { return c.attn.pos == "goat"; };
  const std::string no_goat = "attn.pos is not goat";
  add_int("attn.goat.pos_rank", [](Config& c) -> int& { return c.attn.goat.pos_rank; }, 0, 256, goat, no_goat);
  add_int("attn.goat.abs_rank", [](Config& c) -> int& { return c.attn.goat.abs_rank; }, 0, 31, goat, no_goat);
  add_float("attn.goat.pos_base", [](Config& c) -> double& { return c.attn.goat.pos_base; }, 1.0, 1e12, goat, no_goat);
  add_float("attn.goat.abs_base", [](Config& c) -> double& { return c.attn.goat.abs_base; }, 1.0, 1e12, goat, no_goat);
  k.push_back({"attn.goat.key_bias",
               [](Config& c, const std::string& v, const std::string& w) { c.attn.goat.key_bias = parse_bool("attn.goat.key_bias", v, w); },
               [](const Config& c) { return nlohmann::json(c.attn.goat.key_bias); }, goat, no_goat});
  add_int("attn.goat.train_len", [](Config& c) -> int& { return c.attn.goat.train_len; }, 1, 1 << 24, goat, no_goat);
  add_choice("attn.goat.init", [](Config& c) -> std::string& { return c.attn.goat.init; }, {"seeded", "uniform"}, goat, no_goat);
  add_float("attn.goat.init_std", [](Config& c) -> double& { return c.attn.goat.init_std; }, 0.0, 10.0, goat, no_goat);
  k.push_back({"attn.goat.layers",
               [](Config& c, const std::string& v, const std::string& w) { c.attn.goat.layers = parse_layers("attn.goat.layers", v, w); },
               [](const Config& c) { return layers_json(c.attn.goat.layers); }, goat, no_goat});
  add_choice("attn.goat.other_pos", [](Config& c) -> std::string& { return c.attn.goat.other_pos; }, {"none", "rope", "alibi"}, goat,
             no_goat);

  // Residual kinds (§7.2).
  std::vector<std::string> residual_kind_names;  // the registered kinds (model/residual/residual.h)
  for (const ResidualKindInfo& kind : residual_kinds()) residual_kind_names.push_back(kind.name);
  add_choice("residual.kind", [](Config& c) -> std::string& { return c.residual.kind; }, residual_kind_names);
  add_int("residual.block_size", [](Config& c) -> int& { return c.residual.block_size; }, 1, 1 << 20,
          [](const Config& c) { return c.residual.blocks_kind(); }, "residual.kind is neither attnres nor dar");
  add_int("residual.streams", [](Config& c) -> int& { return c.residual.streams; }, 2, 16,
          [](const Config& c) { return c.residual.streams_kind(); }, "residual.kind is neither hyper nor mhc");
  add_float("residual.hc.scale_init", [](Config& c) -> double& { return c.residual.hc_scale_init; }, -1e3, 1e3,
            [](const Config& c) { return c.residual.kind == "hyper"; }, "residual.kind is not hyper");
  const auto mhc = [](const Config& c) { return c.residual.kind == "mhc"; };
  const std::string not_mhc = "residual.kind is not mhc";
  add_int("residual.mhc.sinkhorn_iters", [](Config& c) -> int& { return c.residual.mhc_sinkhorn_iters; }, 1, 1000, mhc, not_mhc);
  add_float("residual.mhc.alpha_init", [](Config& c) -> double& { return c.residual.mhc_alpha_init; }, -1e3, 1e3, mhc, not_mhc);
  add_choice("residual.mhc.phi_init", [](Config& c) -> std::string& { return c.residual.mhc_phi_init; }, {"zero", "normal"}, mhc, not_mhc);
  // Open intervals (0, 1): the init logits are log-odds of these (§5.3), infinite at the ends (checked below).
  add_float("residual.mhc.home_weight", [](Config& c) -> double& { return c.residual.mhc_home_weight; }, 0.0, 1.0, mhc, not_mhc);
  add_float("residual.mhc.res_diag", [](Config& c) -> double& { return c.residual.mhc_res_diag; }, 0.0, 1.0, mhc, not_mhc);

  // DAR (§6.6): every dar.* key is an error unless residual.kind = dar.
  const auto dar = [](const Config& c) { return c.residual.kind == "dar"; };
  const std::string not_dar = "residual.kind is not dar";
  add_choice("dar.routing", [](Config& c) -> std::string& { return c.dar.routing; }, {"reciprocal", "self_kv", "cross_v", "fixed_kv"},
             dar, not_dar);
  add_bool("dar.sep_v", [](Config& c) -> bool& { return c.dar.sep_v; }, dar, not_dar);
  add_bool("dar.include_partial", [](Config& c) -> bool& { return c.dar.include_partial; }, dar, not_dar);
  add_choice("dar.init", [](Config& c) -> std::string& { return c.dar.init; }, {"parity", "uniform"}, dar, not_dar);
  add_float("dar.tau_init", [](Config& c) -> double& { return c.dar.tau_init; }, -1e3, 1e3, dar, not_dar);
  add_float("dar.other_b_init", [](Config& c) -> double& { return c.dar.other_b_init; }, -1e3, 1e3, dar, not_dar);

  add_int("train.batch_size", [](Config& c) -> int& { return c.train.batch_size; }, 1, 1 << 16);
  add_int("train.grad_accum", [](Config& c) -> int& { return c.train.grad_accum; }, 1, 1 << 16);
  add_int("train.steps", [](Config& c) -> int& { return c.train.steps; }, 0, big);
  add_float("train.lr", [](Config& c) -> double& { return c.train.lr; }, 0.0, 10.0);
  add_float("train.min_lr_ratio", [](Config& c) -> double& { return c.train.min_lr_ratio; }, 0.0, 1.0);
  add_int("train.warmup", [](Config& c) -> int& { return c.train.warmup; }, 0, big);
  add_choice("train.schedule", [](Config& c) -> std::string& { return c.train.schedule; }, {"cosine", "wsd", "constant"});
  add_choice("train.precision", [](Config& c) -> std::string& { return c.train.precision; }, {"fp32", "bf16"});
  add_float("train.wsd_decay_frac", [](Config& c) -> double& { return c.train.wsd_decay_frac; }, 0.0, 1.0,
            [](const Config& c) { return c.train.schedule == "wsd"; }, "train.schedule is not wsd");
  add_float("train.weight_decay", [](Config& c) -> double& { return c.train.weight_decay; }, 0.0, 10.0);
  add_float("train.beta1", [](Config& c) -> double& { return c.train.beta1; }, 0.0, 0.999999);
  add_float("train.beta2", [](Config& c) -> double& { return c.train.beta2; }, 0.0, 0.999999999);
  add_float("train.eps", [](Config& c) -> double& { return c.train.eps; }, 0.0, 1.0);
  add_float("train.grad_clip", [](Config& c) -> double& { return c.train.grad_clip; }, 0.0, 1e9);
  k.push_back({"train.seed",
               [](Config& c, const std::string& v, const std::string& w) { c.train.seed = (uint64_t)parse_int("train.seed", v, w, 0, (1LL << 62)); },
               [](const Config& c) { return nlohmann::json(c.train.seed); }, always, ""});
  add_int("train.eval_every", [](Config& c) -> int& { return c.train.eval_every; }, 0, big);
  add_int("train.eval_batches", [](Config& c) -> int& { return c.train.eval_batches; }, 1, big);
  add_int("train.ckpt_every", [](Config& c) -> int& { return c.train.ckpt_every; }, 0, big);
  add_int("train.log_every", [](Config& c) -> int& { return c.train.log_every; }, 1, big);
  add_float("train.time_limit", [](Config& c) -> double& { return c.train.time_limit; }, 0.0, 1e9);
  add_int("train.max_bad_steps", [](Config& c) -> int& { return c.train.max_bad_steps; }, 1, 1000000);
  add_string("train.out_dir", [](Config& c) -> std::string& { return c.train.out_dir; });
  add_int("train.zero", [](Config& c) -> int& { return c.train.zero; }, 0, 1);
  add_float("train.dp_bucket_mb", [](Config& c) -> double& { return c.train.dp_bucket_mb; }, 0.0, 1024.0);
  add_float("train.dp_timeout", [](Config& c) -> double& { return c.train.dp_timeout; }, 1.0, 1e6);
  add_string("data.dir", [](Config& c) -> std::string& { return c.data.dir; });
  add_string("data.train", [](Config& c) -> std::string& { return c.data.train; });
  add_string("data.val", [](Config& c) -> std::string& { return c.data.val; });
  add_string("data.tokenizer", [](Config& c) -> std::string& { return c.data.tokenizer; });

  // The keys attention-mechanism modules declare (model/attention/mechanism.h), stored as text.
  for (const MechanismInfo& info : attention_mechanisms())
    for (const MechanismKey& mk : info.keys) {
      using Kind = MechanismKey::Kind;
      KeyDef d;
      d.name = mk.name;
      d.set = [mk](Config& c, const std::string& v, const std::string& w) {
        std::string text;
        switch (mk.kind) {
          case Kind::Choice: text = parse_choice(mk.name, v, w, mk.choices); break;
          case Kind::Int: text = std::to_string(parse_int(mk.name, v, w, (long long)mk.lo, (long long)mk.hi)); break;
          case Kind::Float: {
            std::ostringstream os;
            os.precision(17);
            os << parse_float(mk.name, v, w, mk.lo, mk.hi);
            text = os.str();
            break;
          }
          case Kind::Bool: text = parse_bool(mk.name, v, w) ? "true" : "false"; break;
        }
        c.attn.options[mk.name] = text;
      };
      d.get = [mk](const Config& c) -> nlohmann::json {
        const std::string& text = mechanism_option(c, mk.name);
        switch (mk.kind) {
          case Kind::Int: return std::stoll(text);
          case Kind::Float: return std::stod(text);
          case Kind::Bool: return text == "true";
          case Kind::Choice: break;
        }
        return text;
      };
      d.active = mk.active ? mk.active : always;
      d.inactive_reason = mk.inactive_reason;
      d.shown = mk.shown;
      k.push_back(std::move(d));
    }
  return k;
}

const std::vector<KeyDef>& keys() {
  static const std::vector<KeyDef> k = make_keys();
  return k;
}

}  // namespace

std::vector<Assignment> parse_config_text(const std::string& text, const std::string& origin, bool keys_once) {
  std::vector<Assignment> out;
  std::istringstream in(text);
  std::string line, table;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string where = origin + ":" + std::to_string(lineno);
    const std::string s = trim(strip_comment(line));
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s.back() != ']' || s.size() < 3) fail(where, ": malformed table header ", printable(s), " (expected [name])");
      table = trim(s.substr(1, s.size() - 2));
      continue;
    }
    const size_t eq = s.find('=');
    if (eq == std::string::npos) fail(where, ": expected `key = value`, got ", printable(s),
                                       is_printable_text(s) ? "" : " (is this a text file?)");
    std::string key = trim(s.substr(0, eq)), value = trim(s.substr(eq + 1));
    if (key.empty()) fail(where, ": missing key before '='");
    if (value.empty()) fail(where, ": ", shown(key), " has no value");
    if (!table.empty()) key = table + "." + key;
    // keys_once (grid files): a second value would silently replace the first (TOML forbids it too).
    if (keys_once)
      for (const Assignment& earlier : out)
        if (earlier.key == key) fail(where, ": ", shown(key), " is given a second time (first at ", earlier.origin, "); give it once");
    out.push_back({key, value, where});
  }
  return out;
}

std::vector<Assignment> parse_config_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("config file ", path, ": cannot be opened (does it exist?)");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_config_text(ss.str(), path);
}

Assignment parse_override(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) fail("--set ", shown(text), ": expected key=value");
  return {trim(text.substr(0, eq)), trim(text.substr(eq + 1)), "--set " + shown(text)};
}

Config resolve_config(const std::vector<Assignment>& assignments) {
  Config c;
  std::map<std::string, const Assignment*> given;
  for (const auto& a : assignments) {
    const KeyDef* def = nullptr;
    for (const auto& kd : keys()) if (kd.name == a.key) def = &kd;
    if (!def) fail(a.origin, ": unknown configuration key ", printable(a.key));
    def->set(c, a.value, a.origin);
    given[a.key] = &a;
  }
  // Keys of inactive mechanisms are errors (§7.2 Validation).
  for (const auto& kd : keys()) {
    auto it = given.find(kd.name);
    if (it != given.end() && !kd.active(c))
      fail(it->second->origin, ": ", kd.name, " is set but has no effect because ", kd.inactive_reason);
  }
  auto where = [&](const char* key) -> std::string {
    auto it = given.find(key);
    return it != given.end() ? it->second->origin : std::string("default");
  };
  // A rule over several keys is blamed on the assignment that came last (the one that broke it:
  // `--set model.n_head=3` on top of a preset, not the preset's d_model line); the others' origins
  // follow in the message.
  auto last_of = [&](std::initializer_list<const char*> names) -> std::string {
    const Assignment* latest = nullptr;
    for (const char* k : names) {
      auto it = given.find(k);
      if (it != given.end() && (!latest || it->second > latest)) latest = it->second;  // (pointers into `assignments`, in order)
    }
    return latest ? latest->origin : std::string("default");
  };
  auto from = [&](const char* key) { return " (" + where(key) + ")"; };
  ModelConfig& m = c.model;
  if (!given.count("model.kv_heads")) m.kv_heads = m.n_head;
  if (m.d_model % m.n_head != 0)
    fail(last_of({"model.d_model", "model.n_head"}), ": model.d_model = ", m.d_model, from("model.d_model"),
         " is not divisible by model.n_head = ", m.n_head, from("model.n_head"));
  if (m.n_head % m.kv_heads != 0)
    fail(last_of({"model.n_head", "model.kv_heads"}), ": model.n_head = ", m.n_head, from("model.n_head"),
         " is not divisible by model.kv_heads = ", m.kv_heads, from("model.kv_heads"));
  if (c.attn.pos == "rope" && m.head_dim() % 2 != 0)
    fail(last_of({"attn.pos", "model.d_model", "model.n_head"}), ": attn.pos = rope", from("attn.pos"),
         " needs an even head dimension, but model.d_model / model.n_head = ", m.d_model, " / ", m.n_head, " = ", m.head_dim());
  for (const auto& [key, layers] : {std::pair<const char*, const std::vector<int>*>{"attn.xsa.layers", &c.attn.xsa_layers},
                                    {"attn.goat.layers", &c.attn.goat.layers}})
    for (int layer : *layers)
      if (layer >= m.n_layer)
        fail(where(key), ": ", key, " names layer ", layer, ", outside [0, ", m.n_layer, ") (model.n_layer = ", m.n_layer, ")");
  if (c.attn.pos == "goat") {
    GoatConfig& g = c.attn.goat;
    if (!given.count("attn.goat.train_len")) g.train_len = m.seq_len;
    if (m.head_dim() - g.prior_lanes() < 1)
      fail(where("attn.goat.pos_rank"), ": GOAT needs a content dimension D_h − (2·pos_rank + key_bias) >= 1, but D_h = ",
           m.head_dim(), " and 2·", g.pos_rank, " + ", g.key_bias ? 1 : 0, " = ", g.prior_lanes(),
           "; use wider heads (fewer model.n_head) or a smaller attn.goat.pos_rank");
    if (m.kv_heads > 256 || m.kv_heads * g.pos_rank > 2048)
      fail(where("attn.goat.pos_rank"), ": GOAT supports at most 256 KV heads and kv_heads·pos_rank <= 2048 (got ", m.kv_heads,
           "·", g.pos_rank, ")");
    const bool all = g.layers.empty() || (int)g.layers.size() == m.n_layer;
    if (!all && g.other_pos == "rope" && m.head_dim() % 2 != 0)
      fail(where("attn.goat.other_pos"), ": attn.goat.other_pos = rope needs an even head dimension, but it is ", m.head_dim());
  }
  ResidualConfig& r = c.residual;
  if (r.block_size == 0) r.block_size = r.kind == "dar" ? 2 : 1;  // §7.2 defaults (unused by the other kinds)
  for (const char* key : {"residual.mhc.home_weight", "residual.mhc.res_diag"}) {
    const double v = std::string(key) == "residual.mhc.home_weight" ? r.mhc_home_weight : r.mhc_res_diag;
    if (!(v > 0 && v < 1)) fail(where(key), ": ", key, " = ", v, ": expected a number strictly between 0 and 1");
  }
  if (m.mlp_hidden == 0) m.mlp_hidden = m.mlp == "gelu" ? 4 * m.d_model : 64 * ((8 * m.d_model + 191) / 192);
  if (c.train.warmup > c.train.steps && c.train.steps > 0)
    fail(last_of({"train.warmup", "train.steps"}), ": train.warmup = ", c.train.warmup, from("train.warmup"),
         " exceeds train.steps = ", c.train.steps, from("train.steps"));
  for (const MechanismInfo& info : attention_mechanisms())
    if (info.validate) info.validate(c, where);
  if (c.data.train.empty()) c.data.train = c.data.dir + "/train.bin";
  if (c.data.val.empty()) c.data.val = c.data.dir + "/val.bin";
  if (c.data.tokenizer.empty()) c.data.tokenizer = c.data.dir + "/tokenizer.model";
  return c;
}

bool AttentionConfig::xsa_at(int layer) const {
  return xsa != "off" && (xsa_layers.empty() || std::find(xsa_layers.begin(), xsa_layers.end(), layer) != xsa_layers.end());
}

bool AttentionConfig::goat_at(int layer) const {
  return pos == "goat" && (goat.layers.empty() || std::find(goat.layers.begin(), goat.layers.end(), layer) != goat.layers.end());
}

std::string AttentionConfig::pos_at(int layer) const {
  if (pos != "goat") return pos;
  return goat_at(layer) ? "goat" : goat.other_pos;
}

nlohmann::json Config::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& kd : keys())
    if (kd.active(*this) && (!kd.shown || kd.shown(*this))) j[kd.name] = kd.get(*this);
  return j;
}

Config Config::from_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) fail(origin, ": the stored configuration is not a JSON object");
  std::vector<Assignment> as;
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string v;
    // Strings are re-quoted so parse_choice/unquote see them as in a file (built with append: GCC 12's
    // -Wrestrict misfires on operator+ chains here).
    if (it->is_string()) {
      v.reserve(it->get_ref<const std::string&>().size() + 2);
      v.append(1, '"').append(it->get_ref<const std::string&>()).append(1, '"');
    } else {
      v = it->dump();
    }
    as.push_back({it.key(), v, origin + " (stored config)"});
  }
  return resolve_config(as);
}

std::string Config::to_text() const {
  std::ostringstream os;
  const nlohmann::json j = to_json();
  for (auto it = j.begin(); it != j.end(); ++it) os << it.key() << " = " << it->dump() << "\n";
  return os.str();
}

const char* preset_config_text(const std::string& name) {
  // Kept identical to configs/<name>.toml (a test checks).
  if (name == "tiny")
    return "# tiny: for tests (seconds)\n"
           "model.n_layer = 2\nmodel.d_model = 64\nmodel.n_head = 4\nmodel.seq_len = 32\nmodel.vocab_size = 512\n"
           "train.batch_size = 4\ntrain.steps = 20\ntrain.warmup = 2\ntrain.lr = 1e-3\ntrain.eval_every = 10\n"
           "train.eval_batches = 2\ntrain.log_every = 5\n";
  if (name == "small")
    return "# small: the demo model (about two minutes of training on 2 cores)\n"
           "model.n_layer = 4\nmodel.d_model = 256\nmodel.n_head = 4\nmodel.seq_len = 256\nmodel.vocab_size = 8192\n"
           "attn.pos = \"rope\"\n"
           "train.batch_size = 16\ntrain.steps = 160\ntrain.warmup = 16\ntrain.lr = 2e-3\ntrain.eval_every = 40\n"
           "train.eval_batches = 10\ntrain.log_every = 10\ntrain.time_limit = 170\n";
  if (name == "bench")
    return "# bench: the issue's benchmark shape (L=4 d=256 H=4 T=256 B=16 V=8192)\n"
           "model.n_layer = 4\nmodel.d_model = 256\nmodel.n_head = 4\nmodel.seq_len = 256\nmodel.vocab_size = 8192\n"
           "attn.pos = \"learned\"\ntrain.batch_size = 16\n";
  return nullptr;
}

}  // namespace attnlab
