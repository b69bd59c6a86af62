// report.html of `attnlab compare` and `attnlab report`: one self-contained page (inline SVG and CSS,
// no script, nothing fetched) from a results document (docs/compare.md): validation-loss curves with
// a seed band, training-loss curves, the results table, and the analyze figures where the runs have
// them (similarity bias by layer, GOAT priors, depth maps).
#pragma once
#include <string>

#include "core/json.h"

namespace attnlab {

std::string render_report_html(const nlohmann::json& results);

}  // namespace attnlab
