"""Typesetting for the PDF report (ReportLab platypus): fonts, the HTML report's colours, tables whose columns are
sized to their content and wrap instead of running off the page, boxed findings, figures and the document itself.

Imported only when a PDF is asked for (orchestration/report/render.py imports it lazily).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape

import matplotlib
from reportlab.lib import colors
from reportlab.lib.enums import TA_RIGHT
from reportlab.lib.pagesizes import A4, landscape
from reportlab.lib.styles import ParagraphStyle
from reportlab.lib.units import cm
from reportlab.lib.utils import ImageReader
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.ttfonts import TTFont
from reportlab.platypus import CondPageBreak, Image, Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle

__all__ = ["PAGE", "Cell", "box", "build", "figure", "heading", "para", "table"]

# A4 landscape: the widest tables (per class, replay, a comparison of several runs) and the figures, which are
# wider than tall, fit it better than portrait.
PAGE = landscape(A4)
MARGIN = 1.4 * cm
FRAME_W = PAGE[0] - 2 * MARGIN
FRAME_H = PAGE[1] - 2 * MARGIN

# The HTML report's colours (its <style>), so a verdict or a finding looks the same in both.
INK = colors.HexColor("#1b1f23")
GREY = colors.HexColor("#57606a")
RULE = colors.HexColor("#dddddd")
HEAD_BG = colors.HexColor("#f6f8fa")
CLASS_COLOURS = {
    "better": colors.HexColor("#1a7f37"),
    "worse": colors.HexColor("#cf222e"),
    "warn": colors.HexColor("#9a6700"),
    "small": GREY,
}
BOXES = {  # severity -> (left border, background)
    "warning": (colors.HexColor("#d4a72c"), colors.HexColor("#fff8c5")),
    "critical": (colors.HexColor("#cf222e"), colors.HexColor("#ffebe9")),
    "info": (colors.HexColor("#0969da"), colors.HexColor("#ddf4ff")),
    "ok": (colors.HexColor("#1a7f37"), colors.HexColor("#dafbe1")),
}
MONO = "VLDejaVuSansMono"  # the console's aligned tables (where a TTFT goes), as the summary prints them
FONT = "VLDejaVuSans"  # DejaVu Sans ships with matplotlib: every glyph a report prints (Δ, –, µ, ≤) is in it
TABLE_SIZES = (8.0, 7.0, 6.0)  # a table takes the first size at which every column's longest word fits
PAD = 3.0
# Room a section heading needs below it on its page: itself and a table's first rows, else it starts the next page.
# A table then splits where the page ends (its header repeated); nothing else is held together.
SECTION_ROOM = 110.0
FIGURE_ROOM = 60.0  # a figure's caption and a section heading above it


def _register_fonts() -> None:
    """DejaVu Sans (regular, bold, italic) from matplotlib's data, once per process."""
    if FONT in pdfmetrics.getRegisteredFontNames():
        return
    ttf = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")
    faces = {"": "DejaVuSans", "-Bold": "DejaVuSans-Bold", "-Oblique": "DejaVuSans-Oblique"}
    faces["-BoldOblique"] = "DejaVuSans-BoldOblique"
    for suffix, fname in faces.items():
        pdfmetrics.registerFont(TTFont(FONT + suffix, os.path.join(ttf, fname + ".ttf")))
    pdfmetrics.registerFontFamily(
        FONT, normal=FONT, bold=FONT + "-Bold", italic=FONT + "-Oblique", boldItalic=FONT + "-BoldOblique"
    )
    pdfmetrics.registerFont(TTFont(MONO, os.path.join(ttf, "DejaVuSansMono.ttf")))


def _style(name: str, size: float, **kw: Any) -> Any:
    kw = {"fontName": FONT, "textColor": INK, **kw}
    return ParagraphStyle(name, fontSize=size, leading=size * 1.25, **kw)


_register_fonts()
STYLES = {
    "h1": _style("h1", 16, spaceAfter=8, fontName=FONT + "-Bold"),
    "h2": _style("h2", 12.5, spaceBefore=12, spaceAfter=5, fontName=FONT + "-Bold"),
    "caption": _style("caption", 10, spaceBefore=6, spaceAfter=3, fontName=FONT + "-Bold"),
    "body": _style("body", 9, spaceAfter=4),
    "small": _style("small", 8, spaceAfter=4, textColor=GREY),
    "warn": _style("warn", 9, spaceAfter=4, textColor=CLASS_COLOURS["warn"]),
}
STYLES["mono"] = _style("mono", 7.5, spaceAfter=4, fontName=MONO)


