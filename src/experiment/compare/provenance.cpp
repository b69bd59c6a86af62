#include "experiment/compare/provenance.h"

#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "model/version.h"
#include "train/environment.h"

namespace attnlab {
namespace {

nlohmann::json file_identity(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("compare: cannot read ", path, ", the data of the run (does it exist? `attnlab prepare` writes it)");
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  long long bytes = 0;
  while (f) {
    f.read(buf.data(), (std::streamsize)buf.size());
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), (uInt)n);
    bytes += n;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", (unsigned long)crc);
  return {{"bytes", bytes}, {"crc32", hex}};
}

}  // namespace

nlohmann::json data_identity(const Config& cfg) {
  nlohmann::json j;
  j["train"] = file_identity(cfg.data.train);
  j["val"] = file_identity(cfg.data.val);
  j["tokenizer"] = std::filesystem::exists(cfg.data.tokenizer) ? file_identity(cfg.data.tokenizer) : nlohmann::json(nullptr);
  return j;
}

std::string data_differences(const nlohmann::json& stored, const nlohmann::json& now) {
  if (!stored.is_object() || !stored.contains("data")) return "";
  const nlohmann::json& was = stored["data"];
  std::string out;
  for (const char* part : {"train", "val", "tokenizer"}) {
    const nlohmann::json a = was.contains(part) ? was[part] : nlohmann::json(nullptr), b = now.contains(part) ? now[part] : nlohmann::json(nullptr);
    if (a == b) continue;
    auto text = [](const nlohmann::json& x) {
      return x.is_object() ? std::to_string(x.value("bytes", 0LL)) + " bytes crc32 " + x.value("crc32", std::string("?"))
                           : std::string("none");
    };
    out += (out.empty() ? "" : "; ") + std::string(part) + ": " + text(a) + ", now " + text(b);
  }
  return out;
}

nlohmann::json machine_record() {
  nlohmann::json j = nlohmann::json::parse(numeric_environment_json());
  j["attnlab_version"] = version();
  return j;
}

std::string machine_key(const nlohmann::json& m) {
  if (!m.is_object()) return "unrecorded";
  std::string key;
  for (const char* k : {"cpu", "cpu_isa", "build_isa", "onednn", "threads"})
    key += (key.empty() ? "" : ", ") + std::string(k) + " " + (m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : "?");
  return key;
}

}  // namespace attnlab
