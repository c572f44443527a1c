"""``choir.web.search`` (Brave Search API) and ``choir.web.browse`` (host-delegated browser).

* ``choir.web.search`` is a local tool speaking the Brave Search API: ``GET
  /res/v1/web/search?q=&count=&offset=`` with the ``X-Subscription-Token`` header, the key
  coming from the secret ``brave_api_key`` (declared, so only this tool ever sees it). The
  example fake is :class:`LocalBraveServer`, answering in Brave's JSON shape from a
  :class:`LocalSearchIndex` (SQLite FTS5, ranked with BM25).
* ``choir.web.browse`` is executed by the host (the seed: "Playwright via host
  EXECUTE_HOST_TOOL"), under the lock ``browser_tab:{tab}:X`` so two calls never drive one
  tab at once while different tabs browse in parallel. Its side effect is ``external``
  (a browser can submit things), so every call also leaves an audit record. The host side
  here is :class:`BrowserHost`: one loaded page per tab, fetched over HTTP and read as text,
  title and links -- a stand-in for Playwright that needs no browser. :class:`LocalSite`
  serves pages on 127.0.0.1 for it.
"""

from __future__ import annotations

import html
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from typing import Annotated, Any, Final
from urllib.parse import urlencode, urljoin, urlsplit

from pydantic import Field

from stargraph._typed import TypedModel
from stargraph.errors import ToolArgumentError, ToolError, ToolTimeoutError
from stargraph.plugin.hookspecs import hookimpl
from stargraph.tools._host import HostHandler, HostRequest, HostTool, host_tool
from stargraph.tools._result import ToolOutput
from stargraph.tools._tool import PythonTool, ToolContext
from stargraph.tools.builtins._local import (
    FROZEN,
    HttpAnswer,
    HttpRequest,
    LocalHTTPServer,
    http_json,
    keyed_network_tool,
    parse_host_args,
    required_secret,
)

__all__ = [
    "BRAVE_ENDPOINT",
    "BrowseArgs",
    "BrowserHost",
    "LocalBraveServer",
    "LocalSearchIndex",
    "LocalSite",
    "WebPage",
    "WebPlugin",
    "WebSearchArgs",
    "web_browse",
    "web_search_tool",
]

BRAVE_ENDPOINT: Final = "https://api.search.brave.com/res/v1/web/search"
"""The real Brave Search web endpoint (the default of :func:`web_search_tool`)."""

_BRAVE_PATH: Final = "/res/v1/web/search"
_PAGE_LIMIT: Final = 2_000_000


# --------------------------------------------------------------------------- search


