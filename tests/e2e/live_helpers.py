"""What the live end-to-end tests share: a free port, and the server's API with a token."""

import json
import socket
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_get(url, token):
    """A GET to the server's API, its JSON answer."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())
