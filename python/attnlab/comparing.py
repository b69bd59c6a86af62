"""attnlab.compare: a comparison grid (variants × seeds at equal tokens, docs/compare.md) trained
by the engine, its summary as plain Python objects and, where pandas is installed, a DataFrame."""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Dict, List, Optional, Union

from . import _core
from .interrupt import stop_on_interrupt


@dataclasses.dataclass
class CompareResult:
    """A grid's summary (results.json beside it in the output directory).

    complete: every run finished (False: stopped early; the summary covers the runs finished).
    variants: one dict per variant in grid order: variant, baseline, n (finished seeds), params,
      val_loss_mean, val_loss_sd, val_loss_values, tokens_per_s_mean, diff (to the baseline;
      negative is better), ci95_low, ci95_high, p_value (Welch); NaN where a value does not exist.
    """
    complete: bool
    results_json: str
    variants: List[Dict[str, Any]]

    @property
    def frame(self):
        """The variants as a pandas DataFrame indexed by variant (None without pandas)."""
        try:
            import pandas as pd
        except ImportError:
            return None
        return pd.DataFrame(self.variants).set_index("variant")

    def best(self) -> Optional[str]:
        """The variant with the lowest mean validation loss (None before any run finished)."""
        done = [v for v in self.variants if v["n"] > 0 and not math.isnan(v["val_loss_mean"])]
        return min(done, key=lambda v: v["val_loss_mean"])["variant"] if done else None


def _result(d: Dict[str, Any]) -> CompareResult:
    return CompareResult(complete=d["complete"], results_json=d["results_json"], variants=d["variants"])


def compare(grid: Union[str, os.PathLike], out: Union[str, os.PathLike] = "runs/compare", resume: bool = False,
            report: bool = True, summarize_only: bool = False, stop_after_runs: Optional[int] = None,
            stop_after_steps: Optional[int] = None, quiet: bool = True) -> CompareResult:
    """Runs (or, with resume=True, continues) a comparison grid into `out` and returns its summary.

    grid: a grid file (TOML, docs/compare.md) or the grid's text itself (a string holding a newline).
    report: also write out/report.html. summarize_only: train nothing, summarise the runs finished.
    stop_after_runs / stop_after_steps: stop early (a later resume=True call continues).
    quiet=False prints the engine's progress lines. Ctrl-C stops the current run cleanly after its
    step; resume=True continues the grid.
    """
    is_text = isinstance(grid, str) and "\n" in grid
    with stop_on_interrupt():
        d = _core._compare(None if is_text else grid, grid if is_text else None, out, resume, report,
                           summarize_only, -1 if stop_after_runs is None else int(stop_after_runs),
                           -1 if stop_after_steps is None else int(stop_after_steps), quiet)
    return _result(d)


def read_compare_results(results_json: Union[str, os.PathLike]) -> CompareResult:
    """The summary of a results.json written by a compare (this package's or `attnlab compare`)."""
    return _result(_core._read_compare_results(results_json))
