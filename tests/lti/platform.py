"""An emulated LMS (an LTI 1.3 platform) on loopback, for the LTI tests: the same messages and services a
Moodle or Canvas offers a tool, made from the specifications, with keys generated for the test.

- ``/jwks``: the platform's public keys; every id_token it issues is signed RS256 with its private key.
- ``/start``: the third-party login initiation a course page makes (an auto-posting form to the tool's
  ``/lti/init/…``); ``/auth``: the OIDC authorization endpoint, which answers with an auto-posting form
  carrying the signed id_token and the tool's state to the tool's launch URL. ``authorize`` is the same
  answer as data, for the Django test client.
- ``/token``: OAuth 2 client credentials with a JWT client assertion, checked against the tool's JWKS.
- AGS: ``/lineitems`` (the course's grade columns) and ``/lineitems/<n>/scores`` (scores, kept in
  ``scores``); NRPS: ``/memberships`` (the course's roster, ``members``).
- ``/deep_link_return``: where the tool's deep-linking response goes; its JWT is checked against the tool's
  JWKS and its content items become the course's links, each with its grade column, as an LMS makes them.
"""

from __future__ import annotations

import html
import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from jwcrypto.jwk import JWK

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS_CLAIM = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"
DL_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
DL_ITEMS = "https://purl.imsglobal.org/spec/lti-dl/claim/content_items"
AGS_SCOPES = [
    "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "https://purl.imsglobal.org/spec/lti-ags/scope/score",
]
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"


def new_key() -> JWK:
    return JWK.generate(kty="RSA", size=2048, kid=uuid.uuid4().hex, alg="RS256", use="sig")


@dataclass
class Person:
    sub: str
    given_name: str
    family_name: str
    roles: list[str]
    status: str = "Active"
    locale: str = ""  # the language the LMS shows them ("en-US"), sent as launch_presentation.locale

    @property
    def name(self) -> str:
        return f"{self.given_name} {self.family_name}"

    @property
    def email(self) -> str:
        return f"{self.sub}@lms.example"


@dataclass
class Link:
    """A resource link of the course (made by a deep-linking response) and its grade column."""

    id: str
    title: str
    custom: dict[str, str]
    lineitem: str  # the line item's URL, "" without one


@dataclass
class Pending:
    """A launch the course page is about to make: whom, which message, which link."""

    person: Person
    message: str
    link: Link | None
    target: str
    claims: dict[str, Any] = field(default_factory=dict)  # the id_token's claims changed (an expired exp)


