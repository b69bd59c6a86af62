// attnlab data: DNA as a second domain (docs/data.md, "DNA"). A nucleotide tokenizer and
// `attnlab prepare --dna FASTA[.gz]`, which writes train.bin and val.bin shards for the same
// training and evaluation path as text.
//   ids: 0 <unk> (N and every other IUPAC code), 1 <bos>, 2 <eos>, 3 A, 4 C, 5 G, 6 T (vocabulary 7;
//   lower case is the same base)
// Each FASTA record is a document that begins with <bos>. The split is contiguous, so no window of
// val overlaps train: the last val_fraction of every record's bases goes to val.bin (after its own
// <bos>), the rest to train.bin.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

struct NucleotideTokenizer {
  static constexpr int kVocab = 7, kUnk = 0, kBos = 1, kEos = 2;
  static int32_t encode(char c);       // A/C/G/T (either case) → 3..6, anything else → <unk>
  static char decode(int32_t id);      // 'A', 'C', 'G', 'T', 'N' for <unk>, '\0' for bos/eos
};

struct FastaRecord {
  std::string name;                    // the header line without '>'
  std::vector<uint16_t> tokens;        // the sequence's ids
};

// Reads a FASTA file, plain or gzip-compressed (zlib reads both). Errors name the file.
std::vector<FastaRecord> read_fasta(const std::string& path);

struct DnaPrepareOptions {
  std::vector<std::string> inputs;     // FASTA files (.gz or plain)
  std::string out_dir;
  double val_fraction = 0.02;
  bool verbose = true;
};

// Writes out_dir/{train.bin, val.bin, prepare.json}; every file atomically, prepare.json last.
void prepare_dna(const DnaPrepareOptions& options);

}  // namespace attnlab
