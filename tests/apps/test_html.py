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
    assert out == '<p>C &amp; D &lt;fine&gt;. <a href="/x?a=1&amp;b=2" title="Link.">Verweis.</a></p>'


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
