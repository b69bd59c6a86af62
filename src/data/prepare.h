// attnlab data: corpus preparation, text files in, tokenizer and token shards out
// (docs/data.md, "attnlab prepare"). Steps:
//   1. read the inputs (UTF-8 text) and cut them into documents at blank lines, a document over
//      16 KiB into line-aligned pieces; a seeded sample of about val_fraction of the bytes is val
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
#include <vector>

namespace attnlab {

struct PrepareOptions {
  std::vector<std::string> inputs;  // UTF-8 text files
  std::string out_dir;              // created if missing
  int vocab_size = 8192;            // at most 65536 (uint16 shards)
  double val_fraction = 0.02;       // share of the text (in bytes) held out for val.bin, in (0, 0.5]
  uint64_t seed = 1337;             // tokenizer sample and train/val split
  bool verbose = true;              // progress lines on stdout
};

void prepare(const PrepareOptions& options);

// The largest piece of a document encoded as one unit (and the granularity of the val split).
inline constexpr size_t kPrepareMaxPieceBytes = size_t(16) << 10;

}  // namespace attnlab
