// Attention mechanisms as modules (docs/extending.md). Every mechanism that changes the attention
// path of a layer — RoPE, ALiBi, the learned sink, XSA, GOAT, QK-norm — is one file in this folder:
// a class derived from AttentionMechanism<T> plus one registration line. The transformer (gpt.cpp)
// never names a mechanism; it calls the hooks below, in the registry's order, on the layers each
// mechanism acts on.
//
// The points where a mechanism may act on one layer's attention (docs/mechanisms.md §1.1 gives the
// sublayer; the kernel is kernels/attention.h):
//
//   u = Norm(h)                                   (the sublayer input, N = B·T rows × d)
//   projection:  qkv = u·W_qkv + b                one mechanism may own it (GOAT's compact row,
//                                                 unpacked into the packed q|k|v layout: `unpack`)
//   transform:   q, k ← f(q, k)   (in order)      QK-norm, then RoPE; v is never changed
//   kernel:      z = attention(q, k, v; sink, scale, extras)
//                                                 mechanisms set the sink, the scale and the
//                                                 kernel's extra terms (ALiBi slopes, GOAT's sink
//                                                 slope, XSA's epilogue: AttentionExtras)
//   o = z·W_o + b
//
// The backward runs the same points in reverse: the kernel's backward (with the gradient slots the
// mechanisms set), then `after_kernel_backward` (parameter gradients from the kernel's outputs,
// e.g. XSA's gate), then each transform's backward in reverse order, then the projection owner's
// unpack backward. Decoding with a KV cache runs the forward hooks on each new chunk (positions are
// absolute: pos_offset), so a mechanism that works per token or per position works there too.
//
// Parameters are registered per layer under `blocks.{l}.attn.` (their order in the registry is the
// order of initialization: a mechanism's tensors come after the layer's projection and in registry
// order), bound once, and never weight-decayed unless the mechanism says so (§0). Activations the
// mechanism keeps between forward and backward live in its own MechanismState, planned in the
// model's arena (nothing is allocated per step).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "kernels/attention/shape.h"
#include "model/config.h"
#include "model/params.h"
#include "model/trace.h"

namespace attnlab {

// A mechanism's activations for one workspace (training or inference). Mechanisms derive from it.
struct MechanismState {
  virtual ~MechanismState() = default;
};

// What a hook sees of one layer's attention pass over B sequences of Tq tokens.
template <class T>
struct AttentionPass {
  int layer = 0;
  int B = 0, Tq = 0;
  int pos_offset = 0;              // token i of a sequence sits at absolute position pos_offset + i
  int H = 0, Hkv = 0, Dh = 0;
  // Forward: the packed rows (B·Tq, (H + 2Hkv)·Dh), q heads, then k heads, then v heads.
  // Backward: the same layout holding dL/d(qkv).
  T* qkv = nullptr;
  int qkv_stride = 0;
  MechanismState* state = nullptr;  // this mechanism's state in the current workspace
  // The fused kernel's inputs, set by the mechanisms (kernels/attention.h).
  const T* sink = nullptr;          // [H] sink logits (§1.3) or null
  T* dsink = nullptr;               // backward: [H] += dL/dsink, or null
  T scale = 0;                      // the logit scale, 1/sqrt(Dh) unless a mechanism changes it
  kernels::AttentionExtras<T> extras;
};

template <class T>
class AttentionMechanism {
 public:
  virtual ~AttentionMechanism() = default;
  virtual const char* name() const = 0;
  // Whether it acts on layer l (0-based) of this model.
  virtual bool acts_on(int layer) const = 0;

  // ---- parameters ----
  // Adds layer l's tensors; prefix is "blocks.{l}.attn.".
  virtual void register_params(ParamRegistry& /*reg*/, int /*layer*/, const std::string& /*prefix*/) const {}
  // After the registry is finalized and the buffers exist.
  virtual void bind(const ParamRegistry& /*reg*/, T* /*params*/, T* /*grads*/) {}
  // Constant tables (RoPE, GOAT) must cover absolute positions < n.
  virtual void ensure_positions(int /*n*/) {}

  // ---- activations ----
  virtual std::unique_ptr<MechanismState> make_state() const { return nullptr; }
  // Takes the state's buffers for up to `rows` = B·seq rows from the arena, on both passes of the
  // two-pass planning (the counting pass hands out nulls).
  virtual void plan(Arena& /*arena*/, MechanismState& /*state*/, size_t /*rows*/, int /*seq*/, bool /*training*/) const {}

  // ---- projection (at most one mechanism per layer owns it) ----
  // Columns of layer l's qkv projection when this mechanism owns it, 0 when it does not.
  virtual int projection_columns(int /*layer*/) const { return 0; }
  // Where the owned projection writes its (rows, projection_columns) output.
  virtual T* projection_output(MechanismState& /*state*/) const { return nullptr; }
  // Forward: writes pass.qkv (packed) from projection_output. Backward: writes
  // dL/d(projection output) into projection_output from pass.qkv (= dL/d(packed qkv)).
  virtual void unpack_forward(AttentionPass<T>& /*pass*/) const {}
  virtual void unpack_backward(AttentionPass<T>& /*pass*/) const {}