@dataclass
class Platform:
    client_id: str = "vllm-lab-tool"
    deployment_id: str = "deployment-1"
    context_id: str = "course-101"
    context_title: str = "vLLM 서빙 101"
    key: JWK = field(default_factory=new_key)
    tool_jwks: dict[str, Any] = field(default_factory=dict)  # the tool's /lti/jwks/, set by the test
    base: str = ""
    members: list[Person] = field(default_factory=list)
    links: dict[str, Link] = field(default_factory=dict)
    lineitems: dict[str, dict[str, Any]] = field(default_factory=dict)
    scores: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (line item URL, score)
    tokens: set[str] = field(default_factory=set)
    pending: dict[str, Pending] = field(default_factory=dict)
    returned: list[dict[str, Any]] = field(default_factory=list)  # checked deep-linking responses
    nrps_calls: int = 0

    # The platform's addresses, as its registration in the tool names them.
    @property
    def issuer(self) -> str:
        return self.base

    @property
    def auth_url(self) -> str:
        return f"{self.base}/auth"

    @property
    def token_url(self) -> str:
        return f"{self.base}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.base}/jwks"

    def jwks(self) -> dict[str, Any]:
        return {"keys": [json.loads(self.key.export_public())]}

    # The course page: a launch is first a pending message, then a login initiation.
    def prepare(
        self,
        person: Person,
        message: str = "LtiResourceLinkRequest",
        link: Link | None = None,
        target: str = "",
        claims: dict[str, Any] | None = None,
    ) -> str:
        hint = secrets.token_hex(8)
        self.pending[hint] = Pending(person, message, link, target, claims or {})
        return hint

    def login_params(self, hint: str) -> dict[str, str]:
        pending = self.pending[hint]
        return {
            "iss": self.issuer,
            "login_hint": pending.person.sub,
            "target_link_uri": pending.target,
            "lti_message_hint": hint,
            "client_id": self.client_id,
            "lti_deployment_id": self.deployment_id,
        }

    def authorize(self, params: dict[str, str], **overrides: Any) -> dict[str, str]:
        """The OIDC authorization endpoint's answer: the form fields to post to ``params["redirect_uri"]``.
        ``overrides`` change the id_token's claims (an expired ``exp``, another ``aud``) or its ``key``."""
        if params.get("client_id") != self.client_id or params.get("response_type") != "id_token":
            raise ValueError(f"not an LTI authorization request: {params}")
        pending = self.pending[params["lti_message_hint"]]
        if pending.person.sub != params.get("login_hint"):
            raise ValueError("login_hint is not the launching user")
        key = overrides.pop("key", self.key)
        claims = self.claims(pending, params["nonce"], params["redirect_uri"]) | pending.claims | overrides
        token = jwt.encode(
            claims, key.export_to_pem(private_key=True, password=None), algorithm="RS256", headers={"kid": key.key_id}
        )
        return {"id_token": token, "state": params["state"]}

    def claims(self, pending: Pending, nonce: str, target: str) -> dict[str, Any]:
        now = int(time.time())
        person = pending.person
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.client_id,
            "azp": self.client_id,
            "sub": person.sub,
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            "given_name": person.given_name,
            "family_name": person.family_name,
            "name": person.name,
            "email": person.email,
            LTI + "message_type": pending.message,
            LTI + "version": "1.3.0",
            LTI + "deployment_id": self.deployment_id,
            LTI + "target_link_uri": target,
            LTI + "roles": person.roles,
            LTI + "context": {
                "id": self.context_id,
                "title": self.context_title,
                "label": "VLLM101",
                "type": ["http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"],
            },
            LTI + "tool_platform": {"guid": "emulated-lms", "name": "Emulated LMS", "product_family_code": "emulator"},
            NRPS_CLAIM: {"context_memberships_url": f"{self.base}/memberships", "service_versions": ["2.0"]},
        }
        if person.locale:
            claims[LTI + "launch_presentation"] = {"locale": person.locale, "document_target": "window"}
        if pending.message == "LtiDeepLinkingRequest":
            claims[DL_SETTINGS] = {
                "deep_link_return_url": f"{self.base}/deep_link_return",
                "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["window"],
                "accept_multiple": False,
                "data": "dl-opaque",
            }
        elif pending.link is not None:
            link = pending.link
            claims[LTI + "resource_link"] = {"id": link.id, "title": link.title}
            claims[LTI + "custom"] = link.custom
            claims[AGS_CLAIM] = {"scope": AGS_SCOPES, "lineitems": f"{self.base}/lineitems"} | (
                {"lineitem": link.lineitem} if link.lineitem else {}
            )
        return claims

    # The services.
    def check_assertion(self, form: dict[str, str]) -> str:
        """The access token for a client-credentials request whose assertion the tool signed, or ValueError."""
        if form.get("grant_type") != "client_credentials":
            raise ValueError("grant_type")
        assertion = form["client_assertion"]
        kid = jwt.get_unverified_header(assertion)["kid"]
        found = [k for k in self.tool_jwks.get("keys", []) if k.get("kid") == kid]
        if not found:
            raise ValueError("the assertion's key is not in the tool's JWKS")
        public = JWK.from_json(json.dumps(found[0])).export_to_pem()
        body = jwt.decode(assertion, public, algorithms=["RS256"], audience=self.token_url)
        if body["iss"] != self.client_id or body["sub"] != self.client_id:
            raise ValueError("the assertion is not the registered client's")
        token = secrets.token_urlsafe(16)
        self.tokens.add(token)
        return token

    def receive_deep_link(self, token: str) -> list[Link]:
        """The tool's deep-linking response: checked against its JWKS, its items made course links."""
        kid = jwt.get_unverified_header(token)["kid"]
        key = next(k for k in self.tool_jwks["keys"] if k.get("kid") == kid)
        public = JWK.from_json(json.dumps(key)).export_to_pem()
        body = jwt.decode(token, public, algorithms=["RS256"], audience=self.issuer)
        if body["iss"] != self.client_id or body[LTI + "message_type"] != "LtiDeepLinkingResponse":
            raise ValueError("not this tool's deep-linking response")
        if (
            body[LTI + "deployment_id"] != self.deployment_id
            or body.get("https://purl.imsglobal.org/spec/lti-dl/claim/data") != "dl-opaque"
        ):
            raise ValueError("the response does not answer this platform's request")
        self.returned.append(body)
        made = []
        for item in body[DL_ITEMS]:
            lineitem = ""
            if "lineItem" in item:
                lineitem = f"{self.base}/lineitems/{len(self.lineitems) + 1}"
                self.lineitems[lineitem] = dict(item["lineItem"]) | {"id": lineitem}
            link = Link(
                id=f"link-{len(self.links) + 1}",
                title=item.get("title", ""),
                custom=dict(item.get("custom", {})),
                lineitem=lineitem,
            )
            self.links[link.id] = link
            made.append(link)
        return made

    def membership_container(self) -> dict[str, Any]:
        self.nrps_calls += 1
        return {
            "id": f"{self.base}/memberships",
            "context": {"id": self.context_id, "title": self.context_title},
            "members": [
                {
                    "user_id": p.sub,
                    "roles": p.roles,
                    "given_name": p.given_name,
                    "family_name": p.family_name,
                    "name": p.name,
                    "email": p.email,
                }
                | ({} if p.status == "Active" else {"status": p.status})  # optional in NRPS: Active if absent
                for p in self.members
            ],
        }


