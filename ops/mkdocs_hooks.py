"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks: [ops/mkdocs_hooks.py]``).

The site is built from the files as they are in the repository, so that GitHub and the site show the same
text: ``README.md`` becomes the front page, and a few Markdown files outside ``docs/`` (the changelog, the
runbook, the acceptance suite's README) become pages too. Links are written for the repository (relative to
each file); here they are rewritten to the site's pages. A link to a repository file that is no page
(``ops/gateway.example.toml``) becomes its path in code, so ``mkdocs build --strict`` finds no broken link.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]

EXTRA_PAGES = {
    # repository path → page path in the site
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
    "ops/RUNBOOK.md": "runbook.md",
    "acceptance/README.md": "acceptance.md",
}
_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]\n]+)\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def on_files(files: Files, config: Any) -> Files:
    for source, page in EXTRA_PAGES.items():
        content = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=content))
    return files


def _repo_path(page_src: str) -> str:
    for source, page in EXTRA_PAGES.items():
        if page == page_src:
            return source
    return f"docs/{page_src}"


def _site_page(repo_path: str) -> str | None:
    if repo_path in EXTRA_PAGES:
        return EXTRA_PAGES[repo_path]
    if repo_path.startswith("docs/") and repo_path.endswith(".md"):
        return repo_path.removeprefix("docs/")
    if repo_path.rstrip("/") == "docs":
        return "index.md"
    return None


def rewrite_links(markdown: str, page_src: str) -> str:
    """Rewrite the repository-relative links of one page (``page_src``: its path in the site)."""
    here = posixpath.dirname(_repo_path(page_src))
    page_dir = posixpath.dirname(page_src)

    def one(match: re.Match[str]) -> str:
        text, target = match.group("text"), match.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)  # an absolute URL or an anchor of this page
        path, _, anchor = target.partition("#")
        repo_path = posixpath.normpath(posixpath.join(here, path))
        page = _site_page(repo_path)
        if page is None:
            shown = repo_path + ("/" if path.endswith("/") else "")
            return text if text.strip("`") == shown or text.strip("`") == path else f"{text} (`{shown}`)"
        relative = posixpath.relpath(page, page_dir or ".")
        return f"[{text}]({relative}{'#' + anchor if anchor else ''})"

    out, last = [], 0
    for fence in _FENCE.finditer(markdown):  # never touch code blocks
        out.append(_LINK.sub(one, markdown[last : fence.start()]))
        out.append(fence.group(0))
        last = fence.end()
    out.append(_LINK.sub(one, markdown[last:]))
    return "".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return rewrite_links(markdown, page.file.src_uri)
