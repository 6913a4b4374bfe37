"""A strict little HTML reader for the report tests: every element closed in order, and the page's
tables, figures and SVG elements pulled out as plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"meta", "link", "br", "img", "hr", "input", "col", "source", "wbr"}
# SVG elements the charts may close with "/>".
SELF_CLOSING_OK = {"line", "circle", "path", "rect", "stop", "polyline", "polygon"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list["Node"] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all_text(self) -> str:
        parts = list(self.text)
        for c in self.children:
            parts.append(c.all_text())
        return " ".join(p for p in (" ".join(x.split()) for x in parts) if p)

    def iter(self, tag: str | None = None):
        if tag is None or self.tag == tag:
            yield self
        for c in self.children:
            yield from c.iter(tag)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        assert tag in SELF_CLOSING_OK or tag in VOID, f"<{tag}/> is not allowed"
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert len(self.stack) > 1, f"</{tag}> closes nothing"
        top = self.stack.pop()
        assert top.tag == tag, f"</{tag}> closes <{top.tag}>"

    def handle_data(self, data):
        self.stack[-1].text.append(data)


def parse(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    b.close()
    assert len(b.stack) == 1, f"unclosed: {[n.tag for n in b.stack[1:]]}"
    return b.root


def table_rows(table: Node) -> tuple[list[str], list[list[str]]]:
    """(header texts, body rows of cell texts) of a <table>."""
    head = [th.all_text() for tr in table.iter("thead") for th in tr.iter("th")]
    rows = []
    for tbody in table.iter("tbody"):
        for tr in tbody.iter("tr"):
            rows.append([c.all_text() for c in tr.children if c.tag in ("td", "th")])
    return head, rows


def tables_by_class(root: Node, cls: str) -> list[Node]:
    return [t for t in root.iter("table") if cls in t.classes()]


def charts(root: Node) -> list[Node]:
    """The chart SVGs inside figures."""
    return [s for f in root.iter("figure") if "chart" in f.classes() for s in f.iter("svg")]
