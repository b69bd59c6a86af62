#!/usr/bin/env python3
"""The tables of docs/RESULTS.md that `attnlab compare`'s results.md does not print, made from the
same results.json (standard library only):

  python3 scripts/results_tables.py results/main/results.json

- the whole-shard loss of every run, per seed, and the variants' rank within each seed;
- the periodic validation loss (train.eval_batches) at each evaluation step, mean ± sd over seeds;
- the length sweep, all positions and positions >= T_train, mean ± sd over seeds;
- `analyze`'s cos(y, v) and self weight a_tt per layer, mean over seeds.
"""
import json
import math
import sys


def mean(x):
    return sum(x) / len(x)


def sd(x):
    if len(x) < 2:
        return float("nan")
    m = mean(x)
    return math.sqrt(sum((v - m) ** 2 for v in x) / (len(x) - 1))


def pm(x, fmt="%.4f"):
    if not x:
        return "–"
    s = fmt % mean(x)
    if len(x) > 1:
        s += " ± " + fmt % sd(x)
    return s


def betacf(a, b, x):
    # Continued fraction of the incomplete beta function (modified Lentz), as src/experiment/stats.cpp.
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, dd = 1.0, 1 - qab * x / qap
    dd = 1 / (dd if abs(dd) > tiny else tiny)
    h = dd
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        dd = 1 + aa * dd
        dd = 1 / (dd if abs(dd) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= dd * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        dd = 1 + aa * dd
        dd = 1 / (dd if abs(dd) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        de = dd * c
        h *= de
        if abs(de - 1) < 1e-15:
            break
    return h


def ibeta(a, b, x):
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lb = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lb) * betacf(a, b, x) / a
    return 1 - math.exp(lb) * betacf(b, a, 1 - x) / b


def t_two_sided_p(t, df):
    return ibeta(df / 2, 0.5, df / (df + t * t))


def t_quantile(p, df):
    lo, hi = 0.0, 1e3  # p > 0.5
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1 - t_two_sided_p(mid, df) / 2 < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def welch(a, b):
    va, vb = sd(a) ** 2 / len(a), sd(b) ** 2 / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    diff = mean(a) - mean(b)
    q = t_quantile(0.975, df)
    return diff, t_two_sided_p(diff / se, df), diff - q * se, diff + q * se


def paired(a, b):
    dlist = [x - y for x, y in zip(a, b)]
    diff, se, df = mean(dlist), sd(dlist) / math.sqrt(len(dlist)), len(dlist) - 1
    q = t_quantile(0.975, df)
    return diff, t_two_sided_p(diff / se, df), diff - q * se, diff + q * se


# The comparisons the papers make besides "against RoPE": GOAT against ALiBi, DAR against AttnRes.
PAIRS = [("xsa", "rope"), ("goat", "alibi"), ("dar-block", "attnres-block"), ("attnres-block", "rope")]


def main(path):
    d = json.load(open(path))
    order = [v["name"] for v in d["grid"]["variants"]]
    seeds = d["grid"]["seeds"]
    runs = {(r["variant"], r["seed"]): r for r in d["runs"] if "budget_factor" not in r}  # not the [budget] runs
    done_seeds = [s for s in seeds if all((v, s) in runs for v in order)]

    print("## Whole-shard loss per seed (rank within the seed, 1 = lowest)\n")
    print("| variant | " + " | ".join("seed %d" % s for s in seeds) + " | mean rank |")
    print("|---|" + "---:|" * (len(seeds) + 1))
    ranks = {v: [] for v in order}
    for s in done_seeds:
        ordered = sorted(order, key=lambda v: runs[(v, s)]["val_loss"])
        for i, v in enumerate(ordered):
            ranks[v].append(i + 1)
    for v in order:
        cells = []
        for s in seeds:
            r = runs.get((v, s))
            if r is None or r["val_loss"] is None:
                cells.append("–")
            else:
                rk = ""
                if s in done_seeds:
                    rk = " (%d)" % ranks[v][done_seeds.index(s)]
                cells.append("%.4f%s" % (r["val_loss"], rk))
        mr = "%.2f" % mean(ranks[v]) if ranks[v] else "–"
        print("| %s | %s | %s |" % (v, " | ".join(cells), mr))
    # Kendall's W: agreement of the seeds' rankings (1 = every seed ranks the variants alike, 0 = no
    # agreement); W = 12 S / (m² (n³ − n)), S = Σ_v (R_v − m(n + 1)/2)², R_v the sum of v's ranks.
    m, n = len(done_seeds), len(order)
    if m >= 2 and n >= 2:
        S = sum((sum(ranks[v]) - m * (n + 1) / 2) ** 2 for v in order)
        print("\nKendall's W over the %d complete seeds: %.3f" % (m, 12 * S / (m * m * (n ** 3 - n))))
    base = d["grid"]["baseline"]
    print("\nPer-seed difference to %s (same seed, same data order):\n" % base)
    print("| variant | " + " | ".join("seed %d" % s for s in done_seeds) + " |")
    print("|---|" + "---:|" * len(done_seeds))
    for v in order:
        if v == base:
            continue
        print("| %s | %s |" % (v, " | ".join("%+.4f" % (runs[(v, s)]["val_loss"] - runs[(base, s)]["val_loss"]) for s in done_seeds)))

    print("\n## Pairs (the same statistics as results.md, for pairs other than against the baseline)\n")
    print("| variant − other | Δ (Welch) | 95% interval | p | paired Δ | paired 95% interval | paired p |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for v, w in PAIRS:
        if v not in order or w not in order:
            continue
        a = [runs[(v, s)]["val_loss"] for s in done_seeds]
        b = [runs[(w, s)]["val_loss"] for s in done_seeds]
        if len(a) < 2:
            continue
        dw, pw, lw, hw = welch(a, b)
        dp, pp, lp, hp = paired(a, b)
        print("| %s − %s | %+.4f | [%+.4f, %+.4f] | %.3f | %+.4f | [%+.4f, %+.4f] | %.3f |" % (v, w, dw, lw, hw, pw, dp, lp, hp, pp))

    print("\n## Periodic validation loss, mean ± sd over seeds\n")
    steps = None
    for v in order:
        for s in seeds:
            if (v, s) in runs:
                steps = [p[0] for p in runs[(v, s)]["curve"]["val"]]
                break
        if steps:
            break
    print("| variant | " + " | ".join("step %d" % t for t in steps) + " |")
    print("|---|" + "---:|" * len(steps))
    for v in order:
        row = []
        for t in steps:
            x = [p[1] for s in seeds if (v, s) in runs for p in runs[(v, s)]["curve"]["val"] if p[0] == t and p[1] is not None]
            row.append(pm(x, "%.3f"))
        print("| %s | %s |" % (v, " | ".join(row)))
    # Rank agreement along training: per seed, the order of the variants at each evaluation step.
    print("\nOrder of the variants (lowest first) at each periodic evaluation, per seed:\n")
    for s in done_seeds:
        parts = []
        for t in steps:
            val = {v: dict((p[0], p[1]) for p in runs[(v, s)]["curve"]["val"]).get(t) for v in order}
            parts.append("step %d: %s" % (t, " < ".join(sorted(order, key=lambda v: val[v]))))
        print("- seed %d: " % s + "; ".join(parts[-3:]))

    print("\n## Length sweep, mean ± sd over seeds\n")
    mult = None
    for r in d["runs"]:
        if r.get("lengths"):
            mult = r["lengths"]["multiple"]
            break
    if mult:
        print("| variant | " + " | ".join("%g×" % m for m in mult) + " | %g×, positions ≥ T_train |" % mult[-1])
        print("|---|" + "---:|" * (len(mult) + 1))
        for v in order:
            rs = [runs[(v, s)] for s in seeds if (v, s) in runs and runs[(v, s)].get("lengths")]
            cells = [pm([r["lengths"]["loss"][i] for r in rs]) for i in range(len(mult))]
            cells.append(pm([r["lengths"]["loss_beyond_train"][-1] for r in rs]))
            print("| %s | %s |" % (v, " | ".join(cells)))
        print("\nChange from each model's best length to 8× (per run, then mean ± sd):\n")
        print("| variant | loss(8×) − min over lengths |")
        print("|---|---:|")
        for v in order:
            rs = [runs[(v, s)] for s in seeds if (v, s) in runs and runs[(v, s)].get("lengths")]
            x = [r["lengths"]["loss"][-1] - min(r["lengths"]["loss"]) for r in rs]
            print("| %s | %s |" % (v, pm(x)))

    print("\n## analyze: cos(y, v) and self weight a_tt by layer, mean over seeds\n")
    print("| variant | cos(y, v) by layer | self weight a_tt by layer |")
    print("|---|---|---|")
    for v in order:
        rs = [runs[(v, s)] for s in seeds if (v, s) in runs and runs[(v, s)].get("analysis")]
        if not rs:
            continue
        L = len(rs[0]["analysis"]["similarity"])
        cos = [mean([r["analysis"]["similarity"][l]["cos_yv"] for r in rs]) for l in range(L)]
        slf = [mean([r["analysis"]["similarity"][l]["self"] for r in rs]) for l in range(L)]
        print("| %s (n=%d) | %s | %s |" % (v, len(rs), " / ".join("%.2f" % c for c in cos), " / ".join("%.3f" % c for c in slf)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: results_tables.py RESULTS_JSON")
    main(sys.argv[1])
