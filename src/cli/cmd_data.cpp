// `attnlab prepare`: tokenizer training and token shards from text files.
#include "cli/common.h"
#include "data/prepare.h"

namespace attnlab::cli {

void register_data(CLI::App& app) {
  auto* o = new PrepareOptions;
  auto* cmd = app.add_subcommand("prepare", "train a SentencePiece BPE tokenizer on text files and write train/val token shards");
  cmd->add_option("--input", o->inputs, "UTF-8 text files (repeatable)")->required();
  cmd->add_option("--out", o->out_dir, "output directory: tokenizer.model, train.bin, val.bin, prepare.json")->required();
  cmd->add_option("--vocab", o->vocab_size, "vocabulary size")->check(CLI::Range(260, 65536));
  cmd->add_option("--val-fraction", o->val_fraction, "fraction of documents held out for validation")->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", o->seed, "seed of the split and the tokenizer trainer");
  cmd->callback([o] { prepare(*o); });
}

}  // namespace attnlab::cli
