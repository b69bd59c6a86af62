// attnlab.Tokenizer (include/attnlab/tokenizer.h): the SentencePiece tokenizer of a prepared corpus.
#include <attnlab/tokenizer.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>

#include <filesystem>
#include <limits>

#include "bindings.h"

namespace attnlab::python {

using namespace nb::literals;
using api::Tokenizer;

void bind_tokenizer(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer",
                        "The SentencePiece BPE tokenizer of a corpus prepared by attnlab.prepare (its tokenizer.model).")
      .def(
          "__init__",
          [](Tokenizer* self, const std::filesystem::path& path) {
            const std::filesystem::path file = std::filesystem::is_directory(path) ? path / "tokenizer.model" : path;
            new (self) Tokenizer(Tokenizer::load(file.string()));
          },
          "path"_a, "Loads tokenizer.model (a file, or the prepared directory holding it).")
      .def(
          "encode",
          [](const Tokenizer& tok, const std::string& text) {
            std::vector<int32_t> ids = tok.encode(text);
            const size_t n = ids.size();
            return numpy_owning(std::move(ids), {n});
          },
          "text"_a, nb::sig("def encode(self, text: str) -> numpy.typing.NDArray[numpy.int32]"), "Token ids (int32 array) of a text.")
      .def(
          "decode",
          [](const Tokenizer& tok, nb::handle ids) {
            // The tokenizer checks the range itself (and names the id): pass every int32 through.
            const Tokens t = tokens_from(ids, "Tokenizer.decode: ids", std::numeric_limits<int32_t>::max(),
                                         std::numeric_limits<int32_t>::min(), /*allow_empty=*/true);
            return tok.decode(t.ids);
          },
          "ids"_a, nb::sig("def decode(self, ids: numpy.typing.ArrayLike) -> str"), "The text of token ids; control ids (BOS, EOS) decode to nothing.")
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_id", &Tokenizer::bos_id, "The BOS id, -1 when the tokenizer has none.");
}

}  // namespace attnlab::python
