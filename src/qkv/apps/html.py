"""HTML documents around the translator: the text translated, the markup kept.

    page = HtmlDocument('<p>Click <a href="/go">here</a> to start. <b>Now.</b></p>', "en")
    page.sentences          # ['Click here to start.', 'Now.']
    page.join(["Klicken Sie hier, um zu beginnen.", "Jetzt."])
    # '<p><a href="/go">Klicken Sie hier, um zu beginnen.</a> <b>Jetzt.</b></p>'

Parsed with BeautifulSoup (html.parser): tags, attributes, entities, comments, CDATA and the
structure stay; only text changes, read in runs between block boundaries and cut into sentences
as plain text is. A sentence that crosses inline tags is translated whole, the tags it crossed
moved to its edges; `script`, `style`, `code`, `pre` and the like are never translated. The tree
is walked without recursion (any depth), and `join` may be called again (the next best ones).
Details: docs/architecture.md, "Documents".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import CData, Comment, Declaration, Doctype, ProcessingInstruction

from .documents import split_sentences

UNTOUCHED = {"script", "style", "code", "pre", "textarea", "kbd", "samp", "var", "template"}
INLINE = {
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "dfn", "em", "font", "i", "ins", "del",
    "label", "mark", "q", "s", "small", "span", "strong", "sub", "sup", "time", "u",
}  # fmt: skip
NOT_TEXT = (CData, Comment, Declaration, Doctype, ProcessingInstruction)


@dataclass
class _Sentence:
    """A sentence of a run: its text, and the text nodes it covers with the [start, end) of its
    characters in each."""

    text: str
    spans: list[tuple[NavigableString, int, int]] = field(default_factory=list)


class HtmlDocument:
    """An HTML document or fragment whose `sentences` are translated by `join`."""

    def __init__(self, html: str, lang: str) -> None:
        self.html, self.lang = html, lang
        self.soup = BeautifulSoup(html, "html.parser")
        self._joined = False  # join rewrites the soup: a second join starts from a fresh one
        self._sentences: list[_Sentence] = []
        for run in _runs(self.soup):
            self._sentences.extend(_cut(run, lang))

    @property
    def sentences(self) -> list[str]:
        return [s.text for s in self._sentences]

    def join(self, translations: Sequence[str]) -> str:
        """The document with each sentence replaced by its translation."""
        if len(translations) != len(self._sentences):
            raise ValueError(
                f"{len(translations)} translations for {len(self._sentences)} sentences"
            )
        if self._joined:
            return HtmlDocument(self.html, self.lang).join(translations)
        self._joined = True
        edits: dict[int, list[tuple[int, int, str | Tag]]] = {}
        nodes: dict[int, NavigableString] = {}
        moved: list[Tag] = []  # the inline elements that sentences crossed
        for sentence, translation in zip(self._sentences, translations, strict=True):
            first, start, end = sentence.spans[0]
            replacement: str | Tag = translation
            for wrapper in _crossed(sentence):
                outer = self.soup.new_tag(wrapper.name, attrs=dict(wrapper.attrs))
                outer.append(replacement)
                replacement = outer
                moved.append(wrapper)
            edits.setdefault(id(first), []).append((start, end, replacement))
            nodes[id(first)] = first
            for node, s, e in sentence.spans[1:]:
                edits.setdefault(id(node), []).append((s, e, ""))
                nodes[id(node)] = node
        for key, node in nodes.items():
            _rewrite(node, sorted(edits[key], key=lambda edit: edit[0]))
        _remove_emptied(moved)
        return str(self.soup)


def _runs(root: Tag) -> list[list[NavigableString]]:
    """The text nodes of `root`, in runs that end at block boundaries and untouched elements
    (walked with a stack of the open elements' children, not by recursion)."""
    inline = _inline_tags(root)
    runs: list[list[NavigableString]] = [[]]
    open_children = [iter(root.children)]
    while open_children:
        node = next(open_children[-1], None)
        if node is None:  # the end of an element: a block boundary
            open_children.pop()
            runs.append([])
        elif isinstance(node, NavigableString):
            if not isinstance(node, NOT_TEXT):
                runs[-1].append(node)
        elif isinstance(node, Tag) and node.name in UNTOUCHED:
            runs.append([])
        elif isinstance(node, Tag) and id(node) in inline:
            runs[-1].extend(_texts(node))
        elif isinstance(node, Tag):
            runs.append([])
            open_children.append(iter(node.children))
    return [run for run in runs if "".join(run).strip()]


def _inline_tags(root: Tag) -> set[int]:
    """The ids of the inline elements of `root` that hold only text, `br` and such elements
    (no block, nothing untouched): each element after its descendants, without recursion."""
    inline: set[int] = set()
    for tag in reversed([t for t in root.descendants if isinstance(t, Tag)]):
        if tag.name in INLINE and all(
            isinstance(child, NavigableString) or child.name == "br" or id(child) in inline
            for child in tag.children
        ):
            inline.add(id(tag))
    return inline


def _remove_emptied(moved: list[Tag]) -> None:
    """Removes the elements that the sentences they held left empty (each sentence's copy of them
    holds it now), and those that this leaves empty in turn."""
    removable = {id(tag) for tag in moved}
    for tag in moved:
        while id(tag) in removable and tag.parent is not None and not _holds_any(tag):
            removable.discard(id(tag))
            parent = tag.parent
            tag.decompose()
            tag = parent


def _holds_any(tag: Tag) -> bool:
    """Whether an element holds an element or text (its children only: no walk to the end of a
    deep subtree)."""
    return any(isinstance(child, Tag) or str(child) for child in tag.contents)


def _texts(tag: Tag) -> list[NavigableString]:
    return [
        s for s in tag.descendants if isinstance(s, NavigableString) and not isinstance(s, NOT_TEXT)
    ]


def _cut(run: list[NavigableString], lang: str) -> list[_Sentence]:
    """The sentences of a run of text nodes, each with the pieces of the nodes it covers."""
    text = "".join(run)
    bounds, offset = [], 0
    for node in run:
        bounds.append((node, offset, offset + len(node)))
        offset += len(node)
    sentences, position = [], 0
    for before, sentence, after in split_sentences(text, lang).parts:
        start = position + len(before)
        end = start + len(sentence)
        position = end + len(after)
        if not sentence:
            continue
        spans = [
            (node, max(start, a) - a, min(end, b) - a)
            for node, a, b in bounds
            if a < end and start < b and max(start, a) < min(end, b)
        ]
        sentences.append(_Sentence(sentence, spans))
    return sentences


def _crossed(sentence: _Sentence) -> list[Tag]:
    """The inline elements a sentence crosses: around some of its text nodes but not the first,
    innermost first."""
    first = sentence.spans[0][0]
    around_first = {id(p) for p in first.parents}
    crossed: dict[int, Tag] = {}
    for node, _, _ in sentence.spans[1:]:
        for parent in node.parents:  # up to the first element already met (its own are too)
            if id(parent) in around_first or id(parent) in crossed:
                break
            crossed[id(parent)] = parent
    return list(crossed.values())


def _rewrite(node: NavigableString, edits: list[tuple[int, int, str | Tag]]) -> None:
    """Replace character ranges of a text node (sorted, not overlapping) by text or elements."""
    text, parts, position = str(node), [], 0
    for start, end, new in edits:
        parts.extend([text[position:start], new])
        position = end
    parts.append(text[position:])
    merged: list[str | Tag] = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif not isinstance(part, str) or part:
            merged.append(part)
    node.replace_with(*[NavigableString(p) if isinstance(p, str) else p for p in merged or [""]])


__all__ = ["HtmlDocument"]
