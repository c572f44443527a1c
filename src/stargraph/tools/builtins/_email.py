"""``choir.email.send`` (SMTP), ``choir.email.receive`` and ``choir.email.check`` (IMAP).

The tools use the standard library's ``smtplib`` and ``imaplib`` clients against the
plugin's servers, logging in as the agent's address with the secret ``email_password``.

* ``send`` submits one message (``AUTH PLAIN``, then ``MAIL``/``RCPT``/``DATA``); its side
  effect is ``external``, so every call also leaves an audit record with its arguments.
  Subject and addresses cannot carry line breaks (no header injection), and the
  ``Message-ID`` is derived from the content, so a retried send is recognisable.
* ``check`` opens the mailbox read-only (``EXAMINE``) and reports the message and unseen
  counts with the sender and subject of the unseen ones (headers fetched with
  ``BODY.PEEK``, which leaves them unseen).
* ``receive`` fetches messages (``RFC822``), which marks them seen on the server -- a
  change to the outside world, hence ``external`` too.

:class:`LocalMailServer` is the example fake: an SMTP submission server and an IMAP4rev1
server (the subset the clients use) on 127.0.0.1, one mailbox per user, run by asyncio on
a background thread. It refuses what a real server refuses: mail before login, a sender
address that is not the logged-in user, recipients it does not host, a bad password.

TLS: given ``tls=`` (an ``ssl.SSLContext``), the fake speaks implicit TLS on both ports
(SMTPS and IMAPS, as ports 465 and 993 do) and the tools given ``tls=`` (a client context)
connect with ``SMTP_SSL`` / ``IMAP4_SSL``, verifying the server's certificate and host name.
A certificate the client does not accept is a :class:`~stargraph.errors.ToolError` saying
why and how to trust the right one; nothing is sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email
import email.policy
import imaplib
import re
import smtplib
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formatdate
from typing import Annotated, Any, Final, Self

from pydantic import BaseModel, Field

from stargraph._lifecycle import Started
from stargraph._typed import TypedModel
from stargraph.errors import ToolArgumentError, ToolError, ToolTimeoutError
from stargraph.plugin.hookspecs import hookimpl
from stargraph.tools._canonical import sha256_hex
from stargraph.tools._result import ToolOutput
from stargraph.tools._spec import SideEffect
from stargraph.tools._tool import PythonTool, ToolContext
from stargraph.tools.builtins._local import FROZEN, keyed_network_tool, required_secret

__all__ = [
    "EmailCheckArgs",
    "EmailPlugin",
    "EmailReceiveArgs",
    "EmailSendArgs",
    "LocalMailServer",
    "email_tools",
]

_ADDRESS = r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}$"
_MAILBOX = r"^[A-Za-z0-9_./-]{1,64}$"
_DATA_LIMIT: Final = 10_000_000

Address = Annotated[str, Field(pattern=_ADDRESS, max_length=254)]


class EmailSendArgs(TypedModel):
    """Send an email from the agent's address."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    to: Annotated[list[Address], Field(min_length=1, max_length=20, description="Recipients.")]
    subject: Annotated[
        str, Field(max_length=200, pattern=r"^[^\r\n]*$", description="One-line subject.")
    ]
    body: Annotated[str, Field(max_length=100_000, description="Plain-text body.")]
    cc: Annotated[list[Address], Field(max_length=20, description="Copy recipients.")] = []


