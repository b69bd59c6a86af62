// attnlab data: `attnlab prepare` — text files to tokenizer + train/val shards (docs/data.md).
#include "data/prepare.h"

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/files.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/files.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace attnlab {

namespace {

// A line-aligned piece of one document: the unit of parallel encoding and of the train/val split.
struct Piece {
  uint32_t file;
  size_t begin, size;    // byte range in that file's text, blank separator lines excluded
  bool starts_document;  // first piece of its document
  size_t document = 0;   // index of its document over all inputs
  bool val = false;
};

// Offset of the first byte that is not part of well-formed UTF-8, or npos.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c >> 5) == 0x6) { len = 2; cp = c & 0x1F; }
    else if ((c >> 4) == 0xE) { len = 3; cp = c & 0x0F; }
    else if ((c >> 3) == 0x1E) { len = 4; cp = c & 0x07; }
    else return i;
    if (i + len > s.size()) return i;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char d = s[i + k];
      if ((d >> 6) != 0x2) return i;
      cp = (cp << 6) | (d & 0x3F);
    }
    // overlong forms, surrogates and values past U+10FFFF are not UTF-8 either
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

// Documents are runs of non-blank lines; a document longer than kPrepareMaxPieceBytes is cut
// before a line, and a single longer line before a single space between words. Both cuts leave
// the tokens unchanged: the tokenizer has no dummy prefix and never merges across a newline or
// into a following word (tokenizer.h), so encoding the pieces and concatenating equals encoding
// the document.
void cut_pieces(std::string_view text, uint32_t file, std::vector<Piece>& out, size_t& documents) {
  size_t pos = 0, begin = 0;
  bool in_document = false, starts_document = false;
  auto close = [&](size_t end) {
    if (end <= begin) return;
    if (starts_document) ++documents;
    out.push_back({file, begin, end - begin, starts_document, documents - 1});
  };
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string_view::npos ? text.size() : end + 1;
    if (is_blank(text.substr(pos, end - pos))) {
      if (in_document) close(pos);
      in_document = false;
      pos = end;
      continue;
    }
    if (!in_document) {
      begin = pos;
      in_document = starts_document = true;
    } else if (end - begin > kPrepareMaxPieceBytes && pos > begin) {
      close(pos);
      begin = pos;
      starts_document = false;
    }
    while (end - begin > kPrepareMaxPieceBytes) {  // one line longer than a piece
      size_t cut = 0;
      for (size_t c = begin + kPrepareMaxPieceBytes; c > begin + 1; --c)
        if (text[c] == ' ' && text[c - 1] != ' ' && c + 1 < end && text[c + 1] != ' ') { cut = c; break; }
      if (cut == 0) break;  // no space to cut at: keep the line whole
      close(cut);
      begin = cut;
      starts_document = false;
    }
    pos = end;
  }
  if (in_document) close(text.size());
}

constexpr const char* kStagingPrefix = ".prepare-staging.";

// Staging directories of prepare runs that were killed (their pid is gone).
void remove_stale_staging(const std::filesystem::path& out) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kStagingPrefix, 0) != 0) continue;
    const std::string pid = name.substr(std::strlen(kStagingPrefix));
    if (pid.empty() || pid.size() > 18 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (::kill(pid_t(std::atol(pid.c_str())), 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
  }
  remove_stale_temps(out.string());
}

std::string megabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

// The group file of one input: one non-empty group name per document, in document order.
std::vector<std::string> read_group_names(const std::string& path, const std::string& input, size_t documents) {
  const std::string text = data_files::read_text_file(path, "prepare --groups file");
  std::vector<std::string> names;
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string name = text.substr(pos, end - pos);
    ++line;
    while (!name.empty() && (name.back() == '\r' || name.back() == ' ' || name.back() == '\t')) name.pop_back();
    size_t lead = 0;
    while (lead < name.size() && (name[lead] == ' ' || name[lead] == '\t')) ++lead;
    name.erase(0, lead);
    if (name.empty())
      fail("prepare --groups ", path, " line ", line, ": empty; every document needs a group name (one per line)");
    if (find_invalid_utf8(name) != std::string_view::npos)
      fail("prepare --groups ", path, " line ", line, ": not UTF-8 text");
    names.push_back(std::move(name));
    pos = end + 1;
  }
  if (names.size() != documents)
    fail("prepare --groups ", path, ": ", names.size(), " group names for the ", documents, " documents of ", input,
         "; give one line per document, in order (documents are separated by blank lines)");
  return names;
}

