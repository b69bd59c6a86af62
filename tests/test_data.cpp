// Tests of src/data: shards (round trip, corrupt files), the loader (windows, epochs, exact resume,
// evaluation order), the tokenizer (exact round trip, determinism, concatenation) and prepare()
// end to end on the committed test corpus (tests/data: Genesis 1-30 of the World English Bible and
// Spurgeon's Treasury of David on Psalms 1-2, both public domain).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;
using namespace attnlab;

namespace {

fs::path source_dir() {
  if (const char* env = std::getenv("ATTNLAB_SOURCE_DIR"); env && *env) return env;
  return fs::path(__FILE__).parent_path().parent_path();
}

std::vector<std::string> corpus_files() {
  const fs::path dir = source_dir() / "tests" / "data";
  return {(dir / "web_genesis_1-30.txt").string(), (dir / "tdavid_psalms_1-2.txt").string()};
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "attnlab_test_data_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// Runs f, expects an attnlab::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected an attnlab::Error containing \"" << parts.front() << "\"";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << "message lacks \"" << p << "\": " << what;
  }
}

std::vector<std::string> leftover_tmp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp") != std::string::npos ||
        e.path().filename().string().find("staging") != std::string::npos)
      out.push_back(e.path().string());
  return out;
}

// Token i = i (mod 65536): a window's first input tells where it starts in the shard.
std::vector<uint16_t> positional_tokens(size_t n) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = uint16_t(i);
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Shards

TEST(Shard, RoundTripAndLayout) {
  TempDir dir;
  Rng rng(1);
  std::vector<uint16_t> tokens(10007);
  for (auto& t : tokens) t = uint16_t(rng.below(65536));
  const std::string path = dir / "a.bin";
  write_shard(path, tokens.data(), tokens.size());

  // The bytes on disk are llm.c's layout.
  const std::string raw = read_file(path);
  ASSERT_EQ(raw.size(), 1024 + 2 * tokens.size());
  const auto* header = reinterpret_cast<const int32_t*>(raw.data());
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], int32_t(tokens.size()));
  for (int i = 3; i < 256; ++i) EXPECT_EQ(header[i], 0) << "header int " << i;

  const Shard shard = Shard::open(path);
  ASSERT_EQ(shard.size(), tokens.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), shard.tokens()));
  EXPECT_EQ(shard.path(), path);
  EXPECT_TRUE(leftover_tmp_files(dir.path()).empty());
}

TEST(Shard, EmptyShardAndAtomicReplace) {
  TempDir dir;
  const std::string path = dir / "a.bin";
  write_shard(path, nullptr, 0);
  EXPECT_EQ(Shard::open(path).size(), 0u);

  // An open shard keeps its (old) contents while the file is replaced under it.
  const std::vector<uint16_t> first = {1, 2, 3}, second = {7, 8, 9, 10, 11};
  write_shard(path, first.data(), first.size());
  const Shard old_shard = Shard::open(path);
  write_shard(path, second.data(), second.size());
  const Shard new_shard = Shard::open(path);
  ASSERT_EQ(old_shard.size(), 3u);
  EXPECT_EQ(old_shard[2], 3);
  ASSERT_EQ(new_shard.size(), 5u);
  EXPECT_EQ(new_shard[4], 11);
  EXPECT_TRUE(leftover_tmp_files(dir.path()).empty());

  Shard moved = Shard::open(path);
  Shard target = std::move(moved);
  EXPECT_EQ(target.size(), 5u);
}

TEST(Shard, CorruptFilesNameTheFileAndTheFix) {
  TempDir dir;
  const std::vector<uint16_t> tokens = positional_tokens(100);
  const std::string good = dir / "good.bin";
  write_shard(good, tokens.data(), tokens.size());
  const std::string raw = read_file(good);

  auto variant = [&](const std::string& name, std::string bytes) {
    const std::string p = dir / name;
    write_file(p, bytes);
    return p;
  };
  std::string bad_magic = raw;
  bad_magic[0] ^= 0x5a;
  std::string bad_version = raw;
  reinterpret_cast<int32_t*>(bad_version.data())[1] = 2;
  std::string negative = raw;
  reinterpret_cast<int32_t*>(negative.data())[2] = -5;

  const std::string p_magic = variant("magic.bin", bad_magic);
  expect_error([&] { Shard::open(p_magic); }, {p_magic, "magic number", "attnlab prepare"});
  const std::string p_version = variant("version.bin", bad_version);
  expect_error([&] { Shard::open(p_version); }, {p_version, "version 2", "attnlab prepare"});
  const std::string p_trunc = variant("truncated.bin", raw.substr(0, raw.size() - 1));
  expect_error([&] { Shard::open(p_trunc); }, {p_trunc, "truncated", "100 tokens", "attnlab prepare"});
  const std::string p_long = variant("long.bin", raw + "xx");
  expect_error([&] { Shard::open(p_long); }, {p_long, "longer than its header", "attnlab prepare"});
  const std::string p_header = variant("header.bin", raw.substr(0, 1000));
  expect_error([&] { Shard::open(p_header); }, {p_header, "1000 bytes", "header", "attnlab prepare"});
  const std::string p_negative = variant("negative.bin", negative);
  expect_error([&] { Shard::open(p_negative); }, {p_negative, "negative token count"});
  const std::string p_missing = dir / "missing.bin";
  expect_error([&] { Shard::open(p_missing); }, {p_missing, "cannot open", "attnlab prepare"});
  expect_error([&] { Shard::open(dir.path().string()); }, {dir.path().string(), "not a regular file"});
}

