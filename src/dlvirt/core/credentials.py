"""Credentials in URLs (``scheme://user:secret@host``): kept out of logs, records and command lines.

A config may name a Debian mirror or an engine by a URL carrying userinfo. Whatever dlvirt prints or
records shows such a URL with its userinfo as ``***`` (``redact``, ``redacted``); where a tool must
use the credentials, they go to it in a file only root may read (``netrc``: wget's ``~/.netrc``,
apt's ``auth.conf.d``), never on its command line, where every local user can read them (``ps``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")


def redact(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return USERINFO.sub(r"\1***@", text)


def redacted(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings) with every string ``redact``-ed."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: redacted(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    return value


@dataclass(frozen=True)
class Login:
    """The credentials a URL carried, for the place it names."""

    scheme: str
    host: str
    port: int | None
    login: str
    password: str

    def _entry(self, machine: str) -> str:
        if any(c.isspace() or c in "\"'\\#" for c in machine + self.login + self.password):
            raise ValueError("a URL's credentials with blanks, quotes, backslashes or # cannot go into a netrc file")
        return f"machine {machine} login {self.login} password {self.password}\n"

    def netrc(self) -> str:
        """The entry of a ``~/.netrc`` (wget's: it matches the host name alone)."""
        return self._entry(self.host)

    def apt_auth(self) -> str:
        """The entry of an apt ``auth.conf.d`` file (apt uses one without ``scheme://`` for https only)."""
        return self._entry(f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port is not None else ""))


def split_login(url: str) -> tuple[str, Login | None]:
    """``url`` without its userinfo, and the credentials it carried (None: it carried none)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    login = Login(scheme=parts.scheme, host=parts.hostname or "", port=parts.port,
                  login=unquote(parts.username or ""), password=unquote(parts.password or ""))
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])), login
