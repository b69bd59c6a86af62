// Time of the residual kinds alone (src/model/residual/), per training step, with the sublayers
// replaced by copies (o = h, dh = do): what each kind adds around the unchanged attention and MLP.
// Prints a markdown table: the fastest of `reps` steps, per interface call group, in ms.
//
//   build/<dir>/residual_bench [reps=7] [n_layer=4] [d_model=256] [rows=4096] [cpu]
// With `cpu`, times are process CPU seconds (use OMP_NUM_THREADS=1 on a busy machine).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/residual/residual.h"

using namespace attnlab;

namespace {
bool g_cpu = false;
double now() {
  if (g_cpu) return double(std::clock()) / CLOCKS_PER_SEC;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// The fastest of the repetitions: on a shared machine the others measure other processes too.
double median(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 7;
  const int L = argc > 2 ? std::atoi(argv[2]) : 4, C = argc > 3 ? std::atoi(argv[3]) : 256, N = argc > 4 ? std::atoi(argv[4]) : 4096;
  g_cpu = argc > 5 && std::string(argv[5]) == "cpu";
  std::printf("residual kinds alone: L=%d d=%d rows=%d, %d threads, %s time, fastest of %d steps (ms)\n\n", L, C, N,
              omp_get_max_threads(), g_cpu ? "CPU" : "wall", reps);
  std::printf("| kind | forward: read | write | read-out | backward: branch_grad | read_backward | other | total |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const char* extra : {"residual.kind = standard\n", "residual.kind = attnres\n", "residual.kind = attnres\nresidual.block_size = 2\n",
                            "residual.kind = attnres\nresidual.block_size = 4\n", "residual.kind = hyper\n", "residual.kind = mhc\n",
                            "residual.kind = dar\n", "residual.kind = dar\nresidual.block_size = 1\n"}) {
    const std::string text = "model.n_layer = " + std::to_string(L) + "\nmodel.d_model = " + std::to_string(C) +
                             "\nmodel.n_head = 4\n" + extra;
    const Config cfg = resolve_config(parse_config_text(text, "bench"));
    auto R = make_residual<float>(cfg);
    ParamRegistry reg;
    R->register_params(reg);
    reg.finalize();
    std::vector<float> params(reg.total() + 1), grads(reg.total() + 1);
    R->bind(reg, params.data(), grads.data());
    Rng rng(1);
    for (const auto& s : reg.specs())
      for (size_t i = 0; i < s.numel; ++i)
        params[s.offset + i] = s.init == Init::Values ? float(s.init_values[i]) : float(s.init_value + 0.01 * rng.normal());
    Arena arena;
    auto st = R->make_state();
    R->plan(arena, *st, N, true);
    arena.commit();
    R->plan(arena, *st, N, true);
    std::vector<float> e((size_t)N * C);
    for (auto& x : e) x = float(rng.normal());
    const int L2 = 2 * L;
    std::vector<double> t_read, t_write, t_out, t_bgrad, t_rback, t_other, t_total;
    for (int rep = 0; rep < reps + 1; ++rep) {
      double read = 0, write = 0, out = 0, bgrad = 0, rback = 0, other = 0;
      const double t0 = now();
      double t = now();
      std::memcpy(R->embedding(*st), e.data(), e.size() * sizeof(float));
      R->begin(*st, N);
      other += now() - t;
      for (int l = 1; l <= L2; ++l) {
        t = now();
        const float* h = R->read(*st, l, N);
        read += now() - t;
        std::memcpy(R->branch(*st, l), h, (size_t)N * C * sizeof(float));  // o = h (a stand-in for F_l)
        t = now();
        R->write(*st, l, N);
        write += now() - t;
      }
      t = now();
      R->read_out(*st, N);
      float* df = R->read_out_grad(*st, N);
      std::fill(df, df + (size_t)N * C, 1e-3f);
      R->read_out_backward(*st, N);
      out += now() - t;
      for (int l = L2; l >= 1; --l) {
        t = now();
        const float* d = R->branch_grad(*st, l, N);
        bgrad += now() - t;
        t = now();
        float* dh = R->input_grad(*st, l, N);
        other += now() - t;
        if (dh != d)
          for (size_t i = 0; i < (size_t)N * C; ++i) dh[i] += d[i];  // dh = do
        t = now();
        R->read_backward(*st, l, N);
        rback += now() - t;
      }
      t = now();
      R->embedding_grad(*st, N);
      other += now() - t;
      if (rep == 0) continue;  // warm-up
      t_read.push_back(read);
      t_write.push_back(write);
      t_out.push_back(out);
      t_bgrad.push_back(bgrad);
      t_rback.push_back(rback);
      t_other.push_back(other);
      t_total.push_back(now() - t0);
    }
    std::string name = extra;
    for (auto& ch : name) if (ch == '\n') ch = ' ';
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", name.c_str(), 1e3 * median(t_read), 1e3 * median(t_write),
                1e3 * median(t_out), 1e3 * median(t_bgrad), 1e3 * median(t_rback), 1e3 * median(t_other), 1e3 * median(t_total));
  }
  return 0;
}