  // ---- transforms of q and k, in place on pass.qkv (forward), and their backward (on dL/dqkv) ----
  virtual void transform_forward(AttentionPass<T>& /*pass*/) const {}
  virtual void transform_backward(AttentionPass<T>& /*pass*/) const {}

  // ---- the kernel ----
  // Sets pass.sink, pass.scale, pass.extras for the forward (and for the backward, which needs the
  // same terms: it is called again before the kernel's backward).
  virtual void kernel_terms(AttentionPass<T>& /*pass*/) const {}
  // Backward only, after kernel_terms: the gradient slots (pass.dsink, extras.d*), zeroed as needed.
  virtual void kernel_gradient_slots(AttentionPass<T>& /*pass*/) const {}
  // After the kernel's backward: parameter gradients from what it wrote into the slots.
  virtual void after_kernel_backward(AttentionPass<T>& /*pass*/) const {}

  // ---- diagnostics (model/trace.h) ----
  // Fills what this mechanism adds to the view of the layer (e.g. GOAT's parameters and tables).
  virtual void describe(AttentionView<T>& /*view*/, const AttentionPass<T>& /*pass*/) const {}
};

// ---- configuration keys a mechanism declares (stored in Config::attn.options) ----
struct MechanismKey {
  enum class Kind { Choice, Int, Float, Bool };
  std::string name;                  // e.g. "attn.qk_norm"
  Kind kind = Kind::Choice;
  std::string default_value;         // as written in a config file (unquoted)
  std::vector<std::string> choices;  // Kind::Choice
  double lo = 0, hi = 0;             // Kind::Int, Kind::Float: the accepted range
  // When the key may be set (a key of an inactive mechanism is an error, §7.2 Validation), and why not.
  std::function<bool(const Config&)> active;
  std::string inactive_reason;
  // Whether the key appears in the resolved configuration (checkpoints, the banner): mechanisms
  // show their keys only when they are on, so that every configuration without them keeps its
  // exact stored form.
  std::function<bool(const Config&)> shown;
};

// One registered mechanism: its name, its place in the order of the hooks, its keys, a check of
// the resolved configuration (errors name the key), and its constructors.
struct MechanismInfo {
  MechanismInfo(std::string name_, int order_, std::string section_)
      : name(std::move(name_)), order(order_), section(std::move(section_)) {}
  std::string name;
  int order = 0;           // hooks run in increasing order (transform backward: decreasing)
  std::string section;     // docs/mechanisms.md § of its math
  std::vector<MechanismKey> keys;
  // Validates the resolved configuration; `where(key)` names where a key was set ("default" when not).
  std::function<void(const Config&, const std::function<std::string(const char*)>& where)> validate;
  // The mechanism for this configuration, or null when it acts on no layer.
  std::function<std::unique_ptr<AttentionMechanism<float>>(const Config&)> make_float;
  std::function<std::unique_ptr<AttentionMechanism<double>>(const Config&)> make_double;
};

// Every registered mechanism, in hook order.
const std::vector<MechanismInfo>& attention_mechanisms();

// The mechanisms of a model of this configuration (those that act on some layer), in hook order.
template <class T>
std::vector<std::unique_ptr<AttentionMechanism<T>>> make_attention_mechanisms(const Config& cfg);

// The text value of a mechanism key in a resolved configuration (its default when not set).
const std::string& mechanism_option(const Config& cfg, const std::string& key);

// Registration: a mechanism file ends with
//   ATTNLAB_ATTENTION_MECHANISM(file_name) { return MechanismInfo{...}; }
// where file_name is the file's name without .cpp (the build lists the folder's files and calls
// each one's registration: adding a mechanism is adding its file).
#define ATTNLAB_ATTENTION_MECHANISM(file_name) ::attnlab::MechanismInfo attnlab_attention_mechanism_##file_name()

// Both constructors of a mechanism class template M<T> whose constructor takes (const Config&):
// null when it acts on no layer.
template <template <class> class M>
void set_mechanism_constructors(MechanismInfo& info) {
  info.make_float = [](const Config& c) -> std::unique_ptr<AttentionMechanism<float>> {
    auto m = std::make_unique<M<float>>(c);
    return m->active() ? std::move(m) : nullptr;
  };
  info.make_double = [](const Config& c) -> std::unique_ptr<AttentionMechanism<double>> {
    auto m = std::make_unique<M<double>>(c);
    return m->active() ? std::move(m) : nullptr;
  };
}

// Whether a per-layer mechanism acts on any layer (its constructor's flags).
inline bool any_layer(const std::vector<bool>& layers) {
  for (bool on : layers)
    if (on) return true;
  return false;
}

}  // namespace attnlab
