#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/json.h"
#include "kernels/adamw.h"
#include "model/version.h"
#include "train/environment.h"
#include "checkpoint/checksums.h"
#include "checkpoint/safetensors.h"
#include "attnlab/printable.h"

namespace attnlab {

void save_checkpoint(const std::string& path, const GPT<float>& model, const float* adam_m, const float* adam_v,
                     const TrainingState& state) {
  // Never store a checkpoint that cannot be used: NaN or Inf weights (a diverged run) or moments.
  const size_t total = model.registry().total();
  if (!kernels::all_finite(model.params(), total))
    fail("checkpoint ", path, ": not written: the weights hold NaN or Inf values (the run diverged); ",
         "any previous file is unchanged");
  if (adam_m && adam_v && (!kernels::all_finite(adam_m, total) || !kernels::all_finite(adam_v, total)))
    fail("checkpoint ", path, ": not written: the Adam moments hold NaN or Inf values (the run diverged); ",
         "any previous file is unchanged");
  if (adam_v && !std::all_of(adam_v, adam_v + total, [](float v) { return v >= 0; }))
    fail("checkpoint ", path, ": not written: Adam's second moment holds a negative value (a mean of squares cannot); ",
         "any previous file is unchanged");
  std::vector<TensorRef> tensors;
  const auto& specs = model.registry().specs();
  for (const auto& s : specs) tensors.push_back({s.name, s.shape, model.params() + s.offset, "F32"});
  if (adam_m && adam_v) {
    for (const auto& s : specs) tensors.push_back({"adam.m." + s.name, s.shape, adam_m + s.offset, "F32"});
    for (const auto& s : specs) tensors.push_back({"adam.v." + s.name, s.shape, adam_v + s.offset, "F32"});
  }
  std::map<std::string, std::string> meta;
  meta["format"] = kCheckpointFormat;
  meta["format_version"] = std::to_string(kCheckpointFormatVersion);
  meta["attnlab_version"] = version();
  meta["config"] = model.config().to_json().dump();
  meta["step"] = std::to_string(state.step);
  meta["tokens_seen"] = std::to_string(state.tokens_seen);
  meta["data_state"] = nlohmann::json{{"epoch", state.data_epoch}, {"index", state.data_index}}.dump();
  meta["optimizer"] = adam_m ? "adamw" : "none";
  meta["environment"] = numeric_environment_json(state.ranks);  // what bit-exact resume also depends on
  // One checksum per tensor, of the bytes written (docs/checkpoint-format.md, "Checksums").
  std::map<std::string, std::string> sums;
  for (const TensorRef& t : tensors) {
    size_t n = sizeof(float);
    for (int64_t d : t.shape) n *= size_t(d);
    sums[t.name] = tensor_checksum(t.data, n);
  }
  meta[kChecksumKey] = encode_checksums(sums);
  write_safetensors(path, tensors, meta);
}

namespace {
const std::string& need_meta(const SafetensorsFile& f, const std::string& path, const std::string& key) {
  auto it = f.metadata().find(key);
  if (it == f.metadata().end()) fail("checkpoint ", path, ": metadata key '", key, "' is missing (not an attnlab checkpoint?)");
  return it->second;
}

void check_format(const SafetensorsFile& f, const std::string& path) {
  if (need_meta(f, path, "format") != kCheckpointFormat)
    fail("checkpoint ", path, ": metadata format is '", need_meta(f, path, "format"), "', expected 'attnlab'");
  const std::string& v = need_meta(f, path, "format_version");
  if (v != std::to_string(kCheckpointFormatVersion))
    fail("checkpoint ", path, ": format_version ", v, " is not supported by this attnlab (reads version ",
         kCheckpointFormatVersion, ")");
}

// A decimal integer in [0, max]: digits only (std::stoull would take "-1" and wrap it, " 7" and "+7").
uint64_t parse_u64(const std::string& path, const std::string& key, const std::string& v, uint64_t max) {
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
    fail("checkpoint ", path, ": metadata ", key, " = '", v.substr(0, 40), v.size() > 40 ? "...'" : "'",
         " is not a non-negative integer");
  uint64_t x = 0;
  for (char c : v)
    if (__builtin_mul_overflow(x, uint64_t(10), &x) || __builtin_add_overflow(x, uint64_t(c - '0'), &x))
      fail("checkpoint ", path, ": metadata ", key, " = '", v, "' is out of range");
  if (x > max) fail("checkpoint ", path, ": metadata ", key, " = ", v, " is out of range (at most ", max, ")");
  return x;
}

// Every parameter the stored configuration implies must be in the file as F32 of the right shape,
// checked before a model is built from that configuration: a file whose configuration says
// d_model = 65536 but holds a small model must fail here, naming the file, instead of asking for
// terabytes of memory first.
void check_tensors_match_config(const SafetensorsFile& f, const std::string& path, const Config& cfg) {
  const ParamRegistry reg = GPT<float>::layout(cfg);
  for (const auto& s : reg.specs()) {
    if (!f.has(s.name))
      fail("checkpoint ", path, ": its stored configuration (model.n_layer = ", cfg.model.n_layer, ", model.d_model = ",
           cfg.model.d_model, ", model.vocab_size = ", cfg.model.vocab_size, ", ...) needs tensor '", s.name,
           "', which the file does not hold; the file is damaged or its configuration was edited");
    const auto& i = f.info(s.name);
    if (i.dtype != "F32" || i.shape != s.shape) {
      std::string want, got;
      for (auto d : s.shape) want.append(want.empty() ? "" : ",").append(std::to_string(d));
      for (auto d : i.shape) got.append(got.empty() ? "" : ",").append(std::to_string(d));
      fail("checkpoint ", path, ": tensor '", s.name, "' is ", i.dtype, " [", got, "] but its stored configuration (model.d_model = ",
           cfg.model.d_model, ", model.vocab_size = ", cfg.model.vocab_size, ", ...) needs F32 [", want,
           "]; the file is damaged or its configuration was edited");
    }
  }
}

// The tensors' checksums; `present` is false for a file written before
// they were stored (a one-line note, once per file and process: a compare loads one checkpoint
// many times).
struct StoredChecksums {
  bool present = false;
  std::map<std::string, std::string> sums;
};

StoredChecksums stored_checksums(const SafetensorsFile& f, const std::string& path) {
  StoredChecksums c;
  const auto it = f.metadata().find(kChecksumKey);
  if (it == f.metadata().end()) {
    static std::mutex m;
    static std::set<std::string> noted;
    const std::lock_guard<std::mutex> lock(m);
    if (noted.insert(path).second)
      std::fprintf(stderr, "note: checkpoint %s has no tensor checksums (written before they were stored): loaded without verifying them\n",
                   path.c_str());
    return c;
  }
  c.present = true;
  c.sums = decode_checksums(path, it->second);
  return c;
}

// The bytes of tensor `name` as stored must hash to its recorded checksum: a flipped bit inside
// tensor data passes every structural check and would otherwise only move the loss.
void check_checksum(const SafetensorsFile& f, const std::string& path, const StoredChecksums& c, const std::string& name) {
  if (!c.present) return;
  const auto it = c.sums.find(name);
  if (it == c.sums.end())
    fail("checkpoint ", path, ": tensor '", name, "' has no checksum in metadata '", kChecksumKey,
         "' (the file was edited?); pass --skip-checksums to load it anyway");
  const std::string got = tensor_checksum(f.data(name), f.info(name).nbytes);
  if (got != it->second)
    fail("checkpoint ", path, ": tensor '", name, "' fails its checksum (xxh64 ", got, ", stored ", it->second,
         "): its bytes were damaged after it was written; use another copy or an earlier checkpoint ",
         "(--skip-checksums loads it anyway)");
}

// A tensor just read must hold finite numbers: NaN/Inf weights give NaN logits and garbage samples.
void check_finite(const std::string& path, const std::string& name, const float* x, size_t n) {
  if (kernels::all_finite(x, n)) return;
  size_t i = 0;
  while (i < n && std::isfinite(x[i])) ++i;
  fail("checkpoint ", path, ": tensor '", name, "' holds a non-finite value (", x[i], " at element ", i,
       "); the run that wrote it diverged; use an earlier checkpoint");
}
// Adam's second moment is a running mean of squared gradients: a negative entry cannot come from
// training, and AdamW would take the square root of it (NaN weights one step after resuming).
void check_nonnegative(const std::string& path, const std::string& name, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!(x[i] >= 0))
      fail("checkpoint ", path, ": tensor '", name, "' holds a negative value (", x[i], " at element ", i,
           "); Adam's second moment is a mean of squares, so the file is damaged or was not written by attnlab train");
}
}  // namespace