TEST(Shard, ValidateVocabNamesThePosition) {
  TempDir dir;
  std::vector<uint16_t> tokens(5000, 7);
  tokens[1234] = 300;
  tokens[4000] = 512;
  const std::string path = dir / "v.bin";
  write_shard(path, tokens.data(), tokens.size());
  const Shard shard = Shard::open(path);
  EXPECT_NO_THROW(shard.validate_vocab(513));
  expect_error([&] { shard.validate_vocab(512); }, {path, "token 512 at position 4000", "vocabulary of 512"});
  expect_error([&] { shard.validate_vocab(300); }, {path, "token 300 at position 1234"});  // the first bad one
}

// ---------------------------------------------------------------------------------------------
// Data loader

namespace {
struct ShardFile {
  TempDir dir;
  Shard shard;
  explicit ShardFile(const std::vector<uint16_t>& tokens) : shard(make(dir, tokens)) {}
  static Shard make(const TempDir& d, const std::vector<uint16_t>& tokens) {
    write_shard(d / "s.bin", tokens.data(), tokens.size());
    return Shard::open(d / "s.bin");
  }
};

// The window index of each row of a batch drawn from a positional shard.
std::vector<size_t> windows_of(const std::vector<int32_t>& inputs, int B, int T) {
  std::vector<size_t> w(B);
  for (int b = 0; b < B; ++b) w[b] = size_t(inputs[size_t(b) * T]) / size_t(T);
  return w;
}
}  // namespace

TEST(DataLoader, RowsAreShardWindows) {
  Rng rng(3);
  std::vector<uint16_t> tokens(1000);
  for (auto& t : tokens) t = uint16_t(rng.below(50000));
  ShardFile f(tokens);
  const int B = 3, T = 16;
  DataLoader loader(f.shard, B, T, 42);
  EXPECT_EQ(loader.num_windows(), (1000u - 1) / 16);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int step = 0; step < 50; ++step) {
    loader.next(in.data(), tg.data());
    for (int b = 0; b < B; ++b) {
      // find the window: the one whose slice matches (random tokens make it unique)
      size_t match = loader.num_windows();
      for (size_t w = 0; w < loader.num_windows(); ++w)
        if (std::equal(in.begin() + b * T, in.begin() + (b + 1) * T, tokens.begin() + w * T)) { match = w; break; }
      ASSERT_LT(match, loader.num_windows()) << "row " << b << " of step " << step << " is not a window";
      for (int t = 0; t < T; ++t) ASSERT_EQ(tg[b * T + t], tokens[match * T + t + 1]) << "target shift";
    }
  }
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnce) {
  const int B = 4, T = 8;
  ShardFile f(positional_tokens(8 * 37 + 1));  // W = 37 windows, and B does not divide W
  DataLoader loader(f.shard, B, T, 7);
  const size_t W = loader.num_windows();
  ASSERT_EQ(W, 37u);
  std::vector<size_t> seen;
  std::vector<int32_t> in(B * T), tg(B * T);
  while (seen.size() < 4 * W) {
    loader.next(in.data(), tg.data());
    for (size_t w : windows_of(in, B, T)) seen.push_back(w);
  }
  std::vector<std::vector<size_t>> epochs;
  for (int e = 0; e < 4; ++e) {
    std::vector<size_t> order(seen.begin() + e * W, seen.begin() + (e + 1) * W);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t w = 0; w < W; ++w) ASSERT_EQ(sorted[w], w) << "epoch " << e << " misses or repeats a window";
    epochs.push_back(order);
  }
  // The order is shuffled, and differs from epoch to epoch (37! orders: a repeat means a bug).
  std::vector<size_t> identity(W);
  for (size_t w = 0; w < W; ++w) identity[w] = w;
  EXPECT_NE(epochs[0], identity);
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_EQ(loader.state().epoch, 3u);  // 4W windows drawn in batches of 4: inside epoch 3
}