class EmailCheckArgs(TypedModel):
    """Check a mailbox for new (unseen) messages: counts plus sender and subject of each."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    mailbox: Annotated[str, Field(pattern=_MAILBOX, description="Mailbox name.")] = "INBOX"
    max_summaries: Annotated[int, Field(ge=0, le=50, description="Unseen messages listed.")] = 10


class EmailReceiveArgs(TypedModel):
    """Fetch messages (the newest first, unseen only by default); they become seen."""

    typed_error = ToolArgumentError

    model_config = FROZEN

    mailbox: Annotated[str, Field(pattern=_MAILBOX, description="Mailbox name.")] = "INBOX"
    unseen_only: Annotated[bool, Field(description="Only messages not seen yet.")] = True
    limit: Annotated[int, Field(ge=1, le=50, description="At most this many messages.")] = 10
    max_body_chars: Annotated[int, Field(ge=1, le=100_000, description="Body text cut.")] = 4000


@dataclass(frozen=True, slots=True)
class _Endpoint:
    host: str
    smtp_port: int
    imap_port: int
    address: str
    tls: ssl.SSLContext | None = None

    def smtp(self, ctx: ToolContext) -> smtplib.SMTP:
        """An SMTP client connected to the server (over TLS when ``tls`` is set)."""
        if self.tls is None:
            return smtplib.SMTP(self.host, self.smtp_port, timeout=_timeout(ctx))
        return smtplib.SMTP_SSL(self.host, self.smtp_port, timeout=_timeout(ctx), context=self.tls)

    def imap(self, ctx: ToolContext) -> imaplib.IMAP4:
        """An IMAP client connected to the server (over TLS when ``tls`` is set)."""
        if self.tls is None:
            return imaplib.IMAP4(self.host, self.imap_port, timeout=_timeout(ctx))
        return imaplib.IMAP4_SSL(
            self.host, self.imap_port, ssl_context=self.tls, timeout=_timeout(ctx)
        )


def _timeout(ctx: ToolContext) -> float:
    # The socket clients refuse 0 (non-blocking); the arbiter's deadline still holds.
    return max(ctx.remaining(), 0.001)


def _mail_tool(
    id: str, args_model: type[BaseModel], side_effect: SideEffect, *, idempotent: bool = False
) -> Callable[[Callable[..., Any]], PythonTool]:
    """The ``@tool`` of the mail tools: each talks to the mail server over the network,
    within 30 s, with the mailbox password."""
    return keyed_network_tool(
        id,
        args_model,
        "email_password",
        side_effect=side_effect,
        idempotent=idempotent,
        timeout_s=30,
    )


def _mail_error(ctx: ToolContext, service: str, exc: BaseException) -> ToolError:
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or exc.reason or str(exc)
        return ToolError(
            f"tool {ctx.tool!r}: the {service} server's TLS certificate was not accepted "
            f"({reason}); nothing was sent (fix: connect to the host name the certificate "
            "names, and trust its issuer: tls=ssl.create_default_context(cafile=...))"
        )
    if isinstance(exc, ssl.SSLError):
        return ToolError(
            f"tool {ctx.tool!r}: TLS with the {service} server failed ({exc.reason or exc}) "
            "(fix: check that the server speaks TLS on that port, or leave tls unset for a "
            "plain-text server)"
        )
    if isinstance(exc, TimeoutError):
        return ToolTimeoutError(f"tool {ctx.tool!r}: the {service} server did not answer in time")
    if isinstance(exc, smtplib.SMTPAuthenticationError | imaplib.IMAP4.error) and (
        "auth" in str(exc).lower() or "credentials" in str(exc).lower()
    ):
        return ToolError(
            f"tool {ctx.tool!r}: the {service} server refused the login (check the secret "
            "'email_password' and the agent's address)"
        )
    detail = " ".join(str(exc).split())[:300]
    return ToolError(f"tool {ctx.tool!r}: {service} failed: {type(exc).__name__}: {detail}")


def email_tools(
    *,
    host: str,
    smtp_port: int,
    imap_port: int,
    address: str,
    tls: ssl.SSLContext | None = None,
) -> tuple[PythonTool, PythonTool, PythonTool]:
    """``choir.email.send``, ``.receive`` and ``.check`` for ``address`` at ``host``;
    ``tls`` (a client ``ssl.SSLContext``) connects over implicit TLS (SMTPS, IMAPS)."""
    where = _Endpoint(host, smtp_port, imap_port, address, tls)

    @_mail_tool("choir.email.send@1.0.0", EmailSendArgs, "external")
    def email_send(ctx: ToolContext, args: EmailSendArgs) -> ToolOutput:
        """Send an email from the agent's address."""
        password = required_secret(ctx, "email_password")
        digest = sha256_hex(
            "\0".join([where.address, *args.to, "|", *args.cc, args.subject, args.body]).encode()
        )
        message = EmailMessage()
        message["From"] = where.address
        message["To"] = ", ".join(args.to)
        if args.cc:
            message["Cc"] = ", ".join(args.cc)
        message["Subject"] = args.subject
        message["Message-ID"] = f"<{digest[:32]}@stargraph.local>"
        message["Date"] = formatdate(usegmt=True)
        message.set_content(args.body)
        try:
            with where.smtp(ctx) as smtp:
                smtp.ehlo()
                smtp.login(where.address, password)
                refused = smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as exc:
            raise ToolError(
                f"tool {ctx.tool!r}: the SMTP server refused every recipient: "
                f"{sorted(exc.recipients)}"
            ) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise _mail_error(ctx, "SMTP", exc) from None
        delivered = [a for a in [*args.to, *args.cc] if a not in refused]
        return ToolOutput(
            summary=f"sent {args.subject!r} to {len(delivered)} recipient(s)",
            payload={
                "message_id": message["Message-ID"],
                "delivered": delivered,
                "refused": sorted(refused),
            },
        )

    @_mail_tool("choir.email.check@1.0.0", EmailCheckArgs, "read", idempotent=True)
    def email_check(ctx: ToolContext, args: EmailCheckArgs) -> ToolOutput:
        """Check a mailbox for new (unseen) messages: counts, and sender and subject of each."""
        password = required_secret(ctx, "email_password")
        try:
            with where.imap(ctx) as imap:
                imap.login(where.address, password)
                status, data = imap.status(args.mailbox, "(MESSAGES UNSEEN)")
                _expect_ok(ctx, status, data, f"STATUS {args.mailbox}")
                counts = _status_counts(data)
                _expect_ok(
                    ctx, *imap.select(args.mailbox, readonly=True), f"EXAMINE {args.mailbox}"
                )
                status, found = imap.search(None, "UNSEEN")
                _expect_ok(ctx, status, found, "SEARCH UNSEEN")
                unseen = found[0].split() if found and found[0] else []
                listed = []
                for number in unseen[: args.max_summaries]:
                    status, parts = imap.fetch(number.decode(), "(BODY.PEEK[HEADER])")
                    _expect_ok(ctx, status, parts, "FETCH")
                    header = _literal(parts)
                    parsed = email.message_from_bytes(
                        header, _class=EmailMessage, policy=email.policy.default
                    )
                    listed.append(
                        {
                            "id": int(number),
                            "from": str(parsed.get("From", "")),
                            "subject": str(parsed.get("Subject", "")),
                        }
                    )
        except (imaplib.IMAP4.error, OSError) as exc:
            raise _mail_error(ctx, "IMAP", exc) from None
        return ToolOutput(
            summary=f"{args.mailbox}: {counts['UNSEEN']} new of {counts['MESSAGES']} messages",
            payload={
                "mailbox": args.mailbox,
                "messages": counts["MESSAGES"],
                "unseen": counts["UNSEEN"],
                "new": listed,
            },
        )

    @_mail_tool("choir.email.receive@1.0.0", EmailReceiveArgs, "external")
    def email_receive(ctx: ToolContext, args: EmailReceiveArgs) -> ToolOutput:
        """Fetch messages (newest first, unseen only by default); they become seen."""
        password = required_secret(ctx, "email_password")
        messages = []
        try:
            with where.imap(ctx) as imap:
                imap.login(where.address, password)
                _expect_ok(ctx, *imap.select(args.mailbox), f"SELECT {args.mailbox}")
                criterion = "UNSEEN" if args.unseen_only else "ALL"
                status, found = imap.search(None, criterion)
                _expect_ok(ctx, status, found, f"SEARCH {criterion}")
                numbers = found[0].split() if found and found[0] else []
                for number in reversed(numbers[-args.limit :]):
                    status, parts = imap.fetch(number.decode(), "(RFC822)")
                    _expect_ok(ctx, status, parts, "FETCH")
                    messages.append(_read(int(number), _literal(parts), args.max_body_chars))
        except (imaplib.IMAP4.error, OSError) as exc:
            raise _mail_error(ctx, "IMAP", exc) from None
        return ToolOutput(
            summary=f"received {len(messages)} message(s) from {args.mailbox}",
            payload={"mailbox": args.mailbox, "messages": messages},
        )

    return email_send, email_receive, email_check


