// The grid-level statistics of a results document beyond the per-variant summary (docs/compare.md
// "Primary comparisons" and "Gains in compute"), each computed from results["grid"] and the runs
// alone, so `attnlab report` and `--summarize` recompute them: the primary comparisons with their
// t-test, exact sign-flip p, Holm adjustment and seed plan (primary.cpp), the [budget] sweep's
// log-linear fit with each variant's gain in compute (gains.cpp), the tasks' pooled accuracies with
// their score intervals (task_accuracy.cpp) and the length sweep's difference-in-differences
// (length_did.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"

namespace attnlab::compare {

// A run of a [budget] sweep (it records its factor k): kept out of its variant's statistics.
bool is_budget_run(const nlohmann::json& run);

// Final validation loss by variant and seed over the grid's own runs (not the [budget] runs).
std::map<std::string, std::map<uint64_t, double>> loss_by_variant_and_seed(const nlohmann::json& results);

// results["primary_comparisons"] for a grid with a [primary] table (null otherwise).
nlohmann::json primary_comparisons(const nlohmann::json& results);
// results["compute_gains"] for a grid with a [budget] table (null otherwise).
nlohmann::json compute_gains(const nlohmann::json& results);
// results["task_accuracy"] for a grid with [tasks.NAME] (null otherwise): per task, variant and
// length the strict accuracy pooled over seeds with its Wilson interval, the difference to the
// baseline with Newcombe's interval, and for the needle the same per depth (task_accuracy.cpp).
nlohmann::json task_accuracy(const nlohmann::json& results);
// results["length_did"] for a grid with a length sweep (null otherwise): the difference-in-differences
// of each comparison between each length > 1× and 1×, per position range, paired by seed (length_did.cpp).
nlohmann::json length_did(const nlohmann::json& results);

// The tables of both as text cells, which results.md (markdown) and report.html (HTML) lay out
// (inference_tables.cpp). numeric[i]: column i is right-aligned.
struct TextTable {
  std::vector<std::string> header;
  std::vector<bool> numeric;
  std::vector<std::vector<std::string>> rows;
};
TextTable primary_table(const nlohmann::json& primary_comparisons);
TextTable budget_points_table(const nlohmann::json& compute_gains);
TextTable gains_table(const nlohmann::json& compute_gains);
// One task of task_accuracy: a row per variant and length (counts, accuracy, Wilson interval, Δ vs the
// baseline with Newcombe's interval); and for the needle a row per variant and length, a column per depth.
TextTable task_accuracy_table(const nlohmann::json& task);
TextTable depth_accuracy_table(const nlohmann::json& task);
// A row per comparison, length and position range of length_did.
TextTable length_did_table(const nlohmann::json& length_did);
// The fit in words: "L = 5.1234 − 0.2345·ln k over seeds 1, 2, 3; r² = 0.998; slope's 95% interval [..]".
std::string gains_fit_text(const nlohmann::json& compute_gains);

}  // namespace attnlab::compare
