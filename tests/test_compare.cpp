// The grid files of `attnlab compare` (src/experiment/compare.h, docs/compare.md): what a grid parses to,
// and that a bad value fails naming the file, line and key, with the messages of the config's own
// values (model/config_values.h) — the grid and the configs read values through one parser.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "experiment/compare.h"
#include "experiment/compare/evaluations.h"
#include "experiment/compare/plan.h"
#include "experiment/report.h"
#include "experiment/stats.h"
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

// [primary] and [budget] (docs/compare.md "Primary comparisons", "Gains in compute").
TEST(CompareGrid, PrimaryAndBudget) {
  const std::string v = "[variants.rope]\nset = [\"attn.pos=rope\"]\n[variants.xsa]\nset = [\"attn.xsa=on\"]\n"
                        "[variants.goat]\nset = [\"attn.pos=goat\"]\n";
  const Grid g = parse_grid_text("steps = 10\n" + v +
                                     "[primary]\ncomparisons = [\"xsa < rope\", \"goat>rope by 0.02\", \"xsa vs goat\"]\n"
                                     "effect = 0.01\nalpha = 0.1\npower = 0.9\n"
                                     "[budget]\nfactors = [0.5, 1, 2]\n",
                                 "g.toml");
  ASSERT_EQ(g.primary.size(), 3u);
  EXPECT_EQ(g.primary[0].a, "xsa");
  EXPECT_EQ(g.primary[0].b, "rope");
  EXPECT_EQ(g.primary[0].alternative, stats::Alternative::less);
  EXPECT_EQ(g.primary[0].effect, 0);
  EXPECT_EQ(g.primary[1].alternative, stats::Alternative::greater);
  EXPECT_DOUBLE_EQ(g.primary[1].effect, 0.02);
  EXPECT_EQ(g.primary[2].alternative, stats::Alternative::two_sided);
  EXPECT_EQ(comparison_text(g.primary[1]), "goat > rope by 0.02");
  EXPECT_EQ(comparison_text(g.primary[2]), "xsa vs goat");
  EXPECT_DOUBLE_EQ(g.primary_effect, 0.01);
  EXPECT_DOUBLE_EQ(g.primary_alpha, 0.1);
  EXPECT_DOUBLE_EQ(g.primary_power, 0.9);
  EXPECT_EQ(g.budget.variant, "rope");  // the baseline unless named
  EXPECT_EQ(g.budget.factors, (std::vector<double>{0.5, 2}));  // 1 is the grid's own runs
  EXPECT_EQ(budget_run_id("rope", 1.5, 3), "rope@1.5x_s3");
  const Grid plain = parse_grid_text(v, "g.toml");
  EXPECT_TRUE(plain.primary.empty());
  EXPECT_TRUE(plain.budget.variant.empty());
  // The shipped results grid names its primary comparisons.
  const Grid results = parse_grid_file(source_dir() + "/configs/grids/results.toml");
  ASSERT_EQ(results.primary.size(), 5u);
  EXPECT_EQ(comparison_text(results.primary[0]), "xsa < rope");
}

TEST(CompareGrid, PrimaryAndBudgetErrorsNameKeyAndLine) {
  const std::string v = "[variants.rope]\nset = [\"attn.pos=rope\"]\n[variants.xsa]\nset = [\"attn.xsa=on\"]\n";
  auto primary = [&](const std::string& list) { return error_of(v + "[primary]\ncomparisons = [" + list + "]\n"); };
  EXPECT_EQ(primary("\"xsa < rop\""), "g.toml:6: primary.comparisons: \"xsa < rop\": 'rop' is not a variant (variants: rope, xsa)");
  EXPECT_EQ(primary("\"xsa < xsa\""), "g.toml:6: primary.comparisons: \"xsa < xsa\" compares xsa with itself");
  EXPECT_EQ(primary("\"xsa < rope\", \"rope vs xsa\""),
            "g.toml:6: primary.comparisons: \"rope vs xsa\" compares rope and xsa a second time (first as \"xsa < rope\"); give each pair once");
  EXPECT_NE(primary("\"xsa << rope\"").find("g.toml:6: primary.comparisons: \"xsa << rope\": expected \"A < B\""), std::string::npos);
  EXPECT_NE(primary("\"xsa against rope\"").find("expected \"A < B\""), std::string::npos);
  EXPECT_NE(primary("\"xsa < rope by\"").find("expected \"A < B\""), std::string::npos);
  EXPECT_NE(primary("\"xsa < rope by -1\"").find("g.toml:6: primary.comparisons = -1: expected a number in [0, "), std::string::npos);
  EXPECT_EQ(primary("\"xsa < rope by 0\""), "g.toml:6: primary.comparisons: \"xsa < rope by 0\": the effect must be positive (a loss difference in nats per token)");
  EXPECT_EQ(primary(""), "g.toml:6: primary.comparisons is empty (leave [primary] out for none)");
  EXPECT_EQ(error_of(v + "[primary]\neffect = 0.01\n"), "g.toml:6: [primary] has no comparisons (add comparisons = [\"A < B\", ...])");
  EXPECT_NE(error_of(v + "[primary]\npairs = []\n").find("g.toml:6: unknown [primary] key 'pairs'"), std::string::npos);
  EXPECT_NE(error_of(v + "[primary]\ncomparisons = [\"xsa < rope\"]\npower = 1\n").find("g.toml:7: primary.power = 1: expected a number in"),
            std::string::npos);
  // [budget]
  EXPECT_EQ(error_of(v + "[budget]\nvariant = \"rope\"\n"), "g.toml:6: [budget] has no factors (add factors = [0.5, 2]: runs at k × steps)");
  EXPECT_EQ(error_of(v + "[budget]\nvariant = \"nope\"\nfactors = [2]\n"), "g.toml:6: budget.variant 'nope' is not a variant");
  EXPECT_EQ(error_of(v + "[budget]\nfactors = [2, 2]\n"), "g.toml:6: budget.factors gives 2 twice");
  EXPECT_EQ(error_of(v + "[budget]\nfactors = [1]\n"),
            "g.toml:6: budget.factors needs a factor other than 1 (1 is the grid's own runs), e.g. [0.5, 2]");
  EXPECT_EQ(error_of(v + "[budget]\nfactors = [0]\n"), "g.toml:6: budget.factors = 0: a factor must be positive");
  EXPECT_EQ(error_of("steps = 10\n" + v + "[budget]\nfactors = [2, 2.04]\n"),
            "g.toml:7: budget.factors: 2.04 and 2 both give 20 steps of 10; give factors whose steps differ");
  EXPECT_EQ(error_of("steps = 10\n" + v + "[budget]\nfactors = [0.01]\n"), "g.toml:7: budget.factors: 0.01 × 10 steps is less than one step");
  EXPECT_NE(error_of(v + "[budget]\nseeds = [1]\n").find("g.toml:6: unknown [budget] key 'seeds'"), std::string::npos);
}

