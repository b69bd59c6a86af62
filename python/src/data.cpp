// attnlab.prepare and attnlab.read_token_file (include/attnlab/data.h).
#include <attnlab/data.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;

namespace {

std::vector<std::string> strings(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.string());
  return out;
}

api::SplitUnit split_named(const std::string& name) {
  if (name == "documents") return api::SplitUnit::documents;
  if (name == "groups") return api::SplitUnit::groups;
  if (name == "pieces") return api::SplitUnit::pieces;
  throw attnlab::Error("prepare: split = \"" + name + "\": choose documents, groups or pieces");
}

}  // namespace

void bind_data(nb::module_& m) {
  m.def(
      "prepare",
      [](const std::vector<std::filesystem::path>& inputs, const std::filesystem::path& out, int vocab_size,
         double val_fraction, uint64_t seed, const std::string& split, const std::vector<std::filesystem::path>& groups,
         const std::vector<std::string>& val_groups, bool dna) {
        api::PrepareParams p = api::default_prepare_params();
        (dna ? p.dna_inputs : p.inputs) = strings(inputs);
        p.out_dir = out.string();
        p.vocab_size = vocab_size;
        p.val_fraction = val_fraction;
        p.seed = seed;
        p.split = split_named(split);
        p.group_files = strings(groups);
        p.val_groups = val_groups;
        nb::gil_scoped_release release;
        api::prepare_data(p);
        return p.out_dir;
      },
      "inputs"_a, "out"_a, "vocab_size"_a = 8192, "val_fraction"_a = 0.02, "seed"_a = 1337, "split"_a = "documents",
      "groups"_a = std::vector<std::filesystem::path>(), "val_groups"_a = std::vector<std::string>(), "dna"_a = false,
      "Prepares a corpus (`attnlab prepare`, docs/data.md): from UTF-8 text files a SentencePiece tokenizer\n"
      "(tokenizer.model) and token shards (train.bin, val.bin); with dna=True, nucleotide tokens from FASTA\n"
      "files. split: documents (whole blank-line separated documents held out), groups (whole named groups;\n"
      "groups gives one file per input) or pieces. Returns the output directory.");
  m.def(
      "read_token_file",
      [](const std::filesystem::path& path) {
        std::vector<std::vector<int32_t>> rows;
        {
          nb::gil_scoped_release release;
          rows = api::read_token_file(path.string());
        }
        nb::list out;
        for (auto& row : rows) {
          const size_t n = row.size();
          out.append(numpy_owning(std::move(row), {n}));
        }
        return out;
      },
      "path"_a,
      "Token ids of a file: an llm.c shard (train.bin, val.bin) gives one sequence, a text file one per line.\n"
      "Returns a list of int32 arrays.");
}

}  // namespace attnlab::python
