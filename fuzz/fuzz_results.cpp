// libFuzzer target: a compare results.json as `attnlab report` reads it (the document, the
// summary recomputed from its runs, the HTML page) and as api::read_compare_results reads it, on
// arbitrary bytes. The page goes to a scratch file. Seeds: fuzz/corpus/results.
#include <string>

#include "attnlab/compare.h"
#include "core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = attnlab::fuzz::scratch_file("results", data, size);
  try {
    attnlab::api::write_compare_report(path, path + ".html");
  } catch (const attnlab::Error&) {
  }
  try {
    (void)attnlab::api::read_compare_results(path);
  } catch (const attnlab::Error&) {
  }
  return 0;
}
