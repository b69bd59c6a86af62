#include "data/dna.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "core/json.h"
#include "data/files.h"
#include "data/shard.h"

namespace attnlab {

int32_t NucleotideTokenizer::encode(char c) {
  switch (c) {
    case 'A': case 'a': return 3;
    case 'C': case 'c': return 4;
    case 'G': case 'g': return 5;
    case 'T': case 't': return 6;
    default: return kUnk;
  }
}

char NucleotideTokenizer::decode(int32_t id) {
  static constexpr char k[] = "N\0\0ACGT";
  return id >= 0 && id < kVocab ? k[id] : '\0';
}

std::vector<FastaRecord> read_fasta(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail("FASTA file ", path, ": cannot be opened (does it exist?)");
  std::vector<FastaRecord> recs;
  std::string line;
  char buf[1 << 16];
  bool at_line_start = true, in_header = false;
  size_t lineno = 1;
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      fail("FASTA file ", path, ": read error (", msg, ")");
    }
    if (n == 0) break;
    for (int i = 0; i < n; ++i) {
      const char c = buf[i];
      if (c == '\n') {
        if (in_header) recs.back().name = line, line.clear();
        in_header = false;
        at_line_start = true;
        ++lineno;
        continue;
      }
      if (at_line_start && c == '>') {
        recs.emplace_back();
        in_header = true;
        at_line_start = false;
        continue;
      }
      at_line_start = false;
      if (in_header) {
        if (c != '\r') line.push_back(c);
        continue;
      }
      if (c == '\r' || c == ' ' || c == '\t') continue;
      if (recs.empty()) {
        gzclose(f);
        fail("FASTA file ", path, ":", lineno, ": sequence before the first '>' header line (is it FASTA?)");
      }
      recs.back().tokens.push_back((uint16_t)NucleotideTokenizer::encode(c));
    }
  }
  gzclose(f);
  if (in_header && !recs.empty()) recs.back().name = line;
  if (recs.empty()) fail("FASTA file ", path, ": no '>' record");
  return recs;
}

void prepare_dna(const DnaPrepareOptions& o) {
  if (o.inputs.empty()) fail("prepare --dna: no FASTA input");
  if (!(o.val_fraction > 0 && o.val_fraction < 1)) fail("--val-fraction must be in (0, 1)");
  namespace fs = std::filesystem;
  fs::create_directories(o.out_dir);
  std::vector<uint16_t> train, val;
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  size_t unk = 0;
  for (const auto& path : o.inputs) {
    const auto recs = read_fasta(path);
    size_t bases = 0;
    for (const auto& r : recs) {
      const size_t n = r.tokens.size(), nv = (size_t)std::llround(o.val_fraction * double(n));
      if (n < 2 || nv == 0 || nv == n) fail("FASTA file ", path, ": record '", r.name, "' has ", n, " bases, too few to split");
      train.push_back(NucleotideTokenizer::kBos);
      train.insert(train.end(), r.tokens.begin(), r.tokens.end() - (long)nv);
      val.push_back(NucleotideTokenizer::kBos);
      val.insert(val.end(), r.tokens.end() - (long)nv, r.tokens.end());
      for (uint16_t t : r.tokens) unk += t == NucleotideTokenizer::kUnk;
      bases += n;
    }
    inputs.push_back({{"path", path}, {"records", recs.size()}, {"bases", bases}});
    if (o.verbose) std::printf("prepare --dna: %s: %zu records, %zu bases\n", path.c_str(), recs.size(), bases);
  }
  const fs::path out(o.out_dir);
  write_shard((out / "train.bin").string(), train.data(), train.size());
  write_shard((out / "val.bin").string(), val.data(), val.size());
  nlohmann::ordered_json meta;
  meta["format"] = "attnlab-prepare";
  meta["version"] = 1;
  meta["inputs"] = inputs;
  meta["tokenizer"] = {{"type", "nucleotide"}, {"vocab_size", NucleotideTokenizer::kVocab},
                       {"ids", {"<unk>", "<bos>", "<eos>", "A", "C", "G", "T"}}, {"bos_id", 1}, {"eos_id", 2}};
  meta["val_fraction"] = o.val_fraction;
  meta["split"] = "the last val_fraction of each record";
  meta["unknown_bases"] = unk;
  meta["train"] = {{"file", "train.bin"}, {"tokens", train.size()}};
  meta["val"] = {{"file", "val.bin"}, {"tokens", val.size()}};
  data_files::write_file_atomically((out / "prepare.json").string(), {meta.dump(2), "\n"}, "prepare.json");
  if (o.verbose)
    std::printf("prepare --dna: wrote %s/train.bin (%zu tokens), val.bin (%zu tokens); vocabulary %d (model.vocab_size >= %d)\n",
                o.out_dir.c_str(), train.size(), val.size(), NucleotideTokenizer::kVocab, NucleotideTokenizer::kVocab);
}

}  // namespace attnlab
