#!/usr/bin/python3
"""Plots of `attnlab analyze`'s analysis.json (schema: docs/analysis.md), one PNG per diagnostic of
docs/mechanisms.md §8. Called by the CLI after it writes the JSON; also runnable by hand:

    /usr/bin/python3 scripts/plot_analysis.py DIR/analysis.json [OUT_DIR]

Needs Debian's python3-matplotlib. Exit status 3 when matplotlib is missing (the CLI then prints a
note), 2 on a bad argument or an unknown schema version.
"""
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("plot_analysis.py: matplotlib is not installed (apt-get install python3-matplotlib)", file=sys.stderr)
    sys.exit(3)

SUPPORTED_VERSION = 1


def nan(x):
    return float("nan") if x is None else x


def points(ax, x, values, errors, **style):
    """values at x with ±errors bars; without bars where there are no errors at all (analyze
    --bootstrap 0 writes null standard errors, and matplotlib 3.6's errorbar fails on all-NaN yerr)."""
    if all(e is None for e in errors):
        style.pop("capsize", None)
        style.setdefault("linestyle", "none" if style.pop("fmt", None) == "o" else "-")
        style.setdefault("marker", "o")
        ax.plot(list(x), [nan(v) for v in values], **style)
    else:
        ax.errorbar(list(x), [nan(v) for v in values], yerr=[nan(e) for e in errors], **style)


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)


