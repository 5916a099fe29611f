#!/usr/bin/env python3
"""A correx-sessions client with nothing but Python's standard library.

It speaks the HTTP API described in the README:

  * send(events)            POST  <ingest>/v1/events          -> the last event's position "P:O"
  * get(id, min_position)   GET   <query>/v1/sessions/{id}?minPosition=P:O&wait=10s
  * watch(id, cursor)       GET   <query>/v1/sessions/{id}/watch   (Server-Sent Events)

Configuration comes from the same variables as the Go tools:
CORREX_INGEST_URL (default http://localhost:8081), CORREX_QUERY_URL
(default http://localhost:8082) and CORREX_TOKEN (optional bearer token).
"""

import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid


class ProblemError(Exception):
    """A problem+json answer: its status, title, detail and field errors."""

    def __init__(self, status, body):
        self.status = status
        self.body = body
        detail = body.get("detail") or body.get("title") or ""
        super().__init__("HTTP %d: %s %s" % (status, detail, body.get("errors") or ""))


class Client:
    def __init__(self, ingest_url=None, query_url=None, token=None, timeout=10.0):
        env = os.environ
        self.ingest = (ingest_url or env.get("CORREX_INGEST_URL") or "http://localhost:8081").rstrip("/")
        self.query = (query_url or env.get("CORREX_QUERY_URL") or "http://localhost:8082").rstrip("/")
        self.token = token if token is not None else env.get("CORREX_TOKEN", "")
        self.timeout = timeout

    def _request(self, method, url, body=None, headers=None, timeout=None):
        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=h, method=method)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = {"detail": raw.decode(errors="replace")}
            raise ProblemError(e.code, problem) from None

    @staticmethod
    def event(session_id, type_, payload=None, **envelope):
        """An event with a client-side id, so that resending it is safe."""
        ev = {"eventId": str(uuid.uuid4()), "sessionId": session_id, "type": type_,
              "payload": payload or {}}
        ev.update(envelope)
        return ev

    def send(self, events):
        """Sends events in one request; returns the last event's position."""
        with self._request("POST", self.ingest + "/v1/events", {"events": events}) as resp:
            return json.load(resp)["position"]

    def get(self, session_id, min_position=None, wait="10s"):
        """The snapshot; with min_position, once the projector has folded up to it."""
        url = self.query + "/v1/sessions/" + urllib.parse.quote(session_id, safe=":")
        if min_position:
            url += "?" + urllib.parse.urlencode({"minPosition": min_position, "wait": wait})
        with self._request("GET", url) as resp:
            return json.load(resp)

    def watch(self, session_id, cursor=None, timeout=30.0):
        """Yields (event, id, data) for each Server-Sent Event of the session's
        watch: first its snapshot, then its changes. An event with only an id
        (event None) moves the cursor past filtered records: keep it as the
        last id too. Pass the last id as cursor to resume after a drop."""
        url = self.query + "/v1/sessions/" + urllib.parse.quote(session_id, safe=":") + "/watch"
        headers = {"Accept": "text/event-stream"}
        if cursor:
            headers["Last-Event-ID"] = cursor
        with self._request("GET", url, headers=headers, timeout=timeout) as resp:
            event, ident, data = None, None, []
            for raw in resp:
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if ident is not None or data:
                        yield event, ident, "\n".join(data) if data else None
                    event, ident, data = None, None, []
                elif line.startswith(":"):
                    continue  # a heartbeat comment
                else:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "event":
                        event = value
                    elif name == "id":
                        ident = value
                    elif name == "data":
                        data.append(value)
