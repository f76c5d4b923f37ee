"""HTML documents around the translator: the text translated, the markup kept.

    page = HtmlDocument('<p>Click <a href="/go">here</a> to start. <b>Now.</b></p>', "en")
    page.sentences          # ['Click here to start.', 'Now.']
    page.join(["Klicken Sie hier, um zu beginnen.", "Jetzt."])
    # '<p><a href="/go">Klicken Sie hier, um zu beginnen.</a> <b>Jetzt.</b></p>'

The page is parsed with BeautifulSoup (Python's own html.parser): tags, attributes, entities,
comments and the structure stay as they are; only text changes. Text is read in runs: the text
and inline elements (`a`, `b`, `em`, `span`, ...) between two block boundaries, cut into
sentences as plain text is (`qkv.apps.documents`). A sentence inside one text node is replaced
there. A sentence that crosses inline tags ("Click <a>here</a> to start.") is translated whole,
and the inline tags it crossed move to its edges: they wrap the whole translated sentence (qkv
does not guess where the linked words went). The text of `script`, `style`, `code`, `pre`,
`textarea`, `kbd`, `samp` and `var` is never translated, and such an element ends a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import Comment, Declaration, Doctype, ProcessingInstruction

from .documents import split_sentences

UNTOUCHED = {"script", "style", "code", "pre", "textarea", "kbd", "samp", "var", "template"}
INLINE = {
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "dfn", "em", "font", "i", "ins", "del",
    "label", "mark", "q", "s", "small", "span", "strong", "sub", "sup", "time", "u",
}  # fmt: skip
NOT_TEXT = (Comment, Declaration, Doctype, ProcessingInstruction)


@dataclass
class _Sentence:
    """A sentence of a run: its text, and the text nodes it covers with the [start, end) of its
    characters in each."""

    text: str
    spans: list[tuple[NavigableString, int, int]] = field(default_factory=list)


class HtmlDocument:
    """An HTML document or fragment whose `sentences` are translated by `join`."""

    def __init__(self, html: str, lang: str) -> None:
        self.soup = BeautifulSoup(html, "html.parser")
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
        for tag in moved:  # what a moved sentence left empty goes (its copy holds the sentence)
            if tag.parent is not None and not tag.get_text() and not tag.find(True):
                tag.decompose()
        return str(self.soup)


def _runs(root: Tag) -> list[list[NavigableString]]:
    """The text nodes of `root`, in runs that end at block boundaries and untouched elements."""
    runs: list[list[NavigableString]] = [[]]
    for node in root.children:
        if isinstance(node, NavigableString):
            if not isinstance(node, NOT_TEXT):
                runs[-1].append(node)
        elif isinstance(node, Tag) and node.name in UNTOUCHED:
            runs.append([])
        elif isinstance(node, Tag) and node.name in INLINE and _is_inline(node):
            runs[-1].extend(_texts(node))
        elif isinstance(node, Tag):
            runs.extend(_runs(node))
            runs.append([])
    return [run for run in runs if "".join(run).strip()]


def _is_inline(tag: Tag) -> bool:
    """Whether a tag holds only text and inline elements (no block, nothing untouched)."""
    return all(
        isinstance(child, NavigableString)
        or (child.name in INLINE and _is_inline(child))
        or child.name == "br"
        for child in tag.children
    )


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
        for parent in node.parents:
            if id(parent) in around_first:
                break
            crossed.setdefault(id(parent), parent)
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
