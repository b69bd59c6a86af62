#include "checkpoint/checksums.h"

#include "core/json.h"

#include "core/error.h"

// Header-only use of Debian's libxxhash-dev: the hash is compiled into this file, so neither the
// library nor its users link libxxhash.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace attnlab {

std::string tensor_checksum(const void* data, size_t n) {
  const uint64_t h = XXH64(data, n, 0);
  static const char* hex = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 0; i < 16; ++i) s[15 - i] = hex[(h >> (4 * i)) & 15];
  return s;
}

std::string encode_checksums(const std::map<std::string, std::string>& checksums) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, sum] : checksums) j[name] = sum;
  return j.dump();
}

std::map<std::string, std::string> decode_checksums(const std::string& path, const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint ", path, ": metadata '", kChecksumKey, "' is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail("checkpoint ", path, ": metadata '", kChecksumKey, "' is a JSON ", j.type_name(), ", not an object");
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const bool hex16 = it->is_string() && it->get<std::string>().size() == 16 &&
                       it->get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!hex16)
      fail("checkpoint ", path, ": metadata '", kChecksumKey, "' gives tensor '", it.key().substr(0, 120),
           "' the checksum ", it->dump().substr(0, 40), ", not 16 hex digits");
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace attnlab
