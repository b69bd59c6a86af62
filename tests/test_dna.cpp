// DNA as a second domain (docs/data.md, "DNA"): the nucleotide tokenizer, FASTA reading (plain and
// gzip, several records, line breaks, CRLF, lower case, N), and prepare_dna's shards (BOS per
// record in each shard, the contiguous split, prepare.json), which the ordinary loader reads.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/dna.h"
#include "data/loader.h"
#include "data/shard.h"

using namespace attnlab;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("attnlab_test_dna_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}
const char* kFasta = ">chr1 test record\nACGTACGTAC\r\ngtnNACGTAC\nACGTACGTAC\nACGTACGTAC\nACGTACGTAC\n>chr2\nTTTTGGGGCCCCAAAATTTTGGGGCCCCAAAATTTTGGGG\n";
}  // namespace

TEST(Dna, Tokenizer) {
  const std::string s = "ACGTacgtNRY";
  const int32_t want[] = {3, 4, 5, 6, 3, 4, 5, 6, 0, 0, 0};
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(NucleotideTokenizer::encode(s[i]), want[i]);
  EXPECT_EQ(NucleotideTokenizer::decode(6), 'T');
  EXPECT_EQ(NucleotideTokenizer::decode(0), 'N');
  EXPECT_EQ(NucleotideTokenizer::decode(1), '\0');
}

TEST(Dna, FastaPlainAndGzipAreTheSame) {
  const fs::path d = temp_dir();
  { std::ofstream(d / "g.fa") << kFasta; }
  gzFile z = gzopen((d / "g.fa.gz").string().c_str(), "wb");
  gzwrite(z, kFasta, (unsigned)std::strlen(kFasta));
  gzclose(z);
  const auto a = read_fasta((d / "g.fa").string()), b = read_fasta((d / "g.fa.gz").string());
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].name, "chr1 test record");
  EXPECT_EQ(a[1].name, "chr2");
  EXPECT_EQ(a[0].tokens.size(), 50u);
  EXPECT_EQ(a[1].tokens.size(), 40u);
  EXPECT_EQ(a[0].tokens[10], 5);  // 'g' after the CRLF line
  EXPECT_EQ(a[0].tokens[12], 0);  // 'n'
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(a[r].tokens, b[r].tokens);
  { std::ofstream(d / "bad.fa") << "ACGT\n"; }
  EXPECT_THROW(read_fasta((d / "bad.fa").string()), Error);
  EXPECT_THROW(read_fasta((d / "missing.fa").string()), Error);
  fs::remove_all(d);
}

TEST(Dna, PrepareWritesShardsTheLoaderReads) {
  const fs::path d = temp_dir();
  { std::ofstream(d / "g.fa") << kFasta; }
  DnaPrepareOptions o;
  o.inputs = {(d / "g.fa").string()};
  o.out_dir = (d / "out").string();
  o.val_fraction = 0.2;
  o.verbose = false;
  prepare_dna(o);
  Shard tr = Shard::open((d / "out/train.bin").string()), va = Shard::open((d / "out/val.bin").string());
  // chr1: 50 bases → 40 train + 10 val; chr2: 40 → 32 + 8; each piece after its own BOS.
  EXPECT_EQ(tr.size(), 1u + 40 + 1 + 32);
  EXPECT_EQ(va.size(), 1u + 10 + 1 + 8);
  EXPECT_EQ(tr[0], 1);
  EXPECT_EQ(tr[41], 1);
  EXPECT_EQ(va[0], 1);
  EXPECT_EQ(va[11], 1);
  EXPECT_EQ(va[1], NucleotideTokenizer::encode('A'));  // chr1's base 40
  tr.validate_vocab(NucleotideTokenizer::kVocab);
  DataLoader loader(tr, 2, 8, 1);
  std::vector<int32_t> in(16), tg(16);
  loader.next(in.data(), tg.data());
  EXPECT_TRUE(fs::exists(d / "out/prepare.json"));
  fs::remove_all(d);
}
