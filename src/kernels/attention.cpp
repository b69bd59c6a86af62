// attnlab kernels: the run-time choice of the float attention kernel set (kernels/attention.h,
// "Kernel sets") and the float entry points that go through it.
#include "kernels/attention.h"

#include <atomic>
#include <cstdlib>

namespace attnlab::kernels {

#if defined(__x86_64__)
const AttentionKernelSet& attention_kernel_set_avx512();  // attention_avx512.cpp
const AttentionKernelSet& attention_kernel_set_avx2();    // attention_avx2.cpp
#endif

namespace {

const AttentionKernelSet& baseline_set() {
  static constexpr AttentionKernelSet set = ATTNLAB_ATTENTION_KERNEL_SET(baseline);
  return set;
}

struct Candidate {
  const AttentionKernelSet* set;
  bool runs_here;
};

// Every set this binary carries, widest first. The baseline set runs wherever the binary does.
std::vector<Candidate> candidates() {
  std::vector<Candidate> all;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  all.push_back({&attention_kernel_set_avx512(), avx2 && __builtin_cpu_supports("avx512f")});
  all.push_back({&attention_kernel_set_avx2(), avx2});
#endif
  all.push_back({&baseline_set(), true});
  return all;
}

const AttentionKernelSet& find_set(std::string_view name, const char* who) {
  std::string here;  // the sets this CPU runs, for the message
  bool known = false;
  for (const Candidate& c : candidates()) {
    if (c.runs_here) here += std::string(here.empty() ? "" : ", ") + c.set->name;
    if (c.set->name != name) continue;
    if (c.runs_here) return *c.set;
    known = true;
  }
  if (known) fail(who, ": this CPU cannot run the attention kernel set '", name, "'; it runs: ", here);
  fail(who, ": unknown attention kernel set '", name, "'; this CPU runs: ", here);
}

const AttentionKernelSet* default_set() {
  if (const char* env = std::getenv("ATTNLAB_KERNELS"); env && *env) return &find_set(env, "ATTNLAB_KERNELS");
  for (const Candidate& c : candidates())
    if (c.runs_here) return c.set;
  return &baseline_set();
}

std::atomic<const AttentionKernelSet*>& active() {
  static std::atomic<const AttentionKernelSet*> set{default_set()};  // retried on the next call if it throws
  return set;
}

}  // namespace

const AttentionKernelSet& attention_kernels() { return *active().load(std::memory_order_acquire); }

std::vector<std::string> attention_kernel_sets() {
  std::vector<std::string> names;
  for (const Candidate& c : candidates())
    if (c.runs_here) names.emplace_back(c.set->name);
  return names;
}

void use_attention_kernels(std::string_view name) {
  active().store(&find_set(name, "use_attention_kernels"), std::memory_order_release);
}

template <>
void attention_forward<float>(float* out, float* lse, const float* q, const float* k, const float* v,
                              const float* sink, float scale, const AttentionShape& s,
                              const AttentionExtras<float>& x) {
  attention_kernels().forward(out, lse, q, k, v, sink, scale, s, x);
}

template <>
size_t attention_backward_scratch_size<float>(const AttentionShape& s) {
  return attention_kernels().backward_scratch_size(s);
}

template <>
void attention_backward<float>(float* dq, float* dk, float* dv, float* dsink, const float* dout, const float* out,
                               const float* lse, const float* q, const float* k, const float* v, const float* sink,
                               float scale, const AttentionShape& s, const AttentionExtras<float>& x, float* scratch,
                               size_t scratch_size) {
  attention_kernels().backward(dq, dk, dv, dsink, dout, out, lse, q, k, v, sink, scale, s, x, scratch, scratch_size);
}

}  // namespace attnlab::kernels
