#include "train/checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/version.h"
#include "train/safetensors.h"

namespace attnlab {

void save_checkpoint(const std::string& path, const GPT<float>& model, const float* adam_m, const float* adam_v,
                     const TrainingState& state) {
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

uint64_t parse_u64(const std::string& path, const std::string& key, const std::string& v) {
  try {
    size_t used = 0;
    unsigned long long x = std::stoull(v, &used);
    if (used == v.size()) return x;
  } catch (...) {
  }
  fail("checkpoint ", path, ": metadata ", key, " = '", v, "' is not a non-negative integer");
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
  return Config::from_json(j, path);
}

TrainingState load_checkpoint(const std::string& path, GPT<float>& model, float* adam_m, float* adam_v) {
  SafetensorsFile f = SafetensorsFile::open(path);
  check_format(f, path);
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
  for (const auto& s : model.registry().specs()) f.read(s.name, model.params() + s.offset, s.shape, "F32");
  if (adam_m || adam_v) {
    if (!f.has("adam.m." + model.registry().specs()[0].name))
      fail("checkpoint ", path, ": holds no optimizer state (exported weights?); it cannot be resumed — start a new run from it instead");
    for (const auto& s : model.registry().specs()) {
      f.read("adam.m." + s.name, adam_m + s.offset, s.shape, "F32");
      f.read("adam.v." + s.name, adam_v + s.offset, s.shape, "F32");
    }
  }
  TrainingState st;
  st.step = (int64_t)parse_u64(path, "step", need_meta(f, path, "step"));
  st.tokens_seen = parse_u64(path, "tokens_seen", need_meta(f, path, "tokens_seen"));
  try {
    auto d = nlohmann::json::parse(need_meta(f, path, "data_state"));
    st.data_epoch = d.at("epoch").get<uint64_t>();
    st.data_index = d.at("index").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint ", path, ": metadata data_state is malformed (", e.what(), ")");
  }
  return st;
}

}  // namespace attnlab
