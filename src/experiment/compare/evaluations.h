// The parts of a run's evaluation reports that its result.json keeps and the summary, results.md
// and report.html use (docs/compare.md "results.json"); the whole reports stay in the run directory.
#pragma once
#include <filesystem>

#include "core/json.h"

namespace attnlab::compare {

// From an analysis document (docs/analysis.md): what the report draws.
nlohmann::json compact_analysis(const nlohmann::json& analysis);
// From a length report (docs/long-context.md): per length, the multiple of T_train and the losses,
// and the loss of each position bucket ("bucket": its width, "bucket_loss": per length, per bucket).
nlohmann::json compact_lengths(const nlohmann::json& report);
// From a task report (eval/tasks.h): per length, the accuracies and the answer's log-probability,
// the solved and scored samples ("solved", "scored"), and for the needle the same per depth
// ("depths", "solved_by_depth", "scored_by_depth").
nlohmann::json compact_task(const nlohmann::json& report);
// A result.json written before its compact reports kept the bucket losses and the task counts: adds
// them to `run` from the run directory's lengths.json and task_NAME/eval.json where those exist and
// match (results.json gets them; result.json is left as it is).
void complete_from_run_files(nlohmann::json& run, const std::filesystem::path& run_dir);

}  // namespace attnlab::compare