// Data-parallel training (train/data_parallel.h): the parts' rows of each batch, side by side, are
// the batch one loader hands out whole, across epoch ends, and every part's loader ends at the
// same position; so the data a step sees does not depend on how many ranks share it.
TEST(DataLoader, NextRowsOfThePartsMakeTheWholeBatch) {
  const int B = 6, T = 5;
  ShardFile f(positional_tokens(5 * 23 + 1));  // 23 windows: batches cross epoch ends
  for (int parts : {1, 2, 3, 6}) {
    DataLoader whole(f.shard, B, T, 9);
    std::vector<DataLoader> split;
    for (int p = 0; p < parts; ++p) split.emplace_back(f.shard, B, T, 9);
    const int rows = B / parts;
    std::vector<int32_t> in(B * T), tg(B * T), pin(rows * T), ptg(rows * T);
    for (int step = 0; step < 20; ++step) {
      whole.next(in.data(), tg.data());
      for (int p = 0; p < parts; ++p) {
        split[p].next_rows(pin.data(), ptg.data(), p * rows, rows);
        ASSERT_TRUE(std::equal(pin.begin(), pin.end(), in.begin() + (size_t)p * rows * T)) << parts << " parts, step " << step;
        ASSERT_TRUE(std::equal(ptg.begin(), ptg.end(), tg.begin() + (size_t)p * rows * T)) << parts << " parts, step " << step;
        ASSERT_EQ(split[p].state(), whole.state());
      }
    }
  }
}

TEST(DataLoader, DeterministicFromTheSeed) {
  const int B = 2, T = 5;
  ShardFile f(positional_tokens(5 * 100 + 1));
  DataLoader a(f.shard, B, T, 11), b(f.shard, B, T, 11), c(f.shard, B, T, 12);
  std::vector<int32_t> ia(B * T), ta(B * T), ib(B * T), tb(B * T), ic(B * T), tc(B * T);
  bool differs = false;
  for (int step = 0; step < 120; ++step) {  // more than two epochs
    a.next(ia.data(), ta.data());
    b.next(ib.data(), tb.data());
    c.next(ic.data(), tc.data());
    ASSERT_EQ(ia, ib) << "step " << step;
    ASSERT_EQ(ta, tb) << "step " << step;
    differs |= ia != ic;
  }
  EXPECT_TRUE(differs) << "another seed gave the same batches";
}

TEST(DataLoader, ExactResume) {
  const int B = 3, T = 4;
  ShardFile f(positional_tokens(4 * 10 + 1));  // W = 10: batches cross epochs often
  std::vector<int32_t> in(B * T), tg(B * T);
  // Reference run, recording the state before every batch and the batch itself.
  DataLoader reference(f.shard, B, T, 99);
  std::vector<DataLoader::State> states;
  std::vector<std::vector<int32_t>> inputs, targets;
  for (int step = 0; step < 30; ++step) {
    states.push_back(reference.state());
    reference.next(in.data(), tg.data());
    inputs.push_back(in);
    targets.push_back(tg);
  }
  // A fresh loader restored to any state continues exactly like the reference.
  for (size_t k = 0; k < states.size(); k += 1) {
    DataLoader resumed(f.shard, B, T, 99);
    resumed.restore(states[k]);
    for (size_t step = k; step < std::min(states.size(), k + 8); ++step) {
      ASSERT_EQ(resumed.state(), states[step]);
      resumed.next(in.data(), tg.data());
      ASSERT_EQ(in, inputs[step]) << "resumed at batch " << k << ", batch " << step;
      ASSERT_EQ(tg, targets[step]);
    }
  }
  // The states cover an epoch boundary (index == W) and restoring backwards works too.
  EXPECT_TRUE(std::any_of(states.begin(), states.end(), [](const DataLoader::State& s) { return s.index == 0 && s.epoch > 0; }) ||
              std::any_of(states.begin(), states.end(), [](const DataLoader::State& s) { return s.index == 10; }));
  reference.restore(states[2]);
  reference.next(in.data(), tg.data());
  EXPECT_EQ(in, inputs[2]);
  expect_error([&] { reference.restore({0, 11}); }, {"resume position 11", "10 windows"});
}

TEST(DataLoader, RejectsShortShardsAndBadShapes) {
  ShardFile f(positional_tokens(64));
  expect_error([&] { DataLoader(f.shard, 2, 64, 1); }, {f.shard.path(), "64 tokens", "T+1 = 65"});
  EXPECT_NO_THROW(DataLoader(f.shard, 2, 63, 1));  // exactly one window
  expect_error([&] { DataLoader(f.shard, 0, 8, 1); }, {f.shard.path(), "B = 0"});
  expect_error([&] { DataLoader(f.shard, 2, 0, 1); }, {f.shard.path(), "T = 0"});
  std::vector<uint16_t> tokens = positional_tokens(100);
  tokens[77] = 9000;
  ShardFile g(tokens);
  DataLoader loader(g.shard, 1, 8, 1);
  expect_error([&] { loader.validate_vocab(8192); }, {g.shard.path(), "position 77"});
}

