"""The HTML report's pictures, drawn by matplotlib as SVG text to put inline in the page.

- dspan_cdf: the d-span CDF of one host's sweep, log x (Chopper, FAST '15, Figure 3), the runs at the
  host's own factor levels marked;
- prioritization: S_i per factor with the chance level (Figure 4);
- tail_share: the share of tail runs per factor level (Figure 5);
- kernel_gate: baseline against candidate (d-span quantiles, confirmation ratios).

matplotlib is imported inside the functions: it takes a second or more to import, and only a
run with probe data or a kernel gate draws anything. Figures are matplotlib.figure.Figure
objects, not pyplot's: nothing is registered globally, so nothing has to be closed or leaks
between figures. The output is deterministic: no date in the metadata and a fixed id salt per
figure (each figure's own, so ids stay unique when several SVGs share one page).

No host-provided string is drawn: labels are factor names and levels (factors.yml), probe ids
and fixed words. matplotlib escapes SVG text anyway, and math parsing is off, so a "$" in a
label stays a dollar sign.
"""

import bisect
import contextlib
import io
import math
import re
import textwrap

from ext4audit.probe import analysis as probe

STYLE = {
    "svg.fonttype": "none",      # text as <text> (smaller, selectable), not glyph paths
    "text.parse_math": False,    # "$...$" in a label is text, never mathtext
    "font.size": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
BLUE, ORANGE, GREY = "#1f5fa8", "#d9730d", "#555555"
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


@contextlib.contextmanager
def _style(key):
    import matplotlib

    with matplotlib.rc_context(dict(STYLE, **{"svg.hashsalt": "ext4audit-" + key})):
        yield


def _svg(fig):
    """The figure as an <svg> element (without the XML prolog and DOCTYPE, which only a file needs)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _figure(width, height, left, bottom, top=0.1, right=0.15):
    """A figure with fixed margins (inches): room for the tick labels and axis labels, worked out
    from their lengths by the caller. matplotlib's constrained layout would measure every text
    in extra draw passes: it took most of the time the plots took."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height)
    return fig


def _text_width(text, size):
    """About how wide (inches) a line of text is at `size` points: DejaVu Sans averages about half
    an em a character (callers leave some room more: a browser without it draws another font)."""
    return 0.5 * size * len(text) / 72


def _byte_ticks(axis, low, high):
    """Ticks at powers of two (4 KiB, 64 KiB, 1 MiB ...) labelled in KiB/MiB/GiB: a log axis of
    byte counts reads better that way than in powers of ten."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    first, last = math.floor(math.log2(low)), math.ceil(math.log2(high))
    step = max(1, math.ceil((last - first) / 7))
    axis.set_major_locator(FixedLocator([2.0 ** k for k in range(first, last + 1, step)]))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda value, _: probe.human_bytes(value).replace(".0 ", " ")))


def _percent_formatter():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(1.0, decimals=0)


def dspan_cdf(dspans, quantiles, key, own=None):
    """The CDF of a sweep's run d-spans (bytes, log x) with its p50/p90/p99 marked; p90 is the
    tail threshold of the factor mapping. own: the d-spans of the runs with the host's own
    factor levels, marked on the curve (none: the legend says so; None: no own level is known).
    Runs with a d-span of 0 (no extents) cannot sit on a log axis: the caller says how many
    there were. Returns None when there is nothing to draw."""
    values = sorted(v for v in dspans if v > 0)
    if not values:
        return None
    with _style(key):
        fig = _figure(6.4, 3.0, left=0.6, bottom=0.45)
        ax = fig.add_subplot()
        shares = [(i + 1) / len(values) for i in range(len(values))]
        ax.step(values, shares, where="post", color=BLUE, linewidth=1.5, label="runs (%d)" % len(values))
        if own is not None:
            mine = sorted(v for v in own if v > 0)
            label = ("runs with your configuration's levels (%d)" % len(mine) if mine
                     else "no run has all your configuration's levels")
            # on the curve: the share of runs at or below each one's d-span (the step's top)
            ax.plot(mine, [bisect.bisect_right(values, v) / len(values) for v in mine], linestyle="none",
                    marker="o", markersize=5, markerfacecolor="none", markeredgecolor="black", label=label)
        ax.set_xscale("log")
        styles = {"p50": ":", "p90": "--", "p99": "-."}
        for name, style in styles.items():
            if quantiles.get(name):
                ax.axvline(quantiles[name], color=ORANGE, linestyle=style, linewidth=1,
                           label="%s %s%s" % (name, probe.human_bytes(quantiles[name]),
                                              " (tail threshold)" if name == "p90" else ""))
        low, high = values[0], values[-1]
        ax.set_xlim(low / 1.5, high * 1.5)
        _byte_ticks(ax.xaxis, low / 1.5, high * 1.5)
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(_percent_formatter())
        ax.set_xlabel("d-span of a run: first to last block of its files (bytes, log scale)")
        ax.set_ylabel("runs with at most this d-span (%)")
        ax.legend(loc="upper left", fontsize=7)
        return _svg(fig)


def prioritization(entries, key):
    """S_i = Var(E[Y|X_i]) / Var(Y) per factor, largest on top, with the value chance alone gives
    a factor with that many levels (a bar that does not clear its mark explains nothing)."""
    if not entries:
        return None
    entries = list(reversed(entries))  # barh draws bottom up
    labels = ["%s (%d levels)" % (probe.factor_title(e["factor"]), e["levels"]) for e in entries]
    with _style(key):
        fig = _figure(6.4, 0.8 + 0.24 * len(entries), left=0.25 + _text_width(max(labels, key=len), 8), bottom=0.45)
        ax = fig.add_subplot()
        rows = range(len(entries))
        ax.barh(rows, [e["s"] for e in entries], color=BLUE, height=0.6, label="share explained by the factor")
        ax.scatter([e["noise_floor"] for e in entries], rows, marker="|", s=160, color="black", zorder=3,
                   label="chance level: what a factor with that many levels gets by chance")
        ax.set_yticks(list(rows), labels)
        top = max(max(e["s"] for e in entries), max(e["noise_floor"] for e in entries))
        ax.set_xlim(0, min(1.0, max(0.1, top * 1.15)))
        ax.xaxis.set_major_formatter(_percent_formatter())
        ax.set_xlabel("share of the d-span's variance the factor explains (%)")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", fontsize=7)
        return _svg(fig)


def _level_order(label):
    """Levels in their natural order (the host report's JSON sorts them as strings): numbers and
    byte sizes by value; chunk orders and bitmaps as strings (that is their plan order)."""
    found = re.fullmatch(r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)(?: (B|KiB|MiB|GiB))?", label)
    if found:
        return (0, float(found.group(1)) * UNITS[found.group(2) or "B"], label)
    return (1, 0.0, label)


def tail_share(mapping, ranked, runs, key, names=None, own=None, top=4):
    """For the `top` factors by S_i: the share of each level's runs that are in the tail (d-span
    at or above the p90), against the share over all runs (dashed line; about 10%). One axes,
    the factors side by side: a grid of small axes cost several times as much to draw.
    names: {factor: {level label: level name}} (probe.level_names), levels named by what they
    mean; own: {factor: level label} of the host's own configuration, marked over its bar."""
    from matplotlib.transforms import blended_transform_factory

    factors = [e["factor"] for e in ranked if len((mapping or {}).get("factors", {}).get(e["factor"]) or {}) > 1]
    factors = factors[:top]
    if not factors or not runs:
        return None
    names, own = names or {}, own or {}
    overall = mapping["tail_runs"] / runs
    groups = [(name, sorted(mapping["factors"][name], key=_level_order)) for name in factors]
    labels = [names.get(name, {}).get(level, level) for name, levels in groups for level in levels]
    size = 6 if len(labels) <= 40 else 5
    # the level names stand rotated under the bars: room for the longest; the factor titles over
    # the axes take up to three lines
    under = 0.1 + _text_width(max(labels, key=len), size)
    with _style(key):
        fig = _figure(6.4, 2.0 + under, left=0.6, bottom=under, top=0.45)
        ax = fig.add_subplot()
        x_data_y_axes = blended_transform_factory(ax.transData, ax.transAxes)  # titles over, level names under
        spot, ticks, mine = 0.0, [], []
        for number, (name, levels) in enumerate(groups):
            spots = [spot + i for i in range(len(levels))]
            shares = [mapping["factors"][name][level]["tail_share"] for level in levels]
            ax.bar(spots, shares, width=0.75, color=(BLUE, GREY)[number % 2])
            mine += [(x, share) for x, share, level in zip(spots, shares, levels) if level == own.get(name)]
            # wrapped to the group's width (about two characters a bar), so neighbours' titles never overlap
            ax.text((spots[0] + spots[-1]) / 2, 1.0, textwrap.fill(probe.factor_title(name), max(8, 2 * len(levels)),
                                                                break_long_words=False, break_on_hyphens=False),
                    ha="center", va="bottom", fontsize=8, transform=x_data_y_axes)
            ticks += spots
            spot = spots[-1] + 2
        if mine:  # a marker over the bar (a level with no tail runs has no bar to outline), one legend entry
            ax.scatter([x for x, _ in mine], [share + 0.04 for _, share in mine], marker="v", s=30,
                       color="black", zorder=3, label="your configuration")
        ax.axhline(overall, color=ORANGE, linestyle="--", linewidth=1, label="all runs (%.0f%%)" % (100 * overall))
        # the level names as plain texts under the axes, not tick labels: a tick is five artists
        # (marks, grid line, two labels) and cost half the plot's time
        for x, label in zip(ticks, labels):
            ax.text(x, -0.02, label, rotation=90, ha="center", va="top", fontsize=size, transform=x_data_y_axes)
        ax.set_xticks([])
        ax.set_xlim(-1, spot - 1)
        ax.set_ylim(0, 1)
        ax.yaxis.set_major_formatter(_percent_formatter())
        ax.set_ylabel("runs of the level in the tail (%)")
        ax.grid(axis="x", visible=False)
        ax.legend(loc="upper right", fontsize=7)
        return _svg(fig)


def kernel_gate(gate, key):
    """Baseline against candidate: d-span p50/p90/p99 (log y) and each confirmation's ratio with
    its spread (risky cost / safe cost; 1 means no difference)."""
    dspan = gate.get("dspan")
    rows = [r for r in gate.get("confirmations") or [] if r.get("baseline") or r.get("candidate")]
    if not dspan:
        return None
    with _style(key):
        fig = _figure(6.4, 2.8, left=0.6, bottom=0.3, top=0.25)
        left, right = fig.subplots(1, 2, width_ratios=[1, max(1, len(rows))] if rows else [1, 1],
                                   gridspec_kw={"wspace": 0.25})
        names = list(dspan["quantiles"])
        width = 0.38
        values = []
        for offset, side, color in ((-width / 2, "baseline", GREY), (width / 2, "candidate", ORANGE)):
            heights = [max(dspan["quantiles"][n][side], 1) for n in names]
            values += heights
            left.bar([i + offset for i in range(len(names))], heights, width=width, color=color, label=side)
        left.set_yscale("log")
        _byte_ticks(left.yaxis, min(values) / 1.5, max(values) * 1.5)
        left.set_xticks(range(len(names)), names)
        left.set_title("d-span quantiles", fontsize=8)
        left.legend(fontsize=7)
        left.grid(axis="x", visible=False)
        if not rows:
            right.set_visible(False)
        labels, seen = [], {}
        for row in rows:
            seen[row["probe"]] = seen.get(row["probe"], 0) + 1
            labels.append(row["probe"] + (" #%d" % seen[row["probe"]] if seen[row["probe"]] > 1 else ""))
        for offset, side, color in ((-width / 2, "baseline", GREY), (width / 2, "candidate", ORANGE)):
            spots = [(i + offset, row[side], row.get(side + "_spread")) for i, row in enumerate(rows) if row.get(side)]
            if not spots:
                continue
            low = [r - (s[0] if s else r) for _, r, s in spots]
            high = [(s[1] if s else r) - r for _, r, s in spots]
            right.bar([x for x, _, _ in spots], [r for _, r, _ in spots], width=width, color=color, label=side,
                      yerr=[[max(0, v) for v in low], [max(0, v) for v in high]], capsize=3)
        if rows:
            right.axhline(1, color="black", linewidth=0.8)
            right.set_xticks(range(len(rows)), labels, fontsize=7)
            right.set_title("confirmation ratios (risky / safe), spread as bars", fontsize=8)
            right.grid(axis="x", visible=False)
        return _svg(fig)