// Words of a text for the n-gram overlap: split at whitespace, ASCII letters lower-cased, ASCII
// punctuation dropped (so "LORD," and "Lord" are one word), other bytes kept; hashed.
void word_hashes(std::string_view text, std::vector<uint64_t>& out) {
  out.clear();
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    out.push_back(std::hash<std::string>{}(word));
    word.clear();
  };
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') flush();
    else if (c >= 0x80) word.push_back(ch);
    else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')) word.push_back(ch);
    else if (c >= 'A' && c <= 'Z') word.push_back(char(c - 'A' + 'a'));
  }
  flush();
}

// Calls f with a hash of every run of n consecutive words (a polynomial rolling hash of the word
// hashes, exact up to 64-bit collisions).
template <class F>
void for_each_ngram(const std::vector<uint64_t>& words, int n, F&& f) {
  if (n < 1 || words.size() < size_t(n)) return;
  constexpr uint64_t kBase = 0x9E3779B97F4A7C15ULL;
  uint64_t top = 1;  // kBase^(n-1)
  for (int i = 1; i < n; ++i) top *= kBase;
  uint64_t h = 0;
  for (int i = 0; i < n; ++i) h = h * kBase + words[size_t(i)];
  f(h);
  for (size_t i = size_t(n); i < words.size(); ++i) {
    h = (h - words[i - size_t(n)] * top) * kBase + words[i];
    f(h);
  }
}

}  // namespace

const char* split_unit_name(SplitUnit unit) {
  switch (unit) {
    case SplitUnit::documents: return "documents";
    case SplitUnit::groups: return "groups";
    case SplitUnit::pieces: return "pieces";
  }
  return "?";
}

