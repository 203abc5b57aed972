"""The manual holds together: every relative link in README.md and docs/*.md reaches a file and,
with an #anchor, a heading of it; every page says what it is for and the index lists it; the
generated tables are current; and the README's client example runs against the stub engine."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from targets import REPO, Target

DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$", re.MULTILINE)
RUNNABLE = re.compile(r"<!-- runnable: client -->\n```python\n(.*?)```", re.DOTALL)


def prose(text: str) -> str:
    """*text* without its fenced code blocks (a ``# comment`` in one is no heading)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text, lower case, without punctuation, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts by its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of *page*, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    for match in HEADING.finditer(prose(page.read_text())):
        base = slug(match[2])
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out


def links(page: Path) -> list[str]:
    """The targets of the markdown links in *page*'s prose (not in code)."""
    return LINK.findall(CODE_SPAN.sub("", prose(page.read_text())))


def broken_links(page: Path) -> list[str]:
    """The relative links of *page* whose file or anchor does not exist, each with why."""
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file}")
    return broken


def test_the_slugs_are_githubs():
    assert slug("`POST /weight_swap/begin`, `POST /weight_swap/commit`") == "post-weight_swapbegin-post-weight_swapcommit"
    assert slug("SGLang data parallelism (`--dp-size`)") == "sglang-data-parallelism---dp-size"
    assert slug("The [client](x.md) in 20 lines") == "the-client-in-20-lines"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES[1:], ids=[p.name for p in PAGES[1:]])
def test_every_page_says_what_it_is_for_and_is_listed(page):
    lines = [line for line in page.read_text().splitlines() if line.strip()]
    assert lines[0].startswith("# "), "a page starts with its title"
    assert not lines[1].startswith(("#", "|", "```", "-")), "then a line saying what the page is for"
    if page.name != "README.md":
        assert f"]({page.name})" in (DOCS / "README.md").read_text(), "docs/README.md lists every page"


def test_the_generated_tables_are_current():
    done = subprocess.run([sys.executable, "-m", "tools.docs_tables", "--check"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_readme_stays_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo " in text and "make test " in text
    assert 'readme = "README.md"' in (REPO / "pyproject.toml").read_text()


@pytest.mark.targets("stub")
def test_the_readme_example_runs_against_the_stub(target: Target):
    source = RUNNABLE.search((REPO / "README.md").read_text())[1]
    # The example's server and key, replaced by the stub's: the rest runs as printed.
    assert source.count('"http://127.0.0.1:30000"') == 1 and source.count("API_KEY = None") == 1
    source = source.replace('"http://127.0.0.1:30000"', repr(target.url)).replace("API_KEY = None", f"API_KEY = {target.api_key!r}")
    done = subprocess.run([sys.executable, "-c", source], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    committed, tokens, loads = done.stdout.splitlines()
    assert committed == "swap committed everywhere: True"
    count, spans = re.fullmatch(r"tokens: (\d+) spans: (.*)", tokens).groups()
    spans = eval(spans)  # the example prints a list of dicts
    assert int(count) == 400 and spans[0]["start"] == 0 and spans[-1]["end"] == 400
    assert all(a["end"] == b["start"] for a, b in zip(spans, spans[1:])), "the spans cover every token once"
    assert loads == f"{target.url} version: step-1 in flight: 0"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Part `one`\n\n```\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#part-one) [no file](c.md) [no anchor](a.md#not-a-heading) `[code](x.md)`\n")
    assert [b.split(":")[0] for b in broken_links(page)] == ["c.md", "a.md#not-a-heading"]