def plot_attention(a, out, written):
    """§8.1: per layer, the head mean of cos(y, v), a_tt and vsim, with the head range."""
    layers = a["attention"]["layers"]
    x = [l["layer"] for l in layers]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = [("cos_yv", "cos(y_t, v_t), y before XSA", "cosine similarity (unitless)"),
              ("self", "self weight a_tt", "attention probability"),
              ("vsim", "value similarity: mean_{j<t} cos(v_t, v_j)", "cosine similarity (unitless)")]
    for ax, (key, title, ylabel) in zip(axes, panels):
        mean = [l[key]["mean"] for l in layers]
        lo = [l[key]["min"] for l in layers]
        hi = [l[key]["max"] for l in layers]
        ax.fill_between(x, lo, hi, alpha=0.25, label="head range (min..max)")
        ax.plot(x, mean, "o-", label="mean over heads")
        if key == "cos_yv" and any(l["cos_zv"] is not None for l in layers):
            zx = [l["layer"] for l in layers if l["cos_zv"] is not None]
            zm = [l["cos_zv"]["mean"] for l in layers if l["cos_zv"] is not None]
            ax.plot(zx, zm, "s--", label="cos(z_t, v_t), after XSA")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("layer (0-based)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_xticks(x)
        ax.legend(fontsize=8)
    fig.suptitle("§8.1 attention similarity bias, positions t ≥ 1, %d sequences × %d tokens" % (a["sequences"], a["seq_len"]))
    save(fig, out, "attention_similarity.png", written)


def plot_goat(a, out, written):
    g = a["goat"]
    layers = g["layers"]
    n = len(layers)
    # §8.2 rel(Δ) and its Fourier part
    fig, axes = plt.subplots(n, 2, figsize=(12, 3.2 * n), squeeze=False)
    for row, layer in zip(axes, layers):
        for head in layer["kv_heads"]:
            d = range(len(head["rel"]))
            row[0].plot(d, [nan(v) for v in head["rel"]], label="KV head %d" % head["kv_head"])
            row[1].plot(d, [nan(v) for v in head["fourier"]], label="KV head %d" % head["kv_head"])
        for ax, what in zip(row, ["rel(Δ) = Fourier part − slope·Δ", "Fourier part Σ_r A cos(ω_r Δ) + B sin(ω_r Δ)"]):
            ax.axvline(g["T_train"], color="grey", ls=":", lw=1, label="T_train")
            ax.set_xlabel("distance Δ = t_i − t_j (tokens)")
            ax.set_ylabel("log-prior (nats)")
            ax.set_title("layer %d: %s" % (layer["layer"], what), fontsize=9)
            ax.legend(fontsize=7)
    fig.suptitle("§8.2 GOAT relative prior up to 8·T_train")
    save(fig, out, "goat_prior.png", written)
    if not layers[0]["key_bias"]:
        return
    # §8.2 u(j), U(j) and the sink margin
    fig, axes = plt.subplots(n, 1, figsize=(8, 3.2 * n), squeeze=False)
    for (ax,), layer in zip(axes, layers):
        u = layer["u"]
        ax.plot(range(len(u)), u, "k--", lw=1, label="raw u(j) (shared)")
        for head in layer["kv_heads"]:
            ax.plot(range(len(head["U"])), head["U"],
                    label="U(j), KV head %d (sink margin %.3g)" % (head["kv_head"], head["sink_margin"]))
        ax.axvline(g["T_train"], color="grey", ls=":", lw=1, label="T_train")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel("key position j (tokens, symlog)")
        ax.set_ylabel("key profile (nats)")
        ax.set_title("layer %d: key profile U(j) = g·u(j) + b·[j = 0]" % layer["layer"], fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("§8.2 GOAT key profile and sink margin")
    save(fig, out, "goat_profile.png", written)
    # §8.2 slope against its init
    fig, ax = plt.subplots(figsize=(8, 3.5))
    labels, slope, init = [], [], []
    for layer in layers:
        for head in layer["kv_heads"]:
            labels.append("L%d/kv%d" % (layer["layer"], head["kv_head"]))
            slope.append(head["slope"])
            init.append(head["slope_init"])
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], init, width=0.4, label="init (%s: ALiBi slope)" % g["init"])
    ax.bar([x + 0.2 for x in xs], slope, width=0.4, label="learned softplus(ρ)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=45, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("recency slope (nats per token)")
    ax.set_xlabel("layer / KV head")
    ax.set_title("§8.2 GOAT recency slope against its init")
    ax.legend(fontsize=8)
    save(fig, out, "goat_slope.png", written)
    # §8.2 content against sink
    c = g.get("content_vs_sink")
    if c:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
        i = range(len(c["omega"]))
        ax1.plot(i, c["omega"], label="ω_i = max − min content logit")
        ax1.set_xlabel("query position i (tokens)")
        ax1.set_ylabel("content logit spread (nats)")
        ax1.set_title("layer %d: content logit spread" % c["layer"])
        ax1.legend(fontsize=8)
        ax2.plot(i, c["p0"], label="p_0 = a_i0 (first token)")
        ax2.plot(i, c["pmax"], label="p_max = max_j a_ij")
        ax2.plot(i, c["p_recent"], label="p_recent (last %d keys)" % c["recent_window"])
        ax2.set_xlabel("query position i (tokens)")
        ax2.set_ylabel("attention probability")
        ax2.set_title("layer %d: where the weight goes" % c["layer"])
        ax2.legend(fontsize=8)
        fig.suptitle("§8.2 content against sink, mean over heads and sequences")
        save(fig, out, "goat_content_vs_sink.png", written)


def plot_depth(a, out, written):
    d = a["depth"]
    streams = d["streams"]
    fig, axes = plt.subplots(1, len(streams), figsize=(6.5 * len(streams), 5), squeeze=False)
    for ax, s in zip(axes[0], streams):
        rows = s["rows"]
        mat = [[nan(w) for w in r["weights"]] for r in rows]
        im = ax.imshow(mat, aspect="auto", cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(d["columns"])))
        ax.set_xticklabels(d["columns"], rotation=45, fontsize=8)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(["%s (H %s)" % (r["label"], "n/a" if r["entropy_norm"] is None else "%.2f" % r["entropy_norm"])
                            for r in rows], fontsize=8)
        for y, r in enumerate(rows):
            for x, w in enumerate(r["weights"]):
                if w is not None:
                    ax.text(x, y, "%.2f" % w, ha="center", va="center", fontsize=7, color="white" if w < 0.6 else "black")
        ax.set_xlabel("history entry (candidate)")
        ax.set_ylabel("read (sublayer), normalised entropy H")
        ax.set_title("%s stream %d: mean depth weights" % (d["kind"], s["stream"]))
        fig.colorbar(im, ax=ax, label="depth weight (probability)")
    fig.suptitle("§8.3 depth maps (blank: no such candidate)")
    save(fig, out, "depth_maps.png", written)