namespace {

// A results document of variants × seeds with the given final losses (NaN: no run), for the summary.
nlohmann::json results_with(const std::map<std::string, std::vector<double>>& loss, const std::vector<std::string>& order) {
  nlohmann::json variants = nlohmann::json::array(), runs = nlohmann::json::array();
  for (const auto& v : order) {
    variants.push_back({{"name", v}, {"sets", nlohmann::json::array()}});
    for (size_t s = 0; s < loss.at(v).size(); ++s)
      if (!std::isnan(loss.at(v)[s]))
        runs.push_back({{"variant", v}, {"seed", uint64_t(s + 1)}, {"id", v + "_s" + std::to_string(s + 1)}, {"params", 100},
                        {"val_loss", loss.at(v)[s]}, {"tokens_per_s", 1000.0}, {"tokens", 1000}});
  }
  return {{"schema", kCompareSchema}, {"version", kCompareVersion}, {"attnlab_version", "test"},
          {"grid", {{"name", "t"}, {"preset", "tiny"}, {"sets", nlohmann::json::array()}, {"steps", 10}, {"seeds", {1, 2, 3}},
                    {"baseline", order[0]}, {"analyze", false}, {"lengths", nullptr}, {"length_tokens", 0}, {"variants", variants},
                    {"tasks", nlohmann::json::array()}}},
          {"tokens_per_step", 100}, {"tokens_per_run", 1000}, {"val_tokens", 50}, {"runs", runs}};
}

}  // namespace

TEST(CompareSummary, PrimaryComparisons) {
  // a − b per seed: −0.02, −0.01, −0.03: mean −0.02, sd 0.01, t = −0.02/(0.01/√3) = −2√3 on 2 degrees
  // of freedom, whose CDF is ½ + t/(2·sqrt(2 + t²)): one-sided p = ½ − 2√3/(2·√14) = 0.0370899…
  // The sign-flip p: every difference negative, 1/8 (the smallest 3 seeds allow).
  // c has no seed 3: Welch's test of c against b, and the sign-flip over the 2 shared seeds.
  const double nan = std::nan("");
  nlohmann::json r = results_with({{"b", {5.00, 5.10, 5.05}}, {"a", {4.98, 5.09, 5.02}}, {"c", {5.2, 5.3, nan}}}, {"b", "a", "c"});
  r["grid"]["primary"] = {{"comparisons", {{{"text", "a < b"}, {"a", "a"}, {"b", "b"}, {"direction", "<"}, {"effect", nullptr}},
                                           {{"text", "c vs b by 0.05"}, {"a", "c"}, {"b", "b"}, {"direction", "vs"}, {"effect", 0.05}}}},
                          {"effect", nullptr}, {"alpha", 0.05}, {"power", 0.8}};
  summarize_results(r);
  ASSERT_TRUE(r.contains("primary_comparisons"));
  const auto& pc = r["primary_comparisons"]["comparisons"];
  ASSERT_EQ(pc.size(), 2u);
  const auto& ab = pc[0];
  EXPECT_EQ(ab["test"], "paired");
  EXPECT_EQ(ab["n_paired"], 3);
  EXPECT_NEAR(ab["diff"].get<double>(), -0.02, 1e-12);
  EXPECT_NEAR(ab["t"].get<double>(), -2 * std::sqrt(3.0), 1e-9);
  const double p_ab = 0.5 - 2 * std::sqrt(3.0) / (2 * std::sqrt(14.0));
  EXPECT_NEAR(ab["p"].get<double>(), p_ab, 1e-9);
  EXPECT_DOUBLE_EQ(ab["sign_flip"]["p"].get<double>(), 0.125);
  EXPECT_DOUBLE_EQ(ab["sign_flip"]["p_min"].get<double>(), 0.125);
  // The plan at the observed effect 0.02 with sd 0.01, one-sided.
  EXPECT_EQ(ab["plan"]["effect_source"], "observed");
  EXPECT_NEAR(ab["plan"]["effect"].get<double>(), 0.02, 1e-12);
  EXPECT_EQ(ab["plan"]["tails"], 1);
  EXPECT_EQ(ab["plan"]["seeds"], stats::paired_seeds_needed(0.02, 0.01, 0.05, 0.8, stats::Tails::one).n);
  const auto& cb = pc[1];
  EXPECT_EQ(cb["test"], "welch");
  EXPECT_EQ(cb["n_a"], 2);
  EXPECT_EQ(cb["n_paired"], 2);
  const stats::Welch w = stats::welch({5.2, 5.3}, {5.00, 5.10, 5.05});
  EXPECT_NEAR(cb["p"].get<double>(), w.p, 1e-12);  // two-sided
  EXPECT_DOUBLE_EQ(cb["sign_flip"]["p"].get<double>(), 0.5);  // d = {0.2, 0.2}: 2 of 4 patterns have |S| ≥ 0.4
  EXPECT_DOUBLE_EQ(cb["sign_flip"]["p_min"].get<double>(), 0.5);
  EXPECT_EQ(cb["plan"]["effect_source"], "comparison");
  EXPECT_EQ(cb["plan"]["tails"], 2);
  // Holm over the two: the smaller p doubled, the larger kept (at least the smaller's adjusted value).
  const double first = 2 * std::min(p_ab, w.p), second = std::max(first, std::max(p_ab, w.p));
  EXPECT_NEAR(pc[0]["p_holm"].get<double>(), std::min(1.0, p_ab < w.p ? first : second), 1e-12);
  EXPECT_NEAR(pc[1]["p_holm"].get<double>(), std::min(1.0, p_ab < w.p ? second : first), 1e-12);
  EXPECT_DOUBLE_EQ(pc[0]["sign_flip"]["p_holm"].get<double>(), 0.25);  // 2 · 0.125
  // Holm's first step over m = 2 at α = 0.05 asks 2/2^n ≤ 0.05 one-sided (n ≥ 6: 2/64), 4/2^n two-sided (n ≥ 7).
  EXPECT_EQ(r["primary_comparisons"]["sign_flip_min_seeds"]["one_sided"], 6);
  EXPECT_EQ(r["primary_comparisons"]["sign_flip_min_seeds"]["two_sided"], 7);
  EXPECT_DOUBLE_EQ(pc[1]["sign_flip"]["p_holm"].get<double>(), 0.5);
  const std::string md = results_markdown(r);
  EXPECT_NE(md.find("## Primary comparisons"), std::string::npos);
  EXPECT_NE(md.find("| a < b | paired (3) | -0.0200 |"), std::string::npos);
  EXPECT_NE(md.find("| c vs b by 0.05 | welch (2, 3) |"), std::string::npos);
  EXPECT_NE(md.find("not adjusted"), std::string::npos);
  // Without [primary]: no key, and results.md as before.
  nlohmann::json plain = results_with({{"b", {5.0, 5.1, 5.05}}, {"a", {4.98, 5.09, 5.02}}}, {"b", "a"});
  summarize_results(plain);
  EXPECT_FALSE(plain.contains("primary_comparisons"));
  EXPECT_FALSE(plain.contains("compute_gains"));
  EXPECT_EQ(results_markdown(plain).find("## Primary"), std::string::npos);
}