def _expect_ok(ctx: ToolContext, status: str, data: Any, what: str) -> None:
    if status != "OK":
        detail = b" ".join(d for d in data if isinstance(d, bytes)).decode(errors="replace")
        raise ToolError(f"tool {ctx.tool!r}: IMAP {what} failed: {detail or status}")


def _status_counts(data: list[Any]) -> dict[str, int]:
    text = data[0].decode() if data and isinstance(data[0], bytes) else ""
    return {name: int(value) for name, value in re.findall(r"([A-Z]+) (\d+)", text)}


def _literal(parts: list[Any]) -> bytes:
    for part in parts:
        if isinstance(part, tuple) and len(part) == 2:
            return bytes(part[1])
    return b""


def _read(number: int, raw: bytes, limit: int) -> dict[str, Any]:
    parsed = email.message_from_bytes(raw, _class=EmailMessage, policy=email.policy.default)
    body = parsed.get_body(preferencelist=("plain", "html")) if parsed.is_multipart() else parsed
    text: object = ""
    if isinstance(body, EmailMessage):
        try:
            text = body.get_content()
        except LookupError:  # an unknown charset: show the raw text
            payload = body.get_payload(decode=True)
            text = payload.decode(errors="replace") if isinstance(payload, bytes) else ""
    return {
        "id": number,
        "from": str(parsed.get("From", "")),
        "to": str(parsed.get("To", "")),
        "subject": str(parsed.get("Subject", "")),
        "message_id": str(parsed.get("Message-ID", "")),
        "body": str(text).replace("\r\n", "\n")[:limit],
    }


