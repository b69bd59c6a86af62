#!/usr/bin/python3
"""Plots of the long-context JSON reports (docs/long-context.md), one PNG per kind of report, one
line per checkpoint. Called by `attnlab eval --lengths ... --json F` and `attnlab task NAME --eval
--json F` after they write F (the PNG goes next to it, F with the suffix .png); also runnable by hand
to compare checkpoints:

    /usr/bin/python3 scripts/plot_long_context.py [-o OUT.png] REPORT.json [REPORT.json ...]

- `attnlab-length-eval` reports: loss vs length (multiples of T_train) over all positions and over
  positions >= T_train, and the loss per position bucket at the longest length.
- `attnlab-task-eval` reports (passkey, needle, mqar): strict accuracy, per-token accuracy and the
  answer log-probability vs length; for the needle, the lines average over depths and a length x
  depth heatmap of the per-token accuracy is added per checkpoint.

Without -o, each kind is written next to its first report (REPORT.json -> REPORT.png). Reports of
both kinds may be mixed (two PNGs; -o then applies to the first kind only and the other goes next to
its first report). The legend label is the report's file name (without .json) and its positional
scheme. Needs Debian's python3-matplotlib. Exit status 3 when matplotlib is missing (the CLI then
prints a note), 2 on a bad argument or an unknown format/version.
"""
import json
import math
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot_long_context.py: matplotlib is not installed (apt-get install python3-matplotlib)", file=sys.stderr)
    sys.exit(3)

FORMATS = {"attnlab-length-eval": 1, "attnlab-task-eval": 1}


def usage(msg):
    print("plot_long_context.py: %s\nusage: plot_long_context.py [-o OUT.png] REPORT.json [REPORT.json ...]" % msg,
          file=sys.stderr)
    sys.exit(2)


def nan(x):
    return float("nan") if x is None else x


def label(path, doc):
    name = os.path.basename(path)
    if name.endswith(".json"):
        name = name[:-5]
    return "%s (%s, T_train %d)" % (name, doc.get("pos", "?"), doc.get("train_len", 0))


STYLES = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--"), ("X", "-."), ("*", ":")]


def style(i):
    """Marker and line style of the i-th checkpoint, so that coinciding lines stay visible."""
    m, ls = STYLES[i % len(STYLES)]
    return {"marker": m, "linestyle": ls, "markersize": 7 - 1.5 * (i % 3)}


def png_next_to(path):
    root, ext = os.path.splitext(path)
    return (root if ext == ".json" else path) + ".png"


def log2_axis(ax, multiples):
    ax.set_xscale("log", base=2)
    ticks = sorted(set(m for m in multiples if m and m > 0))
    ax.set_xticks(ticks)
    ax.set_xticklabels(["%g×" % m for m in ticks])
    ax.minorticks_off()


def plot_lengths(reports, out):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    all_mult = []
    for i, (path, d) in enumerate(reports):
        lab = label(path, d)
        ls = [l for l in d["lengths"]]
        mult = [l["multiple"] for l in ls]
        all_mult += mult
        line, = axes[0].plot(mult, [nan(l["loss"]) for l in ls], label=lab, **style(i))
        axes[1].plot(mult, [nan(l.get("loss_beyond_train")) for l in ls], color=line.get_color(), label=lab, **style(i))
        app = [l for l in ls if l.get("applicable", True) and l.get("buckets")]
        if app:
            longest = max(app, key=lambda l: l["length"])
            T = d["train_len"]
            xs = [(b["start"] + b["end"]) / 2 / T for b in longest["buckets"]]
            axes[2].plot(xs, [nan(b["loss"]) for b in longest["buckets"]], color=line.get_color(), **style(i),
                         label="%s, length %g×" % (lab, longest["multiple"]))
    for ax in axes[:2]:
        log2_axis(ax, all_mult)
        ax.set_xlabel("evaluation length (multiples of T_train)")
        ax.set_ylabel("cross-entropy (nats/token)")
    axes[0].set_title("loss over all positions")
    axes[1].set_title("loss over positions ≥ T_train")
    axes[2].axvline(1, color="grey", lw=0.7, ls="--")
    axes[2].set_xlabel("position in the block (multiples of T_train, bucket centre)")
    axes[2].set_ylabel("cross-entropy (nats/token)")
    axes[2].set_title("loss per position bucket, longest length")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def mean_by_multiple(cells, key):
    """{multiple: mean of key over the applicable cells (depths)}, None when no cell applies."""
    acc = {}
    for c in cells:
        acc.setdefault(c["multiple"], []).append(c.get(key))
    res = {}
    for m, vs in acc.items():
        vs = [v for v in vs if v is not None]
        res[m] = sum(vs) / len(vs) if vs else None
    return res


