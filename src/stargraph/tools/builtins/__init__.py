"""The seed's 14 built-in tools, shipped as example plugins with local fakes.

=====  ========================  ======================  ====  ===============================
 #     tool                      locks                   host  here
=====  ========================  ======================  ====  ===============================
 1     ``choir.exec``            ``workspace:X``         no    stargraph's own plugin
 2     ``choir.fs.read``         ``file:{path}:S``       no    stargraph's own plugin
 3     ``choir.fs.write``        ``file:{path}:X``       no    stargraph's own plugin
 4     ``choir.fs.search``       ``file:{path}:S``       no    stargraph's own plugin
 5     ``choir.tts.speak``       ``choirtmp:X``          no    :class:`SpeechPlugin`
 6     ``choir.web.search``      --                      no    :class:`WebPlugin` (Brave API)
 7     ``choir.web.browse``      ``browser_tab:{tab}:X`` yes   :class:`WebPlugin` +
                                                               :class:`BrowserHost`
 8     ``choir.notion.query``    --                      no    :class:`NotionPlugin`
 9     ``choir.email.send``      --                      no    :class:`EmailPlugin` (SMTP)
 10    ``choir.email.receive``   --                      no    :class:`EmailPlugin` (IMAP)
 11    ``choir.email.check``     --                      no    :class:`EmailPlugin` (IMAP)
 12    ``choir.memory.query``    ``memory:S``            yes   :class:`MemoryPlugin` +
                                                               :class:`MemoryHost`
 13    ``choir.memory.upsert``   ``memory:X``            yes   :class:`MemoryPlugin` +
                                                               :class:`MemoryHost`
 14    ``choir.memory.compact``  ``memory:X``            no    :class:`MemoryPlugin`
=====  ========================  ======================  ====  ===============================

Each plugin registers its tools through the ``register_tools`` hook, exactly as a
third-party plugin would; each tool has both views (a :class:`~stargraph.tools.ToolSpec`),
a pydantic argument model checked before anything is locked, its side effect, locks,
timeout and secrets declared, and runs only through the arbiter. Host-executed tools are
delegated by the arbiter to its :class:`~stargraph.tools.ToolHost` (``Arbiter(host=...)``)
with the same locks and commit log as local ones.

The services behind them are real protocols against local fakes: Brave's and Notion's
HTTP APIs served on 127.0.0.1 (:class:`LocalBraveServer` over a SQLite FTS5 index,
:class:`LocalNotionServer`), SMTP and IMAP (:class:`LocalMailServer`), a web site for the
browser host (:class:`LocalSite`), memory in SQLite with embeddings (:class:`MemoryStore`),
and a deterministic synthesizer writing WAV files (:class:`ToneSynthesizer`).
:class:`LocalServices` starts them all with demo content::

    with LocalServices() as services:
        registry = Registry.build(get_plugin_manager(plugins=services.plugins))
        with registry.arbiter(workspace, host=services.host, secrets=services.secrets) as arb:
            arb.dispatch(ToolCall(tool="choir.web.search", args={"q": "capital of France"}))
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Final, Self

from pydantic import JsonValue

from stargraph._lifecycle import Started
from stargraph.tools._host import HostHandlers
from stargraph.tools.builtins import _memory
from stargraph.tools.builtins._email import (
    EmailCheckArgs,
    EmailPlugin,
    EmailReceiveArgs,
    EmailSendArgs,
    LocalMailServer,
    email_tools,
)
from stargraph.tools.builtins._local import HttpAnswer, HttpRequest, LocalHTTPServer
from stargraph.tools.builtins._memory import *
from stargraph.tools.builtins._notion import (
    LocalNotionServer,
    NotionPlugin,
    NotionQueryArgs,
    notion_query_tool,
)
from stargraph.tools.builtins._speech import (
    SpeakArgs,
    SpeechPlugin,
    Synthesizer,
    ToneSynthesizer,
    tts_tool,
)
from stargraph.tools.builtins._web import (
    BRAVE_ENDPOINT,
    BrowseArgs,
    BrowserHost,
    LocalBraveServer,
    LocalSearchIndex,
    LocalSite,
    WebPage,
    WebPlugin,
    WebSearchArgs,
    web_browse,
    web_search_tool,
)

__all__ = [
    "BRAVE_ENDPOINT",
    "BUILTIN_TOOLS",
    "BrowseArgs",
    "BrowserHost",
    "DEMO_NOTION",
    "DEMO_PAGES",
    "EmailCheckArgs",
    "EmailPlugin",
    "EmailReceiveArgs",
    "EmailSendArgs",
    "HttpAnswer",
    "HttpRequest",
    "LocalBraveServer",
    "LocalHTTPServer",
    "LocalMailServer",
    "LocalNotionServer",
    "LocalSearchIndex",
    "LocalServices",
    "LocalSite",
    "NotionPlugin",
    "NotionQueryArgs",
    "SpeakArgs",
    "SpeechPlugin",
    "Synthesizer",
    "ToneSynthesizer",
    "WebPage",
    "WebPlugin",
    "WebSearchArgs",
    "email_tools",
    "notion_query_tool",
    "tts_tool",
    "web_browse",
    "web_search_tool",
]
# The memory tools' names are listed once, in _memory.__all__.
__all__ += _memory.__all__
__all__.sort()

BUILTIN_TOOLS: Final = (
    "choir.exec",
    "choir.fs.read",
    "choir.fs.write",
    "choir.fs.search",
    "choir.tts.speak",
    "choir.web.search",
    "choir.web.browse",
    "choir.notion.query",
    "choir.email.send",
    "choir.email.receive",
    "choir.email.check",
    "choir.memory.query",
    "choir.memory.upsert",
    "choir.memory.compact",
)
"""The seed's 14 built-in tool names, in its table's order."""

DEMO_PAGES: Final = (
    WebPage(
        path="/paris",
        title="Paris",
        text="Paris is the capital of France.\n\nIt lies on the Seine.",
        links=("/lyon",),
    ),
    WebPage(
        path="/lyon",
        title="Lyon",
        text="Lyon is a city in France, where the Rhone meets the Saone.",
        links=("/paris",),
    ),
    WebPage(
        path="/tokyo",
        title="Tokyo",
        text="Tokyo is the capital of Japan.",
    ),
)
"""The demo web site of :class:`LocalServices`."""

DEMO_NOTION: Final[dict[str, list[dict[str, JsonValue]]]] = {
    "0f1e2d3c4b5a69788796a5b4c3d2e1f0": [
        {"Name": "Ship the login page", "Status": "Done", "Points": 3},
        {"Name": "Write the release notes", "Status": "Doing", "Points": 1},
        {"Name": "Plan the login audit", "Status": "Todo", "Points": 2},
    ]
}
"""The demo Notion workspace of :class:`LocalServices`: one task database."""


class LocalServices(Started):
    """Every example service on 127.0.0.1 with demo content, plus what uses them:
    :attr:`plugins` (pass to ``get_plugin_manager(plugins=...)``), :attr:`host` (the tool
    host for ``Arbiter(host=...)``) and :attr:`secrets` (for ``Arbiter(secrets=...)``).

    The agent's address is :attr:`address`; a second user, ``ada@example.test``, can
    receive its mail.
    """

    address: Final = "agent@example.test"
    secrets: Final = MappingProxyType(
        {
            "brave_api_key": "brave-local-key",
            "notion_token": "secret_local_notion_token",
            "email_password": "agent-mail-password",
        }
    )

    def __init__(
        self,
        *,
        pages: Sequence[WebPage] = DEMO_PAGES,
        notion: dict[str, list[dict[str, JsonValue]]] | None = None,
        synthesizer: Synthesizer | None = None,
        voice: str = "default",
    ) -> None:
        self.site = LocalSite(pages)
        self.notion = LocalNotionServer(
            DEMO_NOTION if notion is None else notion, token=self.secrets["notion_token"]
        )
        self.mail = LocalMailServer(
            {self.address: self.secrets["email_password"], "ada@example.test": "ada-password"}
        )
        self.memory = _memory.MemoryStore()
        self.browser = BrowserHost()
        self._synthesizer = synthesizer
        self._voice = voice
        self.brave: LocalBraveServer | None = None
        self.plugins: tuple[Any, ...] = ()
        self.host = HostHandlers()

    def start(self) -> Self:
        """Start every server and build the plugins and the host."""
        self.site.start()
        self.notion.start()
        self.mail.start()
        self.brave = LocalBraveServer(self.site.index(), api_key=self.secrets["brave_api_key"])
        self.brave.start()
        memory = _memory.MemoryPlugin(self.memory)
        self.plugins = (
            memory,
            SpeechPlugin(self._synthesizer, voice=self._voice),
            WebPlugin(search_endpoint=self.brave.endpoint),
            NotionPlugin(endpoint=self.notion.url),
            EmailPlugin.for_server(self.mail, self.address),
        )
        self.host = HostHandlers(self.browser.handlers()) | memory.host().handlers()
        return self

    def close(self) -> None:
        """Stop every server and close the memory store."""
        if self.brave is not None:
            self.brave.close()
            self.brave.index.close()
        self.mail.close()
        self.notion.close()
        self.site.close()
        self.memory.close()
