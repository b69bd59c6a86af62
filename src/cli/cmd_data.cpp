// `attnlab prepare`: tokenizer training and token shards from text files, through the public API
// (include/attnlab/) alone.
#include "attnlab/attnlab.h"
#include "cli/common.h"

namespace attnlab::cli {

void register_data(CLI::App& app) {
  auto* o = program_lifetime<api::PrepareParams>();
  o->quiet = false;  // the tool prints progress (the API's default is quiet)
  auto* cmd = app.add_subcommand("prepare", "train a SentencePiece BPE tokenizer on text files and write train/val token shards");
  cmd->add_option("--input", o->inputs, "UTF-8 text files (repeatable)");
  cmd->add_option("--dna", o->dna_inputs, "FASTA files, plain or .gz (repeatable): nucleotide tokens instead of text (docs/data.md, DNA)");
  cmd->add_option("--out", o->out_dir, "output directory: tokenizer.model, train.bin, val.bin, prepare.json")->required();
  cmd->add_option("--vocab", o->vocab_size, "vocabulary size")->check(CLI::Range(260, 65536));
  cmd->add_option("--val-fraction", o->val_fraction, "fraction of documents held out for validation")->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", o->seed, "seed of the split and the tokenizer trainer");
  cmd->callback([o] { api::prepare_data(*o); });
}

}  // namespace attnlab::cli
