// attnlab data: corpus preparation, text files in, tokenizer and token shards out
// (docs/data.md, "attnlab prepare"). Steps:
//   1. read the inputs (UTF-8 text) and cut them into documents at blank lines, a document over
//      16 KiB into line-aligned pieces; a seeded sample of about val_fraction of the bytes is val,
//      drawn in whole units: documents (the default), named groups of documents (one group name
//      per document from a group file per input: a book in two translations goes to one side
//      whole), or pieces (the split of versions before 2026-12: parts of one document can land on
//      both sides); then the word n-gram overlap of val with train is measured (contamination)
//   2. train a BPE tokenizer on the inputs                -> out_dir/tokenizer.model
//   3. encode the pieces in parallel; the bos id goes before each document, and before a piece
//      whose preceding piece went to the other shard, so text between two bos ids is contiguous
//   4. write out_dir/train.bin, out_dir/val.bin (llm.c shards) and out_dir/prepare.json
// The outputs are written into a staging directory inside out_dir (".prepare-staging.<pid>") and
// renamed into place only when all of them are complete, so a failed or killed prepare leaves the
// previous set (tokenizer and shards that belong together) as it was; a staging directory of a
// killed run is removed by the next prepare into the same directory, which is locked against a
// second concurrent prepare (core/files.h). The result depends only on the inputs and the options
// (not on the thread count).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnlab {

// What the train/val split draws whole: a unit never straddles the two shards.
enum class SplitUnit { documents, groups, pieces };
const char* split_unit_name(SplitUnit unit);

struct PrepareOptions {
  std::vector<std::string> inputs;  // UTF-8 text files
  std::string out_dir;              // created if missing
  int vocab_size = 8192;            // at most 65536 (uint16 shards)
  double val_fraction = 0.02;       // share of the text (in bytes) held out for val.bin, in (0, 0.5]
  uint64_t seed = 1337;             // tokenizer sample and train/val split
  SplitUnit split = SplitUnit::documents;
  // split = groups: one file per input, in the same order; line i names the group of document i
  // of that input (documents are separated by blank lines). The same name in two files is one group.
  std::vector<std::string> group_files;
  // split = groups: hold out exactly these groups (each must exist); empty: a seeded sample of
  // whole groups of about val_fraction of the bytes.
  std::vector<std::string> val_groups;
  bool verbose = true;              // progress lines on stdout
};

void prepare(const PrepareOptions& options);

// Word n-gram overlap of a held-out text with a training text: the share of the held-out text's
// n-grams (n consecutive words, lower-cased, punctuation dropped; never across a unit boundary)
// that occur anywhere in the training text. 13 words is the contamination test of GPT-3's
// paper (Brown et al. 2020, appendix C); 8 catches shorter shared phrases.
struct NgramOverlap {
  int n = 0;
  size_t held_out_ngrams = 0;  // n-grams of the held-out text (with repeats)
  size_t found_in_train = 0;   // of those, how many occur in the training text
  double share() const { return held_out_ngrams ? double(found_in_train) / double(held_out_ngrams) : 0.0; }
};
// Each text is a list of units (string_views into the caller's memory).
NgramOverlap ngram_overlap(const std::vector<std::string_view>& held_out, const std::vector<std::string_view>& train, int n);

// The largest piece of a document encoded as one unit (and the granularity of the pieces split).
inline constexpr size_t kPrepareMaxPieceBytes = size_t(16) << 10;

}  // namespace attnlab
