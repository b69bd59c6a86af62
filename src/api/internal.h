// What the public API's implementation files (src/api/) share: the bridge from a public Config to
// the internal resolved one, and back.
#pragma once
#include <vector>

#include "attnlab/config.h"
#include "model/config.h"

namespace attnlab::api {

struct Config::Impl {
  std::vector<Assignment> assignments;  // in order; later ones win
};

// Applies and validates the assignments (attnlab::resolve_config).
attnlab::Config resolve(const Config& config);
// A public Config whose assignments are every key of a resolved configuration.
Config from_resolved(const attnlab::Config& resolved, const std::string& origin);

}  // namespace attnlab::api
