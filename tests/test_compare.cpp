// The grid files of `attnlab compare` (src/experiment/compare.h, docs/compare.md): what a grid parses to,
// and that a bad value fails naming the file, line and key, with the messages of the config's own
// values (model/config_values.h) — the grid and the configs read values through one parser.
#include <gtest/gtest.h>

#include <string>

#include "experiment/compare.h"
#include "model/config_values.h"
#include "source_dir.h"

using namespace attnlab;
using attnlab::test::source_dir;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_grid_text(text, "g.toml");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(CompareGrid, ShippedGridsParse) {
  const Grid quick = parse_grid_file(source_dir() + "/configs/grids/quick.toml");
  EXPECT_EQ(quick.name, "quick");
  EXPECT_EQ(quick.variants.size(), 5u);
  EXPECT_EQ(quick.seeds, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(quick.sets.size(), 7u);
  EXPECT_NO_THROW(parse_grid_file(source_dir() + "/configs/grids/results.toml"));
}

TEST(CompareGrid, ParsesEveryKey) {
  const Grid g = parse_grid_text(
      "name = \"quick\"  # a comment\n"
      "preset = \"tiny\"\n"
      "set = [\"attn.xsa.layers=[0, 1]\", \"train.lr=3e-3\", ]\n"
      "steps = 64\nseeds = [1, 2]\nbaseline = \"xsa\"\nckpt_every = 8\nanalyze = true\nanalyze_sequences = 4\n"
      "lengths = \"1,2\"\nlength_tokens = 512\n"
      "[variants.rope]\nset = [\"attn.pos=rope\"]\n"
      "[variants.xsa]\nset = [\"attn.pos=rope\", \"attn.xsa=on\"]\n"
      "[variants.empty+1]\nset = []\n"
      "[tasks.passkey]\nset = [\"model.seq_len=64\"]\nsteps = 10\nlengths = \"1\"\nsamples = 8\n",
      "g.toml");
  EXPECT_EQ(g.name, "quick");
  EXPECT_EQ(g.preset, "tiny");
  EXPECT_EQ(g.sets, (std::vector<std::string>{"attn.xsa.layers=[0, 1]", "train.lr=3e-3"}));
  EXPECT_EQ(g.steps, 64);
  EXPECT_EQ(g.seeds, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(g.baseline, "xsa");
  EXPECT_EQ(g.ckpt_every, 8);
  EXPECT_TRUE(g.analyze);
  EXPECT_EQ(g.analyze_sequences, 4);
  EXPECT_EQ(g.lengths, "1,2");
  EXPECT_EQ(g.length_tokens, 512);
  ASSERT_EQ(g.variants.size(), 3u);
  EXPECT_EQ(g.variants[1].name, "xsa");
  EXPECT_EQ(g.variants[1].sets, (std::vector<std::string>{"attn.pos=rope", "attn.xsa=on"}));
  EXPECT_TRUE(g.variants[2].sets.empty());
  ASSERT_EQ(g.tasks.size(), 1u);
  EXPECT_EQ(g.tasks[0].name, "passkey");
  EXPECT_EQ(g.tasks[0].steps, 10);
  EXPECT_EQ(g.tasks[0].samples, 8);
  EXPECT_EQ(g.tasks[0].lengths, "1");
}

TEST(CompareGrid, DefaultsAndBaseline) {
  const Grid g = parse_grid_text("[variants.a]\nset = [\"attn.pos=rope\"]\n[variants.b]\nset = [\"attn.pos=alibi\"]\n", "g.toml");
  EXPECT_EQ(g.name, "grid");
  EXPECT_EQ(g.baseline, "a");
  EXPECT_EQ(g.seeds, (std::vector<uint64_t>{1337}));
  EXPECT_EQ(g.steps, 0);
}

TEST(CompareGrid, BadValuesNameFileLineAndKey) {
  const std::string v = "[variants.a]\nset = [\"attn.pos=rope\"]\n";
  EXPECT_EQ(error_of("steps = many\n" + v), "g.toml:1: steps = many: expected an integer");
  EXPECT_EQ(error_of("name = quick\n" + v), "g.toml:1: name = quick: expected a quoted string such as \"text\"");
  EXPECT_EQ(error_of("analyze = yes\n" + v), "g.toml:1: analyze = yes: expected true or false");
  EXPECT_NE(error_of("set = \"attn.pos=rope\"\n" + v).find("g.toml:1: set = \"attn.pos=rope\": expected a one-line list"), std::string::npos);
  EXPECT_NE(error_of("set = [\"attn.pos=rope]\n" + v).find("g.toml:1: set = "), std::string::npos);
  EXPECT_NE(error_of("seeds = [1, -2]\n" + v).find("g.toml:1: seeds = -2: expected an integer in [0, "), std::string::npos);
  EXPECT_NE(error_of("colour = 1\n" + v).find("g.toml:1: unknown grid key 'colour'"), std::string::npos);
  EXPECT_EQ(error_of("baseline = \"nope\"\n" + v), "g.toml: baseline 'nope' is not a variant");
  EXPECT_EQ(error_of("seeds = [1, 1]\n" + v), "g.toml: seeds repeat a value");
  EXPECT_EQ(error_of("name = \"x\"\n"), "g.toml: no variants (add e.g. [variants.rope] set = [\"attn.pos=rope\"])");
  EXPECT_NE(error_of(v + "[variants.a]\nset = []\n").find("g.toml:4: variants.a.set is given a second time (first at g.toml:2)"), std::string::npos);
  EXPECT_NE(error_of(v + "[tasks.sort]\nsteps = 3\n").find("g.toml:4: unknown task 'sort'"), std::string::npos);
}

// The list parser the grid uses, and the config's layer lists beside it: one splitter, quotes respected.
TEST(ConfigValues, Lists) {
  using namespace attnlab::config_values;
  EXPECT_EQ(parse_string_list("k", "[\"a, b\", c]", "w"), (std::vector<std::string>{"a, b", "c"}));
  EXPECT_TRUE(parse_string_list("k", "[ ]", "w").empty());
  EXPECT_THROW(parse_string_list("k", "[\"a\",, \"b\"]", "w"), std::exception);
  EXPECT_THROW(parse_string_list("k", "[\"a\" \"b\"]", "w"), std::exception);
  EXPECT_EQ(parse_layers("k", "[2, 0]", "w"), (std::vector<int>{0, 2}));
  EXPECT_EQ(parse_layers("k", "[1,]", "w"), (std::vector<int>{1}));
  EXPECT_TRUE(parse_layers("k", "all", "w").empty());
  EXPECT_THROW(parse_layers("k", "[0, ]", "w"), std::exception);
  EXPECT_THROW(parse_layers("k", "[0,,1]", "w"), std::exception);
  EXPECT_THROW(parse_layers("k", "[]", "w"), std::exception);
  EXPECT_THROW(parse_layers("k", "[1, 1]", "w"), std::exception);
}
