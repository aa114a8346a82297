#!/usr/bin/env python3
"""Draws a flover_loadgen run (flover_loadgen --plot=OUT.png runs this):
per-request latency over the run (TTFT and end-to-end, by send time, failed
requests marked) and the latency CDFs (TTFT, TPOT, inter-token latency,
end-to-end). Needs matplotlib.

    plot_loadgen.py TIMINGS.json OUT.png

TIMINGS.json: {"title": ..., "requests": [{"sent_s", "ttft_s", "e2e_s",
"tpot_s", "ok", "gaps_s": [...]}, ...]} (times in seconds; ttft_s and tpot_s
null where there is none).
"""
import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_loadgen: matplotlib is missing (pip install matplotlib, or Debian's "
             "python3-matplotlib)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cdf(ax, values, label, scale):
    values = sorted(v * scale for v in values if v is not None)
    if not values:
        return
    n = len(values)
    ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})")


def main(src, dst):
    with open(src) as f:
        data = json.load(f)
    reqs = data["requests"]
    ok = [r for r in reqs if r["ok"]]
    failed = [r for r in reqs if not r["ok"]]
    fig, (over_time, cdfs) = plt.subplots(1, 2, figsize=(13, 4.8))
    over_time.scatter([r["sent_s"] for r in ok], [r["e2e_s"] for r in ok], s=12,
                      label="end-to-end")
    over_time.scatter([r["sent_s"] for r in ok if r["ttft_s"] is not None],
                      [r["ttft_s"] for r in ok if r["ttft_s"] is not None], s=12, marker="x",
                      label="time to first token")
    if failed:
        over_time.scatter([r["sent_s"] for r in failed], [r["e2e_s"] for r in failed], s=30,
                          marker="v", color="red", label=f"failed ({len(failed)})")
    over_time.set_xlabel("request sent at (s from start)")
    over_time.set_ylabel("latency (s)")
    over_time.set_title("per request")
    over_time.grid(alpha=0.3)
    over_time.legend()
    cdf(cdfs, [r["ttft_s"] for r in ok], "TTFT", 1e3)
    cdf(cdfs, [r["tpot_s"] for r in ok], "TPOT", 1e3)
    cdf(cdfs, [g for r in ok for g in r["gaps_s"]], "inter-token", 1e3)
    cdf(cdfs, [r["e2e_s"] for r in ok], "end-to-end", 1e3)
    cdfs.set_xscale("log")
    cdfs.set_xlabel("latency (ms, log scale)")
    cdfs.set_ylabel("fraction of requests (tokens for inter-token)")
    cdfs.set_title("latency CDFs")
    cdfs.grid(alpha=0.3, which="both")
    cdfs.legend()
    fig.suptitle(data.get("title", "flover_loadgen"))
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
