"""Every relative link in README.md, ARCHITECTURE.md and docs/*.md points to a file that exists, and every
``#anchor`` to a heading of that page (GitHub's rule: lowercase, punctuation dropped, spaces to hyphens, a
repeated heading gets -1, -2, ...). Reads the Markdown only: no network, no bertfeat import."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The page without its fenced blocks (a link in a code block is code) and its inline code spans."""
    blank = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # lines keep their numbers
    return re.sub(r"`+[^`\n]*`+", "", blank)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation out; letters, digits, _ and - stay
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """page:line: target (why) for each relative link of the page that points nowhere."""
    text = page.read_text(encoding="utf-8")
    bad = []
    for lineno, line in enumerate(prose(text).splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked (no network)
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                bad.append(f"{page.relative_to(root)}:{lineno}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{page.relative_to(root)}:{lineno}: {target} (no heading #{anchor} in {dest.name})")
    return bad


def test_slug_follows_github():
    assert slug("`make features` for data pipelines") == "make-features-for-data-pipelines"
    assert slug("Matryoshka models (`truncate_dim`)") == "matryoshka-models-truncate_dim"
    assert slug("Errors, overwriting & bad rows") == "errors-overwriting--bad-rows"
    assert slug("[cli](cli.md): every option") == "cli-every-option"


def test_the_checker_sees_a_broken_link(tmp_path):
    """A guard against a checker that passes by reading nothing: a missing file and a missing anchor are named."""
    (tmp_path / "b.md").write_text("# Only heading\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#only-heading) [ok2](b.md#twice-1) [gone](c.md) [anchor](b.md#nowhere)\n"
                    "`[code](d.md)`\n\n```\n[fenced](e.md)\n```\n[self](#top)\n\n# Top\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["a.md:1: c.md (no such file)",
                                            "a.md:1: b.md#nowhere (no heading #nowhere in b.md)"]


def test_every_link_and_anchor_resolves():
    links = sum(len(LINK.findall(prose(p.read_text(encoding="utf-8")))) for p in PAGES)
    assert links > 50  # the pages are read (README.md links to every docs page)
    bad = [b for page in PAGES for b in broken_links(page)]
    assert not bad, "broken links:\n" + "\n".join(bad)
