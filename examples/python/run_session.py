#!/usr/bin/env python3
"""Runs one session through correx-sessions and follows it live.

  python3 examples/python/run_session.py [session-id]

It sends the session's first events, reads its snapshot with read-your-writes
(minPosition), opens its watch, sends the rest while watching, drops the
connection once and resumes it from the last event id, and prints one JSON
line per step. A change that is not applied (an event the session rejected,
as when the id names a session that already ended) is printed as its outcome
with the reason, and the script exits 1. Against `make run`, no configuration
is needed.
"""

import json
import sys
import threading
import uuid

from correx_client import Client, ProblemError


def main():
    c = Client()
    sid = sys.argv[1] if len(sys.argv) > 1 else "demo:py-" + uuid.uuid4().hex[:8]

    pos = c.send([c.event(sid, "SessionCreated", {"goal": "summarise the inbox",
                                                   "labels": {"lang": "python"}}),
                  c.event(sid, "SessionStarted")])
    snap = c.get(sid, min_position=pos)
    out("read", state=snap["state"], version=snap["version"], position=pos)

    # The rest is sent once the watch is open, so the watch sees it happen.
    rest = [c.event(sid, "ToolRequested", {"tool": "search"}),
            c.event(sid, "ToolCompleted", {"ok": True}),
            c.event(sid, "SessionPaused"),
            c.event(sid, "SessionResumed"),
            c.event(sid, "SessionCompleted")]
    sent = threading.Event()

    def send_rest():
        c.send(rest)
        sent.set()

    cursor, drops = None, 0
    while True:
        done = False
        for event, ident, data in c.watch(sid, cursor=cursor):
            cursor = ident or cursor
            if event == "snapshot":
                out("watch", snapshot=json.loads(data)["state"], resumed=drops > 0)
                if not sent.is_set() and drops == 0:
                    threading.Thread(target=send_rest, daemon=True).start()
            elif event == "change":
                ch = json.loads(data)
                if ch.get("outcome") != "applied":
                    # The session did not take one of our events (rejected,
                    # or a duplicate): say which and why, and fail.
                    out(ch.get("outcome", "unknown"), type=ch["type"], reason=ch.get("reason"),
                        version=ch["version"])
                    raise RuntimeError("%s %s: %s" % (ch["type"], ch.get("outcome"), ch.get("reason")))
                out("change", type=ch["type"], to=ch.get("to"), version=ch["version"])
                if ch.get("to") == "COMPLETED":
                    done = True
                    break
                if drops == 0 and ch.get("to") == "PAUSED":
                    break  # drop the connection once: resume from the cursor
        if done:
            break
        drops += 1
        out("resume", cursor=bool(cursor))
    final = c.get(sid)
    out("done", session=sid, state=final["state"], version=final["version"],
        toolCalls=final["counters"]["toolCalls"], drops=drops)

    # Bad input is answered 400 with problem+json naming each event and field.
    try:
        c.send([c.event(sid, "SessionStarted", occurredAt="yesterday")])
    except ProblemError as e:
        errs = e.body.get("errors") or [{}]
        out("refused", status=e.status, field=errs[0].get("field"))
    else:
        raise RuntimeError("an event with occurredAt \"yesterday\" was accepted")


def out(step, **fields):
    print(json.dumps(dict(step=step, **fields)), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a clear message and a failing exit code
        print("error:", e, file=sys.stderr)
        sys.exit(1)
