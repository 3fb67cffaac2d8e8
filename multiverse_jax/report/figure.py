"""The one way the reports make and write a figure: a matplotlib ``Figure`` on the Agg
canvas (no pyplot, so no global backend state and nothing to close)."""

from __future__ import annotations

from pathlib import Path


def new_figure(width: float, height: float, dpi: int = 100):
    """An empty ``width`` x ``height`` inch figure that can be saved as PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def save(fig, path) -> Path:
    """Lay the figure out and write it to ``path`` (the format from its suffix)."""
    fig.tight_layout()
    fig.savefig(path)
    return Path(path)
