// Running an `attnlab compare` grid (docs/compare.md "Running, stopping, resuming"; across
// processes: docs/distributed.md): every check of the grid and of what --out holds, before any cell
// trains, on every entry point; then the cells this process runs (all of them; every N-th with
// --cell I/N; under mpirun, those rank 0 hands it, cell_runner.cpp for each); then the grid's
// documents (documents.cpp), written by one process once every cell is done.
#include <cstdio>
#include <filesystem>
#include <map>

#include "attnlab/distributed.h"
#include "core/distributed.h"
#include "core/error.h"
#include "core/files.h"
#include "core/stop_signals.h"
#include "data/files.h"
#include "experiment/compare.h"
#include "experiment/compare/cell_runner.h"
#include "experiment/compare/common.h"
#include "experiment/compare/documents.h"
#include "experiment/compare/plan.h"
#include "experiment/compare/provenance.h"

namespace attnlab {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace compare;

namespace {

// The runs of the plan without a result.json, as "a, b, c" (at most 10 named).
std::string missing_runs(const std::vector<Run>& runs, const fs::path& runs_dir, size_t* count) {
  std::string list;
  *count = 0;
  for (const auto& r : runs) {
    if (fs::exists(runs_dir / r.id / "result.json")) continue;
    if (++*count <= 10) list += (list.empty() ? "" : ", ") + r.id;
  }
  if (*count > 10) list += ", ... (" + std::to_string(*count - 10) + " more)";
  return list;
}

// The option combinations no entry point accepts (the same on every rank).
void check_options(const CompareOptions& opts, int ranks) {
  const bool cell = opts.cell_count > 0;
  if (cell && (opts.cell_index < 0 || opts.cell_index >= opts.cell_count))
    fail("compare --cell ", opts.cell_index, "/", opts.cell_count, ": the cell index must be 0 .. ", opts.cell_count - 1,
         " (a Slurm array --array=0-", opts.cell_count - 1, " gives SLURM_ARRAY_TASK_ID in that range)");
  if (opts.merge && opts.summarize_only) fail("compare: --merge and --summarize exclude each other (--merge needs every run finished)");
  if (cell && (opts.merge || opts.summarize_only)) fail("compare: --cell trains its cells; --merge and --summarize train nothing: run them apart");
  if (opts.merge && opts.resume) fail("compare --merge trains nothing: it takes no --resume");
  if (ranks > 1) {
    if (cell)
      fail("compare --cell is for batch arrays without MPI; under mpirun (", ranks,
           " processes) the processes share the cells already: leave --cell out");
    if (opts.merge || opts.summarize_only)
      fail("compare ", opts.merge ? "--merge" : "--summarize", " writes the summary alone: run it as one process, not under mpirun (",
           ranks, " processes)");
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content) {
  data_files::write_file_atomically(path, {content}, "compare output");
}

namespace {
bool run_compare_steps(const Grid& grid, const CompareOptions& opts);
}

// Ctrl-C / SIGTERM for the whole grid (core/stop_signals.h): training stops with a checkpoint (the
// trainer's own scope nests in this one), an evaluation at its next batch; either way the grid
// exits with the command that continues it. A run's evaluation starts again on --resume.
bool run_compare(const Grid& grid, const CompareOptions& opts) {
  StopSignals signals;
  try {
    return run_compare_steps(grid, opts);
  } catch (const Interrupted& e) {
    std::printf("\ncompare: %s; the run's training is kept and its evaluation starts again on resume: continue with `%s`\n",
                e.what(), resume_command(opts.grid_path, opts.out).c_str());
    std::fflush(stdout);
    return false;
  }
}

namespace {
bool run_compare_steps(const Grid& grid, const CompareOptions& opts) {
  const int ranks = distributed::size(), rank = distributed::rank();
  const bool cell_mode = opts.cell_count > 0;
  const bool trains = !opts.summarize_only && !opts.merge;
  const fs::path out(opts.out);
  const fs::path runs_dir = out / "runs";

  // Every check before any process writes a run: a bad grid, a refused --out or a run of another
  // grid stops every process of the job with the same message (rank 0 prints it).
  std::vector<Run> runs;
  std::vector<size_t> cells;  // the runs this process may run, in the plan's order
  DirLock lock;
  std::string error;
  try {
    check_options(opts, ranks);
    if (!trains) {
      if (!fs::is_directory(runs_dir))
        fail("compare ", opts.merge ? "--merge" : "--summarize", ": ", runs_dir.string(), " does not exist (no runs to summarize)");
    }
    runs = plan_runs(grid, runs_dir);
    for (size_t i = 0; i < runs.size(); ++i)
      if (!cell_mode || i % (size_t)opts.cell_count == (size_t)opts.cell_index) cells.push_back(i);
    if (trains && !opts.resume) {
      // A fresh grid: --out holds no runs (with --cell: none of this cell's, since the other cells
      // of an array write theirs beside it at the same time).
      if (!cell_mode && fs::exists(runs_dir) && !fs::is_empty(runs_dir))
        fail("compare: ", runs_dir.string(), " already holds runs: pass --resume to continue that grid, or choose another --out");
      for (size_t i : cells)
        if (cell_mode && fs::exists(runs_dir / runs[i].id))
          fail("compare --cell ", opts.cell_index, "/", opts.cell_count, ": ", (runs_dir / runs[i].id).string(),
               " exists already: pass --resume to continue this cell, or choose another --out");
    }
    // The data every run used (docs/compare.md, "Provenance"): a run finished or started on other
    // data than the grid names now (a re-prepared data directory) is refused here, all of them
    // named; nothing is averaged across data.
    std::map<std::string, json> data_by_files;
    std::string mixed;
    for (const auto& r : runs)
      for (const char* record : {"result.json", "provenance.json"}) {
        if (!grid.language_model) break;  // a task-only grid generates its data
        const fs::path path = runs_dir / r.id / record;
        if (!fs::exists(path)) continue;
        json stored;
        try {
          stored = read_json_file(path.string(), "compare: run record");
        } catch (const Error& e) {
          fail(e.what(), ": delete ", (runs_dir / r.id).string(), " to redo this run");
        }
        const std::string key = r.cfg.data.train + "\n" + r.cfg.data.val + "\n" + r.cfg.data.tokenizer;
        auto it = data_by_files.find(key);
        if (it == data_by_files.end()) it = data_by_files.emplace(key, data_identity(r.cfg)).first;
        const std::string d = data_differences(stored, it->second);
        if (!d.empty()) mixed += "\n  " + path.string() + ": " + d;
        break;  // a finished run's result.json is its record
      }
    if (!mixed.empty())
      fail("compare: runs in ", opts.out, " were made on other data than this grid's data now (", runs[0].cfg.data.dir,
           "; the directory was prepared again since?):", mixed,
           "\ndelete those run directories to redo them on this data, restore the data they used, or use another --out");
    // A finished run of another configuration or other evaluations than the grid gives it now.
    for (const auto& r : runs) check_finished_run(grid, r, runs_dir);
    if (opts.merge) {
      size_t count = 0;
      const std::string missing = missing_runs(runs, runs_dir, &count);
      if (count > 0)
        fail("compare --merge: ", count, " of ", runs.size(), " runs of ", opts.out, " have not finished (no result.json): ", missing,
             "; run their cells (--cell I/N, or `", resume_command(opts.grid_path, opts.out), "`) first");
    }
    if (trains) {
      fs::create_directories(runs_dir);
      // One training compare per --out: a plain compare, or rank 0 of an mpirun job for all its
      // ranks, takes it exclusively; the cells of an array share it (each run's trainer also locks
      // its own run directory, so two processes never train one run). A summary only reads
      // finished runs and renames its documents into place, so it takes none.
      if (cell_mode) lock = DirLock::acquire_shared(out.string(), "compare --out", "attnlab compare --cell");
      else if (rank == 0) lock = DirLock::acquire(out.string(), "compare --out", "attnlab compare");
    }
  } catch (const Error& e) {
    error = e.what();
  }
  error = distributed::first_error(error);
  if (!error.empty()) {
    if (ranks > 1) throw JobError(error);
    throw Error(error);
  }

  if (rank == 0 && trains) {
    const size_t tokens_per_step = (size_t)runs[0].cfg.train.batch_size * runs[0].cfg.model.seq_len * runs[0].cfg.train.grad_accum;
    for (const auto& r : runs) {
      if (r.budget_factor > 0 || !grid.language_model) continue;  // a [budget] run trains other tokens by design
      const size_t t = (size_t)r.cfg.train.batch_size * r.cfg.model.seq_len * r.cfg.train.grad_accum;
      if (t != tokens_per_step || r.cfg.train.steps != runs[0].cfg.train.steps)
        std::printf("compare: warning: %s trains %zu tokens, %s %zu: not equal tokens\n", r.id.c_str(), t * r.cfg.train.steps,
                    runs[0].id.c_str(), tokens_per_step * runs[0].cfg.train.steps);
    }
    if (ranks > 1 && !opts.quiet)
      std::printf("compare: %zu runs across %d processes (rank 0 hands them out and trains too); one line per finished run\n",
                  runs.size(), ranks);
    std::fflush(stdout);
  }

  if (trains) {
    // The cells: in order in one process, or handed out by rank 0 as the processes finish theirs.
    std::string failure;
    distributed::ItemEnd worst = distributed::ItemEnd::none;
    {
      CellRunner runner(grid, opts, runs, cells, ranks > 1, ranks > 1 ? "rank " + std::to_string(rank) : "");
      distributed::ItemQueue queue(cells);
      distributed::ItemEnd previous = distributed::ItemEnd::none;
      while (const auto i = queue.next(previous)) {
        try {
          previous = runner.run(*i) == CellEnd::done ? distributed::ItemEnd::done : distributed::ItemEnd::stopped;
        } catch (const std::exception& e) {
          failure = e.what();
          previous = distributed::ItemEnd::failed;
          if (ranks > 1 && rank == 0) {
            std::printf("compare: stopping after an error: waiting for the runs in progress on the other processes\n");
            std::fflush(stdout);
          }
        }
      }
      worst = queue.finish();
    }
    if (!failure.empty()) {
      if (ranks > 1 && rank == 0)
        fail(failure, "\n(the other processes finished their runs; the runs finished are kept: fix the cause and continue with `",
             resume_command(opts.grid_path, opts.out), "`)");
      throw Error(ranks > 1 ? "rank " + std::to_string(rank) + ": " + failure : failure);
    }
    if (rank != 0) return worst != distributed::ItemEnd::stopped;
    if (worst == distributed::ItemEnd::failed)
      fail("compare: a run failed on another process (its error is printed above); the runs finished are kept: fix its cause and "
           "continue with `", resume_command(opts.grid_path, opts.out), "`");
    if (worst == distributed::ItemEnd::stopped) {
      if (ranks > 1) std::printf("compare: stopped; continue with `%s`\n", resume_command(opts.grid_path, opts.out).c_str());
      return false;
    }
    if (cell_mode) {
      if (!opts.quiet)
        std::printf("compare: cell %d/%d done (%zu of %zu runs); once every cell is done: %s\n", opts.cell_index, opts.cell_count,
                    cells.size(), runs.size(), resume_command(opts.grid_path, opts.out, "--merge").c_str());
      return true;
    }
    size_t count = 0;
    const std::string missing = missing_runs(runs, runs_dir, &count);
    if (count > 0)  // a process of the job lost its runs without saying so
      fail("compare: ", count, " of ", runs.size(), " runs have no result.json after every process finished: ", missing,
           "; continue with `", resume_command(opts.grid_path, opts.out), "`");
  }
  write_grid_documents(grid, runs, opts);
  return true;
}
}  // namespace

}  // namespace attnlab