class EmailPlugin:
    """Example plugin: the three email tools for ``address`` at ``host`` (over implicit TLS
    when given ``tls``, a client ``ssl.SSLContext``)."""

    def __init__(
        self,
        *,
        host: str,
        smtp_port: int,
        imap_port: int,
        address: str,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.send, self.receive, self.check = email_tools(
            host=host, smtp_port=smtp_port, imap_port=imap_port, address=address, tls=tls
        )

    @classmethod
    def for_server(
        cls, server: LocalMailServer, address: str, *, tls: ssl.SSLContext | None = None
    ) -> EmailPlugin:
        """The plugin for ``address`` on a :class:`LocalMailServer`. For a server started
        with ``tls``, the client verifies its certificate with ``tls`` (default: the
        system's trust store, as for any real server)."""
        if server.tls is not None and tls is None:
            tls = ssl.create_default_context()
        return cls(
            host=server.host,
            smtp_port=server.smtp_port,
            imap_port=server.imap_port,
            address=address,
            tls=tls,
        )

    @hookimpl
    def register_tools(self, register: Any) -> None:
        """Register send, receive and check."""
        register(self.send)
        register(self.receive)
        register(self.check)


# --------------------------------------------------------------------------- the fake


@dataclass(slots=True)
class _Stored:
    raw: bytes
    flags: set[str] = field(default_factory=set)


class LocalMailServer(Started):
    """SMTP submission and IMAP4rev1 (a subset) on 127.0.0.1; one ``INBOX`` per user.

    ``users`` maps an address to its password. SMTP needs ``AUTH PLAIN`` before ``MAIL``,
    accepts only the logged-in address as sender and only hosted users as recipients. IMAP
    serves ``CAPABILITY LOGIN SELECT EXAMINE STATUS SEARCH FETCH CLOSE NOOP LOGOUT``.
    :meth:`deliver` puts a message in a mailbox as if it came from outside.

    ``tls`` (a server ``ssl.SSLContext`` holding the certificate and key) serves both ports
    over implicit TLS; a client that does not accept the certificate gets no session.
    """

    host: Final = "127.0.0.1"

    def __init__(self, users: Mapping[str, str], *, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        """The server TLS context, or ``None`` for plain text."""
        self._users = dict(users)
        self._boxes: dict[str, list[_Stored]] = {address: [] for address in self._users}
        self._lock = threading.Lock()
        self.transactions: list[tuple[str, tuple[str, ...]]] = []
        """Every accepted SMTP transaction: (sender, recipients)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.Server] = []
        self._sessions: set[asyncio.Task[None]] = set()
        self._ports = (0, 0)

    # ------------------------------------------------------------------ lifecycle

    @property
    def smtp_port(self) -> int:
        """The SMTP port."""
        return self._ports[0]

    @property
    def imap_port(self) -> int:
        """The IMAP port."""
        return self._ports[1]

    def start(self) -> Self:
        """Start both servers on a background event loop."""
        if self._loop is not None:
            return self
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # reported to start() by the main thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="local-mail-server", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread.join()
            self._loop = self._thread = None
            raise ToolError(f"the local mail server could not start: {failure[0]}")
        return self

    async def _open(self) -> None:
        smtp = await asyncio.start_server(self._smtp_session, self.host, 0, ssl=self.tls)
        imap = await asyncio.start_server(self._imap_session, self.host, 0, ssl=self.tls)
        self._servers = [smtp, imap]
        self._ports = (smtp.sockets[0].getsockname()[1], imap.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._sessions):
            task.cancel()
        await asyncio.gather(*self._sessions, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    def close(self) -> None:
        """Stop both servers, end every session and join the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = self._thread = None

    # ------------------------------------------------------------------ mailboxes

    def deliver(self, to: str, *, sender: str, subject: str, body: str) -> None:
        """Put a message from ``sender`` into ``to``'s mailbox (mail from outside)."""
        message = EmailMessage()
        message["From"] = sender
        message["To"] = to
        message["Subject"] = subject
        message.set_content(body)
        self._store([to], message.as_bytes(policy=email.policy.SMTP))

    def mailbox(self, address: str) -> list[tuple[frozenset[str], EmailMessage]]:
        """The messages in ``address``'s mailbox with their flags, oldest first."""
        with self._lock:
            stored = [(frozenset(s.flags), s.raw) for s in self._boxes[address]]
        return [
            (flags, email.message_from_bytes(raw, _class=EmailMessage, policy=email.policy.default))
            for flags, raw in stored
        ]

    def _store(self, recipients: Iterable[str], raw: bytes) -> None:
        with self._lock:
            for address in recipients:
                self._boxes[address].append(_Stored(raw))

    # ------------------------------------------------------------------ SMTP

    async def _smtp_session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self._session(reader, writer, self._smtp)

    async def _imap_session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await self._session(reader, writer, self._imap)

    async def _session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, serve: Any
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        try:
            await serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away mid-command
        finally:
            self._sessions.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _smtp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def say(*lines: str) -> None:
            writer.write("".join(f"{line}\r\n" for line in lines).encode())
            await writer.drain()

        await say(f"220 {self.host} ESMTP stargraph local mail")
        user: str | None = None
        sender: str | None = None
        recipients: list[str] = []
        while True:
            raw = await reader.readline()
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip("\r\n")
            verb, _, rest = line.partition(" ")
            verb = verb.upper()
            if verb == "EHLO":
                await say(f"250-{self.host}", "250-AUTH PLAIN", "250 8BITMIME")
            elif verb == "HELO":
                await say(f"250 {self.host}")
            elif verb == "AUTH":
                mechanism, _, initial = rest.partition(" ")
                if mechanism.upper() != "PLAIN":
                    await say("504 5.5.4 only AUTH PLAIN is supported")
                    continue
                if not initial:
                    await say("334 ")
                    initial = (await reader.readline()).decode(errors="replace").strip()
                user = self._plain_login(initial)
                await say(
                    "235 2.7.0 Authentication successful"
                    if user
                    else "535 5.7.8 Authentication credentials invalid"
                )
            elif verb == "MAIL":
                address = _angle(rest)
                if user is None:
                    await say("530 5.7.0 Authentication required")
                elif address != user:
                    await say(f"553 5.7.1 <{address}>: sender address not owned by {user}")
                else:
                    sender, recipients = address, []
                    await say("250 2.1.0 Ok")
            elif verb == "RCPT":
                address = _angle(rest)
                if sender is None:
                    await say("503 5.5.1 MAIL first")
                elif address not in self._boxes:
                    await say(f"550 5.1.1 <{address}>: no such user here")
                else:
                    recipients.append(address)
                    await say("250 2.1.5 Ok")
            elif verb == "DATA":
                if sender is None or not recipients:
                    await say("503 5.5.1 RCPT first")
                    continue
                await say("354 End data with <CR><LF>.<CR><LF>")
                data = await self._read_data(reader)
                if data is None:
                    await say("552 5.3.4 message too big")
                else:
                    self._store(recipients, data)
                    with self._lock:
                        self.transactions.append((sender, tuple(recipients)))
                    await say("250 2.0.0 Ok: queued")
                sender, recipients = None, []
            elif verb == "RSET":
                sender, recipients = None, []
                await say("250 2.0.0 Ok")
            elif verb == "NOOP":
                await say("250 2.0.0 Ok")
            elif verb == "QUIT":
                await say("221 2.0.0 Bye")
                return
            else:
                await say("502 5.5.2 command not recognized")

    def _plain_login(self, initial: str) -> str | None:
        try:
            _authzid, user, password = base64.b64decode(initial).decode().split("\0")
        except ValueError:  # not base64, not UTF-8, or not three fields
            return None
        return user if self._users.get(user) == password else None

    @staticmethod
    async def _read_data(reader: asyncio.StreamReader) -> bytes | None:
        lines: list[bytes] = []
        size = 0
        while True:
            line = await reader.readline()
            if not line or line in (b".\r\n", b".\n"):
                break
            if line.startswith(b"."):
                line = line[1:]  # dot-stuffing
            size += len(line)
            lines.append(line)
        return b"".join(lines) if size <= _DATA_LIMIT else None

    # ------------------------------------------------------------------ IMAP

    async def _imap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def say(*chunks: bytes | str) -> None:
            writer.write(b"".join(c.encode() if isinstance(c, str) else c for c in chunks))
            await writer.drain()

        await say("* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN] stargraph local IMAP ready\r\n")
        user: str | None = None
        selected: str | None = None
        readonly = True
        while True:
            raw = await reader.readline()
            if not raw:
                return
            tag, _, rest = raw.decode(errors="replace").rstrip("\r\n").partition(" ")
            command, _, arguments = rest.partition(" ")
            command = command.upper()
            args = _imap_tokens(arguments)
            if command == "CAPABILITY":
                await say("* CAPABILITY IMAP4rev1 AUTH=PLAIN\r\n", f"{tag} OK CAPABILITY done\r\n")
            elif command == "NOOP":
                await say(f"{tag} OK NOOP done\r\n")
            elif command == "LOGOUT":
                await say("* BYE logging out\r\n", f"{tag} OK LOGOUT done\r\n")
                return
            elif command == "LOGIN":
                ok = len(args) == 2 and self._users.get(args[0]) == args[1]
                user = args[0] if ok else None
                await say(
                    f"{tag} OK LOGIN done\r\n"
                    if ok
                    else f"{tag} NO [AUTHENTICATIONFAILED] Invalid credentials\r\n"
                )
            elif user is None:
                await say(f"{tag} BAD log in first\r\n")
            elif command in ("SELECT", "EXAMINE", "STATUS"):
                if not args or args[0].upper() != "INBOX":
                    await say(f"{tag} NO [NONEXISTENT] no such mailbox\r\n")
                    continue
                with self._lock:
                    box = self._boxes[user]
                    total = len(box)
                    unseen = sum(1 for s in box if "\\Seen" not in s.flags)
                if command == "STATUS":
                    await say(
                        f"* STATUS INBOX (MESSAGES {total} UNSEEN {unseen})\r\n",
                        f"{tag} OK STATUS done\r\n",
                    )
                    continue
                selected, readonly = user, command == "EXAMINE"
                mode = "READ-ONLY" if readonly else "READ-WRITE"
                await say(
                    "* FLAGS (\\Seen)\r\n",
                    f"* {total} EXISTS\r\n",
                    "* 0 RECENT\r\n",
                    "* OK [UIDVALIDITY 1] UIDs valid\r\n",
                    f"{tag} OK [{mode}] {command} done\r\n",
                )
            elif selected is None:
                await say(f"{tag} BAD select a mailbox first\r\n")
            elif command == "CLOSE":
                selected = None
                await say(f"{tag} OK CLOSE done\r\n")
            elif command == "SEARCH":
                key = (args[-1] if args else "ALL").upper()
                if key not in ("ALL", "SEEN", "UNSEEN"):
                    await say(f"{tag} BAD only ALL, SEEN and UNSEEN are supported\r\n")
                    continue
                with self._lock:
                    box = self._boxes[selected]
                    hits = [
                        str(i)
                        for i, s in enumerate(box, start=1)
                        if key == "ALL" or (("\\Seen" in s.flags) == (key == "SEEN"))
                    ]
                await say(
                    f"* SEARCH {' '.join(hits)}".rstrip() + "\r\n", f"{tag} OK SEARCH done\r\n"
                )
            elif command == "FETCH" and len(args) >= 2:
                await say(*self._fetch(selected, args[0], " ".join(args[1:]), readonly))
                await say(f"{tag} OK FETCH done\r\n")
            else:
                await say(f"{tag} BAD unknown or malformed command\r\n")

    def _fetch(self, box: str, sequence: str, items: str, readonly: bool) -> list[bytes]:
        wanted = items.strip("()").upper().split()
        out: list[bytes] = []
        with self._lock:
            stored = self._boxes[box]
            for number in _sequence(sequence, len(stored)):
                message = stored[number - 1]
                parts: list[bytes] = []
                for item in wanted:
                    if item in ("RFC822", "BODY[]", "BODY.PEEK[]"):
                        data = message.raw
                    elif item in ("BODY[HEADER]", "BODY.PEEK[HEADER]", "RFC822.HEADER"):
                        data = (
                            message.raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0] + b"\r\n\r\n"
                        )
                    elif item == "FLAGS":
                        parts.append(f"FLAGS ({' '.join(sorted(message.flags))})".encode())
                        continue
                    elif item == "RFC822.SIZE":
                        parts.append(f"RFC822.SIZE {len(message.raw)}".encode())
                        continue
                    else:
                        continue  # an item this fake does not serve
                    name = item.replace(".PEEK", "")
                    parts.append(f"{name} {{{len(data)}}}\r\n".encode() + data)
                    if not readonly and item in ("RFC822", "BODY[]", "BODY[HEADER]"):
                        message.flags.add("\\Seen")
                out.append(f"* {number} FETCH (".encode() + b" ".join(parts) + b")\r\n")
        return out


def _angle(text: str) -> str:
    match = re.search(r"<([^>]*)>", text)
    return match.group(1) if match else ""


def _imap_tokens(text: str) -> list[str]:
    """Atoms, quoted strings (with backslash escapes) and parenthesised lists, in order."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == " ":
            i += 1
        elif char == '"':
            value: list[str] = []
            i += 1
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    i += 1
                value.append(text[i])
                i += 1
            tokens.append("".join(value))
            i += 1
        elif char == "(":
            end = text.find(")", i)
            end = len(text) if end < 0 else end + 1
            tokens.append(text[i:end])
            i = end
        else:
            end = text.find(" ", i)
            end = len(text) if end < 0 else end
            tokens.append(text[i:end])
            i = end
    return tokens


def _sequence(text: str, total: int) -> list[int]:
    numbers: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition(":")
        try:
            lo = total if first == "*" else int(first)
            hi = lo if not last else (total if last == "*" else int(last))
        except ValueError:
            continue
        lo, hi = min(lo, hi), max(lo, hi)
        numbers += [n for n in range(lo, hi + 1) if 1 <= n <= total]
    return sorted(set(numbers))
