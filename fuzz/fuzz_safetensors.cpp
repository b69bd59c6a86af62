// libFuzzer target: the safetensors reader and the checkpoint loader on arbitrary bytes. Every
// input must either open cleanly or throw attnlab::Error; a crash, a sanitizer report or another
// exception type is a bug. Seeds: fuzz/corpus/safetensors.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = attnlab::fuzz::scratch_file("safetensors", data, size);
  try {
    attnlab::SafetensorsFile f = attnlab::SafetensorsFile::open(path);
    std::vector<unsigned char> buf;
    for (const auto& name : f.names()) {
      const auto& info = f.info(name);
      buf.resize(info.nbytes);  // bounded by the file size: open() checked the offsets
      f.read(name, buf.data(), info.shape, info.dtype);
    }
    (void)f.metadata();
  } catch (const attnlab::Error&) {
  }
  try {
    // The checkpoint layer on top: stored config, its tensors, finite values, step metadata.
    const attnlab::Config cfg = attnlab::read_checkpoint_config(path);
    (void)cfg;
  } catch (const attnlab::Error&) {
  }
  return 0;
}
