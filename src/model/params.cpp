#include "model/params.h"

#include "core/error.h"

namespace attnlab {

size_t ParamRegistry::add(std::string name, std::vector<int64_t> shape, Init init, double init_value, bool decay) {
  for (const auto& s : specs_) ATTNLAB_CHECK(s.name != name, "duplicate parameter ", name);
  size_t n = 1;
  for (auto d : shape) n *= (size_t)d;
  ParamSpec s{std::move(name), std::move(shape), init, init_value, decay, total_, n};
  total_ += (n + 15) / 16 * 16;
  specs_.push_back(std::move(s));
  return specs_.size() - 1;
}

const ParamSpec* ParamRegistry::find(const std::string& name) const {
  for (const auto& s : specs_) if (s.name == name) return &s;
  return nullptr;
}

}  // namespace attnlab