Config read_checkpoint_config(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  check_format(f, path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(need_meta(f, path, "config"));
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint ", path, ": metadata 'config' is not valid JSON (", e.what(), ")");
  }
  const Config cfg = Config::from_json(j, path);
  check_tensors_match_config(f, path, cfg);
  return cfg;
}

std::string read_checkpoint_environment(const std::string& path) {
  SafetensorsFile f = SafetensorsFile::open(path);
  const auto it = f.metadata().find("environment");
  return it == f.metadata().end() ? std::string() : it->second;
}

namespace {
std::atomic<bool> g_verify_checksums{true};
}

void set_verify_checkpoint_checksums(bool verify) { g_verify_checksums = verify; }
bool verify_checkpoint_checksums() { return g_verify_checksums; }

TrainingState load_checkpoint(const std::string& path, GPT<float>& model, float* adam_m, float* adam_v) {
  SafetensorsFile f = SafetensorsFile::open(path);
  check_format(f, path);
  const StoredChecksums sums = verify_checkpoint_checksums() ? stored_checksums(f, path) : StoredChecksums{};
  // The architecture must match exactly; train.* and data.* may differ (e.g. resuming with more steps).
  const nlohmann::json stored = read_checkpoint_config(path).to_json(), wanted = model.config().to_json();
  auto architecture = [](const nlohmann::json& j) {
    nlohmann::json a = nlohmann::json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key().rfind("train.", 0) != 0 && it.key().rfind("data.", 0) != 0) a[it.key()] = *it;
    return a;
  };
  const nlohmann::json sa = architecture(stored), wa = architecture(wanted);
  if (sa != wa) {
    std::string diff;
    for (auto it = wa.begin(); it != wa.end(); ++it)
      if (!sa.contains(it.key()) || sa[it.key()] != *it)
        diff += " " + it.key() + " (checkpoint " + (sa.contains(it.key()) ? sa[it.key()].dump() : "unset") + ", model " + it->dump() + ")";
    fail("checkpoint ", path, ": its architecture differs from the model being loaded:", diff);
  }
  for (const auto& s : model.registry().specs()) {
    f.read(s.name, model.params() + s.offset, s.shape, "F32");
    check_checksum(f, path, sums, s.name);
    check_finite(path, s.name, model.params() + s.offset, s.numel);
  }
  if (adam_m || adam_v) {
    if (!f.has("adam.m." + model.registry().specs()[0].name))
      fail("checkpoint ", path, ": holds no optimizer state (exported weights?); it cannot be resumed — start a new run from it instead");
    for (const auto& s : model.registry().specs()) {
      f.read("adam.m." + s.name, adam_m + s.offset, s.shape, "F32");
      f.read("adam.v." + s.name, adam_v + s.offset, s.shape, "F32");
      check_checksum(f, path, sums, "adam.m." + s.name);
      check_checksum(f, path, sums, "adam.v." + s.name);
      check_finite(path, "adam.m." + s.name, adam_m + s.offset, s.numel);
      check_finite(path, "adam.v." + s.name, adam_v + s.offset, s.numel);
      check_nonnegative(path, "adam.v." + s.name, adam_v + s.offset, s.numel);
    }
  }
  TrainingState st;
  // At most the largest train.steps a configuration allows (2^30): a hostile "99999999999" must
  // not pass as a finished run, nor "-1" wrap round to 2^64 - 1.
  st.step = (int64_t)parse_u64(path, "step", need_meta(f, path, "step"), kMaxCheckpointStep);
  st.tokens_seen = parse_u64(path, "tokens_seen", need_meta(f, path, "tokens_seen"), UINT64_MAX);
  try {
    auto d = nlohmann::json::parse(need_meta(f, path, "data_state"));
    if (!d.is_object() || !d.contains("epoch") || !d.contains("index") || !d["epoch"].is_number_unsigned() ||
        !d["index"].is_number_unsigned())
      fail("checkpoint ", path, ": metadata data_state = ", d.dump().substr(0, 80),
           " is malformed (expected {\"epoch\": n, \"index\": n} with non-negative integers)");
    st.data_epoch = d.at("epoch").get<uint64_t>();
    st.data_index = d.at("index").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint ", path, ": metadata data_state is malformed (", e.what(), ")");
  }
  return st;
}

}  // namespace attnlab