class _Handler(BaseHTTPRequestHandler):
    platform: Platform

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode()
        if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            return {k: v[0] for k, v in parse_qs(raw).items()}
        return {"_raw": raw}

    def _authorized(self) -> bool:
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        return token in self.platform.tokens

    def _autopost(self, action: str, fields: dict[str, str]) -> None:
        inputs = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items()
        )
        page = (
            f'<!doctype html><form id="f" method="post" action="{html.escape(action)}">{inputs}'
            '<button>Continue</button></form><script>document.getElementById("f").submit()</script>'
        )
        self._send(200, page, "text/html; charset=utf-8")

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        platform = self.platform
        if url.path == "/jwks":
            return self._send(200, platform.jwks())
        if url.path == "/start":  # the course page's link: login initiation to the tool
            return self._autopost(query["init"], platform.login_params(query["hint"]))
        if url.path == "/auth":
            try:
                answer = platform.authorize(query)
            except (KeyError, ValueError) as exc:
                return self._send(400, {"error": "invalid_request", "detail": str(exc)})
            return self._autopost(query["redirect_uri"], answer)
        if not self._authorized():
            return self._send(401, {"error": "unauthorized"})
        if url.path == "/memberships":
            return self._send(
                200, platform.membership_container(), "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"
            )
        if url.path == "/lineitems":
            return self._send(
                200, list(platform.lineitems.values()), "application/vnd.ims.lis.v2.lineitemcontainer+json"
            )
        if f"{platform.base}{url.path}" in platform.lineitems:
            return self._send(200, platform.lineitems[f"{platform.base}{url.path}"])
        return self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        platform = self.platform
        form = self._form()
        if url.path == "/token":
            try:
                token = platform.check_assertion(form)
            except (KeyError, ValueError, jwt.InvalidTokenError) as exc:
                return self._send(400, {"error": "invalid_client", "detail": str(exc)})
            return self._send(
                200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600, "scope": form.get("scope", "")}
            )
        if url.path == "/deep_link_return":
            try:
                links = platform.receive_deep_link(form["JWT"])
            except (KeyError, StopIteration, ValueError, jwt.InvalidTokenError) as exc:
                return self._send(400, f"<p id='dl-error'>{html.escape(str(exc))}</p>", "text/html; charset=utf-8")
            titles = "".join(f"<li class='dl-link'>{html.escape(link.title)}</li>" for link in links)
            return self._send(200, f"<!doctype html><h1>Course links</h1><ul>{titles}</ul>", "text/html; charset=utf-8")
        if not self._authorized():
            return self._send(401, {"error": "unauthorized"})
        line = f"{platform.base}{url.path.removesuffix('/scores')}"
        if url.path.endswith("/scores") and line in platform.lineitems:
            if self.headers.get("Content-Type") != "application/vnd.ims.lis.v1.score+json":
                return self._send(415, {"error": "score media type"})
            platform.scores.append((line, json.loads(form["_raw"])))
            return self._send(204, "")
        return self._send(404, {"error": "not found"})


class PlatformServer:
    """The platform's HTTP server in a thread of this process, on a free loopback port."""

    def __init__(self, platform: Platform, port: int) -> None:
        handler = type("Handler", (_Handler,), {"platform": platform})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        platform.base = f"http://127.0.0.1:{port}"
        self.platform = platform
        self.thread = threading.Thread(target=self.server.serve_forever, name="lti-platform", daemon=True)

    def start(self) -> Platform:
        self.thread.start()
        return self.platform

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def launch_url(query: str) -> tuple[str, dict[str, str]]:
    """The tool's OIDC redirect (its Location) split into the authorization URL and its parameters."""
    url = urlsplit(query)
    return f"{url.scheme}://{url.netloc}{url.path}", {k: v[0] for k, v in parse_qs(url.query).items()}


def start_url(platform: Platform, init: str, hint: str) -> str:
    """The course page's link that starts a launch in a browser."""
    return f"{platform.base}/start?{urlencode({'init': init, 'hint': hint})}"