NgramOverlap ngram_overlap(const std::vector<std::string_view>& held_out, const std::vector<std::string_view>& train, int n) {
  NgramOverlap result;
  result.n = n;
  std::vector<uint64_t> words, seen;
  for (const std::string_view text : train) {
    word_hashes(text, words);
    for_each_ngram(words, n, [&](uint64_t h) { seen.push_back(h); });
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (const std::string_view text : held_out) {
    word_hashes(text, words);
    for_each_ngram(words, n, [&](uint64_t h) {
      ++result.held_out_ngrams;
      result.found_in_train += std::binary_search(seen.begin(), seen.end(), h);
    });
  }
  return result;
}

void prepare(const PrepareOptions& options) {
  namespace fs = std::filesystem;
  const bool verbose = options.verbose;
  auto say = [&](const char* fmt, auto... args) {
    if (!verbose) return;
    std::printf(fmt, args...);
    std::fflush(stdout);
  };

  if (options.inputs.empty()) fail("prepare: no input files; pass one or more text files with --input FILE");
  if (options.out_dir.empty()) fail("prepare: no output directory; pass --out DIR");
  if (options.vocab_size > 65536 || options.vocab_size < 1)
    fail("prepare: vocab size ", options.vocab_size, " is out of range; token shards hold uint16 ids, so use 260..65536");
  if (!(options.val_fraction > 0 && options.val_fraction <= 0.5))
    fail("prepare: val fraction ", options.val_fraction, " is out of range; use a value in (0, 0.5], e.g. 0.02");

  // 1. read and check the inputs before spending time on training
  std::vector<std::string> texts;
  size_t total_bytes = 0;
  for (const auto& path : options.inputs) {
    texts.push_back(data_files::read_text_file(path, "prepare input"));
    const std::string& t = texts.back();
    const size_t bad = find_invalid_utf8(t);
    if (bad != std::string_view::npos)
      fail("prepare input ", path, ": invalid UTF-8 at byte ", bad, " (line ",
           1 + std::count(t.begin(), t.begin() + std::ptrdiff_t(bad), '\n'),
           "); convert the file to UTF-8 first, e.g. `iconv -f latin1 -t utf-8`");
    if (is_blank(t)) fail("prepare input ", path, ": holds only blank lines; give a file with text in it");
    total_bytes += t.size();
  }
  say("prepare: %zu input file%s, %s\n", texts.size(), texts.size() == 1 ? "" : "s", megabytes(double(total_bytes)).c_str());

  // 2. documents, pieces and the train/val split (before training: a bad input fails fast)
  std::vector<Piece> pieces;
  std::vector<size_t> documents_per_file(texts.size(), 0);
  size_t documents = 0;
  for (size_t f = 0; f < texts.size(); ++f) {
    const size_t before = documents;
    cut_pieces(texts[f], uint32_t(f), pieces, documents);
    documents_per_file[f] = documents - before;
  }
  size_t piece_bytes = 0;
  for (const auto& p : pieces) piece_bytes += p.size;
  if (pieces.size() < 2)
    fail("prepare input ", options.inputs.front(), ": the text is a single document of ", piece_bytes,
         " bytes, and val.bin needs a document of its own; separate documents with blank lines or give more text");

  // The units the split draws whole, and the unit of each piece.
  const SplitUnit split = options.split;
  std::vector<size_t> unit_of_piece(pieces.size());
  std::vector<std::string> group_names;  // split = groups: the name of each unit
  if (split != SplitUnit::groups && (!options.group_files.empty() || !options.val_groups.empty()))
    fail("prepare: --groups and --val-groups need --split groups (the split is by ", split_unit_name(split), ")");
  if (split == SplitUnit::pieces) {
    std::iota(unit_of_piece.begin(), unit_of_piece.end(), size_t(0));
  } else if (split == SplitUnit::documents) {
    if (documents < 2)
      fail("prepare input ", options.inputs.front(), ": the text is a single document of ", piece_bytes,
           " bytes, and the documents split needs two; separate documents with blank lines or pass --split pieces");
    for (size_t i = 0; i < pieces.size(); ++i) unit_of_piece[i] = pieces[i].document;
  } else {
    if (options.group_files.size() != options.inputs.size())
      fail("prepare --split groups: ", options.group_files.size(), " --groups file", options.group_files.size() == 1 ? "" : "s",
           " for ", options.inputs.size(), " --input file", options.inputs.size() == 1 ? "" : "s",
           "; give one group file per input, in the same order");
    std::vector<size_t> group_of_document;
    std::map<std::string, size_t> group_index;
    for (size_t f = 0; f < texts.size(); ++f)
      for (std::string& name : read_group_names(options.group_files[f], options.inputs[f], documents_per_file[f])) {
        const auto [it, added] = group_index.emplace(name, group_names.size());
        if (added) group_names.push_back(std::move(name));
        group_of_document.push_back(it->second);
      }
    if (group_names.size() < 2)
      fail("prepare --split groups: every document is in the group '", group_names.front(),
           "'; the split needs at least two groups");
    for (size_t i = 0; i < pieces.size(); ++i) unit_of_piece[i] = group_of_document[pieces[i].document];
  }
  const size_t units = split == SplitUnit::pieces ? pieces.size() : split == SplitUnit::documents ? documents : group_names.size();
  std::vector<size_t> unit_bytes(units, 0);
  for (size_t i = 0; i < pieces.size(); ++i) unit_bytes[unit_of_piece[i]] += pieces[i].size;
  std::vector<char> unit_val(units, 0);
  {
    // A seeded random order of the units; the first ones, up to val_fraction of the bytes, are
    // val. At least one unit goes to each side.
    std::vector<size_t> order(units);
    std::iota(order.begin(), order.end(), size_t(0));
    Rng rng(options.seed ^ 0x76616c6964617465ULL);  // "validate": decorrelated from the tokenizer sample
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    const double target = options.val_fraction * double(piece_bytes);
    size_t val_bytes = 0, taken = 0;
    if (split == SplitUnit::pieces) {
      // (the split of versions before 2026-12, kept bit for bit: it reproduces their shards)
      for (size_t k = 0; k + 1 < order.size() && double(val_bytes) < target; ++k) {
        unit_val[order[k]] = 1;
        val_bytes += unit_bytes[order[k]];
      }
    } else if (!options.val_groups.empty()) {
      std::map<std::string, size_t> index;
      for (size_t g = 0; g < group_names.size(); ++g) index.emplace(group_names[g], g);
      for (const std::string& name : options.val_groups) {
        const auto it = index.find(name);
        if (it == index.end())
          fail("prepare --val-groups: no group is named '", name, "' in the group files (", group_names.size(),
               " groups, e.g. '", group_names.front(), "')");
        if (unit_val[it->second]) fail("prepare --val-groups: '", name, "' is given twice");
        unit_val[it->second] = 1;
        ++taken;
      }
      if (taken == units) fail("prepare --val-groups: every group is held out, and train.bin needs one");
    } else {
      // Seeded passes over the units with a growing size cap: first units of at most a quarter of
      // the target (val is then at least four units, overshoots the target by less than a
      // quarter, and one long book cannot be most of val, which keeps val's mix of sources close
      // to train's); if those run out, units of up to 1.5× the target, then up to half the text.
      for (const double cap : {0.25 * target, 1.5 * target, 0.5 * double(piece_bytes)})
        for (size_t k = 0; k < order.size() && double(val_bytes) < target && taken + 1 < units; ++k) {
          if (unit_val[order[k]] || double(unit_bytes[order[k]]) > cap) continue;
          unit_val[order[k]] = 1;
          val_bytes += unit_bytes[order[k]];
          ++taken;
        }
      if (taken == 0)
        fail("prepare: each of the ", units, " ", split_unit_name(split), " holds more than half of the ", piece_bytes,
             " bytes; holding one out would leave less text for training than for validation. Give more ",
             split_unit_name(split), " or pass --split pieces");
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) pieces[i].val = unit_val[unit_of_piece[i]] != 0;
  std::vector<std::string> held_out_groups;
  for (size_t g = 0; g < group_names.size(); ++g)
    if (unit_val[g]) held_out_groups.push_back(group_names[g]);
  std::sort(held_out_groups.begin(), held_out_groups.end());
  const size_t val_units = size_t(std::count(unit_val.begin(), unit_val.end(), char(1)));
  {
    size_t held = 0;
    for (const auto& p : pieces) held += p.val ? p.size : 0;
    std::string names;
    for (size_t k = 0; k < held_out_groups.size() && k < 12; ++k) names += (k ? ", " : ": ") + held_out_groups[k];
    if (held_out_groups.size() > 12) names += ", ...";
    say("prepare: split by %s: %zu of %zu held out (%.2f%% of the bytes)%s\n", split_unit_name(split), val_units, units,
        100.0 * double(held) / double(piece_bytes), names.c_str());
  }

  // Contamination: how much of val's text also occurs in train, word for word.
  std::vector<NgramOverlap> overlaps;
  {
    std::vector<std::string_view> val_text, train_text;
    for (const auto& p : pieces)
      (p.val ? val_text : train_text).push_back(std::string_view(texts[p.file]).substr(p.begin, p.size));
    for (const int n : {8, 13}) overlaps.push_back(ngram_overlap(val_text, train_text, n));
    say("prepare: val n-grams also in train: %.2f%% of 8-word, %.2f%% of 13-word (contamination check)\n",
        100.0 * overlaps[0].share(), 100.0 * overlaps[1].share());
  }

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec || !fs::is_directory(options.out_dir))
    fail("prepare: cannot create the output directory ", options.out_dir, " (", ec ? ec.message() : "not a directory",
         ")");
  const fs::path out(options.out_dir);
  // Every output goes into a staging directory inside out_dir first and is renamed into place
  // only when the whole set is written: a failure (ENOSPC, a kill) leaves the previous set intact
  // instead of a new tokenizer beside old shards. One prepare per directory at a time.
  const DirLock lock = DirLock::acquire(options.out_dir, "prepare --out", "attnlab prepare");
  remove_stale_staging(out);
  const fs::path staging = out / (std::string(kStagingPrefix) + std::to_string(long(::getpid())));
  fs::remove_all(staging, ec);
  fs::create_directory(staging, ec);
  if (ec) fail("prepare: cannot create the staging directory ", staging.string(), " (", ec.message(), ")");
  struct RemoveOnFailure {
    fs::path dir;
    bool armed = true;
    ~RemoveOnFailure() {
      std::error_code e;
      if (armed) fs::remove_all(dir, e);
    }
  } cleanup{staging};

  // 3. the tokenizer: trained on train's text only, so that nothing of val informs the model (the
  // pieces split keeps the tokenizer of versions before 2026-12, trained on all of the text)
  Timer timer;
  say("prepare: training a BPE tokenizer, vocab %d, on at most %s of %s lines ...\n", options.vocab_size,
      megabytes(double(kTokenizerTrainingBytes)).c_str(), split == SplitUnit::pieces ? "all" : "train's");
  const std::string model_path = (staging / "tokenizer.model").string();
  if (split == SplitUnit::pieces) {
    train_tokenizer(options.inputs, (staging / "tokenizer").string(), options.vocab_size, options.seed);
  } else {
    std::vector<std::string_view> train_text;
    for (const auto& p : pieces)
      if (!p.val) train_text.push_back(std::string_view(texts[p.file]).substr(p.begin, p.size));
    train_tokenizer_on_text(train_text, "the training side of " + options.inputs.front() +
                                            (options.inputs.size() > 1 ? " and the other inputs" : ""),
                            (staging / "tokenizer").string(), options.vocab_size, options.seed);
  }
  const Tokenizer tokenizer = Tokenizer::load(model_path);
  say("prepare: %s in %.1f s\n", (out / "tokenizer.model").string().c_str(), timer.seconds());

  // 4. encode in parallel (SentencePiece runs at a few MB/s per thread). Errors inside the
  // parallel region are carried out of it: an exception must not cross an OpenMP boundary.
  timer.reset();
  const int threads = omp_get_max_threads();
  say("prepare: encoding %zu pieces of %zu documents on %d thread%s ...\n", pieces.size(),
      std::accumulate(documents_per_file.begin(), documents_per_file.end(), size_t(0)), threads,
      threads == 1 ? "" : "s");
  std::vector<std::vector<int>> encoded(pieces.size());
  std::atomic<size_t> bytes_done{0};
  std::atomic<size_t> next_report{piece_bytes / 4};
  std::string error;
#pragma omp parallel for schedule(dynamic, 8)
  for (size_t i = 0; i < pieces.size(); ++i) {
    try {
      const Piece& p = pieces[i];
      tokenizer.encode_into(std::string_view(texts[p.file]).substr(p.begin, p.size), encoded[i]);
      const size_t done = bytes_done.fetch_add(p.size) + p.size;
      if (verbose && done >= next_report) {
#pragma omp critical(attnlab_prepare_progress)
        if (done >= next_report && done < piece_bytes) {
          say("prepare:   %3.0f%% (%.1f s)\n", 100.0 * double(done) / double(piece_bytes), timer.seconds());
          next_report.store(done + piece_bytes / 4);
        }
      }
    } catch (const std::exception& e) {
#pragma omp critical(attnlab_prepare_error)
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw Error(error);
  const double encode_seconds = timer.seconds();

  // 5. assemble the shards in input order
  std::vector<uint16_t> train, val;
  size_t train_bytes = 0, val_bytes = 0, train_pieces = 0, val_pieces = 0;
  {
    size_t train_tokens = 0, val_tokens = 0;
    for (size_t i = 0; i < pieces.size(); ++i)
      (pieces[i].val ? val_tokens : train_tokens) += encoded[i].size() + 1;
    train.reserve(train_tokens);  // (an upper bound: not every piece gets a bos)
    val.reserve(val_tokens);
  }
  const int bos = tokenizer.bos_id();
  // bos marks a break in the text: a document start, or a piece whose predecessor in its
  // document went to the other shard. Between two bos ids a shard holds contiguous input text.
  auto starts_context = [&](size_t i) { return pieces[i].starts_document || pieces[i - 1].val != pieces[i].val; };
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    std::vector<uint16_t>& dst = p.val ? val : train;
    (p.val ? val_bytes : train_bytes) += p.size;
    ++(p.val ? val_pieces : train_pieces);
    if (starts_context(i)) dst.push_back(uint16_t(bos));
    for (int id : encoded[i]) {
      ATTNLAB_CHECK(id >= 0 && id < 65536, "token id out of the uint16 range");
      dst.push_back(uint16_t(id));
    }
    std::vector<int>().swap(encoded[i]);  // free as we go: the int ids are twice the shard's size
  }
  const size_t total_tokens = train.size() + val.size();
  say("prepare: %zu tokens in %.1f s (%.2f MB/s, %.2f bytes per token)\n", total_tokens, encode_seconds,
      double(piece_bytes) / 1e6 / std::max(encode_seconds, 1e-9), double(piece_bytes) / double(std::max<size_t>(total_tokens, 1)));

  // 6. write everything into the staging directory; prepare.json last, as the record of a finished run
  const std::string train_path = (out / "train.bin").string(), val_path = (out / "val.bin").string();
  write_shard((staging / "train.bin").string(), train.data(), train.size());
  write_shard((staging / "val.bin").string(), val.data(), val.size());

  nlohmann::ordered_json meta;
  meta["format"] = "attnlab-prepare";
  meta["version"] = 1;
  meta["inputs"] = nlohmann::ordered_json::array();
  std::vector<size_t> val_bytes_per_file(texts.size(), 0);
  for (const auto& p : pieces) val_bytes_per_file[p.file] += p.val ? p.size : 0;
  for (size_t f = 0; f < texts.size(); ++f)
    meta["inputs"].push_back({{"path", options.inputs[f]}, {"bytes", texts[f].size()}, {"documents", documents_per_file[f]},
                              {"val_bytes", val_bytes_per_file[f]}});
  meta["tokenizer"] = {{"file", "tokenizer.model"},
                       {"type", "sentencepiece-bpe"},
                       {"trained_on", split == SplitUnit::pieces ? "all text" : "train text"},
                       {"vocab_size", tokenizer.vocab_size()},
                       {"bos_id", tokenizer.bos_id()},
                       {"eos_id", tokenizer.eos_id()},
                       {"training_bytes_cap", kTokenizerTrainingBytes}};
  meta["seed"] = options.seed;
  meta["val_fraction"] = options.val_fraction;
  meta["max_piece_bytes"] = kPrepareMaxPieceBytes;
  {
    nlohmann::ordered_json record{{"unit", split_unit_name(split)}, {"units", units}, {"val_units", val_units}};
    if (split == SplitUnit::groups) {
      record["group_files"] = options.group_files;
      record["val_groups"] = held_out_groups;
      record["chosen"] = options.val_groups.empty() ? "seeded sample" : "--val-groups";
    }
    meta["split"] = record;
    nlohmann::ordered_json contamination = nlohmann::ordered_json::array();
    for (const NgramOverlap& o : overlaps)
      contamination.push_back({{"ngram_words", o.n}, {"val_ngrams", o.held_out_ngrams}, {"found_in_train", o.found_in_train},
                               {"share", o.share()}});
    meta["contamination"] = contamination;
  }
  meta["train"] = {{"file", "train.bin"}, {"tokens", train.size()}, {"bytes", train_bytes}, {"pieces", train_pieces}};
  meta["val"] = {{"file", "val.bin"}, {"tokens", val.size()}, {"bytes", val_bytes}, {"pieces", val_pieces}};
  const std::string json_path = (out / "prepare.json").string();
  data_files::write_file_atomically((staging / "prepare.json").string(), {meta.dump(2), "\n"}, "prepare record");

  // 7. switch the complete set in: the old prepare.json goes first (while the files are renamed
  // one by one the directory is not a finished set), the new one last.
  fs::remove(out / "prepare.json", ec);
  for (const char* name : {"tokenizer.model", "train.bin", "val.bin", "prepare.json"}) {
    fs::rename(staging / name, out / name, ec);
    if (ec) fail("prepare: cannot move ", (staging / name).string(), " into ", options.out_dir, " (", ec.message(), ")");
  }
  sync_directory(options.out_dir);
  fs::remove_all(staging, ec);
  cleanup.armed = false;
  say("prepare: wrote %s (%zu tokens, %s), %s (%zu tokens, %s), %s\n", train_path.c_str(), train.size(),
      megabytes(double(train_bytes)).c_str(), val_path.c_str(), val.size(), megabytes(double(val_bytes)).c_str(),
      json_path.c_str());
}

}  // namespace attnlab
