"""The main figure in the terminal, for users on a remote shell: cluster examples/s against workers.

Drawn with Rich (no extra dependency): per mode, one bar per worker count, scaled to the largest value
of the chart, with `│` where ideal linear scaling from the mode's smallest worker count would reach.
"""

from __future__ import annotations

from rich.text import Text

from orchestrator.bench.summary import Row

BAR = "█"
STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")


def throughput_chart(all_rows: list[Row], width: int = 50) -> Text:
    base = [r for r in all_rows if r.variant == "baseline" and r.examples_per_s is not None]
    if not base:
        return Text("(no finished baseline cell to chart)", style="dim")
    modes = list(dict.fromkeys(r.mode for r in base))
    ideal: dict[tuple[str, int], float] = {}
    for mode in modes:
        mine = sorted((r for r in base if r.mode == mode), key=lambda r: r.workers)
        per_worker = (mine[0].examples_per_s or 0.0) / mine[0].workers
        ideal.update({(mode, r.workers): per_worker * r.workers for r in mine})
    top = max([r.examples_per_s or 0.0 for r in base] + list(ideal.values())) or 1.0
    label_w = max(len(m) for m in modes)
    out = Text("examples/s against workers (│ = ideal linear scaling)\n", style="bold")
    for i, mode in enumerate(modes):
        style = STYLES[i % len(STYLES)]
        for k, r in enumerate(sorted((r for r in base if r.mode == mode), key=lambda r: r.workers)):
            value = r.examples_per_s or 0.0
            cells = round(width * value / top)
            mark = min(width - 1, round(width * ideal[(mode, r.workers)] / top))
            bar = [BAR if j < cells else " " for j in range(width)]
            if bar[mark] == " " or mark >= cells - 1:
                bar[mark] = "│"
            name = mode if k == 0 else ""
            out.append(f"{name:<{label_w}} w{r.workers:<3}")
            out.append("".join(bar), style=style)
            out.append(f" {value:,.0f}\n")
    return out
