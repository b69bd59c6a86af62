#include "core/json.h"

#include <string>

namespace attnlab::json_checks {

void value_missing(const char* condition) {
  // 403 is nlohmann's own id for "key not found" (json::at on a missing key).
  throw nlohmann::json::out_of_range::create(
      403, std::string("a value the reader needs is missing (") + condition + ")", nullptr);
}

}  // namespace attnlab::json_checks