TEST(DataLoader, EvalWalksTheWindowsInOrder) {
  const int B = 4, T = 8;
  ShardFile f(positional_tokens(8 * 10 + 3));  // W = 10
  const DataLoader loader(f.shard, B, T, 5);
  ASSERT_EQ(loader.eval_batches(0), 3u);  // ceil(10 / 4)
  EXPECT_EQ(loader.eval_batches(2), 2u);
  EXPECT_EQ(loader.eval_batches(100), 3u);
  std::vector<int32_t> in(B * T), tg(B * T);
  std::vector<size_t> expected_fresh = {4, 4, 2};
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(loader.eval_batch(k, in.data(), tg.data()), int(expected_fresh[k]));
    const auto w = windows_of(in, B, T);
    for (int b = 0; b < B; ++b) {
      EXPECT_EQ(w[b], (k * B + b) % 10) << "batch " << k << " row " << b;
      for (int t = 0; t < T; ++t) EXPECT_EQ(tg[b * T + t], in[b * T + t] + 1);
    }
  }
  // Evaluation does not disturb the training order.
  DataLoader a(f.shard, B, T, 5), b(f.shard, B, T, 5);
  std::vector<int32_t> ia(B * T), ta(B * T);
  a.eval_batch(1, ia.data(), ta.data());
  a.next(ia.data(), ta.data());
  b.next(in.data(), tg.data());
  EXPECT_EQ(ia, in);
}

// ---------------------------------------------------------------------------------------------
// Tokenizer

namespace {
// One tiny tokenizer for the tokenizer tests (training takes ~0.2 s).
const Tokenizer& test_tokenizer() {
  static TempDir dir;
  static const Tokenizer tok = [] {
    train_tokenizer(corpus_files(), dir / "tiny", 400, 1234);
    return Tokenizer::load(dir / "tiny.model");
  }();
  return tok;
}
}  // namespace

TEST(Tokenizer, ExactRoundTrip) {
  const Tokenizer& tok = test_tokenizer();
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  for (const auto& path : corpus_files()) {
    const std::string text = read_file(path);
    const std::vector<int> ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text) << path;
    // The merges compress: a character-level model would give 1 byte per token or less.
    EXPECT_GT(double(text.size()) / double(ids.size()), 1.4) << path;
    for (int id : ids) ASSERT_TRUE(id >= 0 && id < 400);
  }
  // Text unlike the training data: whitespace runs, tabs, CR, leading/trailing spaces, and
  // characters never seen (byte fallback).
  for (const std::string& s : {std::string("  leading and trailing  "), std::string("tabs\tand\r\nCRLF\n\n\nlines"),
                              std::string("naïve café — 東京 ∑ 🙂"), std::string("x"), std::string(""),
                              std::string("many      spaces"), std::string("\n")}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << "'" << s << "'";
  }
  // bos/eos decode to nothing, so a shard's documents decode to their text.
  std::vector<int> with_bos = {tok.bos_id()};
  const auto hello = tok.encode("In the beginning");
  with_bos.insert(with_bos.end(), hello.begin(), hello.end());
  EXPECT_EQ(tok.decode(with_bos), "In the beginning");
  expect_error([&] { tok.decode({5, 400}); }, {"id 400 at position 1", "400 ids"});
  expect_error([&] { tok.decode({-1}); }, {"id -1 at position 0"});
}

TEST(Tokenizer, ConcatenatesAtNewlinesAndSpaces) {
  // prepare() encodes documents in pieces cut before a line or a single space between words;
  // this is the property that makes that exact.
  const Tokenizer& tok = test_tokenizer();
  const std::string text = read_file(corpus_files()[1]).substr(5000, 3000);
  const std::vector<int> whole = tok.encode(text);
  std::vector<size_t> cuts;
  for (size_t c = 1; c + 1 < text.size(); ++c)
    if (text[c - 1] == '\n' || (text[c] == ' ' && text[c - 1] != ' ' && text[c + 1] != ' ')) cuts.push_back(c);
  ASSERT_GT(cuts.size(), 100u);
  for (size_t k = 0; k < cuts.size(); k += cuts.size() / 40) {
    std::vector<int> joined = tok.encode(text.substr(0, cuts[k]));
    const std::vector<int> tail = tok.encode(text.substr(cuts[k]));
    joined.insert(joined.end(), tail.begin(), tail.end());
    ASSERT_EQ(joined, whole) << "cut at byte " << cuts[k];
  }
}

