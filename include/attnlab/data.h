// attnlab public API: where training gets its token batches.
//
// Implement DataSource to feed batches from memory, a generator or your own files; or use
// tokens_data_source (a token vector in memory) or shard_data_source (a directory written by
// `attnlab prepare`). To train on a prepared directory with exact resume and validation on its
// val.bin, set data.dir in the Config and call train() without a source instead.
// Token files (read_token_file) hold ids for forward, gradients and your own scoring.
// Thread-safety: a DataSource is called from the thread that runs train(), one call at a time;
// do not share one between concurrent trainings. The free functions may run concurrently.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnlab/error.h"

namespace attnlab::api {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills the next batch: inputs and targets are (B, T) row-major; targets[b][t] is the id that
  // should follow inputs[b][t] (usually inputs[b][t + 1] of a window of T + 1 tokens); a negative
  // target is ignored. Ids must be in [0, model.vocab_size). Called once per micro-batch; it should
  // not allocate (the training loop allocates nothing per step).
  virtual void next(int32_t* inputs, int32_t* targets, int B, int T) = 0;
  // Resuming a run (TrainParams::resume): bring the source to where it was after `batches` calls of
  // next() with batches of (B, T). The default draws and discards them (exact for a deterministic
  // source that starts from its beginning).
  virtual void skip(uint64_t batches, int B, int T);
  // One line naming the data, for the run's log.
  virtual std::string describe() const { return "a user data source"; }
};

// A corpus for training on: `attnlab prepare` (docs/data.md). From UTF-8 text files, a SentencePiece
// BPE tokenizer (tokenizer.model) and token shards (train.bin, val.bin); from FASTA files (plain or
// .gz), nucleotide tokens instead. Give inputs or dna_inputs, not both.
// What the text split draws whole (docs/data.md, "The train/val split"): documents (blank-line
// separated; the default), named groups of documents (group_files: a book in two translations is
// held out whole), or pieces of at most 16 KiB (versions before 2026-12; parts of one document can
// land on both sides, so validation is only weakly held out).
enum class SplitUnit { documents, groups, pieces };

struct PrepareParams {
  std::vector<std::string> inputs;      // UTF-8 text files
  std::vector<std::string> dna_inputs;  // FASTA files
  std::string out_dir;                  // created if missing
  int vocab_size = 8192;                // text: 260 .. 65536
  double val_fraction = 0.02;           // share held out for val.bin, in (0, 0.5]
  uint64_t seed = 1337;                 // text: the tokenizer's sample and the train/val split
  SplitUnit split = SplitUnit::documents;  // text only (FASTA: the end of each record is val)
  std::vector<std::string> group_files; // split = groups: one per input; line i = group of document i
  std::vector<std::string> val_groups;  // split = groups: hold out these; empty = a seeded sample
  bool quiet = true;                    // no progress lines on stdout
};
PrepareParams default_prepare_params();
// Writes out_dir/{tokenizer.model (text), train.bin, val.bin, prepare.json}, each atomically.
void prepare_data(const PrepareParams& params);

// Consecutive windows of T + 1 tokens from `tokens` (window w: tokens [w·T, w·T + T]), rows in
// order, wrapping to the start when the vector runs out. Needs at least T + 1 tokens.
std::unique_ptr<DataSource> tokens_data_source(std::vector<int32_t> tokens);
// The training shard (train.bin) of a directory prepared with `attnlab prepare`, in the seeded
// random window order of `attnlab train` (docs/data.md).
std::unique_ptr<DataSource> shard_data_source(const std::string& dir, uint64_t seed = 1337);

// Reads token ids: an llm.c shard (by its magic; `attnlab prepare` writes them) → one sequence;
// otherwise a text file with one sequence of whitespace-separated ids (0..65535) per line, all lines
// the same length (`attnlab forward --tokens`, `attnlab grads --tokens`). Errors name the file and line.
std::vector<std::vector<int32_t>> read_token_file(const std::string& path);
// Whether `path` starts with the magic of an llm.c token shard.
bool is_token_shard(const std::string& path);

}  // namespace attnlab::api
