"""Asking a running extender for its state (``GET /debug/state``) and shadow's scorecard
(``/debug/shadow``), as the scheduler calls it: HTTPS with the CA that signed its certificate, and a
client certificate when it requires one."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from extender.core.diagnostics import MAX_STATE_NODES, ExtenderState, StateDocumentError, parse_state_document
from extender.core.errors import ExtenderError
from extender.core.shadowdocument import ShadowDocument, ShadowDocumentError, parse_shadow_document

MAX_STATE_BYTES = 8 * 1024 * 1024


class ExtenderUnreachable(ExtenderError):
    """The extender did not answer its state, or answered something else."""


@dataclass(frozen=True, slots=True)
class RemoteExtender:
    url: str  # https://hugepage-extender.hugepage-extender.svc:8888 (the verbs' URL, as urlPrefix)
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    timeout_seconds: float = 10.0

    def _context(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https://"):
            if self.cert_file or self.ca_file:
                raise ExtenderUnreachable(f"{self.url}: client certificates and a CA need an https:// URL")
            return None
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def state(self, namespace: str, nodes: Sequence[str] | None = None, *, exclude_pod: str = "") -> ExtenderState:
        """The extender's state for ``namespace``; in-flight holds on ``nodes`` (None: every node with one)."""
        query: dict[str, str] = {"namespace": namespace}
        if nodes is not None:
            if len(nodes) > MAX_STATE_NODES:
                # Asked in pages: a candidate list can be the whole cluster.
                first = self.state(namespace, nodes[:MAX_STATE_NODES], exclude_pod=exclude_pod)
                rest = self.state(namespace, nodes[MAX_STATE_NODES:], exclude_pod=exclude_pod)
                return _merged(first, rest)
            query["nodes"] = ",".join(nodes)
        if exclude_pod:
            query["excludePod"] = exclude_pod
        body = self._get("/debug/state", query)
        try:
            return parse_state_document(body)
        except StateDocumentError as error:
            raise ExtenderUnreachable(f"{self.url}: {error}") from None

    def shadow(self, namespace: str = "") -> ShadowDocument:
        """Shadow's scorecard (``/debug/shadow``): every namespace's, or ``namespace``'s row."""
        body = self._get("/debug/shadow", {"namespace": namespace} if namespace else {})
        try:
            return parse_shadow_document(body)
        except ShadowDocumentError as error:
            raise ExtenderUnreachable(f"{self.url}: {error}") from None

    def _get(self, path: str, query: dict[str, str]) -> bytes:
        url = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 (http(s) only)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds, context=self._context()) as answer:  # noqa: S310
                body: bytes = answer.read(MAX_STATE_BYTES + 1)
        except urllib.error.HTTPError as error:
            raise ExtenderUnreachable(f"{self.url}: {path} answered {error.code} {error.reason}") from None
        except (urllib.error.URLError, OSError, ssl.SSLError) as error:
            reason = getattr(error, "reason", error)
            raise ExtenderUnreachable(f"{self.url}: {reason}") from None
        if len(body) > MAX_STATE_BYTES:
            raise ExtenderUnreachable(f"{self.url}: {path} answer over {MAX_STATE_BYTES} bytes")
        return body


def _merged(a: ExtenderState, b: ExtenderState) -> ExtenderState:
    reports = (
        None
        if a.node_reports is None and b.node_reports is None
        else {**(a.node_reports or {}), **(b.node_reports or {})}
    )
    return ExtenderState(
        ready=a.ready and b.ready,
        namespace=a.namespace,
        policy=a.policy,
        exempt=a.exempt,
        holds_by_size={name: {**held, **b.holds_by_size.get(name, {})} for name, held in a.holds_by_size.items()},
        placement=a.placement,
        node_reports=reports,
    )