TEST(Tokenizer, TrainingIsDeterministic) {
  TempDir dir;
  train_tokenizer(corpus_files(), dir / "a", 300 + 100, 1234);
  train_tokenizer(corpus_files(), dir / "b", 300 + 100, 1234);
  const std::string a = read_file(dir / "a.model"), b = read_file(dir / "b.model");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_TRUE(leftover_tmp_files(dir.path()).empty());
  EXPECT_FALSE(fs::exists(dir / "a.vocab"));
}

TEST(Tokenizer, ErrorsNameTheFile) {
  TempDir dir;
  const std::string missing = dir / "missing.model";
  expect_error([&] { Tokenizer::load(missing); }, {missing, "attnlab prepare"});
  const std::string garbage = dir / "garbage.model";
  write_file(garbage, "this is not a protobuf");
  expect_error([&] { Tokenizer::load(garbage); }, {garbage, "not a SentencePiece model"});
  // A well-formed model proto whose second piece begins with a NUL byte: SentencePiece's trie
  // builder throws on it (a fuzzer's finding); it must become an error naming the file.
  const std::string nul_piece = dir / "nul_piece.model";
  write_file(nul_piece, std::string("\x0a\x0e\x0a\x05<}nk>\x15\x00\x00\x00\x00\x18\x02"
                                    "\x0a\x0c\x0a\x03<s>\x0a\x05\x00\x18\x00\x20\x00", 30));
  expect_error([&] { Tokenizer::load(nul_piece); }, {nul_piece, "not a usable SentencePiece model"});

  const std::string empty = dir / "empty.txt";
  write_file(empty, "");
  expect_error([&] { train_tokenizer({empty}, dir / "t", 400, 1); }, {empty, "empty"});
  const std::string absent = dir / "absent.txt";
  expect_error([&] { train_tokenizer({corpus_files()[0], absent}, dir / "t", 400, 1); }, {absent, "cannot open"});
  expect_error([&] { train_tokenizer(corpus_files(), dir / "t", 300, 1); }, {corpus_files()[0], "too small", "at least"});
  expect_error([&] { train_tokenizer(corpus_files(), dir / "t", 70000, 1); }, {"65536"});
}

// ---------------------------------------------------------------------------------------------
// prepare()

namespace {
// The non-blank lines of a text, which is what prepare() keeps (blank lines separate documents).
size_t non_blank_bytes(const std::string& text) {
  size_t bytes = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    if (text.find_first_not_of(" \t\r\n", pos) < end) bytes += end - pos;
    pos = end;
  }
  return bytes;
}

// Splits a shard into its bos-separated segments and decodes each.
std::vector<std::string> decoded_segments(const Shard& shard, const Tokenizer& tok) {
  std::vector<std::string> out;
  std::vector<int> ids;
  auto flush = [&] {
    if (!ids.empty()) out.push_back(tok.decode(ids));
    ids.clear();
  };
  for (size_t i = 0; i < shard.size(); ++i) {
    if (shard[i] == tok.bos_id()) flush();
    else ids.push_back(shard[i]);
  }
  flush();
  return out;
}
}  // namespace