TEST(CompareSummary, GainsInCompute) {
  // The budget variant b at k = 0.5, 1, 2: L_s(k) = 5 + e_s − 0.1·ln k exactly (seed offsets e =
  // 0, 0.02, −0.01), so every seed's line has slope −0.1 and intercept 5 + e_s. Variant a:
  // 5 + e_s − 0.1·ln 1.5 + (0.001, −0.001, 0): u_s = L_{a,s} − a_s has mean −0.1·ln 1.5 and sd 0.001,
  // the slopes no spread: ln k_a = ln 1.5, se = 0.001/sqrt(3·0.01), interval ln 1.5 ∓ t_{0.975, 2}·se.
  // Variant c: 5 + e_s − 0.1·ln 4 on seeds 1 and 2: k = 4, beyond the swept 0.5–2: extrapolated.
  const double e[3] = {0, 0.02, -0.01}, noise[3] = {0.001, -0.001, 0};
  const double nan = std::nan("");
  std::vector<double> b, a, c;
  for (int s = 0; s < 3; ++s) {
    b.push_back(5 + e[s]);
    a.push_back(5 + e[s] - 0.1 * std::log(1.5) + noise[s]);
    c.push_back(s < 2 ? 5 + e[s] - 0.1 * std::log(4.0) : nan);
  }
  nlohmann::json r = results_with({{"b", b}, {"a", a}, {"c", c}}, {"b", "a", "c"});
  for (double k : {0.5, 2.0})
    for (int s = 0; s < 3; ++s)
      r["runs"].push_back({{"variant", "b"}, {"seed", uint64_t(s + 1)}, {"id", budget_run_id("b", k, s + 1)}, {"params", 100},
                           {"val_loss", 5 + e[s] - 0.1 * std::log(k)}, {"tokens_per_s", 1000.0}, {"tokens", 1000 * k}, {"budget_factor", k}});
  r["grid"]["budget"] = {{"variant", "b"}, {"factors", {0.5, 2.0}}};
  summarize_results(r);
  EXPECT_EQ(r["summary"][0]["n"], 3);  // the budget runs are not b's seeds
  ASSERT_TRUE(r.contains("compute_gains"));
  const auto& cg = r["compute_gains"];
  ASSERT_TRUE(cg["fit"].is_object());
  EXPECT_NEAR(cg["fit"]["slope"].get<double>(), -0.1, 1e-12);
  EXPECT_NEAR(cg["fit"]["intercept"].get<double>(), 5 + (0.02 - 0.01) / 3, 1e-12);
  EXPECT_EQ(cg["points"].size(), 3u);
  EXPECT_DOUBLE_EQ(cg["points"][2]["tokens"].get<double>(), 2000);
  ASSERT_EQ(cg["gains"].size(), 2u);
  const auto& ga = cg["gains"][0];
  EXPECT_EQ(ga["variant"], "a");
  EXPECT_NEAR(ga["factor"].get<double>(), 1.5, 1e-9);
  const double se = 0.001 / std::sqrt(3 * 0.01);
  EXPECT_NEAR(ga["se_ln_factor"].get<double>(), se, 1e-9);
  EXPECT_NEAR(ga["ci95"][0].get<double>(), 1.5 * std::exp(-4.30265272974946385232 * se), 1e-6);
  EXPECT_NEAR(ga["ci95"][1].get<double>(), 1.5 * std::exp(4.30265272974946385232 * se), 1e-6);
  EXPECT_FALSE(ga["extrapolated"].get<bool>());
  const auto& gc = cg["gains"][1];
  EXPECT_EQ(gc["n"], 2);
  EXPECT_NEAR(gc["factor"].get<double>(), 4, 1e-9);
  EXPECT_TRUE(gc["extrapolated"].get<bool>());
  const std::string md = results_markdown(r);
  EXPECT_NE(md.find("## Gains in compute"), std::string::npos);
  EXPECT_NE(md.find("| a | "), std::string::npos);
  EXPECT_NE(md.find("1.50× the tokens"), std::string::npos);
  EXPECT_NE(md.find("4.00× the tokens (extrapolated: outside the swept 0.5–2×)"), std::string::npos);
  // A loss that does not fall with tokens gives no gains.
  for (auto& run : r["runs"])
    if (run.contains("budget_factor")) run["val_loss"] = 5.5;
  summarize_results(r);
  EXPECT_TRUE(r["compute_gains"]["gains"].empty());
  EXPECT_NE(r["compute_gains"]["note"].get<std::string>().find("does not fall"), std::string::npos);
}