class WebSearchArgs(TypedModel):
    """Search the web (Brave Search) and return titles, URLs and snippets."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    q: Annotated[str, Field(min_length=1, max_length=400, description="The search query.")]
    count: Annotated[int, Field(ge=1, le=20, description="How many results.")] = 5
    offset: Annotated[int, Field(ge=0, le=9, description="Result page, from 0.")] = 0


def web_search_tool(endpoint: str = BRAVE_ENDPOINT) -> PythonTool:
    """``choir.web.search@1.0.0`` against the Brave-compatible ``endpoint``."""

    @keyed_network_tool("choir.web.search@1.0.0", WebSearchArgs, "brave_api_key")
    def web_search(ctx: ToolContext, args: WebSearchArgs) -> ToolOutput:
        """Search the web (Brave Search); return titles, URLs and snippets."""
        key = required_secret(ctx, "brave_api_key")
        query = urlencode({"q": args.q, "count": args.count, "offset": args.offset})
        data = http_json(
            ctx,
            f"{endpoint}?{query}",
            headers={"Accept": "application/json", "X-Subscription-Token": key},
            service="Brave Search",
        )
        results = _brave_results(ctx, data)
        return ToolOutput(
            summary=f"{len(results)} results for {args.q!r}",
            payload={"query": args.q, "results": results},
        )

    return web_search


def _brave_results(ctx: ToolContext, data: Any) -> list[dict[str, str]]:
    web = data.get("web") if isinstance(data, dict) else None
    raw = web.get("results") if isinstance(web, dict) else []
    if not isinstance(raw, list):
        raise ToolError(f"tool {ctx.tool!r}: Brave Search answered without a web.results list")
    results = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            raise ToolError(f"tool {ctx.tool!r}: Brave Search answered a result without a url")
        results.append(
            {
                "title": str(item.get("title", "")),
                "url": item["url"],
                "description": str(item.get("description", "")),
            }
        )
    return results


class LocalSearchIndex:
    """A local web index: pages by URL, searched with SQLite FTS5 (BM25)."""

    def __init__(self) -> None:
        from stargraph.skills.refs.stores import SqliteDocumentStore

        self._store = SqliteDocumentStore(":memory:")
        self._snippets: dict[str, str] = {}

    def add(self, url: str, title: str, text: str) -> None:
        """Index one page (a second ``add`` of a URL replaces it)."""
        from stargraph.skills.refs.stores import Passage

        self._store.add([Passage(id=url, text=f"{title}\n{text}", source=url, title=title)])
        self._snippets[url] = " ".join(text.split())[:200]

    def search(self, query: str, *, count: int, offset: int = 0) -> list[dict[str, str]]:
        """Results ``offset*count`` .. ``+count``, best first: title, url, description."""
        hits = self._store.search(query, k=count * (offset + 1))[offset * count :]
        passages = {p.id: p for p in self._store.get([h.id for h in hits])}
        return [
            {"title": passages[h.id].title, "url": h.id, "description": self._snippets[h.id]}
            for h in hits
        ]

    def close(self) -> None:
        """Drop the index."""
        self._store.close()


class LocalBraveServer(LocalHTTPServer):
    """The Brave Search web endpoint on 127.0.0.1, answering from a :class:`LocalSearchIndex`.

    It checks what Brave checks: the ``X-Subscription-Token`` (401 otherwise) and ``q``
    (422 when missing or longer than 400 characters); ``count`` is capped at 20.
    """

    def __init__(self, index: LocalSearchIndex, *, api_key: str) -> None:
        super().__init__()
        self.index = index
        self._api_key = api_key

    @property
    def endpoint(self) -> str:
        """The URL to give :func:`web_search_tool`."""
        return self.url + _BRAVE_PATH

    def answer(self, request: HttpRequest) -> HttpAnswer:
        """Brave's web search answer (or its error shape)."""
        if request.method != "GET" or request.path != _BRAVE_PATH:
            return super().answer(request)
        if request.headers.get("x-subscription-token") != self._api_key:
            return _brave_error(401, "SUBSCRIPTION_TOKEN_INVALID", "The provided token is invalid")
        q = (request.query.get("q") or [""])[0]
        if not q or len(q) > 400:
            return _brave_error(422, "VALIDATION", "q must have 1 to 400 characters")
        try:
            count = min(int((request.query.get("count") or ["20"])[0]), 20)
            offset = min(int((request.query.get("offset") or ["0"])[0]), 9)
        except ValueError:
            return _brave_error(422, "VALIDATION", "count and offset must be integers")
        results = [
            {"type": "search_result", **r}
            for r in self.index.search(q, count=max(count, 1), offset=max(offset, 0))
        ]
        return HttpAnswer.of_json(
            200,
            {
                "type": "search",
                "query": {"original": q},
                "web": {"type": "search", "results": results},
            },
        )


def _brave_error(status: int, code: str, detail: str) -> HttpAnswer:
    return HttpAnswer.of_json(
        status,
        {"type": "ErrorResponse", "error": {"code": code, "status": status, "detail": detail}},
    )


# --------------------------------------------------------------------------- browse


class BrowseArgs(TypedModel):
    """Open a URL in a browser tab and return the page's title, text and links."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    url: Annotated[
        str,
        Field(
            pattern=r"^https?://[^\s/$.?#][^\s]*$",
            max_length=2048,
            description="http:// or https:// URL to open.",
        ),
    ]
    tab: Annotated[
        str,
        Field(
            pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$",
            description="Browser tab to use (calls on one tab run one at a time).",
        ),
    ] = "main"
    max_chars: Annotated[int, Field(ge=1, le=100_000, description="Text to return, at most.")] = (
        4000
    )


web_browse: Final[HostTool] = host_tool(
    id="choir.web.browse@1.0.0",
    args_model=BrowseArgs,
    side_effect="external",
    locks=("browser_tab:{tab}:X",),
    network=True,
    timeout_s=30,
)
"""``choir.web.browse@1.0.0``: executed by the host (:class:`BrowserHost` here)."""


class WebPage(TypedModel):
    """One page of a :class:`LocalSite`."""

    typed_error = ToolError

    model_config = FROZEN

    path: str = Field(pattern=r"^/[^\s]*$", description="URL path, e.g. '/paris'.")
    title: str
    text: str
    links: tuple[str, ...] = Field((), description="Paths (or URLs) this page links to.")

    def html(self) -> str:
        """The page as HTML (a script and a style block too, which readers must skip)."""
        paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in self.text.split("\n\n") if p)
        links = "".join(
            f'<li><a href="{html.escape(link, quote=True)}">{html.escape(link)}</a></li>'
            for link in self.links
        )
        return (
            f"<!doctype html><html><head><title>{html.escape(self.title)}</title>"
            "<style>p { margin: 0 }</style></head><body>"
            f"<h1>{html.escape(self.title)}</h1>{paragraphs}<ul>{links}</ul>"
            "<script>document.title = 'changed by script';</script></body></html>"
        )


class LocalSite(LocalHTTPServer):
    """A small web site on 127.0.0.1 serving :class:`WebPage` objects as HTML."""

    def __init__(self, pages: Iterable[WebPage]) -> None:
        super().__init__()
        self.pages = {page.path: page for page in pages}

    def url_of(self, path: str) -> str:
        """The absolute URL of ``path``."""
        return self.url + path

    def index(self) -> LocalSearchIndex:
        """A search index over every page, by absolute URL."""
        index = LocalSearchIndex()
        for page in self.pages.values():
            index.add(self.url_of(page.path), page.title, page.text)
        return index

    def answer(self, request: HttpRequest) -> HttpAnswer:
        """The page's HTML, or a 404 page."""
        page = self.pages.get(request.path)
        if request.method != "GET" or page is None:
            body = b"<html><head><title>Not found</title></head><body>Not found</body></html>"
            return HttpAnswer(404, body, "text/html; charset=utf-8")
        return HttpAnswer(200, page.html().encode(), "text/html; charset=utf-8")


