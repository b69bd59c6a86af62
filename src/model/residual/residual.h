// The residual interface (docs/mechanisms.md §1.1, §4, §5, §6, §7.1): every residual kind wraps the
// same unchanged sublayers F_l(x) = f_l(Norm_l(x)), l = 1..2L (odd l: attention of layer (l−1)/2,
// even l: its MLP). The transformer asks the residual where each sublayer reads its input from and
// where it writes its output to, and never knows which kind runs.
//
// Forward of one pass over N = B·T rows (depth and stream mixing never cross positions, §7.1, so
// the same calls serve training, evaluation and KV-cached chunks of any N up to the planned rows):
//
//   embedding_forward(r.embedding(s), ...)        e = x_0 is written straight into the residual
//   r.begin(s, N)
//   for l = 1..2L:
//     h = r.read(s, l, N)                          the sublayer input h_l (N×d), saved for backward
//     o = r.branch(s, l)                            F_l writes o_l (N×d) here ...
//     ... F_l(h) into o ...
//     r.write(s, l, N)                              ... and the residual folds it into its state
//   x_f = r.read_out(s, N)                          the input of Norm_f (N×d)
//
// Backward, in reverse (gradients of inputs ACCUMULATE, like every norm_backward):
//
//   dx_f = r.read_out_grad(s, N)                   zeroed; Norm_f's backward accumulates into it
//   r.read_out_backward(s, N)
//   for l = 2L..1:
//     do = r.branch_grad(s, l, N)                   dLoss/do_l (N×d), read-only
//     dh = r.input_grad(s, l, N)                    F_l's backward accumulates dLoss/dh_l here, with
//     ... F_l backward ...                          the saved input r.input(s, l); it must read all
//     r.read_backward(s, l, N)                      of `do` before it first writes `dh` (they may alias)
//   de = r.embedding_grad(s, N)                     dLoss/de for the embedding backward
//
// `standard` hands out the existing buffers (x_l is written in place over o_l, dh aliases do), so
// it costs exactly what the plain pre-norm GPT costs. Parameters are registered by the kind, under
// names `residual.{l}.<name>` (l = 1..2L) and `residual.final.<name>`, none weight-decayed (§0).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "model/config.h"
#include "model/params.h"
#include "model/trace.h"

namespace attnlab {

// The activations of one residual kind for one workspace (training or inference): made by the
// kind, laid out by plan(), handed back to every call. Kinds derive from it.
struct ResidualState {
  virtual ~ResidualState() = default;
  size_t bytes = 0;  // arena bytes planned by the kind for this workspace (memory report)
};

template <class T>
class Residual {
 public:
  virtual ~Residual() = default;
  virtual const char* kind() const = 0;

  // ---- parameters ----
  // Adds the kind's tensors to the registry (called by GPT's constructor before finalize()).
  virtual void register_params(ParamRegistry& reg) const = 0;
  // Binds parameter and gradient pointers after the registry is finalized and the buffers exist.
  virtual void bind(const ParamRegistry& reg, T* params, T* grads) = 0;

  // ---- activations ----
  virtual std::unique_ptr<ResidualState> make_state() const = 0;
  // Takes the kind's buffers for up to `rows` rows from the arena. Called on both passes of the
  // arena's two-pass planning (first counting, then taking); `training` adds the backward buffers.
  virtual void plan(Arena& arena, ResidualState& s, size_t rows, bool training) const = 0;

  // ---- forward ----
  virtual T* embedding(ResidualState& s) const = 0;
  virtual void begin(ResidualState& s, int N) const = 0;
  virtual const T* read(ResidualState& s, int l, int N) const = 0;
  virtual T* branch(ResidualState& s, int l) const = 0;
  virtual void write(ResidualState& s, int l, int N) const = 0;
  virtual const T* read_out(ResidualState& s, int N) const = 0;
  // The saved values of the forward pass, for the backward of the norms.
  virtual const T* input(const ResidualState& s, int l) const = 0;
  virtual const T* final_input(const ResidualState& s) const = 0;

