"""HTML fragments translated with their markup kept: tag by tag, the structure of the output equals
the input's (names, attributes, order, nesting) where no sentence crosses an inline tag; a sentence
that crosses one is translated whole and the tag wraps it; untouched elements stay untouched."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from qkv.apps.html import HtmlDocument

FRAGMENTS = [
    "<p>First sentence. Second one.</p>",
    '<div class="x"><h1 id="t">Title here</h1><p>Text. <b>Bold.</b> More text.</p></div>',
    "<ul><li>Item one</li><li>Item two. <i>Italic three.</i></li></ul>",
    "<table><tr><td>A cell.</td><td>Another cell.</td></tr></table>",
    '<p>A &amp; B &lt;ok&gt;. <a href="/x?a=1&amp;b=2" title="Link.">Link text.</a></p>',
    "<!DOCTYPE html><html><head><title>Page title.</title></head>"
    "<body><!-- a comment. --><p>Body text.</p><br/><img alt='An image.' src='a.png'/></body></html>",
    "<p>Use <code>print(x)</code> here.</p><pre>keep. this.</pre><script>var s = 'a. b.';</script>"
    "<style>p { color: red; }</style>",
    "Plain text. No tags at all.",
    "<p>Line one.<br>Line two.</p>\n<p>\n  Indented text.\n</p>",
]


def structure(html: str) -> list[tuple[str, dict]]:
    return [(t.name, dict(t.attrs)) for t in BeautifulSoup(html, "html.parser").find_all(True)]


@pytest.mark.parametrize("html", FRAGMENTS)
def test_the_structure_is_kept_tag_by_tag(html: str) -> None:
    page = HtmlDocument(html, "en")
    out = page.join([f"[{s.upper()}]" for s in page.sentences])
    assert structure(out) == structure(html)
    assert HtmlDocument(html, "en").join(page.sentences) == str(BeautifulSoup(html, "html.parser"))
    for s in page.sentences:
        assert f"[{s.upper()}]" in BeautifulSoup(out, "html.parser").get_text()


def test_untouched_elements_and_comments_are_not_translated() -> None:
    page = HtmlDocument(FRAGMENTS[6], "en")
    assert page.sentences == ["Use", "here."]
    out = BeautifulSoup(page.join(["X", "Y."]), "html.parser")
    assert out.code.string == "print(x)" and out.pre.string == "keep. this."
    assert out.script.string == "var s = 'a. b.';" and out.style.string == "p { color: red; }"
    assert HtmlDocument(FRAGMENTS[5], "en").sentences == ["Page title.", "Body text."]


def test_entities_round_trip_and_attributes_stay() -> None:
    page = HtmlDocument(FRAGMENTS[4], "en")
    assert page.sentences == ["A & B <ok>.", "Link text."]
    out = page.join(["C & D <fine>.", "Verweis."])
    assert (
        out == '<p>C &amp; D &lt;fine&gt;. <a href="/x?a=1&amp;b=2" title="Link.">Verweis.</a></p>'
    )


def test_a_sentence_that_crosses_inline_tags_is_wrapped_by_them() -> None:
    page = HtmlDocument('<p>Click <a href="/go">here</a> to <b>start</b>. Then wait.</p>', "en")
    assert page.sentences == ["Click here to start.", "Then wait."]
    out = page.join(["Klicken Sie hier, um zu beginnen.", "Dann warten."])
    assert out == '<p><b><a href="/go">Klicken Sie hier, um zu beginnen.</a></b> Dann warten.</p>'


def test_a_sentence_inside_one_inline_tag_stays_inside_it() -> None:
    page = HtmlDocument("<p><b>Bold one. Bold two.</b> Plain three.</p>", "en")
    out = page.join(["Eins.", "Zwei.", "Drei."])
    assert out == "<p><b>Eins. Zwei.</b> Drei.</p>"


def test_the_number_of_translations_must_match() -> None:
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        HtmlDocument("<p>One. Two.</p>", "en").join(["Eins."])


def test_join_again_gives_what_a_fresh_document_gives() -> None:
    """A second join (the next best translations) starts from the document as it came, not from
    the page the first join rewrote."""
    html = '<p>Click <a href="/go">here</a> to start. Then wait.</p><p>Bye.</p>'
    page = HtmlDocument(html, "en")
    assert page.join(["A.", "B.", "C."]) == HtmlDocument(html, "en").join(["A.", "B.", "C."])
    assert page.join(["D.", "E.", "F."]) == HtmlDocument(html, "en").join(["D.", "E.", "F."])
    assert page.join(["D.", "E.", "F."]) == '<p><a href="/go">D.</a> E.</p><p>F.</p>'


def test_a_cdata_section_stays_as_it_is_untranslated() -> None:
    """A browser reads CDATA in HTML as a comment: it is kept as it is, as comments are."""
    page = HtmlDocument("<p>One <![CDATA[3 4]]> two.</p><p><![CDATA[x. y.]]></p>", "en")
    assert page.sentences == ["One  two."]
    assert page.join(["Eins zwei."]) == "<p>Eins zwei.<![CDATA[3 4]]></p><p><![CDATA[x. y.]]></p>"


@pytest.mark.parametrize(
    ("opening", "closing", "depth"),
    [("<div>", "</div>", 10_000), ("<i>", "</i>", 1_400), ('<span class="s">', "</span>", 5_000)],
)
def test_deep_nesting_is_translated_without_recursion(
    opening: str, closing: str, depth: int
) -> None:
    """Thousands of nested elements (Python's recursion limit is 1,000): read and written back."""
    html = opening * depth + "One. Two." + closing * depth
    page = HtmlDocument(html, "en")
    assert page.sentences == ["One.", "Two."]
    assert page.join(["Eins.", "Zwei."]) == opening * depth + "Eins. Zwei." + closing * depth


def test_a_sentence_crossing_deeply_nested_inline_tags_is_wrapped_by_them() -> None:
    """One sentence across 2,000 nested inline elements, a word in each: translated whole, the
    elements it crossed around it, the first one's where it was."""
    html = "<p>" + "<b>w " * 2000 + "end." + "</b>" * 2000 + "</p>"
    page = HtmlDocument(html, "en")
    assert page.sentences == ["w " * 2000 + "end."]
    out = page.join(["X."])
    assert BeautifulSoup(out, "html.parser").get_text() == "X."
    assert out == "<p>" + "<b>" * 2000 + "X." + "</b>" * 2000 + "</p>"
