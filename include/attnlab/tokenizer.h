// attnlab public API: the SentencePiece BPE tokenizer of a prepared corpus (tokenizer.model,
// written by prepare_data / `attnlab prepare`): text to the ids a Model reads, and back.
//
//   auto tok = attnlab::api::Tokenizer::load(data_dir + "/tokenizer.model");
//   std::vector<int32_t> ids = model.generate(tok.encode("Blessed is the man"), 40, params);
//   std::string text = tok.decode(ids);
//
// Thread-safety: const methods may run concurrently on one Tokenizer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/error.h"

namespace attnlab::api {

class Tokenizer {
 public:
  static Tokenizer load(const std::string& model_path);
  std::vector<int32_t> encode(const std::string& text) const;
  // Control ids (BOS, EOS) decode to nothing; an id outside [0, vocab_size) is an error.
  std::string decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const;
  int bos_id() const;  // -1 when the tokenizer has none

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnlab::api
