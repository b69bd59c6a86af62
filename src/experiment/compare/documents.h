// The documents of an `attnlab compare` grid (docs/compare.md "Results"): results.json, results.md
// and report.html in --out, from the result.json of every finished run, read in the plan's order,
// so that they are the same whichever process finished which run, in whatever order.
#pragma once
#include <vector>

#include "experiment/compare.h"
#include "experiment/compare/plan.h"

namespace attnlab::compare {

// Writes the grid's documents from the runs of `runs` that have a result.json (all of them, or
// results.json is marked partial) and prints results.md unless opts.quiet. Warns when the runs of
// one variant were computed on different machines or builds.
void write_grid_documents(const Grid& grid, const std::vector<Run>& runs, const CompareOptions& opts);

}  // namespace attnlab::compare
