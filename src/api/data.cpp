// The public data sources (include/attnlab/data.h): a token vector in memory and a prepared shard.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "attnlab/data.h"
#include "core/error.h"
#include "data/dna.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"

namespace attnlab::api {

void DataSource::skip(uint64_t batches, int B, int T) {
  std::vector<int32_t> inputs((size_t)B * T), targets(inputs.size());
  for (uint64_t i = 0; i < batches; ++i) next(inputs.data(), targets.data(), B, T);
}

namespace {

class TokensDataSource final : public DataSource {
 public:
  explicit TokensDataSource(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {
    if (tokens_.size() < 2) fail("tokens_data_source: ", tokens_.size(), " tokens; at least T + 1 are needed");
  }
  void next(int32_t* inputs, int32_t* targets, int B, int T) override {
    if ((size_t)T + 1 > tokens_.size())
      fail("tokens_data_source: ", tokens_.size(), " tokens, fewer than T + 1 = ", T + 1, " (model.seq_len + 1)");
    for (int b = 0; b < B; ++b) {
      if (position_ + T + 1 > tokens_.size()) position_ = 0;
      for (int t = 0; t < T; ++t) {
        inputs[(size_t)b * T + t] = tokens_[position_ + t];
        targets[(size_t)b * T + t] = tokens_[position_ + t + 1];
      }
      position_ += T;
    }
  }
  void skip(uint64_t batches, int B, int T) override {
    position_ = 0;
    DataSource::skip(batches, B, T);
  }
  std::string describe() const override { return "data: " + std::to_string(tokens_.size()) + " tokens in memory"; }

 private:
  std::vector<int32_t> tokens_;
  size_t position_ = 0;
};

class ShardDataSource final : public DataSource {
 public:
  ShardDataSource(const std::string& dir, uint64_t seed)
      : path_((std::filesystem::path(dir) / "train.bin").string()), shard_(Shard::open(path_)), seed_(seed) {}
  void next(int32_t* inputs, int32_t* targets, int B, int T) override {
    if (!loader_) {
      if (shard_.size() < (size_t)T + 1) fail("data ", path_, " has ", shard_.size(), " tokens, fewer than T + 1 = ", T + 1);
      loader_ = std::make_unique<DataLoader>(shard_, B, T, seed_);
    } else if (B != loader_->batch_size() || T != loader_->seq_len()) {
      fail("shard_data_source ", path_, ": batches of (", B, ", ", T, ") after (", loader_->batch_size(), ", ",
           loader_->seq_len(), "); one source serves one shape");
    }
    loader_->next(inputs, targets);
  }
  void skip(uint64_t batches, int B, int T) override {
    if (!loader_) {
      if (shard_.size() < (size_t)T + 1) fail("data ", path_, " has ", shard_.size(), " tokens, fewer than T + 1 = ", T + 1);
      loader_ = std::make_unique<DataLoader>(shard_, B, T, seed_);
    }
    // The loader's position after `batches` batches of B windows: epoch and index in its order.
    const uint64_t windows = batches * (uint64_t)B;
    loader_->restore({windows / loader_->num_windows(), windows % loader_->num_windows()});
  }
  std::string describe() const override { return "data: " + path_ + " (" + std::to_string(shard_.size()) + " tokens)"; }

 private:
  std::string path_;
  Shard shard_;
  uint64_t seed_;
  std::unique_ptr<DataLoader> loader_;
};

}  // namespace

PrepareParams default_prepare_params() { return PrepareParams{}; }

void prepare_data(const PrepareParams& params) {
  if (!params.dna_inputs.empty()) {
    if (!params.inputs.empty()) fail("prepare: give either --input (text) or --dna (FASTA), not both");
    if (!params.group_files.empty() || !params.val_groups.empty() || params.split != SplitUnit::documents)
      fail("prepare: --split, --groups and --val-groups apply to text (--input); FASTA records are split at their end");
    DnaPrepareOptions d;
    d.inputs = params.dna_inputs;
    d.out_dir = params.out_dir;
    d.val_fraction = params.val_fraction;
    d.verbose = !params.quiet;
    prepare_dna(d);
    return;
  }
  if (params.inputs.empty()) fail("prepare: give --input FILE (text) or --dna FASTA");
  PrepareOptions o;
  o.inputs = params.inputs;
  o.out_dir = params.out_dir;
  o.vocab_size = params.vocab_size;
  o.val_fraction = params.val_fraction;
  o.seed = params.seed;
  o.split = params.split == SplitUnit::groups   ? attnlab::SplitUnit::groups
            : params.split == SplitUnit::pieces ? attnlab::SplitUnit::pieces
                                                : attnlab::SplitUnit::documents;
  o.group_files = params.group_files;
  o.val_groups = params.val_groups;
  o.verbose = !params.quiet;
  prepare(o);
}

std::unique_ptr<DataSource> tokens_data_source(std::vector<int32_t> tokens) {
  return std::make_unique<TokensDataSource>(std::move(tokens));
}

std::unique_ptr<DataSource> shard_data_source(const std::string& dir, uint64_t seed) {
  return std::make_unique<ShardDataSource>(dir, seed);
}

bool is_token_shard(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  f.read(reinterpret_cast<char*>(&magic), sizeof magic);
  return f && magic == kShardMagic;
}

std::vector<std::vector<int32_t>> read_token_file(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) fail("token file ", path, ": cannot be opened (does it exist?)");
  int32_t magic = 0;
  probe.read(reinterpret_cast<char*>(&magic), sizeof magic);
  if (probe && magic == kShardMagic) {
    Shard s = Shard::open(path);
    return {std::vector<int32_t>(s.tokens(), s.tokens() + s.size())};
  }
  std::ifstream f(path);
  std::vector<std::vector<int32_t>> seqs;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    std::istringstream ls(line);
    std::vector<int32_t> seq;
    std::string tok;
    while (ls >> tok) {
      size_t used = 0;
      long long v = -1;
      try { v = std::stoll(tok, &used); } catch (...) { used = 0; }
      if (used != tok.size() || v < 0 || v > 65535)
        fail("token file ", path, ":", lineno, ": '", tok, "' is not a token id (0..65535)");
      seq.push_back((int32_t)v);
    }
    if (seq.empty()) continue;
    if (!seqs.empty() && seq.size() != seqs[0].size())
      fail("token file ", path, ":", lineno, ": ", seq.size(), " ids, but the first sequence has ", seqs[0].size(),
           " (all lines must have the same length)");
    seqs.push_back(std::move(seq));
  }
  if (seqs.empty()) fail("token file ", path, ": contains no token ids");
  return seqs;
}

}  // namespace attnlab::api