  // ---- backward ----
  virtual T* read_out_grad(ResidualState& s, int N) const = 0;
  virtual void read_out_backward(ResidualState& s, int N) const = 0;
  virtual const T* branch_grad(ResidualState& s, int l, int N) const = 0;
  virtual T* input_grad(ResidualState& s, int l, int N) const = 0;
  virtual void read_backward(ResidualState& s, int l, int N) const = 0;
  virtual const T* embedding_grad(ResidualState& s, int N) const = 0;

  // ---- diagnostics (docs/mechanisms.md §8.3–§8.5, docs/analysis.md) ----
  // Shows the states of the last forward over N rows to an inspector (model/trace.h). Needs a
  // training-planned state (which keeps every sublayer's values); `standard` shows nothing.
  virtual void inspect(const ResidualState& /*s*/, int /*N*/, ResidualInspector<T>& /*ins*/) const {}
  // The §8.5 patch: while set, read q's stream-j retrieval R^j is replaced by src (N, C) before the
  // mix, in every forward (null clears it). Only DAR has stream reads; other kinds refuse.
  virtual void set_read_patch(ResidualState& /*s*/, int /*q*/, int /*j*/, const T* /*src*/) const {
    fail("residual.kind = ", kind(), " has no stream reads to patch");
  }
};

// One registered residual kind (docs/extending.md): a kind is one file in this folder that ends with
//   ATTNLAB_RESIDUAL_KIND(file_name) { ResidualKindInfo info("<name>", order, "§"); ...; return info; }
// The build lists the folder's files that register a kind and calls each registration, so no other
// file names the kind; `residual.kind` accepts the registered names.
struct ResidualKindInfo {
  ResidualKindInfo(std::string name_, int order_, std::string section_)
      : name(std::move(name_)), order(order_), section(std::move(section_)) {}
  std::string name;
  int order = 0;          // the order of residual.kind's choices in messages
  std::string section;    // docs/mechanisms.md §
  // What the diagnostics need to know of the kind's structure (analyze, docs/mechanisms.md §8.3–§8.5):
  // the depth histories it keeps and reads by attention over depth (AttnRes 1, DAR 2), and its
  // parallel streams mixed by maps (HC, mHC: residual.streams). 0 when it has none.
  std::function<int(const Config&)> depth_streams = [](const Config&) { return 0; };
  std::function<int(const Config&)> parallel_streams = [](const Config&) { return 0; };
  std::function<std::unique_ptr<Residual<float>>(const Config&)> make_float;
  std::function<std::unique_ptr<Residual<double>>(const Config&)> make_double;
};

// Every registered kind, in `order`.
const std::vector<ResidualKindInfo>& residual_kinds();
// The kind named `name`; fails naming the registered kinds.
const ResidualKindInfo& residual_kind(const std::string& name);
// The residual kind of `cfg.residual.kind`.
template <class T>
std::unique_ptr<Residual<T>> make_residual(const Config& cfg);
// Streams a kind's diagnostics may patch (§8.5's rescue gain): DAR's two, HC/mHC's n, else 0.
inline int residual_patchable_streams(const Config& cfg) {
  const ResidualKindInfo& k = residual_kind(cfg.residual.kind);
  return k.depth_streams(cfg) == 2 ? 2 : k.parallel_streams(cfg);
}

#define ATTNLAB_RESIDUAL_KIND(file_name) ::attnlab::ResidualKindInfo attnlab_residual_kind_##file_name()

// Both constructors of a kind class template K<T> whose constructor takes (const Config&).
template <template <class> class K>
void set_residual_constructors(ResidualKindInfo& info) {
  info.make_float = [](const Config& c) -> std::unique_ptr<Residual<float>> { return std::make_unique<K<float>>(c); };
  info.make_double = [](const Config& c) -> std::unique_ptr<Residual<double>> { return std::make_unique<K<double>>(c); };
}

// Parameter name of sublayer l's tensor (`residual.{l}.name`) and of the read-out's.
inline std::string residual_param(int l, const std::string& name) { return "residual." + std::to_string(l) + "." + name; }
inline std::string residual_final_param(const std::string& name) { return "residual.final." + name; }

}  // namespace attnlab
