// `attnlab prepare`: tokenizer training and token shards from text files, through the public API
// (include/attnlab/) alone.
#include <cstdlib>
#include <map>

#include "attnlab/attnlab.h"
#include "cli/common.h"
#include "cli/validators.h"

namespace attnlab::cli {

void register_data(CLI::App& app) {
  auto* o = program_lifetime<api::PrepareParams>();
  o->quiet = false;  // the tool prints progress (the API's default is quiet)
  auto* cmd = app.add_subcommand("prepare", "train a SentencePiece BPE tokenizer on text files and write train/val token shards");
  cmd->add_option("--input", o->inputs, "UTF-8 text files (repeatable)");
  cmd->add_option("--dna", o->dna_inputs, "FASTA files, plain or .gz (repeatable): nucleotide tokens instead of text (docs/data.md, DNA)");
  cmd->add_option("--out", o->out_dir, "output directory: tokenizer.model, train.bin, val.bin, prepare.json")->required();
  cmd->add_option("--vocab", o->vocab_size, "vocabulary size")->check(in_range(260, 65536));
  cmd->add_option("--val-fraction", o->val_fraction, "share of the text (in bytes) held out for validation, in (0, 0.5]")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(value.c_str(), &end);
            if (end == value.c_str() || *end != '\0' || !(v > 0 && v <= 0.5)) return "must be in (0, 0.5], e.g. 0.02";
            return "";
          },
          "(0, 0.5]"));
  cmd->add_option("--seed", o->seed, "seed of the split and the tokenizer trainer");
  const std::map<std::string, api::SplitUnit> units{
      {"documents", api::SplitUnit::documents}, {"groups", api::SplitUnit::groups}, {"pieces", api::SplitUnit::pieces}};
  cmd->add_option("--split", o->split,
                  "what the train/val split holds out whole: documents (blank-line separated), groups (named in "
                  "--groups files), or pieces of at most 16 KiB (the split before 2026-12)")
      ->transform(CLI::CheckedTransformer(units, CLI::ignore_case))
      ->default_str("documents");
  cmd->add_option("--groups", o->group_files,
                  "with --split groups, one file per --input in the same order: line i names the group of document i "
                  "(the same name in two files is one group)");
  cmd->add_option("--val-groups", o->val_groups,
                  "with --split groups: hold out exactly these groups (comma-separated or repeated); default: a seeded "
                  "sample of whole groups")
      ->delimiter(',');
  cmd->callback([o] { api::prepare_data(*o); });
}

}  // namespace attnlab::cli