def plot_tasks(reports, out):
    needles = [(p, d) for p, d in reports if d.get("task") == "needle"]
    rows = 2 if needles else 1
    ncols = max(3, len(needles))
    fig = plt.figure(figsize=(5 * ncols, 4.3 * rows))
    axes = [fig.add_subplot(rows, ncols, i + 1) for i in range(3)]
    panels = [("strict_accuracy", "strict accuracy (whole answer right)", "fraction of samples"),
              ("token_accuracy", "per-token accuracy of the answer", "fraction of answer tokens"),
              ("answer_logprob", "log-probability of the answer", "log p(answer) (nats, sum over its tokens)")]
    all_mult = []
    tasks = sorted(set(d.get("task", "?") for _, d in reports))
    for i, (path, d) in enumerate(reports):
        lab = label(path, d) + (" [%s]" % d.get("task") if len(tasks) > 1 else "")
        for ax, (key, _, _) in zip(axes, panels):
            m = mean_by_multiple(d["cells"], key)
            xs = sorted(m)
            all_mult += xs
            ax.plot(xs, [nan(m[x]) for x in xs], label=lab, **style(i))
    for ax, (key, title, ylabel) in zip(axes, panels):
        log2_axis(ax, all_mult)
        ax.set_xlabel("evaluation length (multiples of T_train)")
        ax.set_ylabel(ylabel)
        ax.set_title(title + (" (mean over depths)" if needles else ""))
        if key != "answer_logprob":
            ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for i, (path, d) in enumerate(needles):
        ax = fig.add_subplot(rows, ncols, ncols + i + 1)
        mults = sorted(set(c["multiple"] for c in d["cells"]))
        depths = sorted(set(c["depth"] for c in d["cells"] if c.get("depth") is not None))
        grid = [[float("nan")] * len(mults) for _ in depths]
        for c in d["cells"]:
            if c.get("depth") is None:
                continue
            grid[depths.index(c["depth"])][mults.index(c["multiple"])] = nan(c.get("token_accuracy"))
        im = ax.imshow(grid, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(mults)))
        ax.set_xticklabels(["%g×" % m for m in mults])
        ax.set_yticks(range(len(depths)))
        ax.set_yticklabels(["%g" % x for x in depths])
        ax.set_xlabel("evaluation length (multiples of T_train)")
        ax.set_ylabel("needle depth (fraction of the context)")
        ax.set_title("needle per-token accuracy: " + label(path, d), fontsize=9)
        for yi, row in enumerate(grid):
            for xi, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(xi, yi, "%.2f" % v, ha="center", va="center", fontsize=7,
                            color="white" if v < 0.5 else "black")
        fig.colorbar(im, ax=ax, label="fraction of answer tokens")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv):
    out, paths = None, []
    i = 0
    while i < len(argv):
        if argv[i] in ("-o", "--out"):
            if i + 1 >= len(argv):
                usage("-o needs a file name")
            out = argv[i + 1]
            i += 2
        elif argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            paths.append(argv[i])
            i += 1
    if not paths:
        usage("no report given")
    groups = {}
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            usage("cannot read %s: %s" % (p, e))
        fmt = d.get("format") if isinstance(d, dict) else None
        if fmt not in FORMATS or d.get("version") != FORMATS[fmt]:
            usage("%s is not an attnlab-length-eval or attnlab-task-eval version 1 report" % p)
        groups.setdefault(fmt, []).append((p, d))
    first = True
    for fmt in [f for f in FORMATS if f in groups]:
        reports = groups[fmt]
        target = out if (out and first) else png_next_to(reports[0][0])
        first = False
        (plot_lengths if fmt == "attnlab-length-eval" else plot_tasks)(reports, target)
        print("wrote %s" % target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
