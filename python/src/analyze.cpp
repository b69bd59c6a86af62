// attnlab.analyze (include/attnlab/analyze.h): the diagnostics of a checkpoint, its tables as NumPy
// arrays (one per column, a row per layer) beside the analysis.json it writes.
#include <attnlab/analyze.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <filesystem>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;

namespace {

template <class Row, class T>
nb::object column(const std::vector<Row>& rows, T Row::*field) {
  std::vector<double> values;
  for (const Row& r : rows) values.push_back(double(r.*field));
  const size_t n = values.size();
  return numpy_owning(std::move(values), {n});
}

}  // namespace

void bind_analyze(nb::module_& m) {
  m.def(
      "analyze",
      [](const std::filesystem::path& checkpoint, const std::filesystem::path& shard, const std::filesystem::path& out,
         int sequences, int batch_size, int cka_tokens, int bootstrap, uint64_t seed, bool rescue_by_depth) {
        api::AnalyzeParams p = api::default_analyze_params();
        p.sequences = sequences;
        p.batch_size = batch_size;
        p.cka_tokens = cka_tokens;
        p.bootstrap = bootstrap;
        p.seed = seed;
        p.rescue_by_depth = rescue_by_depth;
        api::AnalyzeResult r;
        {
          nb::gil_scoped_release release;
          r = api::analyze(checkpoint.string(), shard.string(), out.string(), p);
        }
        nb::dict layers;
        std::vector<double> index;
        for (const auto& l : r.layers) index.push_back(l.layer);
        const size_t n = index.size();
        layers["layer"] = numpy_owning(std::move(index), {n});
        layers["cos_yv_mean"] = column(r.layers, &api::AnalyzeLayer::cos_yv_mean);
        layers["cos_yv_min"] = column(r.layers, &api::AnalyzeLayer::cos_yv_min);
        layers["cos_yv_max"] = column(r.layers, &api::AnalyzeLayer::cos_yv_max);
        layers["self_mean"] = column(r.layers, &api::AnalyzeLayer::self_mean);
        layers["vsim_mean"] = column(r.layers, &api::AnalyzeLayer::vsim_mean);
        std::vector<double> cos_zv;  // NaN on layers without XSA
        for (const auto& l : r.layers) cos_zv.push_back(l.has_cos_zv ? l.cos_zv_mean : NAN);
        layers["cos_zv_mean"] = numpy_owning(std::move(cos_zv), {n});
        nb::dict out_dict;
        out_dict["path"] = r.path;
        out_dict["seq_len"] = r.seq_len;
        out_dict["loss"] = r.loss;
        out_dict["layers"] = layers;
        if (r.has_rescue) {
          out_dict["rescue_when_patched"] = column(r.rescue_when_patched, &api::RescueGain::value);
          out_dict["rescue_when_patched_se"] = column(r.rescue_when_patched, &api::RescueGain::se);
        }
        return out_dict;
      },
      "checkpoint"_a, "shard"_a, "out"_a, "sequences"_a = 64, "batch_size"_a = 8, "cka_tokens"_a = 4096,
      "bootstrap"_a = 1000, "seed"_a = 0, "rescue_by_depth"_a = true,
      "The diagnostics of docs/mechanisms.md §8.1-§8.5 for a checkpoint on windows of a token shard (`attnlab\n"
      "analyze`); writes out/analysis.json (docs/analysis.md defines every number) and returns a dict: path,\n"
      "seq_len, loss, layers (a dict of float64 arrays, one entry per layer: layer, cos_yv_mean/min/max,\n"
      "self_mean, vsim_mean, cos_zv_mean NaN where a layer has no XSA) and, for residual kinds with streams,\n"
      "rescue_when_patched and its standard errors (one per stream).");
}

}  // namespace attnlab::python