TEST(Prepare, EndToEndOnTheTestCorpus) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = corpus_files();
  options.out_dir = dir / "out";  // created by prepare
  options.vocab_size = 400;
  options.val_fraction = 0.05;
  options.seed = 7;
  options.verbose = false;
  prepare(options);

  const Tokenizer tok = Tokenizer::load(dir / "out/tokenizer.model");
  EXPECT_EQ(tok.vocab_size(), 400);
  const Shard train = Shard::open(dir / "out/train.bin"), val = Shard::open(dir / "out/val.bin");
  train.validate_vocab(400);
  val.validate_vocab(400);
  const auto meta = nlohmann::json::parse(read_file(dir / "out/prepare.json"));
  EXPECT_EQ(meta["train"]["tokens"].get<size_t>(), train.size());
  EXPECT_EQ(meta["val"]["tokens"].get<size_t>(), val.size());
  EXPECT_EQ(meta["tokenizer"]["vocab_size"].get<int>(), 400);
  ASSERT_EQ(meta["inputs"].size(), 2u);
  EXPECT_EQ(meta["inputs"][0]["documents"].get<int>(), 30);  // Genesis 1-30, one chapter each
  EXPECT_EQ(meta["inputs"][1]["documents"].get<int>(), 2);   // Psalms 1-2

  // Every kept byte of the input is in exactly one shard, and every segment is input text.
  const std::string genesis = read_file(options.inputs[0]), psalms = read_file(options.inputs[1]);
  const size_t kept = non_blank_bytes(genesis) + non_blank_bytes(psalms);
  size_t decoded = 0;
  for (const Shard* s : {&train, &val})
    for (const std::string& seg : decoded_segments(*s, tok)) {
      decoded += seg.size();
      EXPECT_TRUE(genesis.find(seg) != std::string::npos || psalms.find(seg) != std::string::npos)
          << "a decoded segment is not input text: " << seg.substr(0, 80);
    }
  EXPECT_EQ(decoded, kept);
  EXPECT_EQ(meta["train"]["bytes"].get<size_t>() + meta["val"]["bytes"].get<size_t>(), kept);
  // The default split holds out whole documents: val is at least val_fraction of the bytes,
  // overshooting by less than one document (the largest is a psalm), and each of its segments
  // is a whole document: a bos before each document and nowhere else.
  EXPECT_EQ(meta["split"]["unit"], "documents");
  EXPECT_EQ(meta["split"]["units"].get<int>(), 32);
  EXPECT_EQ(meta["tokenizer"]["trained_on"], "train text");
  const double val_share = meta["val"]["bytes"].get<double>() / double(kept);
  EXPECT_GE(val_share, 0.05);
  EXPECT_LT(val_share, 0.05 + double(non_blank_bytes(psalms)) / double(kept));
  size_t bos = 0;
  for (const Shard* s : {&train, &val})
    for (size_t i = 0; i < s->size(); ++i) bos += (*s)[i] == tok.bos_id();
  EXPECT_EQ(bos, 32u);
  for (const std::string& seg : decoded_segments(val, tok)) {
    const std::string& text = genesis.find(seg) != std::string::npos ? genesis : psalms;
    const size_t at = text.find(seg);
    ASSERT_NE(at, std::string::npos);
    EXPECT_TRUE(at == 0 || text.compare(at - 2, 2, "\n\n") == 0) << "a val segment starts inside a document";
    EXPECT_TRUE(at + seg.size() == text.size() || text.compare(at + seg.size(), 1, "\n") == 0)
        << "a val segment ends inside a document";
  }
  // The contamination record: both n-gram sizes, shares in [0, 1].
  ASSERT_EQ(meta["contamination"].size(), 2u);
  for (const auto& c : meta["contamination"]) {
    EXPECT_GT(c["val_ngrams"].get<size_t>(), 0u);
    EXPECT_LE(c["found_in_train"].get<size_t>(), c["val_ngrams"].get<size_t>());
  }
  EXPECT_TRUE(leftover_tmp_files(dir.path() / "out").empty());

  // The val shard feeds a loader (about 4.6k tokens at this vocab).
  DataLoader loader(val, 4, 64, 1);
  EXPECT_GT(loader.eval_batches(0), 3u);

  // Same inputs and options, one thread instead of all, into a fresh directory: identical bytes.
  // Then again into the first directory: outputs are replaced in place.
  PrepareOptions again = options;
  again.out_dir = dir / "out2";
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  prepare(again);
  omp_set_num_threads(threads);
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin", "prepare.json"}) {
    const std::string a = read_file(dir / (std::string("out/") + name));
    const std::string b = read_file(dir / (std::string("out2/") + name));
    EXPECT_TRUE(a == b) << name << " differs between runs";
  }
  prepare(options);
  EXPECT_EQ(read_file(dir / "out/train.bin"), read_file(dir / "out2/train.bin"));
  EXPECT_TRUE(leftover_tmp_files(dir.path() / "out").empty());
}

TEST(Prepare, PiecesSplitKeepsTheOldLayout) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = corpus_files();
  options.out_dir = dir / "out";
  options.vocab_size = 400;
  options.val_fraction = 0.05;
  options.seed = 7;
  options.split = SplitUnit::pieces;
  options.verbose = false;
  prepare(options);
  const Tokenizer tok = Tokenizer::load(dir / "out/tokenizer.model");
  const Shard train = Shard::open(dir / "out/train.bin"), val = Shard::open(dir / "out/val.bin");
  const auto meta = nlohmann::json::parse(read_file(dir / "out/prepare.json"));
  EXPECT_EQ(meta["split"]["unit"], "pieces");
  EXPECT_EQ(meta["tokenizer"]["trained_on"], "all text");
  const size_t kept = non_blank_bytes(read_file(options.inputs[0])) + non_blank_bytes(read_file(options.inputs[1]));
  // val holds at least val_fraction of the bytes, overshooting by less than one piece.
  const double val_share = meta["val"]["bytes"].get<double>() / double(kept);
  EXPECT_GE(val_share, 0.05);
  EXPECT_LT(val_share, 0.05 + double(kPrepareMaxPieceBytes) / double(kept));
  size_t bos = 0;
  for (const Shard* s : {&train, &val})
    for (size_t i = 0; i < s->size(); ++i) bos += (*s)[i] == tok.bos_id();
  // One per document, plus one where a document's pieces continue in the other shard (only the
  // two psalms are longer than a piece).
  EXPECT_GE(bos, 32u);
  EXPECT_LE(bos, 32u + 2 * (read_file(options.inputs[1]).size() / kPrepareMaxPieceBytes + 1));
}