TEST(CompareResume, ConfigKeysAddedSinceARunAreNoDifferenceAtTheirDefault) {
  nlohmann::json now{{"train.steps", 10}, {"train.precision", "fp32"}};
  EXPECT_EQ(compare::config_differences({{"train.steps", 10}}, now), "");
  now["train.precision"] = "bf16";
  EXPECT_EQ(compare::config_differences({{"train.steps", 10}}, now), "train.precision");
  EXPECT_EQ(compare::config_differences({{"train.steps", 11}, {"train.precision", "fp32"}}, now), "train.precision, train.steps");
}

// Task-only grids (docs/compare.md "Task-only grids"): language_model = false, only [tasks.NAME].
TEST(CompareGrid, TaskOnlyGrid) {
  const std::string v = "[variants.rope]\nset = [\"attn.pos=rope\"]\n[variants.alibi]\nset = [\"attn.pos=alibi\"]\n";
  const std::string task = "[tasks.passkey]\nsteps = 3\nset = [\"model.seq_len=80\"]\n";
  const Grid g = parse_grid_text("language_model = false\npreset = \"tiny\"\nseeds = [1, 2]\n" + v + task, "g.toml");
  EXPECT_FALSE(g.language_model);
  ASSERT_EQ(g.tasks.size(), 1u);
  EXPECT_TRUE(parse_grid_text(v + task, "g.toml").language_model);  // the default
  EXPECT_EQ(error_of("language_model = false\n" + v),
            "g.toml:1: language_model = false, but the grid has no [tasks.NAME] table: it would train nothing "
            "(add e.g. [tasks.passkey] steps = 200, or leave language_model out)");
  EXPECT_EQ(error_of("language_model = no\n" + v + task), "g.toml:1: language_model = no: expected true or false");
  // Every key of the language model is refused, naming the key and its line; the first in file order.
  const std::string tail = " is for the language model, which this grid does not train (language_model = false at g.toml:1); remove it "
                           "(a task's own steps, lengths and samples go in its [tasks.NAME] table)";
  for (const std::string key : {"steps = 10", "ckpt_every = 2", "analyze = true", "analyze_sequences = 2", "lengths = \"1,2\"",
                                "length_tokens = 512"}) {
    SCOPED_TRACE(key);
    EXPECT_EQ(error_of("language_model = false\n" + key + "\n" + v + task), "g.toml:2: " + key.substr(0, key.find(' ')) + tail);
  }
  EXPECT_EQ(error_of("language_model = false\n" + v + task + "[primary]\ncomparisons = [\"alibi < rope\"]\n"), "g.toml:10: [primary]" + tail);
  EXPECT_EQ(error_of("language_model = false\n" + v + task + "[budget]\nfactors = [2]\n"), "g.toml:10: [budget]" + tail);
  EXPECT_EQ(error_of("lengths = \"1,2\"\nlanguage_model = false\n" + v + task),
            "g.toml:1: lengths is for the language model, which this grid does not train (language_model = false at g.toml:2); remove it "
            "(a task's own steps, lengths and samples go in its [tasks.NAME] table)");
  // The record of a run's evaluations: unchanged for a grid with a language model (its finished runs
  // resume), "language_model": false only in a task-only grid.
  EXPECT_FALSE(compare::evaluations_json(parse_grid_text(v + task, "g.toml")).contains("language_model"));
  EXPECT_EQ(compare::evaluations_json(g)["language_model"], false);
  // A task-only plan resolves each cell's task model (no language model is checked).
  const auto runs = compare::plan_runs(g, "/tmp/attnlab_test_task_only_plan");
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].id, "rope_s1");
  ASSERT_EQ(runs[0].tasks.size(), 1u);
  EXPECT_EQ(runs[0].tasks[0].cfg.model.vocab_size, 70);
}

