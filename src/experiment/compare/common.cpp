#include "experiment/compare/common.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace attnlab::compare {

using nlohmann::json;

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot read ", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string sets_text(const std::vector<std::string>& sets) {
  std::string s;
  for (const auto& x : sets) s += (s.empty() ? "" : "; ") + x;
  return s;
}

}  // namespace attnlab::compare
