// One cell of an `attnlab compare` grid (docs/compare.md "Running, stopping, resuming"): a planned
// run trained through the library's train() and its callbacks (resumed from its latest checkpoint,
// refused when the grid changed since), then evaluated (the whole validation shard, analyze, the
// length sweep, the tasks), its result.json written last. Which process runs which cell, and in
// what order, is runner.cpp's business: a cell reads and writes its own run directory alone.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "experiment/compare.h"
#include "experiment/compare/plan.h"
#include "model/config.h"

namespace attnlab::compare {

enum class CellEnd { done, stopped };

// A finished run (its result.json) must be the result of the configuration and evaluations the grid
// gives it now: an error naming the file and the difference otherwise (checked for every finished
// run before any cell trains).
void check_finished_run(const Grid& grid, const Run& run, const std::filesystem::path& runs_dir);

class CellRunner {
 public:
  // `cells`: the runs this process may run (the ETA counts theirs). `one_line`: print one line per
  // finished cell and no progress (a process of a multi-process job, whose progress lines would
  // interleave with the others'). `process`: how that line names this process ("rank 1"; "").
  CellRunner(const Grid& grid, const CompareOptions& opts, const std::vector<Run>& runs, const std::vector<size_t>& cells, bool one_line,
             std::string process);
  // Trains and evaluates run i (skipped when its result.json exists). `stopped` when a signal or a
  // stop_after_* option stopped it (its message printed); errors throw.
  CellEnd run(size_t i);
  // The identity of a configuration's data (provenance.h's data_identity), computed once per files.
  const nlohmann::json& data_of(const Config& c);

 private:
  const Grid& grid_;
  const CompareOptions& opts_;
  const std::vector<Run>& runs_;
  const std::filesystem::path runs_dir_;
  const bool one_line_;
  const std::string process_;
  const bool tty_;
  int finished_here_ = 0;
  std::map<std::string, nlohmann::json> data_by_files_;
  // The ETA counts training steps still to do, at the rate measured in this process per kind
  // (the language model and each task; a task not yet measured is assumed to cost what the
  // language model costs per token). Evaluations are not counted.
  std::map<std::string, int64_t> steps_left_;   // "" = the language model, else the task's name
  std::map<std::string, double> sec_per_step_;  // measured
  std::map<std::string, std::pair<double, int64_t>> measured_;
  double grid_eta();
};

}  // namespace attnlab::compare