class _Reader(HTMLParser):
    """Title, visible text and links of an HTML page (script and style skipped)."""

    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.title = ""
        self.links: list[str] = []
        self._chunks: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(urljoin(self.base, href))
        elif tag in ("p", "br", "li", "h1", "h2", "h3", "div", "tr"):
            self._chunks.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self._chunks.append(data)

    @property
    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self._chunks).splitlines())
        return "\n".join(line for line in lines if line)


class BrowserHost:
    """The host side of ``choir.web.browse``: one loaded page per tab.

    A stand-in for Playwright: the page is fetched over HTTP(S) and read as title, visible
    text and absolute links (scripts do not run). ``allowed_hosts`` (host names, default
    any) limits where it may go. :meth:`handlers` plugs it into a
    :class:`~stargraph.tools.HostHandlers`.
    """

    def __init__(self, *, allowed_hosts: Iterable[str] | None = None) -> None:
        self.allowed_hosts = frozenset(allowed_hosts) if allowed_hosts is not None else None
        self._tabs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def handlers(self) -> Mapping[str, HostHandler]:
        """``{"choir.web.browse": self.browse}``."""
        return {"choir.web.browse": self.browse}

    def tab(self, name: str) -> dict[str, Any] | None:
        """What tab ``name`` shows now (url, status, title, text, links), if it was used."""
        with self._lock:
            return self._tabs.get(name)

    def browse(self, request: HostRequest) -> ToolOutput:
        """Open ``request.args['url']`` in its tab."""
        args = parse_host_args(BrowseArgs, request)
        host = urlsplit(args.url).hostname or ""
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            raise ToolError(
                f"tool {request.tool!r}: host {host!r} is not one this browser may visit "
                f"(allowed: {sorted(self.allowed_hosts)})",
                node=request.node,
            )
        status, final_url, body, kind = _fetch(request, args.url)
        reader = _Reader(final_url)
        if "html" in kind or not kind:
            reader.feed(body.decode(errors="replace"))
            reader.close()
            text = reader.text
        else:
            text = body.decode(errors="replace")
        page = {
            "tab": args.tab,
            "url": final_url,
            "status": status,
            "title": " ".join(reader.title.split()),
            "text": text[: args.max_chars],
            "links": list(dict.fromkeys(reader.links))[:50],
        }
        with self._lock:
            self._tabs[args.tab] = page
        return ToolOutput(
            summary=f"tab {args.tab}: HTTP {status} {page['title'] or final_url}", payload=page
        )


def _fetch(request: HostRequest, url: str) -> tuple[int, str, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=request.timeout_s) as response:
            return (
                response.status,
                response.geturl(),
                response.read(_PAGE_LIMIT),
                response.headers.get_content_type(),
            )
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, url, exc.read(_PAGE_LIMIT), exc.headers.get_content_type()
    except TimeoutError:
        raise ToolTimeoutError(f"tool {request.tool!r}: {url} did not answer in time") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ToolError(
            f"tool {request.tool!r}: cannot open {url}: {reason}", node=request.node
        ) from None


class WebPlugin:
    """Example plugin: ``choir.web.search`` (against ``search_endpoint``) and
    ``choir.web.browse`` (host-delegated: give the arbiter a :class:`BrowserHost`)."""

    def __init__(self, *, search_endpoint: str = BRAVE_ENDPOINT) -> None:
        self.search = web_search_tool(search_endpoint)
        self.browse = web_browse

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Register both tools."""
        register(self.search)
        register(self.browse)
