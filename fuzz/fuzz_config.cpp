// libFuzzer target: the configuration parser (TOML subset, --set overrides, strict validation) and
// the stored-configuration path (JSON -> Config) on arbitrary text. Seeds: fuzz/corpus/config.
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::Config c = attnlab::resolve_config(attnlab::parse_config_text(text, "fuzz"));
    // A resolved configuration must survive its own round trip (the checkpoint path).
    const attnlab::Config back = attnlab::Config::from_json(c.to_json(), "fuzz round trip");
    if (back.to_json() != c.to_json()) __builtin_trap();
  } catch (const attnlab::Error&) {
  }
  try {
    attnlab::parse_override(text);
  } catch (const attnlab::Error&) {
  }
  try {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_discarded()) (void)attnlab::Config::from_json(j, "fuzz json");
  } catch (const attnlab::Error&) {
  }
  return 0;
}
