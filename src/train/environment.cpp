#include "train/environment.h"

#if defined(__SSE__)
#include <immintrin.h>
#endif
#include <dnnl.h>
#if DNNL_VERSION_MAJOR < 3
#include <dnnl_debug.h>
#endif

#include <fstream>
#include <string>

#include "core/json.h"
#include "core/threads.h"

namespace attnlab {

namespace {
// The instruction set oneDNN dispatches to on this CPU (its JIT kernels' choice).
std::string onednn_isa() {
#if DNNL_VERSION_MAJOR >= 3
  // 3.x dropped dnnl_cpu_isa2str; the names of 3.2's enum.
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    default: return "isa " + std::to_string(int(dnnl_get_effective_cpu_isa()));
  }
#else
  return dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
#endif
}

std::string build_isa() {
  std::string s;
  auto add = [&](const char* name) { s += s.empty() ? name : std::string(",") + name; };
#if defined(__AVX512F__)
  add("avx512f");
#endif
#if defined(__AVX2__)
  add("avx2");
#endif
#if defined(__FMA__)
  add("fma");
#endif
#if defined(__AVX__)
  add("avx");
#endif
#if defined(__SSE4_2__)
  add("sse4.2");
#endif
  return s.empty() ? "baseline" : s;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown";
}
}  // namespace

std::string numeric_environment_json(int ranks) {
  nlohmann::json j;
  if (ranks > 1) j["ranks"] = std::to_string(ranks);
  j["threads"] = std::to_string(omp_threads());
  j["cpu_isa"] = onednn_isa();
  j["build_isa"] = build_isa();
  const dnnl_version_t* v = dnnl_version();
  j["onednn"] = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (" +
                (v->hash ? v->hash : "?") + ")";
#if defined(__SSE__)
  const unsigned csr = _mm_getcsr();
  j["ftz"] = (csr & 0x8000) ? "on" : "off";
  j["daz"] = (csr & 0x0040) ? "on" : "off";
#else
  j["ftz"] = "n/a";
  j["daz"] = "n/a";
#endif
  j["cpu"] = cpu_model();
  return j.dump();
}

std::vector<std::string> numeric_environment_differences(const std::string& stored_json, int ranks) {
  std::vector<std::string> out;
  nlohmann::json stored, now = nlohmann::json::parse(numeric_environment_json(ranks));
  try {
    stored = nlohmann::json::parse(stored_json);
  } catch (const nlohmann::json::exception&) {
    return {"the stored environment record is not valid JSON"};
  }
  if (!stored.is_object()) return {"the stored environment record is not a JSON object"};
  // Data-parallel ranks: absent means one process, on either side.
  const auto stored_ranks = stored.find("ranks");
  const std::string ranks_was = stored_ranks != stored.end() && stored_ranks->is_string() ? stored_ranks->get<std::string>() : "1";
  if (ranks_was != std::to_string(ranks)) out.push_back("data-parallel ranks " + ranks_was + " -> " + std::to_string(ranks));
  now.erase("ranks");
  for (auto it = now.begin(); it != now.end(); ++it) {
    const auto s = stored.find(it.key());
    const std::string was = s != stored.end() && s->is_string() ? s->get<std::string>() : "unrecorded";
    const std::string is = it->get<std::string>();
    if (was != is) out.push_back(it.key() + " " + was + " -> " + is);
  }
  return out;
}

}  // namespace attnlab