// [tasks.mqar] keys, kv_pairs, queries and [tasks.needle] depths (as `attnlab task` takes them).
TEST(CompareGrid, TaskKeys) {
  const std::string v = "preset = \"tiny\"\n[variants.rope]\nset = [\"attn.pos=rope\"]\n";
  const Grid g = parse_grid_text(v + "[tasks.mqar]\nkeys = 16\nkv_pairs = 8\nqueries = 4\n[tasks.needle]\ndepths = [0, 0.25, 1]\n"
                                     "set = [\"model.seq_len=96\"]\n", "g.toml");
  ASSERT_EQ(g.tasks.size(), 2u);
  EXPECT_EQ(g.tasks[0].mqar_keys, 16);
  EXPECT_EQ(g.tasks[0].kv_pairs, 8);
  EXPECT_EQ(g.tasks[0].queries, 4);
  EXPECT_EQ(g.tasks[1].depths, (std::vector<double>{0, 0.25, 1}));
  const nlohmann::json tj = compare::tasks_json(g);
  EXPECT_EQ(tj[0]["keys"], 16);
  EXPECT_EQ(tj[0]["queries"], 4);
  EXPECT_EQ(tj[1]["depths"], nlohmann::json({0, 0.25, 1}));
  // Without them the record is what it was (finished runs of earlier grids resume).
  EXPECT_EQ(compare::tasks_json(parse_grid_text(v + "[tasks.mqar]\nsteps = 3\n", "g.toml"))[0],
            nlohmann::json({{"name", "mqar"}, {"sets", nlohmann::json::array()}, {"steps", 3}, {"lengths", "1,2,4"}, {"samples", 64}}));
  // The task model gets the vocabulary of that shape: 3 + 2K.
  const auto runs = compare::plan_runs(g, "/tmp/attnlab_test_task_keys_plan");
  EXPECT_EQ(runs[0].tasks[0].cfg.model.vocab_size, 3 + 2 * 16);
  EXPECT_EQ(runs[0].tasks[0].gen->describe()["kv_pairs"], 8);
  // Ranges and the keys of the other tasks.
  EXPECT_EQ(error_of(v + "[tasks.mqar]\nkeys = 1\n"), "g.toml:5: tasks.mqar.keys = 1: expected an integer in [2, 4096]");
  EXPECT_EQ(error_of(v + "[tasks.mqar]\nkeys = 5000\n"), "g.toml:5: tasks.mqar.keys = 5000: expected an integer in [2, 4096]");
  EXPECT_EQ(error_of(v + "[tasks.mqar]\nqueries = 0\n"), "g.toml:5: tasks.mqar.queries = 0: expected an integer in [1, 4096]");
  EXPECT_EQ(error_of(v + "[tasks.mqar]\nkeys = 4\nkv_pairs = 5\n"),
            "g.toml:6: tasks.mqar.kv_pairs: kv_pairs = 5 exceeds keys = 4 (each pair has its own key)");
  EXPECT_EQ(error_of(v + "[tasks.mqar]\nqueries = 3\nkv_pairs = 2\n"),
            "g.toml:6: tasks.mqar.kv_pairs: queries = 3 exceeds kv_pairs = 2 (each query asks one pair)");
  EXPECT_EQ(error_of(v + "[tasks.passkey]\ndepths = [0.5]\n"), "g.toml:5: tasks.passkey.depths: depths is a key of [tasks.needle] only");
  EXPECT_EQ(error_of(v + "[tasks.needle]\nkeys = 4\n"), "g.toml:5: tasks.needle.keys: keys is a key of [tasks.mqar] only");
  EXPECT_NE(error_of(v + "[tasks.needle]\ndepth = [0.5]\n").find("g.toml:5: unknown task key 'depth'"), std::string::npos);
  EXPECT_EQ(error_of(v + "[tasks.needle]\ndepths = [0.5, 1.5]\n"), "g.toml:5: tasks.needle.depths = 1.5: expected a number in [0, 1]");
  EXPECT_EQ(error_of(v + "[tasks.needle]\ndepths = [0.5, 0.5]\n"), "g.toml:5: tasks.needle.depths gives 0.5 twice");
  EXPECT_EQ(error_of(v + "[tasks.needle]\ndepths = []\n"),
            "g.toml:5: tasks.needle.depths is empty (leave it out for the default 0.1, 0.3, 0.5, 0.7, 0.9)");
  std::string many = "[";
  for (int i = 0; i <= 64; ++i) many += (i ? ", " : "") + std::to_string(i / 64.0);
  EXPECT_EQ(error_of(v + "[tasks.needle]\ndepths = " + many + "]\n"), "g.toml:5: tasks.needle.depths gives 65 depths; at most 64");
  // The defaults are resolved per cell at the task model's seq_len, before anything trains:
  // model.seq_len = 64 gives kv_pairs = min(64, 64/8) = 8.
  auto plan_error = [](const std::string& text) {
    try {
      compare::plan_runs(parse_grid_text(text, "g.toml"), "/tmp/attnlab_test_task_keys_plan");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(plan_error(v + "[tasks.mqar]\nset = [\"model.seq_len=64\"]\nqueries = 9\n"),
            "grid [tasks.mqar] (variant rope): queries = 9 exceeds kv_pairs = 8 (the default, min(keys, model.seq_len/8)): each query "
            "asks one pair");
  EXPECT_EQ(plan_error(v + "[tasks.mqar]\nset = [\"model.seq_len=64\"]\nkv_pairs = 100\n"),
            "grid [tasks.mqar] (variant rope): kv_pairs = 100 exceeds keys = 64 (the default, 64): each pair needs its own key");
  EXPECT_EQ(plan_error(v + "[tasks.mqar]\nset = [\"model.seq_len=64\"]\nkv_pairs = 30\n"),
            "grid [tasks.mqar] (variant rope): 30 pairs and 30 queries take 120 tokens, more than the task model's model.seq_len = 64: "
            "give fewer kv_pairs or queries, or a longer model.seq_len in [tasks.mqar] set");
  EXPECT_EQ(plan_error(v + "[tasks.mqar]\nset = [\"model.seq_len=64\"]\nkeys = 4\n"), "");  // kv_pairs = min(4, 8) = 4
}

namespace {

// A compact task report (compare/evaluations.h) at multiples 1 and 2: solved of scored per length,
// and per depth (two depths: the counts split k = k0 + k1, n = n/2 each) when `depths`.
nlohmann::json task_part(long long k1, long long n1, long long k2, long long n2, bool depths = false) {
  nlohmann::json t{{"multiple", {1.0, 2.0}}, {"token_accuracy", {0.5, 0.5}}, {"strict_accuracy", {double(k1) / n1, double(k2) / n2}},
                   {"answer_logprob", {-1.0, -1.0}}, {"solved", {k1, k2}}, {"scored", {n1, n2}}};
  if (depths) {
    t["depths"] = {0.1, 0.9};
    t["solved_by_depth"] = {{k1 / 2, k1 - k1 / 2}, {k2 / 2, k2 - k2 / 2}};
    t["scored_by_depth"] = {{n1 / 2, n1 - n1 / 2}, {n2 / 2, n2 - n2 / 2}};
  }
  return t;
}

}  // namespace

// docs/compare.md "Task accuracy": the solved samples pooled over seeds with Wilson's interval and
// the difference to the baseline with Newcombe's (Newcombe 1998, Table II example (a): 56/70 − 48/80).
TEST(CompareSummary, TaskAccuracyPooledOverSeeds) {
  nlohmann::json r = results_with({{"b", {5.0, 5.1}}, {"a", {4.9, 5.0}}}, {"b", "a"});
  r["grid"]["tasks"] = {{{"name", "needle"}, {"sets", nlohmann::json::array()}, {"steps", 3}, {"lengths", "1,2"}, {"samples", 40}}};
  // b: 20/40 + 28/40 = 48/80 at 1×; a: 30/35 + 26/35 = 56/70. At 2×: b 0/40 + 0/40, a 35/35 + 35/35.
  const long long kb[2] = {20, 28}, ka[2] = {30, 26};
  for (auto& run : r["runs"]) {
    const int s = run["seed"].get<int>() - 1;
    run["tasks"]["needle"] = run["variant"] == "b" ? task_part(kb[s], 40, 0, 40, true) : task_part(ka[s], 35, 35, 35, true);
  }
  summarize_results(r);
  ASSERT_TRUE(r.contains("task_accuracy"));
  const auto& t = r["task_accuracy"]["tasks"][0];
  EXPECT_EQ(t["task"], "needle");
  ASSERT_EQ(t["variants"].size(), 2u);
  const auto& b = t["variants"][0];
  const auto& a = t["variants"][1];
  EXPECT_EQ(b["variant"], "b");
  EXPECT_TRUE(b["vs_baseline"].is_null());
  EXPECT_EQ(b["strict"][0]["solved"], 48);
  EXPECT_EQ(b["strict"][0]["samples"], 80);
  EXPECT_EQ(b["strict"][0]["seeds"], 2);
  EXPECT_NEAR(b["strict"][0]["ci95"][0].get<double>(), 0.49045465005160394, 1e-12);  // Wilson 48/80 (Python, the same formula)
  EXPECT_NEAR(b["strict"][0]["ci95"][1].get<double>(), 0.7003817240412907, 1e-12);
  EXPECT_EQ(a["strict"][0]["solved"], 56);
  EXPECT_EQ(a["strict"][0]["samples"], 70);
  EXPECT_NEAR(a["vs_baseline"][0]["diff"].get<double>(), 0.2, 1e-12);
  EXPECT_NEAR(a["vs_baseline"][0]["ci95"][0].get<double>(), 0.0524, 5e-5);  // Newcombe's Table II, method 10
  EXPECT_NEAR(a["vs_baseline"][0]["ci95"][1].get<double>(), 0.3339, 5e-5);
  // 0/80 and 70/70: the intervals reach the bounds exactly, the difference 1 with its interval below 1.
  EXPECT_EQ(b["strict"][1]["ci95"][0].get<double>(), 0.0);
  EXPECT_EQ(a["strict"][1]["ci95"][1].get<double>(), 1.0);
  EXPECT_EQ(a["vs_baseline"][1]["ci95"][1].get<double>(), 1.0);
  // By depth: b at 1× and depth 0.1 pools 10 + 14 of 20 + 20.
  EXPECT_EQ(t["depths"], nlohmann::json({0.1, 0.9}));
  EXPECT_EQ(b["by_depth"][0][0]["solved"], 24);
  EXPECT_EQ(b["by_depth"][0][0]["samples"], 40);
  EXPECT_EQ(a["by_depth"][0][1]["solved"], 15 + 13);
  EXPECT_NEAR(b["by_depth"][0][0]["ci95"][0].get<double>(), stats::wilson(24, 40).lo, 1e-15);
  const std::string md = results_markdown(r);
  EXPECT_NE(md.find("| a | 1× | 56 / 70 (2) | 0.800 | [0.692, 0.877] | +0.200 | [+0.052, +0.334] |"), std::string::npos);
  EXPECT_NE(md.find("| b | 1× | 48 / 80 (2) | 0.600 | [0.490, 0.700] | baseline |"), std::string::npos);
  EXPECT_NE(md.find("### NIAH by depth"), std::string::npos);
  EXPECT_NE(md.find("| variant | length | depth 0.1 | depth 0.9 |"), std::string::npos);
  // A run without the counts (a result.json from before they were kept) leaves that variant's cells empty.
  r["runs"][0]["tasks"]["needle"].erase("solved");
  summarize_results(r);
  EXPECT_TRUE(r["task_accuracy"]["tasks"][0]["variants"][0]["strict"][0].is_null());
  EXPECT_TRUE(r["task_accuracy"]["tasks"][0]["variants"][1]["vs_baseline"][0].is_null());
  // Without tasks: no key.
  nlohmann::json plain = results_with({{"b", {5.0}}, {"a", {4.9}}}, {"b", "a"});
  summarize_results(plain);
  EXPECT_FALSE(plain.contains("task_accuracy"));
  EXPECT_FALSE(plain.contains("length_did"));
}

// compact_task keeps the counts the intervals pool: summed over depths, and per depth.
TEST(CompareSummary, CompactTaskKeepsCounts) {
  nlohmann::json report{{"train_len", 64}, {"samples", 10}, {"cells", nlohmann::json::array()}};
  for (int length : {64, 128})
    for (double depth : {0.2, 0.8})
      report["cells"].push_back({{"length", length}, {"multiple", length / 64.0}, {"applicable", true}, {"depth", depth}, {"samples", 10},
                                 {"solved", int(depth * 10) + length / 64}, {"strict_accuracy", 0.0}, {"token_accuracy", 0.0},
                                 {"answer_logprob", 0.0}});
  const nlohmann::json c = compare::compact_task(report);
  EXPECT_EQ(c["solved"], nlohmann::json({2 + 1 + 8 + 1, 2 + 2 + 8 + 2}));
  EXPECT_EQ(c["scored"], nlohmann::json({20, 20}));
  EXPECT_EQ(c["depths"], nlohmann::json({0.2, 0.8}));
  EXPECT_EQ(c["solved_by_depth"], nlohmann::json({{3, 9}, {4, 10}}));
  EXPECT_EQ(c["scored_by_depth"], nlohmann::json({{10, 10}, {10, 10}}));
  // An inapplicable length (learned positions beyond T_train) has no counts.
  report["cells"][2] = {{"length", 128}, {"multiple", 2.0}, {"applicable", false}, {"depth", 0.2}, {"strict_accuracy", nullptr},
                        {"token_accuracy", nullptr}, {"answer_logprob", nullptr}};
  const nlohmann::json d = compare::compact_task(report);
  EXPECT_TRUE(d["solved"][1].is_null());
  EXPECT_TRUE(d["solved_by_depth"][1][0].is_null());
  EXPECT_EQ(d["solved_by_depth"][1][1], 10);
}

namespace {

// A compact length report at 1× and 2× of T = 4 positions: all-position losses and, at 2×, two buckets.
nlohmann::json length_part(double at1, double at2, double bucket0, double bucket1) {
  return {{"train_len", 4}, {"token_budget", 64}, {"multiple", {1.0, 2.0}}, {"loss", {at1, at2}}, {"loss_beyond_train", {nullptr, bucket1}},
          {"bucket", 4}, {"bucket_loss", {{at1}, {bucket0, bucket1}}}};
}

}  // namespace

// docs/compare.md "Length difference-in-differences": per seed (A − B at L) − (A − B at 1×).
TEST(CompareSummary, LengthDifferenceInDifferences) {
  nlohmann::json r = results_with({{"b", {5.0, 5.1, 5.2}}, {"a", {4.9, 5.0, 5.1}}}, {"b", "a"});
  // b's loss at 1× is 5 + s/10, at 2× 0.05 more (0.1 more in the second bucket); a is 0.05 lower at
  // 1× and its gap at 2× (all positions) is −0.05 + d_s with d = 0.01, 0.02, 0.03: DiD = d, mean 0.02, sd
  // 0.01, t = 2√3 on 2 degrees of freedom, two-sided p = 1 − t/sqrt(2 + t²) = 1 − 2√3/√14. In the
  // second bucket the gap grows by 2·d_s; in the first it stays (DiD 0 for every seed: no test).
  const double d[3] = {0.01, 0.02, 0.03};
  for (auto& run : r["runs"]) {
    const int s = run["seed"].get<int>() - 1;
    const double base = 5 + s / 10.0;
    run["lengths"] = run["variant"] == "b" ? length_part(base, base + 0.05, base, base + 0.1)
                                           : length_part(base - 0.05, base + d[s], base - 0.05, base + 0.1 - 0.05 + 2 * d[s]);
  }
  summarize_results(r);
  ASSERT_TRUE(r.contains("length_did"));
  const auto& did = r["length_did"];
  EXPECT_EQ(did["comparisons_from"], "baseline");
  EXPECT_EQ(did["bucket"], 4);
  ASSERT_EQ(did["comparisons"].size(), 1u);
  const auto& c = did["comparisons"][0];
  EXPECT_EQ(c["comparison"], "a − b");
  ASSERT_EQ(c["rows"].size(), 3u);  // 2×: all positions, [0, 4), [4, 8)
  const auto& all = c["rows"][0];
  EXPECT_EQ(all["positions"], "all");
  EXPECT_EQ(all["n"], 3);
  EXPECT_NEAR(all["did"].get<double>(), 0.02, 1e-12);
  EXPECT_NEAR(all["diff_at_1"].get<double>(), -0.05, 1e-12);
  EXPECT_NEAR(all["diff_at_length"].get<double>(), -0.03, 1e-12);
  EXPECT_NEAR(all["t"].get<double>(), 2 * std::sqrt(3.0), 1e-8);
  EXPECT_NEAR(all["p"].get<double>(), 1 - 2 * std::sqrt(3.0) / std::sqrt(14.0), 1e-9);
  const double half = 4.30265272974946385232 * 0.01 / std::sqrt(3.0);
  EXPECT_NEAR(all["ci95"][0].get<double>(), 0.02 - half, 1e-9);
  EXPECT_NEAR(all["ci95"][1].get<double>(), 0.02 + half, 1e-9);
  EXPECT_DOUBLE_EQ(all["sign_flip_p"].get<double>(), 0.25);  // all three of one sign: 2/2^3, the smallest 3 seeds allow
  EXPECT_EQ(c["rows"][1]["positions"], "[0, 4)");
  EXPECT_NEAR(c["rows"][1]["did"].get<double>(), 0, 1e-12);
  EXPECT_TRUE(c["rows"][1]["p"].is_null());  // no spread: no t-test
  EXPECT_EQ(c["rows"][2]["positions"], "[4, 8)");
  EXPECT_EQ(c["rows"][2]["start"], 4);
  EXPECT_NEAR(c["rows"][2]["did"].get<double>(), 0.04, 1e-12);
  EXPECT_EQ(did["tests"], 2);
  const std::string md = results_markdown(r);
  EXPECT_NE(md.find("## Length difference-in-differences"), std::string::npos);
  EXPECT_NE(md.find("| a − b | 2× | all | 3 | -0.0500 | -0.0300 | +0.0200 |"), std::string::npos);
  EXPECT_NE(md.find("these 2 tests (lengths × position ranges × comparisons) are not adjusted"), std::string::npos);
  // With [primary], its comparisons (in their direction of text) instead of every variant against the baseline.
  r["grid"]["primary"] = {{"comparisons", {{{"text", "b vs a"}, {"a", "b"}, {"b", "a"}, {"direction", "vs"}, {"effect", nullptr}}}},
                          {"effect", nullptr}, {"alpha", 0.05}, {"power", 0.8}};
  summarize_results(r);
  EXPECT_EQ(r["length_did"]["comparisons_from"], "primary");
  EXPECT_EQ(r["length_did"]["comparisons"][0]["comparison"], "b vs a");
  EXPECT_NEAR(r["length_did"]["comparisons"][0]["rows"][0]["did"].get<double>(), -0.02, 1e-12);
  // A sweep without 1× has no reference: a note, no rows.
  for (auto& run : r["runs"]) run["lengths"]["multiple"] = {2.0, 4.0};
  summarize_results(r);
  EXPECT_TRUE(r["length_did"]["comparisons"][0]["rows"].empty());
  EXPECT_NE(r["length_did"]["note"].get<std::string>().find("no 1× length"), std::string::npos);
}

// A task-only document: no loss table or curves; the tasks' tables.
TEST(CompareSummary, TaskOnlyDocument) {
  nlohmann::json r = results_with({{"b", {5.0, 5.1}}, {"a", {4.9, 5.0}}}, {"b", "a"});
  r["grid"]["language_model"] = false;
  r["grid"]["steps"] = 0;
  r["grid"]["tasks"] = {{{"name", "mqar"}, {"sets", nlohmann::json::array()}, {"steps", 3}, {"lengths", "1,2"}, {"samples", 10}}};
  for (auto& run : r["runs"]) {
    run["val_loss"] = nullptr;
    run["params"] = nullptr;
    run["tokens_per_s"] = nullptr;
    run["curve"] = {{"train", nlohmann::json::array()}, {"val", nlohmann::json::array()}};
    run["tasks"]["mqar"] = task_part(5, 10, 2, 10);
  }
  summarize_results(r);
  const std::string md = results_markdown(r);
  EXPECT_NE(md.find("Task-only grid (`language_model = false`)"), std::string::npos);
  EXPECT_EQ(md.find("| variant | settings | parameters"), std::string::npos);
  EXPECT_EQ(md.find("Welch degrees of freedom"), std::string::npos);
  EXPECT_NE(md.find("## Task: mqar"), std::string::npos);
  EXPECT_NE(md.find("| a | 2× | 4 / 20 (2) | 0.200 |"), std::string::npos);
  EXPECT_EQ(md.find("NIAH by depth"), std::string::npos);
  const std::string html = render_report_html(r);
  EXPECT_EQ(html.find("id=\"results-table\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"fig-val-loss\""), std::string::npos);
  EXPECT_NE(html.find("id=\"task-accuracy-mqar\""), std::string::npos);
  EXPECT_NE(html.find("task-only grid"), std::string::npos);
}

// A result.json recorded before the bucket losses and task counts were kept gets them from its run
// directory's lengths.json and task_NAME/eval.json (docs/compare.md "Task accuracy", "Length
// difference-in-differences"); a report of other lengths is not taken.
TEST(CompareSummary, OlderRunsCompletedFromTheirReports) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attnlab_test_complete_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "task_passkey");
  const nlohmann::json lengths{{"train_len", 4}, {"token_budget", 64}, {"bucket", 4},
                               {"lengths", {{{"length", 4}, {"multiple", 1.0}, {"applicable", true}, {"loss", 5.0}, {"loss_beyond_train", nullptr},
                                             {"buckets", {{{"start", 0}, {"end", 4}, {"tokens", 8}, {"loss", 5.0}}}}},
                                            {{"length", 8}, {"multiple", 2.0}, {"applicable", true}, {"loss", 5.5}, {"loss_beyond_train", 6.0},
                                             {"buckets", {{{"start", 0}, {"end", 4}, {"tokens", 8}, {"loss", 5.0}},
                                                          {{"start", 4}, {"end", 8}, {"tokens", 8}, {"loss", 6.0}}}}}}}};
  const nlohmann::json task{{"train_len", 4}, {"samples", 10},
                            {"cells", {{{"length", 4}, {"multiple", 1.0}, {"applicable", true}, {"samples", 10}, {"solved", 7},
                                        {"strict_accuracy", 0.7}, {"token_accuracy", 0.8}, {"answer_logprob", -1.0}}}}};
  std::ofstream(dir / "lengths.json") << lengths.dump();
  std::ofstream(dir / "task_passkey" / "eval.json") << task.dump();
  nlohmann::json old_lengths = compare::compact_lengths(lengths), old_task = compare::compact_task(task);
  old_lengths.erase("bucket");
  old_lengths.erase("bucket_loss");
  old_task.erase("solved");
  old_task.erase("scored");
  nlohmann::json run{{"lengths", old_lengths}, {"tasks", {{"passkey", old_task}}}};
  compare::complete_from_run_files(run, dir);
  EXPECT_EQ(run["lengths"]["bucket"], 4);
  EXPECT_EQ(run["lengths"]["bucket_loss"], nlohmann::json({{5.0}, {5.0, 6.0}}));
  EXPECT_EQ(run["tasks"]["passkey"]["solved"], nlohmann::json({7}));
  EXPECT_EQ(run["tasks"]["passkey"]["scored"], nlohmann::json({10}));
  // A run evaluated at other lengths than its directory's report: left as it is.
  nlohmann::json other{{"lengths", old_lengths}, {"tasks", {{"passkey", old_task}}}};
  other["lengths"]["multiple"] = {1.0, 4.0};
  other["tasks"]["passkey"]["multiple"] = {2.0};
  compare::complete_from_run_files(other, dir);
  EXPECT_FALSE(other["lengths"].contains("bucket_loss"));
  EXPECT_FALSE(other["tasks"]["passkey"].contains("solved"));
  std::filesystem::remove_all(dir);
}
