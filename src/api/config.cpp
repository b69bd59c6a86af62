// attnlab::api::Config (include/attnlab/config.h) over the internal parser and resolver
// (model/config.h): a list of assignments, resolved on use.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "api/internal.h"
#include "core/error.h"
#include "checkpoint/checkpoint.h"
#include "core/json.h"

namespace attnlab::api {

Config::Config() : impl_(std::make_unique<Impl>()) {}
Config::Config(const Config& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Config& Config::operator=(const Config& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
// A moved-from Config is left empty (the defaults), not without an Impl.
Config::Config(Config&& other) noexcept : impl_(std::move(other.impl_)) { other.impl_ = std::make_unique<Impl>(); }
Config& Config::operator=(Config&& other) noexcept {
  std::swap(impl_, other.impl_);
  return *this;
}
Config::~Config() = default;

Config Config::preset(const std::string& name) {
  const char* text = preset_config_text(name);
  if (!text) fail("preset ", name, ": unknown preset (choose tiny, small or bench)");
  return from_text(text, "preset " + name);
}

Config Config::from_file(const std::string& path) {
  Config c;
  c.impl_->assignments = parse_config_file(path);
  return c;
}

Config Config::from_text(const std::string& text, const std::string& origin) {
  Config c;
  c.impl_->assignments = parse_config_text(text, origin);
  return c;
}

Config Config::from_checkpoint(const std::string& path) { return from_resolved(read_checkpoint_config(path), path); }

Config Config::resume(const std::string& checkpoint, const std::vector<std::string>& overrides) {
  Config c = from_checkpoint(checkpoint);
  std::vector<Assignment> parsed;
  for (const auto& s : overrides) parsed.push_back(parse_override(s));
  // The stored data.train/val/tokenizer are paths resolved from the stored data.dir: a new
  // data.dir replaces them (unless they are given too), or it would be silently ignored.
  if (std::any_of(parsed.begin(), parsed.end(), [](const Assignment& a) { return a.key == "data.dir"; }))
    c.unset("data.train").unset("data.val").unset("data.tokenizer");
  c.impl_->assignments.insert(c.impl_->assignments.end(), parsed.begin(), parsed.end());
  return c;
}

bool Config::has_preset(const std::string& name) { return preset_config_text(name) != nullptr; }

Config& Config::set_override(const std::string& key_equals_value) {
  impl_->assignments.push_back(parse_override(key_equals_value));
  return *this;
}

Config& Config::unset(const std::string& key) {
  std::erase_if(impl_->assignments, [&](const Assignment& a) { return a.key == key; });
  return *this;
}

Config& Config::set(const std::string& key, const std::string& value) {
  if (key.empty()) fail("Config::set: the key is empty (value ", value, ")");
  impl_->assignments.push_back({key, value, "Config::set(\"" + key + "\")"});
  return *this;
}

Config& Config::set(const std::string& key, double value) {
  if (!std::isfinite(value)) fail("Config::set(\"", key, "\"): ", value, " is not a finite number");
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", value);  // round-trips exactly
  return set(key, std::string(buf));
}

Config& Config::set(const std::string& key, bool value) { return set(key, std::string(value ? "true" : "false")); }

Config& Config::merge(const Config& other) {
  const auto copy = other.impl_->assignments;  // (other may be *this)
  impl_->assignments.insert(impl_->assignments.end(), copy.begin(), copy.end());
  return *this;
}

void Config::resolve() const { (void)api::resolve(*this); }

std::string Config::get(const std::string& key) const {
  const nlohmann::json j = api::resolve(*this).to_json();
  const auto it = j.find(key);
  if (it == j.end()) fail("configuration key ", key, ": no such key (docs/mechanisms.md §7.2 lists them)");
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string Config::dump() const { return api::resolve(*this).to_text(); }

std::string Config::to_json_string() const { return api::resolve(*this).to_json().dump(); }

bool Config::operator==(const Config& other) const { return to_json_string() == other.to_json_string(); }

attnlab::Config resolve(const Config& config) { return resolve_config(config.impl().assignments); }

Config from_resolved(const attnlab::Config& resolved, const std::string& origin) {
  // Every key with its resolved value, strings quoted as in a file (as Config::from_json does).
  // (Quoted with append: GCC 12's -Wrestrict misfires on "\"" + s + "\"", as in model/config.cpp.)
  const nlohmann::json j = resolved.to_json();
  Config c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string value;
    if (it->is_string()) value.append("\"").append(it->get<std::string>()).append("\"");
    else value = it->dump();
    c.impl().assignments.push_back({it.key(), value, origin});
  }
  return c;
}

}  // namespace attnlab::api
