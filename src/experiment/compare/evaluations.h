// The parts of a run's evaluation reports that its result.json keeps and the summary, results.md
// and report.html use (docs/compare.md "results.json"); the whole reports stay in the run directory.
#pragma once
#include <nlohmann/json.hpp>

namespace attnlab::compare {

// From an analysis document (docs/analysis.md): what the report draws.
nlohmann::json compact_analysis(const nlohmann::json& analysis);
// From a length report (docs/long-context.md): per length, the multiple of T_train and the losses.
nlohmann::json compact_lengths(const nlohmann::json& report);
// From a task report (eval/tasks.h): per length, the accuracies and the answer's log-probability.
nlohmann::json compact_task(const nlohmann::json& report);

}  // namespace attnlab::compare
