// attnlab data: the tokenizer. A SentencePiece BPE model trained so that decode(encode(text)) ==
// text byte for byte (docs/data.md): identity normalization, no extra-whitespace removal, no dummy
// prefix, byte fallback for every character the merges do not cover. Without a dummy prefix
// encoding is also concatenative: encode(a + b) == encode(a) + encode(b) whenever b starts at a
// space or right after a newline, which is what lets prepare() encode a corpus in parallel chunks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace attnlab {

class Tokenizer {
 public:
  // Loads a SentencePiece model file; errors name the file and say how to make one.
  static Tokenizer load(const std::string& model_path);

  std::vector<int> encode(const std::string& text) const;
  // Same, into a caller's vector (overwritten), for loops that reuse one buffer.
  void encode_into(std::string_view text, std::vector<int>& ids) const;
  // Control ids (bos, eos) decode to nothing; an id outside [0, vocab_size) is an error.
  std::string decode(const std::vector<int>& ids) const;

  int vocab_size() const;
  int bos_id() const;
  int eos_id() const;
  const std::string& path() const { return path_; }

 private:
  Tokenizer() = default;
  // shared: a Tokenizer is cheap to copy, and the processor is immutable after load, so the
  // copies (and OpenMP threads) may encode concurrently.
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  std::string path_;
};

// Trains a BPE tokenizer of `vocab_size` pieces on the lines of `text_files` and writes
// `model_prefix`.model (atomically: a temporary file, fsync, rename). Deterministic for a given
// input, vocab_size and seed: the trainer runs on a fixed number of threads, and when the input
// exceeds the training cap (kTokenizerTrainingBytes) the lines it learns from are a seeded sample.
// vocab_size must be at most 65536 (shards store uint16 ids) and at least 259 plus the number of
// distinct characters in the text (3 control ids, 256 byte-fallback ids, one piece per character).
void train_tokenizer(const std::vector<std::string>& text_files, const std::string& model_prefix, int vocab_size,
                     uint64_t seed);
// The same on text in memory (each element one or more whole lines); `source` names it in errors.
void train_tokenizer_on_text(const std::vector<std::string_view>& texts, const std::string& source,
                             const std::string& model_prefix, int vocab_size, uint64_t seed);

// Training cap: beyond this many bytes of lines, a seeded sample of lines is used. Measured on the
// 20.8 MB default corpus, vocab 8192 (docs/data.md): a 4 MB sample trains in 6.5 s on this busy
// 2-core machine against 20 s for all of it, and compresses held-out text within 0.2% as well
// (4.056 against 4.064 bytes per token).
inline constexpr size_t kTokenizerTrainingBytes = size_t(4) << 20;

}  // namespace attnlab