namespace {
// Group files for the test corpus: Genesis chapters 1-10, 11-20, 21-30 are groups "G1", "G2", "G3";
// the two psalms share the group "P".
std::vector<std::string> write_group_files(const fs::path& dir) {
  std::string genesis;
  for (int c = 0; c < 30; ++c) genesis.append("G").append(std::to_string(1 + c / 10)).append("\n");
  const std::string g = (dir / "genesis.groups").string(), p = (dir / "psalms.groups").string();
  std::ofstream(g) << genesis;
  std::ofstream(p) << "P\r\n  P  \n";  // CR and spaces around a name are not part of it
  return {g, p};
}
}  // namespace

TEST(Prepare, GroupsSplitHoldsOutWholeGroups) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = corpus_files();
  options.out_dir = dir / "out";
  options.vocab_size = 400;
  options.val_fraction = 0.1;
  options.split = SplitUnit::groups;
  options.group_files = write_group_files(dir.path());
  options.verbose = false;
  options.val_groups = {"G2"};
  prepare(options);
  auto meta = nlohmann::json::parse(read_file(dir / "out/prepare.json"));
  EXPECT_EQ(meta["split"]["unit"], "groups");
  EXPECT_EQ(meta["split"]["units"].get<int>(), 4);
  EXPECT_EQ(meta["split"]["val_groups"], nlohmann::json::array({"G2"}));
  // val is exactly Genesis 11-20: ten documents, their bytes, and each is a whole chapter.
  const Tokenizer tok = Tokenizer::load(dir / "out/tokenizer.model");
  const auto segments = decoded_segments(Shard::open(dir / "out/val.bin"), tok);
  ASSERT_EQ(segments.size(), 10u);
  const std::string genesis = read_file(options.inputs[0]);
  size_t bytes = 0;
  for (const std::string& seg : segments) {
    EXPECT_NE(genesis.find(seg), std::string::npos);
    bytes += seg.size();
  }
  EXPECT_EQ(meta["val"]["bytes"].get<size_t>(), bytes);
  EXPECT_EQ(meta["inputs"][0]["val_bytes"].get<size_t>(), bytes);
  EXPECT_EQ(meta["inputs"][1]["val_bytes"].get<size_t>(), 0u);

  // A seeded sample draws whole groups: val's bytes are a sum of whole groups' bytes.
  options.val_groups.clear();
  options.out_dir = dir / "sampled";
  prepare(options);
  meta = nlohmann::json::parse(read_file(dir / "sampled/prepare.json"));
  EXPECT_EQ(meta["split"]["chosen"], "seeded sample");
  ASSERT_GE(meta["split"]["val_groups"].size(), 1u);
  for (const auto& name : meta["split"]["val_groups"]) {
    if (name == "P") {
      EXPECT_EQ(meta["inputs"][1]["val_bytes"].get<size_t>(), non_blank_bytes(read_file(options.inputs[1])));
    }
  }
}

TEST(Prepare, GroupErrorsNameTheFileAndLine) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = corpus_files();
  options.out_dir = dir / "out";
  options.vocab_size = 400;
  options.split = SplitUnit::groups;
  options.verbose = false;
  auto files = write_group_files(dir.path());
  options.group_files = {files[0]};
  expect_error([&] { prepare(options); }, {"1 --groups file", "2 --input files"});
  options.group_files = files;
  options.val_groups = {"G9"};
  expect_error([&] { prepare(options); }, {"--val-groups", "'G9'"});
  options.val_groups = {"G1", "G1"};
  expect_error([&] { prepare(options); }, {"--val-groups", "'G1'", "twice"});
  options.val_groups = {"G1", "G2", "G3", "P"};
  expect_error([&] { prepare(options); }, {"every group is held out"});
  options.val_groups.clear();
  std::ofstream(files[1]) << "P\n\n";
  expect_error([&] { prepare(options); }, {files[1], "line 2", "empty"});
  std::ofstream(files[1]) << "P\n";
  expect_error([&] { prepare(options); }, {files[1], "1 group names", "2 documents", options.inputs[1]});
  options.split = SplitUnit::documents;
  expect_error([&] { prepare(options); }, {"--split groups"});
}

