// `attnlab prepare`: tokenizer training and token shards from text files.
#include "cli/common.h"
#include "data/dna.h"
#include "data/prepare.h"
#include "core/error.h"

namespace attnlab::cli {

void register_data(CLI::App& app) {
  auto* o = program_lifetime<PrepareOptions>();
  auto* cmd = app.add_subcommand("prepare", "train a SentencePiece BPE tokenizer on text files and write train/val token shards");
  auto* dna = program_lifetime<std::vector<std::string>>();
  cmd->add_option("--input", o->inputs, "UTF-8 text files (repeatable)");
  cmd->add_option("--dna", *dna, "FASTA files, plain or .gz (repeatable): nucleotide tokens instead of text (docs/data.md, DNA)");
  cmd->add_option("--out", o->out_dir, "output directory: tokenizer.model, train.bin, val.bin, prepare.json")->required();
  cmd->add_option("--vocab", o->vocab_size, "vocabulary size")->check(CLI::Range(260, 65536));
  cmd->add_option("--val-fraction", o->val_fraction, "fraction of documents held out for validation")->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--seed", o->seed, "seed of the split and the tokenizer trainer");
  cmd->callback([o, dna] {
    if (!dna->empty()) {
      if (!o->inputs.empty()) fail("prepare: give either --input (text) or --dna (FASTA), not both");
      DnaPrepareOptions d;
      d.inputs = *dna;
      d.out_dir = o->out_dir;
      d.val_fraction = o->val_fraction;
      prepare_dna(d);
      return;
    }
    if (o->inputs.empty()) fail("prepare: give --input FILE (text) or --dna FASTA");
    prepare(*o);
  });
}

}  // namespace attnlab::cli
