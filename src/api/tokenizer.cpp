// attnlab::api::Tokenizer (include/attnlab/tokenizer.h) over data/tokenizer.h.
#include "attnlab/tokenizer.h"

#include "data/tokenizer.h"

namespace attnlab::api {

struct Tokenizer::Impl {
  attnlab::Tokenizer tokenizer;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_path) {
  return Tokenizer(std::make_unique<Impl>(Impl{attnlab::Tokenizer::load(model_path)}));
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  const std::vector<int> ids = impl_->tokenizer.encode(text);
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  return impl_->tokenizer.decode(std::vector<int>(ids.begin(), ids.end()));
}

int Tokenizer::vocab_size() const { return impl_->tokenizer.vocab_size(); }
int Tokenizer::bos_id() const { return impl_->tokenizer.bos_id(); }

}  // namespace attnlab::api