TEST(Prepare, NgramOverlapCountsSharedRunsOfWords) {
  // Case and punctuation do not matter; a run across two units is not an n-gram.
  const std::vector<std::string_view> train = {"In the beginning God created the heaven", "and the earth."};
  EXPECT_EQ(ngram_overlap({"in THE beginning, God created"}, train, 3).found_in_train, 3u);
  EXPECT_EQ(ngram_overlap({"in THE beginning, God created"}, train, 3).held_out_ngrams, 3u);
  EXPECT_EQ(ngram_overlap({"created the heaven and the"}, train, 3).found_in_train, 1u);  // only "created the heaven"
  EXPECT_EQ(ngram_overlap({"the earth"}, train, 3).held_out_ngrams, 0u);                   // shorter than n
  const NgramOverlap none = ngram_overlap({"a b c d"}, train, 2);
  EXPECT_EQ(none.held_out_ngrams, 3u);
  EXPECT_EQ(none.found_in_train, 0u);
  EXPECT_DOUBLE_EQ(none.share(), 0.0);
}

// A prepare that fails after the tokenizer is trained (here: the file-size limit stops the first
// shard write with EFBIG, as ENOSPC would) must leave the previous set as it was: the old
// tokenizer with the old shards, not a new tokenizer beside old shards. Nothing staged remains.
TEST(Prepare, AFailedPrepareLeavesThePreviousSetIntact) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = corpus_files();
  options.out_dir = dir / "out";
  options.vocab_size = 360;
  options.verbose = false;
  prepare(options);
  std::map<std::string, std::string> before;
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin", "prepare.json"})
    before[name] = read_file(dir / (std::string("out/") + name));
  ASSERT_LT(before["tokenizer.model"].size(), before["train.bin"].size());

  options.vocab_size = 400;
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit small = old;
  small.rlim_cur = before["tokenizer.model"].size() * 2;  // the tokenizer fits, train.bin does not
  auto old_handler = signal(SIGXFSZ, SIG_IGN);           // EFBIG from write() instead of the signal
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string err;
  try {
    prepare(options);
  } catch (const Error& e) {
    err = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  EXPECT_NE(err, "") << "the write was expected to fail";
  for (const auto& [name, bytes] : before)
    EXPECT_TRUE(read_file(dir / ("out/" + name)) == bytes) << name << " changed although prepare failed";
  EXPECT_TRUE(leftover_tmp_files(dir.path() / "out").empty());

  // And the next prepare succeeds and replaces the whole set.
  prepare(options);
  EXPECT_EQ(Tokenizer::load(dir / "out/tokenizer.model").vocab_size(), 400);
  Shard::open(dir / "out/train.bin").validate_vocab(400);
  EXPECT_TRUE(leftover_tmp_files(dir.path() / "out").empty());
}

TEST(Prepare, SeedChangesTheSplit) {
  TempDir dir;
  PrepareOptions options;
  options.inputs = {corpus_files()[0]};
  options.out_dir = dir / "a";
  options.vocab_size = 350;
  options.verbose = false;
  prepare(options);
  options.out_dir = dir / "b";
  options.seed = 1338;
  prepare(options);
  EXPECT_NE(read_file(dir / "a/val.bin"), read_file(dir / "b/val.bin"));
}

TEST(Prepare, InputErrorsNameTheFile) {
  TempDir dir;
  PrepareOptions options;
  options.out_dir = dir / "out";
  options.vocab_size = 400;
  options.verbose = false;

  expect_error([&] { prepare(options); }, {"no input files", "--input"});
  const std::string missing = dir / "missing.txt";
  options.inputs = {corpus_files()[0], missing};
  expect_error([&] { prepare(options); }, {missing, "cannot open"});
  const std::string empty = dir / "empty.txt";
  write_file(empty, "");
  options.inputs = {empty};
  expect_error([&] { prepare(options); }, {empty, "empty"});
  const std::string blank = dir / "blank.txt";
  write_file(blank, "\n  \n\t\n");
  options.inputs = {blank};
  expect_error([&] { prepare(options); }, {blank, "blank"});
  const std::string latin1 = dir / "latin1.txt";
  write_file(latin1, "line one\ncaf\xe9 au lait\n");
  options.inputs = {latin1};
  expect_error([&] { prepare(options); }, {latin1, "invalid UTF-8 at byte 12", "line 2", "iconv"});
  const std::string single = dir / "single.txt";
  write_file(single, read_file(corpus_files()[0]).substr(0, 3000));  // one chapter, one document
  options.inputs = {single};
  expect_error([&] { prepare(options); }, {single, "single document"});

  options.inputs = corpus_files();
  options.val_fraction = 0;
  expect_error([&] { prepare(options); }, {"val fraction 0"});
  options.val_fraction = 0.02;
  options.vocab_size = 70000;
  expect_error([&] { prepare(options); }, {"vocab size 70000", "65536"});
  EXPECT_FALSE(fs::exists(dir / "out")) << "a failed prepare must not leave outputs";
}