def plot_streams(a, out, written):
    s = a["streams"]
    subs = s["sublayers"]
    n = s["n"]
    cols = min(len(subs), 4)
    rows = (len(subs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.9 * cols + 1, 3.6 * rows), squeeze=False, constrained_layout=True)
    for ax in axes.flat[len(subs):]:
        ax.axis("off")
    for ax, sub in zip(axes.flat, subs):
        im = ax.imshow(sub["res"], cmap="magma", vmin=0, vmax=1)
        ax.set_title("%s: mean res\npre %s\npost %s" % (sub["label"], " ".join("%.2f" % x for x in sub["pre"]),
                                                         " ".join("%.2f" % x for x in sub["post"])), fontsize=7)
        ax.set_xlabel("source stream u")
        ax.set_ylabel("target stream s")
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        if n <= 6:
            for y in range(n):
                for x in range(n):
                    ax.text(x, y, "%.2f" % sub["res"][y][x], ha="center", va="center", fontsize=7,
                            color="black" if sub["res"][y][x] > 0.5 else "white")
    fig.colorbar(im, ax=axes.ravel().tolist(), label="mixing weight M_su (unitless)")
    fig.suptitle("§8.3 %s mean maps per sublayer (X′_s = Σ_u M_su X_u + post_s·o)" % s["kind"])
    fig.savefig(os.path.join(out, "stream_maps.png"), dpi=110)
    plt.close(fig)
    written.append(os.path.join(out, "stream_maps.png"))
    g = s["composite_gain"]["by_depth"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([x["sublayer"] for x in g], [x["mean"] for x in g], "o-", label="mean over tokens")
    ax.plot([x["sublayer"] for x in g], [x["max"] for x in g], "s--", label="max over tokens")
    ax.axhline(1, color="grey", lw=0.5, label="doubly stochastic: 1")
    ax.set_xlabel("sublayer l (product res_l···res_1)")
    ax.set_ylabel("composite gain (unitless)")
    ax.set_title("§8.3 %s composite gain max(row, column abs. sum)" % s["kind"])
    ax.legend(fontsize=8)
    save(fig, out, "composite_gain.png", written)


def plot_cka(a, out, written):
    c = a["cka"]
    mats, titles = [], []
    if "within_stream" in c:
        for j, m in enumerate(c["within_stream"]):
            mats.append(m)
            titles.append("within stream %d: CKA(H_r, H_r')" % j)
    for st in c.get("streams", []):
        mats.append(st["matrix"])
        titles.append("%s: CKA(X_s, X_s')" % st["label"])
    extra = "entries_across_streams" in c
    k = len(mats) + (1 if extra else 0)
    fig, axes = plt.subplots(1, k, figsize=(4.6 * k, 4.2), squeeze=False)
    for ax, m, t in zip(axes[0], mats, titles):
        im = ax.imshow([[nan(x) for x in r] for r in m], cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(m)))
        ax.set_yticks(range(len(m)))
        if len(m) <= 10:
            for y, row in enumerate(m):
                for x, v in enumerate(row):
                    if v is not None:
                        ax.text(x, y, "%.2f" % v, ha="center", va="center", fontsize=7, color="black" if v > 0.6 else "white")
        ax.set_title(t, fontsize=9)
        ax.set_xlabel("history entry r (0 = e) / stream s")
        ax.set_ylabel("history entry r (0 = e) / stream s")
        fig.colorbar(im, ax=ax, label="linear CKA (unitless)")
    if extra:
        ax = axes[0][-1]
        ax.plot(range(len(c["entries_across_streams"])), c["entries_across_streams"], "o-", label="CKA(H⁰_r, H¹_r), entry r")
        ax.plot(range(1, len(c["reads_across_streams"]) + 1), c["reads_across_streams"], "s--", label="CKA(R⁰_l, R¹_l), read l")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("entry r / read l (last = read-out)")
        ax.set_xticks(range(len(c["reads_across_streams"]) + 1))
        ax.set_ylabel("linear CKA (unitless)")
        ax.set_title("DAR: the two streams against each other", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("§8.4 linear CKA on %d sampled tokens" % c["tokens"])
    save(fig, out, "cka.png", written)


def plot_rescue(a, out, written):
    """§8.5: the runs' losses and the rescue gain when one stream is patched, overall and read by read."""
    r = a["rescue"]
    n = r["streams"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    names = ["L_clean", "L_corr"] + ["L_patch(%d)" % s for s in range(n)]
    vals = [r["L_clean"], r["L_corr"]] + r["L_patch"]
    points(ax1, range(len(vals)), [v["value"] for v in vals], [v["se"] for v in vals], fmt="o", capsize=4)
    ax1.set_xticks(range(len(vals)))
    ax1.set_xticklabels(names, rotation=30, fontsize=8)
    ax1.set_xlim(-0.5, len(vals) - 0.5)
    ax1.set_ylabel("loss (nats per token)")
    ax1.set_xlabel("run (±1 bootstrap s.e.)" if r["bootstrap"] > 0 else "run (no bootstrap: --bootstrap 0)")
    g = r["RG_when_patched"]
    ax1.set_title("rescue gain with stream s patched: " + ", ".join(
        "s=%d %.2f±%.2f" % (s, nan(x["value"]), nan(x["se"])) for s, x in enumerate(g)), fontsize=8)
    if "by_depth" in r:
        by = r["by_depth"]
        x = range(len(by))
        for s in range(n):
            points(ax2, x, [b["RG_when_patched"][s]["value"] for b in by], [b["RG_when_patched"][s]["se"] for b in by],
                   marker="o", capsize=3, label="stream %d patched" % s + (" (RG_%d)" % (1 - s) if r["kind"] == "dar" else ""))
        ax2.set_xticks(list(x))
        ax2.set_xticklabels([b["label"] for b in by], rotation=45, fontsize=8)
        ax2.axhline(0, color="grey", lw=0.5)
        ax2.axhline(1, color="grey", lw=0.5, ls=":")
        ax2.set_xlabel("patched read (one at a time)")
        ax2.set_ylabel("rescue gain of the other streams (unitless)")
        ax2.set_title("rescue gain by depth", fontsize=9)
        ax2.legend(fontsize=8)
    else:
        ax2.axis("off")
    fig.suptitle("§8.5 %s rescue gain over %d sequences (%d bootstrap resamples)" % (r["kind"], r["sequences"], r["bootstrap"]))
    save(fig, out, "rescue_gain.png", written)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1]) as f:
        a = json.load(f)
    if a.get("schema") != "attnlab.analysis" or a.get("version") != SUPPORTED_VERSION:
        print("plot_analysis.py: %s is not an attnlab.analysis version %d document" % (sys.argv[1], SUPPORTED_VERSION),
              file=sys.stderr)
        sys.exit(2)
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.dirname(os.path.abspath(sys.argv[1]))
    os.makedirs(out, exist_ok=True)
    written = []
    plot_attention(a, out, written)
    if a.get("goat"):
        plot_goat(a, out, written)
    if a.get("depth"):
        plot_depth(a, out, written)
    if a.get("streams"):
        plot_streams(a, out, written)
    if a.get("cka"):
        plot_cka(a, out, written)
    if a.get("rescue"):
        plot_rescue(a, out, written)
    for p in written:
        print("wrote %s" % p)


if __name__ == "__main__":
    main()
