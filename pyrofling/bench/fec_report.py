"""``bench fec``'s report: the residual-loss table a person reads, and the recovery curves it can draw."""

from __future__ import annotations

from typing import Any


def _fmt_loss(x: float) -> str:
    if x == 0:
        return "0"
    if x < 1e-12:
        return "<1e-12"
    if x >= 0.01:
        return f"{x * 100:.2f}%"
    return f"{x:.1e}"


def format_table(result: dict[str, Any]) -> str:
    """The human-readable report: residual frame loss per K × loss model × scheme, then speed."""
    rows = result["rows"]
    losses = result["config"]["losses"]
    lines = []
    lines.append("Residual frame loss: share of frames not delivered complete (lower is better).")
    lines.append("mds-exact: the best any code can do at this overhead (exact; i.i.d. and fixed-count losses only).")
    lines.append("")
    header = f"{'K':>4} {'F':>3}  {'scheme':<20}" + "".join(f"{lbl:>13}" for lbl in losses)
    lines.append(header)
    lines.append("-" * len(header))
    by_key = {(r["scheme"], r["k"], r["loss_model"]): r for r in rows}
    order = result["config"]["schemes"]
    for k in result["config"]["ks"]:
        for scheme in order:
            cells = []
            present = False
            for lbl in losses:
                r = by_key.get((scheme, k, lbl))
                if r is None:
                    cells.append(f"{'-':>13}")
                    continue
                present = True
                cells.append(f"{_fmt_loss(r['residual_frame_loss']):>13}")
            if present:
                f = next(r["repair_blocks"] for (s, kk, _), r in by_key.items() if s == scheme and kk == k)
                lines.append(f"{k:>4} {f:>3}  {scheme:<20}" + "".join(cells))
        trials = {by_key[(s, k, lbl)]["trials"] for s in order for lbl in losses if (s, k, lbl) in by_key} - {0}
        lines.append(f"{'':>9}trials: {', '.join(str(t) for t in sorted(trials))}")
        lines.append("")
    mismatches = sum(r["mismatches"] for r in rows)
    lines.append(f"Recovered frames that differed from the original: {mismatches}")
    speed_rows = {}
    for r in rows:
        if r["encode_MBps"] is not None or r["decode_MBps_by_losses"]:
            key = (r["scheme"].replace("/peel", "").replace("/pyrofling", ""), r["k"])
            speed_rows[key] = r
    if speed_rows:
        lines.append("")
        lines.append("Throughput, MB/s of payload, single thread, 1024-byte blocks (median over frames).")
        lines.append(
            "decode: from the received blocks in one call; per-datagram: fed one block at a time as the viewer does."
        )
        head = (
            f"{'K':>4}  {'codec':<12}{'encode':>10}{'decode 0 lost':>15}{'1 lost':>10}{'2 lost':>10}"
            f"{'per-datagram 1 lost':>21}{'2 lost':>10}"
        )
        lines.append(head)
        lines.append("-" * len(head))

        def num(v: float | None) -> str:
            return "-" if v is None else f"{v:,.0f}"

        for (codec, k), r in sorted(speed_rows.items(), key=lambda x: (x[0][1], x[0][0])):
            d = r["decode_MBps_by_losses"] or {}
            inc = r["incremental_decode_MBps_by_losses"] or {}
            lines.append(
                f"{k:>4}  {codec:<12}{num(r['encode_MBps']):>10}{num(d.get('0')):>15}"
                f"{num(d.get('1')):>10}{num(d.get('2')):>10}{num(inc.get('1')):>21}{num(inc.get('2')):>10}"
            )
    peers = result["config"]["peers"]
    missing = [p for p, ok in peers.items() if not ok]
    if missing:
        lines.append("")
        lines.append(f"Not compared (install the 'compare' extra): {', '.join(missing)}")
    lines.append(f"Elapsed: {result['elapsed_s']:.1f} s")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: str) -> None:
    """Per frame size: recovery against the number of lost packets (``n=K`` models, as in the
    FEC blog's curves) on top, residual frame loss on a log scale for the other models below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    ks = result["config"]["ks"]
    losses = result["config"]["losses"]
    schemes = result["config"]["schemes"]
    exact = [lbl for lbl in losses if lbl.startswith("n=")]
    other = [lbl for lbl in losses if not lbl.startswith("n=")]
    by_key = {(r["scheme"], r["k"], r["loss_model"]): r for r in rows}
    panels = [p for p in (exact, other) if p]
    fig, axes = plt.subplots(len(panels), len(ks), figsize=(3.6 * len(ks), 3.4 * len(panels)), squeeze=False)
    markers = "o^sv<>Dp*h"
    for col, k in enumerate(ks):
        f = next((r["repair_blocks"] for r in rows if r["k"] == k and r["scheme"] != "none"), 0)
        for row, labels in enumerate(panels):
            ax = axes[row][col]
            for i, scheme in enumerate(schemes):
                pts: list[tuple[int, dict[str, Any]]] = [
                    (j, by_key[(scheme, k, lbl)]) for j, lbl in enumerate(labels) if (scheme, k, lbl) in by_key
                ]
                if not pts:
                    continue
                if labels is exact:
                    xs = [int(labels[j][2:]) for j, _ in pts]
                    ys = [100 * r["frame_success"] for _, r in pts]
                else:
                    xs = [j for j, _ in pts]
                    # A cell with no failure is drawn at half a failure, so it stays on the log scale.
                    ys = [max(r["residual_frame_loss"], 0.5 / r["trials"] if r["trials"] else 1e-7) for _, r in pts]
                ax.plot(xs, ys, marker=markers[i % len(markers)], linestyle=":", label=scheme, alpha=0.85)
            if labels is exact:
                ax.set_xlabel("packets lost (of K + F)")
                ax.set_ylabel("frames recovered, %")
                ax.set_ylim(-3, 103)
            else:
                ax.set_yscale("log")
                ax.set_xticks(range(len(labels)))
                ax.set_xticklabels(labels, rotation=30, fontsize=8)
                ax.set_ylabel("frames lost (log)")
            ax.set_title(f"K = {k}, F = {f}", fontsize=10)
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("pyrofling bench fec: lower frame loss is better; points at the floor lost no frame", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
