#include "model/params.h"

#include "core/error.h"

namespace attnlab {

size_t ParamRegistry::add(std::string name, std::vector<int64_t> shape, Init init, double init_value, bool decay) {
  ATTNLAB_CHECK(!finalized_, "add() after finalize()");
  for (const auto& s : specs_) ATTNLAB_CHECK(s.name != name, "duplicate parameter ", name);
  size_t n = 1;
  for (auto d : shape) n *= (size_t)d;
  specs_.push_back(ParamSpec{std::move(name), std::move(shape), init, init_value, {}, decay, 0, n});
  return specs_.size() - 1;
}

size_t ParamRegistry::add_values(std::string name, std::vector<int64_t> shape, std::vector<double> values, bool decay) {
  const size_t i = add(std::move(name), std::move(shape), Init::Values, 0.0, decay);
  ATTNLAB_CHECK(values.size() == specs_[i].numel, "init values of ", specs_[i].name, ": ", values.size(), " for ",
                specs_[i].numel, " elements");
  specs_[i].init_values = std::move(values);
  return i;
}

void ParamRegistry::finalize() {
  ATTNLAB_CHECK(!finalized_, "finalize() twice");
  total_ = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& s : specs_) {
      if (s.decay != (pass == 0)) continue;
      s.offset = total_;
      total_ += (s.numel + 15) / 16 * 16;
    }
    if (pass == 0) decayed_total_ = total_;
  }
  finalized_ = true;
}

const ParamSpec* ParamRegistry::find(const std::string& name) const {
  for (const auto& s : specs_) if (s.name == name) return &s;
  return nullptr;
}

}  // namespace attnlab
