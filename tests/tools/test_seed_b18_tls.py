"""Row B18, email over TLS: the local SMTP/IMAP fake serves implicit TLS (SMTPS, IMAPS) with
a self-signed certificate made at test time by the ``openssl`` command, and the built-in
email tools send, check and receive through a real arbiter over it. A certificate the client
does not accept (an issuer it does not trust, or one naming another host) is a typed
``ToolError``, and nothing is sent."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolError
from stargraph.plugin import Registry, get_plugin_manager
from stargraph.tools import Arbiter, ToolCall, ToolResult
from stargraph.tools.builtins import EmailPlugin, LocalMailServer
from tests.support import data

AGENT = "agent@example.test"
FRIEND = "ada@example.test"
USERS = {AGENT: "agent-secret", FRIEND: "ada-secret"}


def make_certificate(folder: Path, name: str, san: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own issuer) for ``san``, and its key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl command is needed to make the test certificate")
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    return make_certificate(tmp_path, "local-mail", "IP:127.0.0.1")


@pytest.fixture
def server(certificate: tuple[Path, Path]) -> Iterator[LocalMailServer]:
    with LocalMailServer(USERS, tls=server_context(*certificate)) as running:
        yield running


def arbiter_for(plugin: EmailPlugin, workspace: Path) -> Arbiter:
    registry = Registry.build(get_plugin_manager(plugins=[plugin], entry_points=False))
    arbiter = registry.arbiter(workspace, secrets={"email_password": USERS[AGENT]})
    assert isinstance(arbiter, Arbiter)
    return arbiter


def run(arbiter: Arbiter, tool_name: str, **args: Any) -> ToolResult:
    return arbiter.dispatch(ToolCall(tool=tool_name, args=args, call_id=f"c-{tool_name}"))


def test_B18_email_send_check_receive_over_tls(
    server: LocalMailServer, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    plugin = EmailPlugin.for_server(server, AGENT, tls=trusting)
    server.deliver(AGENT, sender="bob@example.org", subject="hello", body="over TLS")
    with arbiter_for(plugin, tmp_path) as arbiter:
        check = data(run(arbiter, "choir.email.check"))
        assert (check["messages"], check["unseen"]) == (1, 1)
        got = data(run(arbiter, "choir.email.receive"))["messages"]
        assert [(m["from"], m["subject"], m["body"]) for m in got] == [
            ("bob@example.org", "hello", "over TLS\n")
        ]
        sent = run(arbiter, "choir.email.send", to=[FRIEND], subject="re", body="x")
    [(_, message)] = server.mailbox(FRIEND)
    assert message["Message-ID"] == data(sent)["message_id"]
    assert server.transactions == [(AGENT, (FRIEND,))]


@pytest.mark.parametrize("problem", ["untrusted issuer", "another host name"])
def test_B18_a_bad_server_certificate_is_a_typed_error_and_sends_nothing(
    problem: str, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, key = certificate
    client: ssl.SSLContext | None = None  # for_server: the system trust store
    if problem == "another host name":
        cert, key = make_certificate(tmp_path, "elsewhere", "DNS:mail.elsewhere.test")
        client = ssl.create_default_context(cafile=str(cert))  # trusted, wrong name
    reason = {
        "untrusted issuer": "self-signed certificate",
        "another host name": "IP address mismatch",
    }[problem]
    with LocalMailServer(USERS, tls=server_context(cert, key)) as server:
        plugin = EmailPlugin.for_server(server, AGENT, tls=client)
        with arbiter_for(plugin, tmp_path) as arbiter:
            for tool_name, args in [
                ("choir.email.send", {"to": [FRIEND], "subject": "s", "body": "b"}),
                ("choir.email.check", {}),
                ("choir.email.receive", {}),
            ]:
                service = "SMTP" if tool_name.endswith("send") else "IMAP"
                with pytest.raises(ToolError) as info:
                    run(arbiter, tool_name, **args)
                message = str(info.value)
                assert f"the {service} server's TLS certificate was not accepted" in message
                assert reason in message
                assert "tls=ssl.create_default_context(cafile=...)" in message
            records = [r.model_dump(mode="json") for r in arbiter.commit_log.records()]
        assert server.transactions == []
        assert [flags for flags, _ in server.mailbox(FRIEND)] == []
    assert [r["status"] for r in records if r["kind"] == "call"] == ["error"] * 3
    assert USERS[AGENT] not in json.dumps(records)
