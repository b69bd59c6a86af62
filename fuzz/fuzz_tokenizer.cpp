// libFuzzer target: the tokenizer loader (a SentencePiece model file) on arbitrary bytes; a model
// that loads must encode and decode. Seeds: fuzz/corpus/tokenizer.
#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = attnlab::fuzz::scratch_file("tokenizer", data, size);
  try {
    const attnlab::Tokenizer tok = attnlab::Tokenizer::load(path);
    const std::vector<int> ids = tok.encode("In the beginning God created the heavens and the earth.\n");
    (void)tok.decode(ids);
    (void)tok.decode({0, 1, 2, tok.vocab_size() - 1});
  } catch (const attnlab::Error&) {
  }
  return 0;
}
