// attnlab data: SentencePiece BPE training and the Tokenizer wrapper (docs/data.md, "Tokenizer").
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/rng.h"
#include "data/files.h"

namespace attnlab {

namespace {

// SentencePiece skips training sentences longer than max_sentence_length (4192 bytes by default),
// and text often keeps a whole paragraph on one line (the Treasury of David has 9 KB ones): such
// lines are cut into pieces of at most this many bytes at a space, so all the text is learned from.
constexpr size_t kMaxSentenceBytes = 4096;
// A fixed trainer thread count: the model must not depend on the machine it was trained on.
constexpr int kTrainerThreads = 2;

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Appends the training sentences of one text: its non-blank lines, long ones cut before a space
// (or, with no space in reach, at a UTF-8 character boundary).
void append_sentences(std::string_view text, std::vector<std::string_view>& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (is_blank(line)) continue;
    while (line.size() > kMaxSentenceBytes) {
      size_t cut = line.rfind(' ', kMaxSentenceBytes);
      if (cut == std::string_view::npos || cut == 0) {
        cut = kMaxSentenceBytes;
        while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
        if (cut == 0) cut = kMaxSentenceBytes;
      }
      out.push_back(line.substr(0, cut));
      line.remove_prefix(cut);
    }
    if (!line.empty()) out.push_back(line);
  }
}

// Distinct Unicode code points (character_coverage=1.0 makes each one a piece of the vocabulary).
size_t count_distinct_characters(const std::vector<std::string>& sentences) {
  std::unordered_set<uint32_t> seen;
  for (const auto& s : sentences) {
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = s[i];
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      uint32_t cp = 0;
      for (size_t k = 0; k < len && i + k < s.size(); ++k) cp = (cp << 8) | static_cast<unsigned char>(s[i + k]);
      seen.insert(cp);
      i += len;
    }
  }
  return seen.size();
}

class SentenceList : public sentencepiece::SentenceIterator {
 public:
  explicit SentenceList(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return index_ >= sentences_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return sentences_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  size_t index_ = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Tokenizer

Tokenizer Tokenizer::load(const std::string& model_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec))
    fail("tokenizer ", model_path, ": no such file; run `attnlab prepare --input FILE... --out DIR` to train one");
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status;
  try {
    status = processor->Load(model_path);
  } catch (const std::exception& e) {
    // A model that parses but holds pieces its index cannot take (an empty piece, or one that
    // begins with a NUL byte) makes SentencePiece's trie builder throw instead of returning a status.
    fail("tokenizer ", model_path, ": not a usable SentencePiece model (", e.what(),
         "); run `attnlab prepare` to train one");
  }
  if (!status.ok())
    fail("tokenizer ", model_path, ": not a SentencePiece model (", status.ToString(),
         "); run `attnlab prepare` to train one");
  if (processor->GetPieceSize() > 65536)
    fail("tokenizer ", model_path, ": vocabulary of ", processor->GetPieceSize(),
         " pieces does not fit the uint16 ids of token shards (at most 65536)");
  Tokenizer t;
  t.processor_ = std::move(processor);
  t.path_ = model_path;
  return t;
}

void Tokenizer::encode_into(std::string_view text, std::vector<int>& ids) const {
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) fail("tokenizer ", path_, ": cannot encode text (", status.ToString(), ")");
}

std::vector<int> Tokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  encode_into(text, ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  const int V = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= V)
      fail("tokenizer ", path_, ": cannot decode id ", ids[i], " at position ", i, ": the vocabulary has ", V,
           " ids; was the model trained with a different tokenizer?");
  std::string text;
  const auto status = processor_->Decode(ids, &text);
  if (!status.ok()) fail("tokenizer ", path_, ": cannot decode (", status.ToString(), ")");
  return text;
}

int Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int Tokenizer::bos_id() const { return processor_->bos_id(); }
int Tokenizer::eos_id() const { return processor_->eos_id(); }

// ---------------------------------------------------------------------------------------------
// Training

void train_tokenizer(const std::vector<std::string>& text_files, const std::string& model_prefix, int vocab_size,
                     uint64_t seed) {
  if (text_files.empty()) fail("tokenizer training: no input files; give at least one text file");
  std::vector<std::string> texts;
  texts.reserve(text_files.size());
  for (const auto& path : text_files) texts.push_back(data_files::read_text_file(path, "tokenizer training input"));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  train_tokenizer_on_text(views, text_files.front() + (text_files.size() > 1 ? " and the other inputs" : ""),
                          model_prefix, vocab_size, seed);
}

void train_tokenizer_on_text(const std::vector<std::string_view>& texts, const std::string& source,
                             const std::string& model_prefix, int vocab_size, uint64_t seed) {
  if (model_prefix.empty()) fail("tokenizer training: empty model prefix; give the output path without .model");
  if (vocab_size > 65536)
    fail("tokenizer training: vocab_size ", vocab_size,
         " does not fit the uint16 ids of token shards; use at most 65536");

  std::vector<std::string_view> all;
  for (const auto& t : texts) append_sentences(t, all);
  size_t total_bytes = 0;
  for (auto s : all) total_bytes += s.size();
  if (all.empty()) fail("tokenizer training: ", source, " holds only blank lines");

  // A seeded sample of whole lines when the text is larger than the cap, kept in input order.
  std::vector<size_t> chosen(all.size());
  std::iota(chosen.begin(), chosen.end(), size_t(0));
  if (total_bytes > kTokenizerTrainingBytes) {
    Rng rng(seed ^ 0x746f6b656e697a65ULL);  // "tokenize": decorrelated from other uses of the seed
    for (size_t i = chosen.size() - 1; i > 0; --i) std::swap(chosen[i], chosen[rng.below(i + 1)]);
    size_t bytes = 0, keep = 0;
    while (keep < chosen.size() && bytes < kTokenizerTrainingBytes) bytes += all[chosen[keep++]].size();
    chosen.resize(keep);
    std::sort(chosen.begin(), chosen.end());
  }
  std::vector<std::string> sentences;
  sentences.reserve(chosen.size());
  for (size_t i : chosen) sentences.emplace_back(all[i]);

  const size_t distinct = count_distinct_characters(sentences);
  const size_t needed = 3 + 256 + distinct;
  if (vocab_size < 0 || size_t(vocab_size) < needed)
    fail("tokenizer training: vocab_size ", vocab_size, " is too small for ", source,
         ": 3 control ids, 256 byte-fallback ids and ", distinct,
         " distinct characters need ", needed, "; use a vocab_size of at least ", needed);

  // No model_prefix: the model comes back serialized, and is written atomically below.
  // Exact round trip (docs/data.md): identity normalization, whitespace kept as is, no dummy
  // prefix, bytes for anything the merges do not cover.
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes + 96)},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", std::to_string(kTrainerThreads)},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "1"},
  };
  sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(seed % 0xFFFFFFFFu));  // -1 is reserved
  SentenceList iterator(sentences);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &iterator, &model);
  if (!status.ok())
    fail("tokenizer training on ", source, " failed: ", status.ToString(), " (vocab_size ", vocab_size, ", ", sentences.size(), " lines)");
  if (model.empty()) fail("tokenizer training: SentencePiece returned an empty model");
  data_files::write_file_atomically(model_prefix + ".model", {model}, "tokenizer");
}

}  // namespace attnlab