def text(s: object) -> str:
    """Plain text as Paragraph markup: &, < and > escaped, so data can never be taken for a tag."""
    return escape(str(s))


def para(markup: str, style: str = "body") -> Any:
    """A paragraph of markup (escape data with text() first)."""
    return Paragraph(markup, STYLES[style])


def heading(title: str, level: int = 2) -> Any:
    """A section heading (h1/h2), or a figure's caption (level 3); each becomes an entry of the PDF's outline."""
    return para(text(title), {1: "h1", 2: "h2"}.get(level, "caption"))


@dataclass
class Cell:
    """A table cell: lines of (text, class); class '' is plain, else better / worse / warn / small."""

    lines: list[tuple[str, str]]
    left: bool = False  # left-aligned (labels, names); numbers are right-aligned as in the HTML

    @classmethod
    def of(cls, value: object, left: bool = False, klass: str = "") -> Cell:
        """One line of plain text."""
        return cls([(str(value), klass)], left)


@dataclass
class _Measured:
    natural: list[float] = field(default_factory=list)  # the widest line of each column
    least: list[float] = field(default_factory=list)  # the widest word of each column


def _font(klass: str) -> str:
    return FONT + "-Bold" if klass in ("better", "worse", "head") else FONT


def _measure(rows: Sequence[Sequence[Cell]], size: float) -> _Measured:
    m = _Measured([0.0] * len(rows[0]), [0.0] * len(rows[0]))
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            for line, klass in cell.lines:
                font = _font("head" if i == 0 else klass)
                sz = size - 1 if klass == "small" else size
                w = pdfmetrics.stringWidth(line, font, sz)
                words = [pdfmetrics.stringWidth(x, font, sz) for x in line.split()] or [0.0]
                m.natural[j] = max(m.natural[j], w + 2 * PAD + 1)
                m.least[j] = max(m.least[j], max(words) + 2 * PAD + 1)
    return m


def column_widths(natural: Sequence[float], least: Sequence[float], avail: float) -> list[float]:
    """Each column its natural width when they all fit; else the widest are capped at one width (never below
    their longest word) so that together they fill `avail`; columns whose words alone overflow are scaled."""
    if sum(natural) <= avail:
        return list(natural)
    if sum(least) >= avail:  # even word by word they overflow: long words are split (splitLongWords)
        return [w * avail / sum(least) for w in least]
    lo, hi = 0.0, max(natural)
    for _ in range(60):  # bisection on the cap; 60 halvings are far below a point
        cap = (lo + hi) / 2
        if sum(max(lw, min(n, cap)) for n, lw in zip(natural, least, strict=True)) > avail:
            hi = cap
        else:
            lo = cap
    return [max(lw, min(n, lo)) for n, lw in zip(natural, least, strict=True)]


def _cell_paragraph(cell: Cell, size: float, header: bool) -> Any:
    parts = []
    for line, klass in cell.lines:
        body = text(line)
        if klass in ("better", "worse"):
            body = f"<b>{body}</b>"
        if klass in CLASS_COLOURS:
            body = f'<font color="{CLASS_COLOURS[klass].hexval()}">{body}</font>'
        if klass == "small":
            body = f'<font size="{size - 1}">{body}</font>'
        parts.append(f"<b>{body}</b>" if header else body)
    style = _style("td", size, alignment=0 if cell.left else TA_RIGHT)
    return Paragraph("<br/>".join(parts), style)


