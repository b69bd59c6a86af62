// The standard residual x_l = x_{l−1} + F_l(x_{l−1}) (docs/mechanisms.md §1.1), and the factory of
// residual kinds. It hands out the buffers the plain pre-norm GPT always used: the 2L+1 states
// x_0..x_{2L}, with F_l writing o_l into x_l's buffer and x_{l−1} then added in place; one gradient
// buffer that is at once dx_l, do_l and (after the norm backward accumulates into it) dx_{l−1}.
// No parameters, no copies, no extra FLOPs.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"
#include "model/residual/residual.h"

namespace attnlab {
namespace {

template <class T>
void add_inplace(T* y, const T* x, size_t n) {
#pragma omp parallel for simd schedule(static) if (parallel : n >= kernels::kParallelMinElements)
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

template <class T>
struct StandardState : ResidualState {
  std::vector<T*> x;  // x_0..x_{2L}, (N, d) each
  T* dx = nullptr;    // (N, d), training only
};

template <class T>
class StandardResidual final : public Residual<T> {
 public:
  explicit StandardResidual(const Config& cfg) : L2_(2 * cfg.model.n_layer), C_(cfg.model.d_model) {}
  const char* kind() const override { return "standard"; }
  void register_params(ParamRegistry&) const override {}
  void bind(const ParamRegistry&, T*, T*) override {}

  std::unique_ptr<ResidualState> make_state() const override { return std::make_unique<StandardState<T>>(); }
  void plan(Arena& arena, ResidualState& rs, size_t rows, bool training) const override {
    auto& s = st(rs);
    const size_t before = arena.planned();
    s.x.assign(L2_ + 1, nullptr);
    for (auto& x : s.x) x = arena.template take<T>(rows * C_);
    s.dx = training ? arena.template take<T>(rows * C_) : nullptr;
    if (!arena.committed()) s.bytes = arena.planned() - before;
  }

  T* embedding(ResidualState& rs) const override { return x(rs, 0); }
  void begin(ResidualState&, int) const override {}
  const T* read(ResidualState& rs, int l, int) const override { return x(rs, l - 1); }
  T* branch(ResidualState& rs, int l) const override { return x(rs, l); }
  void write(ResidualState& rs, int l, int N) const override { add_inplace(x(rs, l), x(rs, l - 1), (size_t)N * C_); }
  const T* read_out(ResidualState& rs, int) const override { return x(rs, L2_); }
  const T* input(const ResidualState& rs, int l) const override { return x(rs, l - 1); }
  const T* final_input(const ResidualState& rs) const override { return x(rs, L2_); }

  T* read_out_grad(ResidualState& rs, int N) const override {
    std::memset(dx(rs), 0, sizeof(T) * N * C_);
    return dx(rs);
  }
  void read_out_backward(ResidualState&, int) const override {}
  const T* branch_grad(ResidualState& rs, int, int) const override { return dx(rs); }
  T* input_grad(ResidualState& rs, int, int) const override { return dx(rs); }  // dx_{l−1} = dx_l + dh_l
  void read_backward(ResidualState&, int, int) const override {}
  const T* embedding_grad(ResidualState& rs, int) const override { return dx(rs); }

 private:
  static StandardState<T>& st(ResidualState& s) { return static_cast<StandardState<T>&>(s); }
  static T* x(const ResidualState& s, int i) { return static_cast<const StandardState<T>&>(s).x[i]; }
  static T* dx(const ResidualState& s) { return static_cast<const StandardState<T>&>(s).dx; }
  int L2_, C_;
};

}  // namespace

ATTNLAB_RESIDUAL_KIND(standard) {
  ResidualKindInfo info("standard", 10, "1.1");
  set_residual_constructors<StandardResidual>(info);
  return info;
}

}  // namespace attnlab
