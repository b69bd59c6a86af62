// `attnlab analyze`: the diagnostics of docs/mechanisms.md §8.1–§8.5, computed from the engine's own
// forward through the tracing hook (model/trace.h). The output is one JSON document whose schema,
// versioned, is docs/analysis.md; every number is defined there with the §8 section it follows.
#pragma once
#include <cstdint>
#include <vector>

#include "core/json.h"
#include "core/progress.h"
#include "model/gpt.h"

namespace attnlab {

inline constexpr const char* kAnalysisSchema = "attnlab.analysis";
inline constexpr int kAnalysisVersion = 1;

struct AnalyzeOptions {
  int batch = 8;              // sequences per forward (the largest divisor of the count up to this)
  int cka_tokens = 4096;      // §8.4: tokens sampled for CKA (all of them when there are fewer)
  int bootstrap = 1000;       // §8.5: bootstrap resamples of the sequences
  uint64_t seed = 0;          // the CKA token sample and the bootstrap
  bool rescue_by_depth = true;  // §8.5: also patch one read at a time
  int recent_window = 128;    // §8.2: p_recent sums the last this many keys
  ProgressFn progress;        // windows done, after each batch; Ctrl-C stops there
};

// Runs every diagnostic that applies to the model. `seqs` holds n_seq windows of seq_len + 1 tokens
// (inputs [0, seq_len), targets [1, seq_len]); `corrupt` the same number of windows read instead of
// them by §8.5's corrupted run (empty: no rescue gain). The model must be unplanned or planned for
// (batch, seq_len) (analyze plans it). Returns the document of docs/analysis.md without the
// provenance keys (checkpoint, data) that the caller adds.
template <class T>
nlohmann::json analyze(GPT<T>& model, const std::vector<int32_t>& seqs, const std::vector<int32_t>& corrupt, int n_seq,
                       int seq_len, const AnalyzeOptions& opt);

// n windows of len tokens drawn with a seed (uniform start offsets, with replacement) from a token
// array of `size` tokens.
std::vector<int32_t> draw_windows(const uint16_t* tokens, size_t size, int n, int len, uint64_t seed);

// §8.4 linear CKA of X (n×p) and Y (n×q), row-major, computed directly in double:
// ‖Y_cᵀX_c‖_F² / (‖X_cᵀX_c‖_F·‖Y_cᵀY_c‖_F) with column-centred X_c, Y_c. 0 if either is constant.
double linear_cka(const double* X, const double* Y, size_t n, int p, int q);

// The same CKA the way analyze() computes it: Σx, Σxᵀx, Σyᵀy and Σxᵀy accumulated in double over
// chunks of `chunk` rows, then centred (C_xy = Σxᵀy − n·x̄ᵀȳ). NaN if either is constant.
double linear_cka_streaming(const double* X, const double* Y, size_t n, int p, int q, size_t chunk);

// §8.3: the composite gain of a real n×n matrix, max(largest absolute row sum, largest absolute
// column sum).
double composite_gain(const double* M, int n);

extern template nlohmann::json analyze<float>(GPT<float>&, const std::vector<int32_t>&, const std::vector<int32_t>&, int, int,
                                              const AnalyzeOptions&);
extern template nlohmann::json analyze<double>(GPT<double>&, const std::vector<int32_t>&, const std::vector<int32_t>&, int, int,
                                               const AnalyzeOptions&);

}  // namespace attnlab