def table(header: Sequence[Cell], rows: Sequence[Sequence[Cell]], avail: float = FRAME_W) -> Any:
    """A table with a grey header row repeated on every page, columns sized by column_widths, cells wrapped."""
    everything = [list(header), *[list(r) for r in rows]]
    size = TABLE_SIZES[-1]
    for s in TABLE_SIZES:
        if sum(_measure(everything, s).least) <= avail:
            size = s
            break
    m = _measure(everything, size)
    widths = column_widths(m.natural, m.least, avail)
    data = [[_cell_paragraph(c, size, i == 0) for c in row] for i, row in enumerate(everything)]
    t = Table(data, colWidths=widths, repeatRows=1, hAlign="LEFT")
    t.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.5, RULE),
                ("BACKGROUND", (0, 0), (-1, 0), HEAD_BG),
                ("VALIGN", (0, 0), (-1, -1), "TOP"),
                ("LEFTPADDING", (0, 0), (-1, -1), PAD),
                ("RIGHTPADDING", (0, 0), (-1, -1), PAD),
                ("TOPPADDING", (0, 0), (-1, -1), 1.5),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 2),
            ]
        )
    )
    return t


def box(markup_lines: Sequence[str], severity: str) -> list[Any]:
    """A finding as the HTML draws it: a tinted box with a thick coloured left border."""
    border, background = BOXES[severity]
    t = Table([[para("<br/>".join(markup_lines))]], colWidths=[FRAME_W], hAlign="LEFT")
    t.setStyle(
        TableStyle(
            [
                ("BACKGROUND", (0, 0), (-1, -1), background),
                ("LINEBEFORE", (0, 0), (0, -1), 4, border),
                ("LEFTPADDING", (0, 0), (-1, -1), 9),
                ("TOPPADDING", (0, 0), (-1, -1), 5),
                ("BOTTOMPADDING", (0, 0), (-1, -1), 3),
            ]
        )
    )
    return [t, Spacer(1, 5)]  # one row: a table never splits it, and a list lets a heading keep with it


def figure(caption: str, png: bytes, dpi: float, above: Sequence[Any] = ()) -> list[Any]:
    """A figure under its caption (and `above` it, a section's heading), on one page, scaled to fit the frame
    (never past its size at `dpi`) without distorting it."""
    w, h = ImageReader(io.BytesIO(png)).getSize()
    room_h = FRAME_H - FIGURE_ROOM
    scale = min(FRAME_W / w, room_h / h, 72 / dpi)
    img = Image(io.BytesIO(png), width=w * scale, height=h * scale)
    # a new page only when the figure does not fit what is left of this one
    return [CondPageBreak(h * scale + FIGURE_ROOM), *above, heading(caption, 3), img]


def build(path: str, title: str, story: list[Any]) -> None:
    """Write the document: the story on A4 landscape pages, each footed with the title and its number; the
    headings and captions make the PDF's outline (bookmarks)."""
    doc = SimpleDocTemplate(
        path,
        pagesize=PAGE,
        leftMargin=MARGIN,
        rightMargin=MARGIN,
        topMargin=MARGIN,
        bottomMargin=MARGIN,
        title=title,
        author="vllm-locust",
        creator="vllm-locust report",
    )
    levels = {"h1": 0, "h2": 1, "caption": 2}
    seen: list[int] = []

    def outline(flowable: Any) -> None:
        style = getattr(getattr(flowable, "style", None), "name", None)
        if isinstance(flowable, Paragraph) and style in levels:
            key = f"s{len(seen)}"
            seen.append(1)
            doc.canv.bookmarkPage(key)
            doc.canv.addOutlineEntry(flowable.getPlainText(), key, level=levels[style])

    def footer(canvas: Any, _doc: Any) -> None:
        canvas.saveState()
        canvas.setFont(FONT, 7)
        canvas.setFillColor(GREY)
        canvas.drawString(MARGIN, MARGIN / 2, title[:150])
        canvas.drawRightString(PAGE[0] - MARGIN, MARGIN / 2, f"page {canvas.getPageNumber()}")
        canvas.restoreState()

    doc.afterFlowable = outline  # an instance hook rather than a subclass: the library is untyped
    doc.build(_room_for_sections(story), onFirstPage=footer, onLaterPages=footer)


def _room_for_sections(story: list[Any]) -> list[Any]:
    """The story with a conditional page break before each section heading (none where one is already set)."""
    out: list[Any] = []
    for f in story:
        is_h2 = isinstance(f, Paragraph) and f.style.name == "h2"
        if is_h2 and not (out and isinstance(out[-1], CondPageBreak)):
            out.append(CondPageBreak(SECTION_ROOM))
        out.append(f)
    return out
