#!/usr/bin/env python3
"""Plots fusion_benchmark JSON: mean request latency, time to first token and
total time against the mean inter-arrival gap, one line per scheduler.

    python3 benchmarks/plot_fusion.py RESULTS.json OUT.png   # needs python3-matplotlib
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    runs = data["runs"]
    schedulers = sorted({r["scheduler"] for r in runs}, key=lambda s: [r["scheduler"] for r in runs].index(s))
    gaps = sorted({r["gap_ms"] for r in runs})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    for name in schedulers:
        pts = sorted((r["gap_ms"], r) for r in runs if r["scheduler"] == name)
        xs = [gaps.index(g) for g, _ in pts]
        axes[0].plot(xs, [r["mean_s"] for _, r in pts], marker="o", label=name)
        axes[1].plot(xs, [r["ttft_mean_s"] for _, r in pts], marker="o", label=name)
        axes[2].plot(xs, [r["total_s"] for _, r in pts], marker="o", label=name)
    labels = ["all at once" if g == 0 else f"{g:g} ms" for g in gaps]
    for ax, title in zip(axes, ["mean request latency (s)", "mean time to first token (s)",
                                "total time (s)"]):
        ax.set_xticks(range(len(gaps)))
        ax.set_xticklabels(labels)
        ax.set_xlabel("mean inter-arrival gap (Poisson)")
        ax.set_title(title)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(loc="center right", fontsize=8)
    fig.suptitle(f"{data['model']}, 32 requests, 8-token prompts, outputs {data['output_len']}")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
