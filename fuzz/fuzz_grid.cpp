// libFuzzer target: the grid file of `attnlab compare` (TOML subset: variants, seeds, tasks,
// [primary], [budget]) on arbitrary text, then the plan of its runs (every run's configuration
// resolved, lengths parsed, memory checked) as compare builds it before anything trains. Nothing is
// written. Seeds: fuzz/corpus/grid.
#include <string>

#include "core/error.h"
#include "experiment/compare.h"
#include "experiment/compare/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const attnlab::Grid grid = attnlab::parse_grid_text(text, "fuzz.toml");
    // A grid of thousands of runs is valid and planned in full; keep each input cheap to plan.
    if (grid.variants.size() * grid.seeds.size() > 64) return 0;
    const auto runs = attnlab::compare::plan_runs(grid, "/tmp/attnlab_fuzz_grid_runs");
    (void)attnlab::compare::evaluations_json(grid);
    (void)attnlab::compare::primary_json(grid);
    (void)attnlab::compare::tasks_json(grid);
    if (runs.empty()) __builtin_trap();  // a parsed grid has a variant and a seed
  } catch (const attnlab::Error&) {
  }
  return 0;
}
